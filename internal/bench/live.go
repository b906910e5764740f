package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/generator"
	"github.com/dpstage/stage/ledger"
)

// livePhase measures close-to-publish latency in the steady state: the stage
// runs on its own topic while the generator produces into it at
// LiveEventsPerSec, with event time running fast enough that a window closes
// every LiveWindowEvery. Unlike the throughput pass, where a backlog's
// windows close faster than they can be released and queue behind each
// other, each window's release here starts as soon as its end is passed.
func livePhase(ctx context.Context, cfg Config, addr, dir string, res *Results) error {
	scfg, err := stageConfig(addr, liveTopic, liveOutput, "bench-live", dir+"/stage-live", cfg.Partitions)
	if err != nil {
		return err
	}
	scale := float64(windowSize) / float64(cfg.LiveWindowEvery)
	g, err := generator.New(generator.Config{
		Users:           cfg.Users,
		EventsPerSecond: cfg.LiveEventsPerSec,
		TimeScale:       scale,
		Start:           epoch,
		Seed:            20260102,
	})
	if err != nil {
		return fmt.Errorf("bench: live: %w", err)
	}
	var (
		mu      sync.Mutex // guards latMs and windows (OnRelease runs on the releaser)
		latMs   []float64
		windows = map[int64]bool{}
	)
	st, err := newStage(scfg, func(u *ledger.Unit, lat time.Duration) {
		mu.Lock()
		latMs = append(latMs, float64(lat)/float64(time.Millisecond))
		windows[u.WindowStart] = true
		mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("bench: live: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- st.Run(runCtx) }() // owner: livePhase; ends with runCtx
	// Produce only once the stage has its partitions, so that no window
	// is released from a backlog.
	deadline := time.Now().Add(time.Minute)
	for !st.Readiness().Ready() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: live: stage not ready within a minute")
		}
		select {
		case err := <-runErr:
			return fmt.Errorf("bench: live: stage stopped: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	wr := &kafka.Writer{
		Addr:         kafka.TCP(addr),
		Topic:        liveTopic,
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond,
		BatchSize:    10_000,
	}
	defer wr.Close()
	pctx, cancel := context.WithTimeout(ctx, cfg.LiveDuration)
	defer cancel()
	if err := g.Run(pctx, wr); err != nil {
		return fmt.Errorf("bench: live: produce: %w", err)
	}
	// Let the releases of the windows closed by the last events finish.
	time.Sleep(cfg.LiveWindowEvery + 500*time.Millisecond)
	consumed := st.Stats().Consumed.Load()
	stop()
	if err := <-runErr; err != nil {
		return fmt.Errorf("bench: live: stage: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(latMs) == 0 {
		return fmt.Errorf("bench: live: no window released in %v", cfg.LiveDuration)
	}
	res.ReleaseLatencyP50Ms = percentile(latMs, 50)
	res.ReleaseLatencyP99Ms = percentile(latMs, 99)
	res.ReleaseLatencyMaxMs = percentile(latMs, 100)
	res.ReleaseLatencyUnits = len(latMs)
	res.LiveWindowsReleased = len(windows)
	res.LiveEventsPerSec = cfg.LiveEventsPerSec
	res.LiveWindowEverySecs = cfg.LiveWindowEvery.Seconds()
	res.LiveEventsProduced = g.Written()
	res.LiveEventsConsumed = consumed
	res.LiveEventsPerWindows = float64(cfg.LiveEventsPerSec) * cfg.LiveWindowEvery.Seconds()
	return nil
}
