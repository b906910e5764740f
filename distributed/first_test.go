package distributed_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestDistFirstStartSkipsOldInput (issue 22 item 2, "first start re-reads
// all retained input"): input records older than a fresh partition's
// first window minus events.max_future (here 3h old; max_future 1h) could
// never count, so a fresh partition starts after them: they are not read
// (Stats.Consumed) and are counted as skipped; the recent ones are read.
func TestDistFirstStartSkipsOldInput(t *testing.T) {
	const size = 2 * time.Second
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, size, 300*time.Millisecond)
	if cfg.Events.MaxFuture.D() != time.Hour {
		t.Fatalf("events.max_future %v, the test assumes 1h", cfg.Events.MaxFuture)
	}
	old := e2e.StreamFrom(time.Now().Add(-3*time.Hour), size, 1, 40)
	produceKeyed(t, h, old)
	recent := e2e.StreamFrom(time.Now().Add(-time.Minute), size, 1, 12)
	produceKeyed(t, h, recent)
	r := h.Start(cfg)
	st := r.Stage.Stats()
	e2e.WaitFor(t, "the recent records to be read", 30*time.Second, func() bool { return st.Consumed.Load() >= int64(len(recent)) })
	time.Sleep(500 * time.Millisecond) // any old record read would show by now
	if got := st.Consumed.Load(); got != int64(len(recent)) {
		t.Errorf("read %d input records, want the %d recent ones only (%d old ones skipped)", got, len(recent), st.FirstStartSkipped.Load())
	}
	if got := st.FirstStartSkipped.Load(); got != int64(len(old)) {
		t.Errorf("%d records skipped, want the %d old ones", got, len(old))
	}
}
