package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/segmentio/kafka-go"
)

const (
	inputTopic  = "bench-events"
	liveTopic   = "bench-live"
	outputTopic = "bench-releases"
	liveOutput  = outputTopic + "-live"
)

// benchTopics are the topics of a run. Each stage (pass or live phase) has
// its own output topic: a stage refuses to start with a fresh ledger over an
// output topic that already holds releases.
func benchTopics(cfg Config) map[string]int {
	t := map[string]int{inputTopic: cfg.Partitions, liveTopic: cfg.Partitions, liveOutput: 1}
	for r := range cfg.Rounds {
		t[stageOutput(r)] = 1
	}
	return t
}

func stageOutput(round int) string { return fmt.Sprintf("%s-%d", outputTopic, round) }

// passTimeout bounds one consumer pass, its process's start and end
// included.
func passTimeout(n int) time.Duration { return 2*time.Minute + time.Duration(n/2000)*time.Second }

// Kinds of consumer pass, in the order of a round's first half.
var passKinds = []string{roleReader, roleKgo, roleStage}

func runKafkaPhases(ctx context.Context, cfg Config, w *workload, res *Results) error {
	dir, err := os.MkdirTemp("", "stage-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	b, err := startBroker(ctx, cfg.ChildCommand, benchTopics(cfg))
	if err != nil {
		return err
	}
	defer b.stop() //nolint:errcheck // stopped below; a second stop is harmless
	cfg.progress("broker: own process (pid %d) at %s", b.c.cmd.Process.Pid, b.addr)

	if cfg.anyPass() {
		if err := produce(ctx, b.addr, w, res); err != nil {
			return err
		}
		cfg.progress("produce: %d events (%.0f bytes avg) in %.2fs, %.0f events/s", w.n, res.AvgEventBytes, res.ProduceSeconds, res.ProduceEventsPerSec)
		if err := throughputPhases(ctx, cfg, b, w, dir, res); err != nil {
			return err
		}
	}
	if !cfg.SkipLive {
		if err := livePhase(ctx, cfg, b.addr, dir, res); err != nil {
			return err
		}
		cfg.progress("live: %d windows released, close-to-publish p50 %.1f ms, p99 %.1f ms (%d units)",
			res.LiveWindowsReleased, res.ReleaseLatencyP50Ms, res.ReleaseLatencyP99Ms, res.ReleaseLatencyUnits)
	}
	cpu, err := b.stop()
	if err != nil {
		return err
	}
	res.BrokerCPUSeconds = cpu.Seconds()
	return nil
}

func (c *Config) anyPass() bool { return !c.SkipReader || !c.SkipKgo || !c.SkipStage }

func (c *Config) skip(kind string) bool {
	switch kind {
	case roleReader:
		return c.SkipReader
	case roleKgo:
		return c.SkipKgo
	default:
		return c.SkipStage
	}
}

// throughputPhases runs the consumer passes, each in a process of its own,
// Rounds times: in even rounds reader, kgo, stage, in odd ones the reverse
// (ABC CBA ...), so that a linear drift of the machine's load cancels out of
// the medians.
func throughputPhases(ctx context.Context, cfg Config, b *brokerProc, w *workload, dir string, res *Results) error {
	figs := map[string]*ConsumerFigures{}
	order := 0
	for round := range cfg.Rounds {
		kinds := passKinds
		if round%2 == 1 {
			kinds = []string{passKinds[2], passKinds[1], passKinds[0]}
		}
		for _, kind := range kinds {
			if cfg.skip(kind) {
				continue
			}
			p, r, err := consumerPass(ctx, cfg, b, w, dir, kind, round)
			if err != nil {
				return err
			}
			p.Order = order
			order++
			if figs[kind] == nil {
				figs[kind] = &ConsumerFigures{}
			}
			figs[kind].Passes = append(figs[kind].Passes, p)
			note := ""
			if kind == roleStage {
				note = fmt.Sprintf(", all read at %.2fs (%.0f/s)", p.ReadSeconds, p.ReadEventsPerSec)
				if round == 0 {
					res.StageWindowsReleased = r.Windows
					res.StageUnitsReleased = r.Units
					res.StageCounted = r.Counted
					res.StageDropped = r.Dropped
					res.CatchupLatencyP50Ms = percentile(r.LatMs, 50)
					res.CatchupLatencyP99Ms = percentile(r.LatMs, 99)
					res.Metrics = r.Metrics
				}
			}
			cfg.progress("%s[%d]: %.0f events/s (%.2fs after %.2fs to the first record%s), %.3f µs CPU per record, broker %.0f%% of a core",
				kind, round, p.EventsPerSec, p.Seconds, p.JoinSeconds, note, p.CPUMicrosPerRecord, 100*p.BrokerCPUShare)
		}
	}
	res.Reader, res.Kgo, res.Stage = figs[roleReader], figs[roleKgo], figs[roleStage]
	res.summarize()
	return nil
}

// consumerPass runs one consumer child over the topic and measures it, and
// the broker's CPU over the pass.
func consumerPass(ctx context.Context, cfg Config, b *brokerProc, w *workload, dir, kind string, round int) (Pass, *childResult, error) {
	pctx, cancel := context.WithTimeout(ctx, passTimeout(w.n))
	defer cancel()
	f := consumerFlags{
		addr:       b.addr,
		topic:      inputTopic,
		group:      fmt.Sprintf("bench-%s-%d", kind, round),
		total:      int64(w.total()),
		partitions: w.partitions,
	}
	if round == 0 {
		switch kind {
		case roleReader:
			f.cpuProfile = cfg.ReaderCPUProfile
		case roleKgo:
			f.cpuProfile = cfg.KgoCPUProfile
		case roleStage:
			f.cpuProfile = cfg.CPUProfile
			f.allocProfile = cfg.AllocProfile
			if !cfg.SkipMetrics {
				f.metricsScrapes = cfg.MetricsScrapes
				f.metricsCPUProfile = cfg.MetricsCPUProfile
			}
		}
	}
	if kind == roleStage {
		f.output = stageOutput(round)
		f.stateDir = filepath.Join(dir, fmt.Sprintf("stage-%d", round))
		f.lastWindow = w.lastWindow
	}
	c, err := startChild(pctx, cfg.ChildCommand, kind, f.args()...)
	if err != nil {
		return Pass{}, nil, err
	}
	fail := func(err error) (Pass, *childResult, error) {
		_ = c.cmd.Process.Kill()
		<-c.waited
		return Pass{}, nil, fmt.Errorf("bench: %s pass %d: %w", kind, round, err)
	}
	var (
		bFirst, bRead, bDone time.Duration
		tFirst, tRead, tDone time.Time
		result               *childResult
	)
	for result == nil {
		l, err := c.next(pctx)
		if err != nil {
			return fail(err)
		}
		var t *time.Time
		var bc *time.Duration
		switch l.Ev {
		case "first":
			t, bc = &tFirst, &bFirst
		case "read":
			t, bc = &tRead, &bRead
		case "done":
			t, bc = &tDone, &bDone
		case "result":
			result = l.Result
			continue
		default:
			continue
		}
		*t = time.Now()
		if *bc, err = b.cpu(pctx); err != nil {
			return fail(err)
		}
	}
	procCPU, err := c.wait(pctx)
	if err != nil {
		return Pass{}, nil, fmt.Errorf("bench: %s pass %d: %w", kind, round, err)
	}
	if result.Records != int64(w.total()) {
		return Pass{}, nil, fmt.Errorf("bench: %s pass %d read %d records, want %d", kind, round, result.Records, w.total())
	}
	n := float64(w.total())
	p := Pass{
		Round:                     round,
		JoinSeconds:               result.JoinSeconds,
		Seconds:                   result.Seconds,
		EventsPerSec:              n / result.Seconds,
		CPUMicrosPerRecord:        result.CPUSeconds / n * 1e6,
		ProcessCPUMicrosPerRecord: (procCPU.Seconds() - result.AsideCPUSeconds) / n * 1e6,
		AllocsPerRecord:           float64(result.Allocs) / n,
	}
	if wall := tDone.Sub(tFirst); wall > 0 && !tFirst.IsZero() {
		p.BrokerCPUShare = float64(bDone-bFirst) / float64(wall)
		p.BrokerCPUMicrosPerRecord = (bDone - bFirst).Seconds() / n * 1e6
	}
	if result.ReadSeconds > 0 {
		p.ReadSeconds = result.ReadSeconds
		p.ReadEventsPerSec = n / result.ReadSeconds
		p.ReadCPUMicrosPerRecord = result.ReadCPUSeconds / n * 1e6
		if wall := tRead.Sub(tFirst); wall > 0 && !tRead.IsZero() {
			p.BrokerReadCPUShare = float64(bRead-bFirst) / float64(wall)
		}
	}
	return p, result, nil
}

// produce writes the workload's events (keyed by user: one user, one
// partition, in event-time order) and the flush events, from this process
// into the broker's. Only the writes are timed, not the generation of the
// messages.
func produce(ctx context.Context, addr string, w *workload, res *Results) error {
	wr := &kafka.Writer{
		Addr:         kafka.TCP(addr),
		Topic:        inputTopic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    10_000, // BatchBytes stays 1 MiB: the broker's message.max.bytes
		BatchTimeout: time.Millisecond,
	}
	defer wr.Close()
	const chunk = 40_000
	msgs := make([]kafka.Message, 0, chunk)
	var spent time.Duration
	for i := 0; i < w.n; {
		msgs = msgs[:0]
		for ; i < w.n && len(msgs) < chunk; i++ {
			msgs = append(msgs, w.gen.Message(int64(i)))
		}
		t0 := time.Now()
		if err := wr.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("bench: produce: %s", shortError(err))
		}
		spent += time.Since(t0)
	}
	fw := &kafka.Writer{
		Addr:         kafka.TCP(addr),
		Topic:        inputTopic,
		Balancer:     partitionBalancer{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
	}
	defer fw.Close()
	if err := fw.WriteMessages(ctx, w.flushMessages()...); err != nil {
		return fmt.Errorf("bench: produce flush events: %w", err)
	}
	res.ProduceSeconds = spent.Seconds()
	res.ProduceEventsPerSec = float64(w.n) / spent.Seconds()
	return nil
}

// partitionBalancer sends a message to its Partition field.
type partitionBalancer struct{}

func (partitionBalancer) Balance(m kafka.Message, partitions ...int) int { return m.Partition }

// shortError cuts kafka-go's per-message error lists short.
func shortError(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
