// Package cli implements the stage command's subcommands. cmd/stage/main.go
// only calls Main.
package cli

import (
	"fmt"
	"io"

	"github.com/dpstage/stage/internal/lib/buildinfo"
)

const usage = `stage — a streaming differential-privacy stage for Kafka pipelines

Usage:
  stage run       --config FILE   run the stage (empty kafka.brokers: embedded broker)
  stage validate  --config FILE   check a config and print the derived privacy plan
  stage calibrate [flags]         what noise does a privacy target need (see stage calibrate -h)
  stage generate  --config FILE   produce synthetic demo events into the input topic
  stage health    --config FILE   ask the running stage's /healthz (--ready: /readyz), for container health checks
  stage eval      [flags]         reproduce the papers' privacy–utility plots (see stage eval -h)
  stage plan      --config FILE --events N,...   expected error of a config's releases at N events
  stage bench     [flags]         measure the stage beside a bare kafka-go consumer (see stage bench -h)
  stage broker    [--config FILE] [--port 9092] [--data-dir DIR] [--topics name:partitions,...]
                                  run the embedded broker as a process of its own (N replicas on one machine)
  stage version                   print the version, source revision and Go version (also --version)

Exit codes: 0 success, 1 runtime failure, 2 bad usage or invalid configuration
(stage health: 0 healthy, 1 anything else, since Docker reserves 2).
`

// Main runs the subcommand named by args[0] and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	rest := args[1:]
	switch args[0] {
	case "run":
		return Run(rest, stdout, stderr)
	case "validate":
		return Validate(rest, stdout, stderr)
	case "calibrate":
		return Calibrate(rest, stdout, stderr)
	case "generate":
		return Generate(rest, stdout, stderr)
	case "health":
		return Health(rest, stdout, stderr)
	case "eval":
		return Eval(rest, stdout, stderr)
	case "plan":
		return Plan(rest, stdout, stderr)
	case "bench":
		return Bench(rest, stdout, stderr)
	case "broker":
		return Broker(rest, stdout, stderr)
	case "version", "--version", "-version":
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "stage version: takes no arguments (got %q)\n", rest)
			return 2
		}
		fmt.Fprintln(stdout, buildinfo.Get())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "stage: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
