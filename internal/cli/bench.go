package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dpstage/stage/internal/bench"
)

// Bench implements `stage bench`: the stage beside bare kafka-go and
// franz-go consumers, each in its own process, reading from the embedded
// broker in another, in one run (see internal/bench and docs/bench.md).
//
// `stage bench child ROLE ...` (not in the help) is how the harness starts
// its child processes: the broker and each consumer under test.
func Bench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "child" {
		return bench.ChildMain(args[1:], stdout, stderr)
	}
	c, asJSON, quiet, code := parseBench(args, stderr)
	if code != 0 {
		return code
	}
	if !quiet {
		c.Progress = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench.Run(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "stage bench: %v\n", err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "stage bench: %v\n", err)
			return 1
		}
		return 0
	}
	write := func() error { return bench.WriteTable(stdout, res) }
	if res.Dist != nil {
		write = func() error { return bench.WriteDistTable(stdout, res.Dist) }
	}
	if err := write(); err != nil {
		fmt.Fprintf(stderr, "stage bench: %v\n", err)
		return 1
	}
	return 0
}

// parseBench parses the flags of `stage bench`; code is 0, or the exit
// code after a usage error (reported on stderr).
func parseBench(args []string, stderr io.Writer) (c bench.Config, asJSON, quiet bool, code int) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.Events, "events", 2_000_000, "synthetic events to produce and read")
	fs.IntVar(&c.Partitions, "partitions", 4, "partitions of the input topic")
	fs.IntVar(&c.Windows, "windows", 100, "one-minute event-time windows the events span")
	fs.IntVar(&c.Users, "users", 100_000, "generator user population (Zipf-skewed)")
	fs.IntVar(&c.Rounds, "rounds", 5, "rounds of consumer passes, in alternating order (figures are medians)")
	fs.IntVar(&c.MemoryUsers, "memory-users", 1_000_000, "distinct users of the memory phase")
	fs.BoolVar(&c.SkipReader, "skip-reader", false, "skip the bare kafka-go Reader consumer")
	fs.BoolVar(&c.SkipKgo, "skip-kgo", false, "skip the bare franz-go (kgo) consumer")
	fs.BoolVar(&c.SkipStage, "skip-stage", false, "skip the full stage (and its latency and /metrics figures)")
	fs.BoolVar(&c.SkipMetrics, "skip-metrics", false, "skip the /metrics scrape figures")
	fs.IntVar(&c.MetricsScrapes, "metrics-scrapes", 200, "/metrics scrapes timed per variant after the first stage pass")
	fs.BoolVar(&c.SkipLive, "skip-live", false, "skip the live (steady-state) latency phase")
	fs.DurationVar(&c.LiveDuration, "live-duration", 20*time.Second, "how long the live latency phase produces")
	fs.IntVar(&c.LiveEventsPerSec, "live-rate", 20_000, "events per second produced in the live phase")
	fs.DurationVar(&c.LiveWindowEvery, "live-window-every", 200*time.Millisecond, "wall time between window closes in the live phase")
	fs.BoolVar(&c.SkipInProcess, "skip-inprocess", false, "skip decode+bound+aggregate without Kafka")
	fs.BoolVar(&c.SkipRelease, "skip-release", false, "skip the Dirichlet release rates")
	fs.BoolVar(&c.SkipMemory, "skip-memory", false, "skip the bounder memory figures")
	fs.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the first stage pass (its process) to `file`")
	fs.StringVar(&c.AllocProfile, "allocprofile", "", "write the allocation profile after the first stage pass to `file` (and the one before it to file.base)")
	fs.StringVar(&c.ReaderCPUProfile, "reader-cpuprofile", "", "write a CPU profile of the first kafka-go Reader pass to `file`")
	fs.StringVar(&c.KgoCPUProfile, "kgo-cpuprofile", "", "write a CPU profile of the first franz-go pass to `file`")
	fs.StringVar(&c.MetricsCPUProfile, "metrics-cpuprofile", "", "write a CPU profile of the timed /metrics scrapes to `file`")
	fs.IntVar(&c.Instances, "instances", 0, "run the distributed mode's bench instead: the stage with kafka.distributed as 1 process and as `N` (≥ 2) processes side by side (flags used: --events, --partitions, --windows, --users, --rounds)")
	fs.BoolVar(&asJSON, "json", false, "print the figures as JSON instead of a table")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return c, false, false, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stage bench: unexpected argument %q\n", fs.Arg(0))
		return c, false, false, 2
	}
	if c.Events < 1 || c.Partitions < 1 || c.Windows < 1 || c.Users < 1 || c.Rounds < 1 || c.MemoryUsers < 2 || c.MetricsScrapes < 1 ||
		c.LiveDuration <= 0 || c.LiveEventsPerSec < 1 || c.LiveWindowEvery < time.Millisecond || c.LiveWindowEvery > time.Minute {
		fmt.Fprintln(stderr, "stage bench: --events, --partitions, --windows, --users, --rounds, --live-rate, --metrics-scrapes must be at least 1, --memory-users at least 2, --live-duration positive and --live-window-every in [1ms, 1m]")
		return c, false, false, 2
	}
	if err := bench.ParseInstances(c.Instances); err != nil {
		fmt.Fprintf(stderr, "stage bench: %v\n", err)
		return c, false, false, 2
	}
	return c, asJSON, quiet, 0
}
