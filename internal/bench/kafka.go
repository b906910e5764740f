package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/internal/embedded"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/source/allone"
)

const (
	inputTopic  = "bench-events"
	liveTopic   = "bench-live"
	outputTopic = "bench-releases"
)

// The stage's per-partition reader settings (pipeline/fetch.go, fetchMaxBytes
// and fetchMaxWait):
// the ceiling's readers use the same, so the comparison is reader for
// reader. QueueCapacity is left at kafka-go's default (100) in both.
const (
	readerMinBytes = 1
	readerMaxBytes = 1 << 20
	readerMaxWait  = 500 * time.Millisecond
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

const liveOutput = outputTopic + "-live"

// passTimeout bounds one ceiling or stage pass.
func passTimeout(n int) time.Duration { return 2*time.Minute + time.Duration(n/2000)*time.Second }

func runKafkaPhases(ctx context.Context, cfg Config, w *workload, res *Results) error {
	dir, err := os.MkdirTemp("", "stage-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	b, err := embedded.Start(embedded.Config{
		Topics:  benchTopics(cfg),
		DataDir: dir + "/kafka",
	})
	if err != nil {
		return fmt.Errorf("bench: start embedded broker: %w", err)
	}
	defer b.Close()

	if !cfg.SkipCeiling || !cfg.SkipStage || !cfg.SkipConnBatch {
		if err := produce(ctx, b.Addr(), w, res); err != nil {
			return err
		}
		cfg.progress("produce: %d events (%.0f bytes avg) in %.2fs, %.0f events/s", w.n, res.AvgEventBytes, res.ProduceSeconds, res.ProduceEventsPerSec)
		if err := throughputPhases(ctx, cfg, b.Addr(), w, dir, res); err != nil {
			return err
		}
	}
	if !cfg.SkipLive {
		if err := livePhase(ctx, cfg, b.Addr(), dir, res); err != nil {
			return err
		}
		cfg.progress("live: %d windows released, close-to-publish p50 %.1f ms, p99 %.1f ms (%d units)",
			res.LiveWindowsReleased, res.ReleaseLatencyP50Ms, res.ReleaseLatencyP99Ms, res.ReleaseLatencyUnits)
	}
	return nil
}

// throughputPhases runs the ceiling and stage passes (ABBA) and the
// conn-batch reader over the produced topic.
func throughputPhases(ctx context.Context, cfg Config, addr string, w *workload, dir string, res *Results) error {
	var ceil, stage []float64
	order := 0
	runCeiling := func(round int) error {
		prof := ""
		if round == 0 {
			prof = cfg.CeilingCPUProfile
		}
		p, err := ceilingPass(ctx, addr, w, fmt.Sprintf("bench-ceiling-%d", round), prof)
		if err != nil {
			return err
		}
		p.Order = order
		order++
		res.CeilingRounds = append(res.CeilingRounds, p)
		ceil = append(ceil, p.EventsPerSec)
		cfg.progress("ceiling[%d]: %.0f events/s (%.2fs after a %.2fs join, %.2f allocs/event)", round, p.EventsPerSec, p.Seconds, p.JoinSeconds, p.AllocsPerEvent)
		return nil
	}
	runStage := func(round int) error {
		sr, err := stagePass(ctx, cfg, addr, w, dir, round)
		if err != nil {
			return err
		}
		sr.pass.Order = order
		order++
		res.StageRounds = append(res.StageRounds, sr.pass)
		stage = append(stage, sr.pass.EventsPerSec)
		if round == 0 {
			res.StageWindowsReleased = sr.windows
			res.StageUnitsReleased = sr.units
			res.StageCounted = sr.counted
			res.StageDropped = sr.dropped
			res.CatchupLatencyP50Ms = percentile(sr.latMs, 50)
			res.CatchupLatencyP99Ms = percentile(sr.latMs, 99)
		}
		cfg.progress("stage[%d]: %.0f events/s (%.2fs after a %.2fs join, %.2f allocs/event), %d windows released, latency p50 %.1f ms p99 %.1f ms",
			round, sr.pass.EventsPerSec, sr.pass.Seconds, sr.pass.JoinSeconds, sr.pass.AllocsPerEvent, sr.windows, percentile(sr.latMs, 50), percentile(sr.latMs, 99))
		return nil
	}
	for round := range cfg.Rounds {
		// ABBA: ceiling first in even rounds, stage first in odd ones.
		ceilingFirst := round%2 == 0
		for _, ceiling := range []bool{ceilingFirst, !ceilingFirst} {
			var err error
			switch {
			case ceiling && !cfg.SkipCeiling:
				err = runCeiling(round)
			case !ceiling && !cfg.SkipStage:
				err = runStage(round)
			}
			if err != nil {
				return err
			}
		}
	}
	res.CeilingEventsPerSec = median(ceil)
	res.StageEventsPerSec = median(stage)
	var readRates, ceilCPU, stageCPU []float64
	for _, p := range res.StageRounds {
		readRates = append(readRates, float64(w.total())/p.ReadSeconds)
		stageCPU = append(stageCPU, p.CPUSecondsPerMillion)
	}
	for _, p := range res.CeilingRounds {
		ceilCPU = append(ceilCPU, p.CPUSecondsPerMillion)
	}
	res.StageReadEventsPerSec = median(readRates)
	if len(ceil) > 0 && len(stage) > 0 {
		res.StageVsCeiling = res.StageEventsPerSec / res.CeilingEventsPerSec
		res.StageReadVsCeiling = res.StageReadEventsPerSec / res.CeilingEventsPerSec
		var pairs []float64
		for i := range min(len(ceil), len(stage)) {
			pairs = append(pairs, stage[i]/ceil[i])
		}
		res.StageVsCeilingPairs = median(pairs)
		res.StageVsCeilingBest = slices.Max(stage) / slices.Max(ceil)
		if c, s := median(ceilCPU), median(stageCPU); c > 0 && s > 0 {
			res.StageVsCeilingCPU = c / s
		}
	}
	if !cfg.SkipConnBatch {
		r, err := connBatchPass(ctx, addr, w)
		if err != nil {
			return err
		}
		res.ConnBatchEventsPerSec = r
		if res.CeilingEventsPerSec > 0 {
			res.ConnBatchVsCeiling = r / res.CeilingEventsPerSec
		}
		cfg.progress("conn-batch: %.0f events/s", r)
	}
	return nil
}

// produce writes the workload's events (keyed by user: one user, one
// partition, in event-time order) and the flush events. Only the writes are
// timed, not the generation of the messages.
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

// meter measures a pass: allocations and CPU time from start to stop.
type meter struct {
	mallocs uint64
	cpu     time.Duration
}

func startMeter() meter {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return meter{mallocs: ms.Mallocs, cpu: processCPU()}
}

// stop returns the allocations and CPU seconds since start.
func (m meter) stop() (allocs uint64, cpu float64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs - m.mallocs, (processCPU() - m.cpu).Seconds()
}

// ceilingPass reads every message of the topic with a bare consumer group:
// per assigned partition one kafka.Reader configured as the stage's, each
// message fetched and discarded.
func ceilingPass(ctx context.Context, addr string, w *workload, group, cpuProfile string) (Pass, error) {
	ctx, cancel := context.WithTimeout(ctx, passTimeout(w.n))
	defer cancel()
	stopProf, err := startCPUProfile(cpuProfile)
	if err != nil {
		return Pass{}, fmt.Errorf("bench: cpu profile: %w", err)
	}
	defer stopProf() //nolint:errcheck // stopped below; a second stop is harmless
	m := startMeter()
	began := time.Now()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                group,
		Brokers:           []string{addr},
		Topics:            []string{inputTopic},
		GroupBalancers:    []kafka.GroupBalancer{allone.Balancer{}},
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  time.Second,
	})
	if err != nil {
		return Pass{}, fmt.Errorf("bench: ceiling consumer group: %w", err)
	}
	defer cg.Close()
	gen, err := cg.Next(ctx)
	if err != nil {
		return Pass{}, fmt.Errorf("bench: ceiling join: %w", err)
	}
	total := int64(w.total())
	var (
		seen      atomic.Int64
		firstOnce sync.Once
		first     time.Time
		last      time.Time
		done      = make(chan struct{})
		errOnce   sync.Once
		passErr   error
	)
	for _, a := range gen.Assignments[inputTopic] {
		p, off := a.ID, a.Offset
		gen.Start(func(gctx context.Context) {
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:   []string{addr},
				Topic:     inputTopic,
				Partition: p,
				MinBytes:  readerMinBytes,
				MaxBytes:  readerMaxBytes,
				MaxWait:   readerMaxWait,
			})
			defer r.Close()
			if off < 0 {
				off = kafka.FirstOffset
			}
			if err := r.SetOffset(off); err != nil {
				errOnce.Do(func() { passErr = err; close(done) })
				return
			}
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					if ctx.Err() == nil && gctx.Err() == nil {
						errOnce.Do(func() { passErr = fmt.Errorf("partition %d: %w", p, err); close(done) })
					}
					return
				}
				firstOnce.Do(func() { first = time.Now() })
				_ = m
				if seen.Add(1) == total {
					last = time.Now()
					errOnce.Do(func() { close(done) })
					return
				}
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Pass{}, fmt.Errorf("bench: ceiling: %d of %d messages before %w", seen.Load(), total, ctx.Err())
	}
	allocs, cpu := m.stop()
	if err := stopProf(); err != nil {
		return Pass{}, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if passErr != nil {
		return Pass{}, fmt.Errorf("bench: ceiling: %w", passErr)
	}
	cancel()
	el := last.Sub(first)
	return Pass{
		JoinSeconds:          first.Sub(began).Seconds(),
		Seconds:              el.Seconds(),
		EventsPerSec:         float64(total) / el.Seconds(),
		AllocsPerEvent:       float64(allocs) / float64(total),
		CPUSecondsPerMillion: cpu / float64(total) * 1e6,
	}, nil
}

type stageResult struct {
	pass    Pass
	windows int
	units   int
	counted int64
	dropped Drops
	latMs   []float64
}

// stagePass runs the full stage over the topic until the last window's
// releases are acknowledged.
func stagePass(ctx context.Context, cfg Config, addr string, w *workload, dir string, round int) (*stageResult, error) {
	stateDir := fmt.Sprintf("%s/stage-%d", dir, round)
	scfg, err := stageConfig(addr, inputTopic, stageOutput(round), fmt.Sprintf("bench-stage-%d", round), stateDir, w.partitions)
	if err != nil {
		return nil, err
	}
	nHist := len(scfg.Histograms)
	var (
		mu       sync.Mutex
		latMs    []float64
		units    int
		windows  = map[int64]int{}
		lastDone time.Time
		done     = make(chan struct{})
	)
	onRelease := func(u *ledger.Unit, lat time.Duration) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		units++
		latMs = append(latMs, float64(lat)/float64(time.Millisecond))
		windows[u.WindowStart]++
		if u.WindowStart == w.lastWindow && windows[u.WindowStart] == nHist {
			lastDone = now
			close(done)
		}
	}
	st, err := pipeline.New(pipeline.Options{
		Config:       scfg,
		Log:          zap.NewNop(),
		OnRelease:    onRelease,
		DrainTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: stage: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, passTimeout(w.n))
	defer cancel()
	var stopProf func() error = func() error { return nil }
	if round == 0 {
		if stopProf, err = startCPUProfile(cfg.CPUProfile); err != nil {
			return nil, fmt.Errorf("bench: cpu profile: %w", err)
		}
		if cfg.AllocProfile != "" {
			if err := writeAllocProfile(cfg.AllocProfile + ".base"); err != nil {
				return nil, fmt.Errorf("bench: alloc profile: %w", err)
			}
		}
	}
	defer stopProf() //nolint:errcheck
	if round == 0 && cfg.MutexProfile != "" {
		runtime.SetMutexProfileFraction(1)
		defer runtime.SetMutexProfileFraction(0)
	}
	if round == 0 && cfg.BlockProfile != "" {
		runtime.SetBlockProfileRate(1)
		defer runtime.SetBlockProfileRate(0)
	}
	m := startMeter()
	runCtx, stopRun := context.WithCancel(pctx)
	defer stopRun()
	runErr := make(chan error, 1)
	began := time.Now()
	go func() { runErr <- st.Run(runCtx) }() // owner: stagePass; ends with runCtx
	// The first consumed message marks the end of the group join. Polling
	// a counter every millisecond until then costs nothing measurable.
	var first time.Time
	for first.IsZero() {
		select {
		case err := <-runErr:
			return nil, fmt.Errorf("bench: stage stopped before consuming: %v", err)
		case <-pctx.Done():
			return nil, fmt.Errorf("bench: stage: nothing consumed before %w", pctx.Err())
		case <-time.After(time.Millisecond):
		}
		if st.Stats().Consumed.Load() > 0 {
			first = time.Now()
		}
	}
	// When did the stage read the last message? Polled every 2 ms; this
	// splits the pass into reading and the release of the windows still
	// open then.
	consumedAll := make(chan time.Time, 1)
	go func() { // owner: stagePass; ends with the pass
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-pctx.Done():
				return
			case now := <-t.C:
				if st.Stats().Consumed.Load() >= int64(w.total()) {
					consumedAll <- now
					return
				}
			}
		}
	}()
	select {
	case <-done:
	case err := <-runErr:
		return nil, fmt.Errorf("bench: stage stopped before the last release: %v", err)
	case <-pctx.Done():
		return nil, fmt.Errorf("bench: stage: last window not released before %w (consumed %d of %d)", pctx.Err(), st.Stats().Consumed.Load(), w.total())
	}
	allocs, cpu := m.stop()
	if err := stopProf(); err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if round == 0 {
		if err := writeAllocProfile(cfg.AllocProfile); err != nil {
			return nil, fmt.Errorf("bench: alloc profile: %w", err)
		}
		if err := writeProfile("mutex", cfg.MutexProfile); err != nil {
			return nil, fmt.Errorf("bench: mutex profile: %w", err)
		}
		if err := writeProfile("block", cfg.BlockProfile); err != nil {
			return nil, fmt.Errorf("bench: block profile: %w", err)
		}
	}
	stopRun()
	if err := <-runErr; err != nil {
		return nil, fmt.Errorf("bench: stage: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	el := lastDone.Sub(first)
	readSeconds := el.Seconds()
	select {
	case t := <-consumedAll:
		readSeconds = t.Sub(first).Seconds()
	default:
	}
	sr := &stageResult{
		pass: Pass{
			JoinSeconds:          first.Sub(began).Seconds(),
			Seconds:              el.Seconds(),
			EventsPerSec:         float64(w.total()) / el.Seconds(),
			AllocsPerEvent:       float64(allocs) / float64(w.total()),
			CPUSecondsPerMillion: cpu / float64(w.total()) * 1e6,
			ReadSeconds:          readSeconds,
		},
		windows: len(windows),
		units:   units,
		counted: st.Stats().Counted.Load(),
		dropped: st.Stats().Dropped(),
		latMs:   latMs,
	}
	return sr, nil
}

// connBatchPass reads every partition with kafka.Conn.ReadBatch (one
// connection per partition leader, one goroutine per partition), reading
// each value into a reused buffer: kafka-go without its Reader.
func connBatchPass(ctx context.Context, addr string, w *workload) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, passTimeout(w.n))
	defer cancel()
	total := int64(w.total())
	var seen atomic.Int64
	conns := make([]*kafka.Conn, w.partitions)
	for p := range conns {
		c, err := kafka.DialLeader(ctx, "tcp", addr, inputTopic, p)
		if err != nil {
			return 0, fmt.Errorf("bench: conn-batch: dial partition %d: %w", p, err)
		}
		defer c.Close()
		if _, err := c.Seek(0, kafka.SeekAbsolute); err != nil {
			return 0, fmt.Errorf("bench: conn-batch: seek partition %d: %w", p, err)
		}
		conns[p] = c
	}
	errs := make(chan error, len(conns))
	start := time.Now()
	for _, c := range conns {
		go func() { // owner: connBatchPass; ends when the partition is read
			buf := make([]byte, 64<<10)
			for {
				if ctx.Err() != nil {
					errs <- ctx.Err()
					return
				}
				hw, err := c.ReadLastOffset()
				if err != nil {
					errs <- err
					return
				}
				off, _ := c.Offset()
				if off >= hw {
					errs <- nil
					return
				}
				c.SetReadDeadline(time.Now().Add(30 * time.Second)) //nolint:errcheck
				b := c.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: readerMinBytes, MaxBytes: readerMaxBytes, MaxWait: readerMaxWait})
				for {
					if _, err := b.Read(buf); err != nil {
						if !errors.Is(err, io.EOF) {
							b.Close()
							errs <- err
							return
						}
						break
					}
					seen.Add(1)
				}
				if err := b.Close(); err != nil && !errors.Is(err, io.EOF) {
					errs <- err
					return
				}
			}
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			return 0, fmt.Errorf("bench: conn-batch: %w", err)
		}
	}
	el := time.Since(start)
	if got := seen.Load(); got != total {
		return 0, fmt.Errorf("bench: conn-batch read %d messages, want %d", got, total)
	}
	return float64(total) / el.Seconds(), nil
}

// shortError cuts kafka-go's per-message error lists short.
func shortError(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
