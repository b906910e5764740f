package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/embedded"
)

// Broker implements `stage broker`: the embedded Kafka-protocol broker as a
// process of its own, for trying setups that need one broker shared by
// several processes on one machine — N replicas of the distributed mode
// (docs/distributed.md, "Without Docker"), or a stage and `stage generate`.
// --config creates the topics a stage config names (input with
// kafka.input_partitions, output, dead letter); the distributed mode's
// internal topics are created by the replicas themselves
// (kafka.distributed.create_topics). Topics the broker creates have
// message.timestamp.type=LogAppendTime. It serves until SIGINT or SIGTERM.
func Broker(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runBroker(ctx, args, stdout, stderr)
}

func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "a stage config: create its input, output and dead-letter topics")
	port := fs.Int("port", 9092, "port to listen on, on 127.0.0.1 (0: a free one)")
	dir := fs.String("data-dir", "", "directory for the broker's log, topics and group offsets, reloaded by the next start on it (default: a temporary one, removed at exit)")
	extra := fs.String("topics", "", "more topics to create: name:partitions,...")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "stage broker: unexpected arguments %q\n", fs.Args())
		return 2
	}
	topics := map[string]int{}
	logCfg := config.Log{Format: config.LogFormatConsole, Level: "warn"}
	if *path != "" {
		cfg, code := loadConfig(*path, stderr)
		if cfg == nil {
			return code
		}
		maps.Copy(topics, embeddedTopics(cfg))
	}
	more, err := parseTopicList(*extra)
	if err != nil {
		fmt.Fprintf(stderr, "stage broker: --topics: %v\n", err)
		return 2
	}
	maps.Copy(topics, more)
	if len(topics) == 0 {
		fmt.Fprintln(stderr, "stage broker: no topics: give --config FILE (its input, output and dead-letter topics) and/or --topics name:partitions,...")
		return 2
	}
	log, err := newLogger(logCfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "stage broker: %v\n", err)
		return 2
	}
	defer log.Sync() //nolint:errcheck
	b, err := embedded.Start(embedded.Config{Port: *port, DataDir: *dir, Topics: topics, Logger: log.Named("broker")})
	if errors.Is(err, embedded.ErrDataDirInUse) {
		fmt.Fprintf(stderr, "stage broker: %v\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "stage broker: %v (port %d taken? --port 0 picks a free one)\n", err, *port)
		return 1
	}
	names := slices.Sorted(maps.Keys(topics))
	for i, t := range names {
		names[i] = t + ":" + strconv.Itoa(topics[t])
	}
	fmt.Fprintf(stdout, "embedded Kafka broker at %s, data in %s, topics %s (message.timestamp.type=LogAppendTime); SIGINT or SIGTERM stops it\n",
		b.Addr(), b.DataDir(), strings.Join(names, ","))
	<-ctx.Done()
	if err := b.Close(); err != nil {
		fmt.Fprintf(stderr, "stage broker: %v\n", err)
		return 1
	}
	return 0
}

// parseTopicList parses "a:4,b:1" (partitions at least 1).
func parseTopicList(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, n, ok := strings.Cut(part, ":")
		parts, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || parts < 1 {
			return nil, fmt.Errorf("%q: want name:partitions with partitions at least 1", part)
		}
		out[name] = parts
	}
	return out, nil
}
