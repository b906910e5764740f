package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
)

// This file holds every use of package pipeline's API in the harness
// (pipeline.New, Run, Stats, Readiness, DerivePlan), so that a move of the
// stage's packages changes the harness here only. Package aggregate and
// decode are used by local.go (the phases without Kafka).

// benchStage is the running stage as the harness sees it.
type benchStage = pipeline.Stage

// newStage builds the full stage (pipeline.New) with a silent log.
func newStage(scfg *config.Config, onRelease func(*ledger.Unit, time.Duration)) (*benchStage, error) {
	st, err := pipeline.New(pipeline.Options{
		Config:       scfg,
		Log:          zap.NewNop(),
		OnRelease:    onRelease,
		DrainTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: stage: %w", err)
	}
	return st, nil
}

// countMechanism is the stage configuration's count mechanism, calibrated.
func countMechanism(lc *config.Config) (mechanism.Mechanism, error) {
	p, err := plan.DerivePlan(lc)
	if err != nil {
		return nil, err
	}
	return p.Count.Mechanism, nil // the bench's configuration has count histograms only
}

// stagePass runs the full stage (pipeline.New + Run, in this child process)
// over the topic until the last window's releases are acknowledged
// (Options.OnRelease). The first record and the last record read are found
// by polling the stage's consumed counter (every millisecond until the
// first, then every 2 ms; the counter is published at least every 64
// records and at every partition's end).
func stagePass(ctx context.Context, c consumerFlags, m *passMeter) (*childResult, error) {
	if c.output == "" || c.stateDir == "" || c.partitions < 1 {
		return nil, fmt.Errorf("stage: --output, --state-dir and --partitions are required")
	}
	scfg, err := stageConfig(c.addr, c.topic, c.output, c.group, c.stateDir, c.partitions)
	if err != nil {
		return nil, err
	}
	nHist := len(scfg.Histograms)
	var web *httpapi.Server
	if c.metricsScrapes > 0 {
		// The HTTP server as `stage run` wires it: its collector reads the
		// stage, its latency histogram and release store are fed by
		// OnRelease.
		if web, err = httpapi.New(httpapi.Options{Config: scfg, Log: zap.NewNop()}); err != nil {
			return nil, err
		}
	}
	var (
		mu      sync.Mutex // guards latMs, units, windows
		latMs   []float64
		units   int
		windows = map[int64]int{}
		done    = make(chan struct{})
	)
	onRelease := func(u *ledger.Unit, lat time.Duration) {
		if web != nil {
			web.OnRelease(u, lat)
		}
		mu.Lock()
		defer mu.Unlock()
		units++
		latMs = append(latMs, float64(lat)/float64(time.Millisecond))
		windows[u.WindowStart]++
		if u.WindowStart == c.lastWindow && windows[u.WindowStart] == nHist {
			close(done)
		}
	}
	st, err := newStage(scfg, onRelease)
	if err != nil {
		return nil, err
	}
	if web != nil {
		web.Attach(st)
	}
	if err := writeProfile("allocs", baseName(c.allocProfile)); err != nil {
		return nil, fmt.Errorf("alloc profile: %w", err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	runErr := make(chan error, 1)
	go func() { runErr <- st.Run(runCtx) }() // owner: stagePass; ends with runCtx
	pollDone := make(chan struct{})
	go func() { // owner: stagePass; ends at the last record or with runCtx
		defer close(pollDone)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		first := false
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			n := st.Stats().Consumed.Load()
			if !first && n > 0 {
				m.markFirst()
				first = true
				t.Reset(2 * time.Millisecond)
			}
			if n >= c.total {
				m.markRead()
				return
			}
		}
	}()
	select {
	case <-done:
	case err := <-runErr:
		return nil, fmt.Errorf("stage stopped before the last release: %v", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("last window not released before %w (consumed %d of %d)", ctx.Err(), st.Stats().Consumed.Load(), c.total)
	}
	select { // the last record was read before its window was released
	case <-pollDone:
	case <-ctx.Done():
		return nil, fmt.Errorf("last window released, but %d of %d records counted as consumed before %w", st.Stats().Consumed.Load(), c.total, ctx.Err())
	}
	r, err := m.done(st.Stats().Consumed.Load())
	if err != nil {
		return nil, err
	}
	if err := writeProfile("allocs", c.allocProfile); err != nil {
		return nil, fmt.Errorf("alloc profile: %w", err)
	}
	if web != nil {
		c0 := processCPU()
		if r.Metrics, err = measureMetrics(web, c.metricsScrapes, c.metricsCPUProfile); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
		r.AsideCPUSeconds = (processCPU() - c0).Seconds()
	}
	stopRun()
	if err := <-runErr; err != nil {
		return nil, fmt.Errorf("stage: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	r.Windows, r.Units, r.LatMs = len(windows), units, latMs
	r.Counted = st.Stats().Counted.Load()
	r.Dropped = st.Stats().Dropped()
	return r, nil
}

func baseName(p string) string {
	if p == "" {
		return ""
	}
	return p + ".base"
}
