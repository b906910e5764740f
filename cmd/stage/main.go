// Command stage is a streaming differential-privacy stage for Kafka
// pipelines. See `stage help` and the README.
package main

import (
	"os"

	"github.com/dpstage/stage/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
