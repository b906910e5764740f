package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/pipeline"
)

// TestRunOnce: a Stage is single-use: Run after Run returns ErrRunTwice at
// once (the first Run, soft-stopped before it reached a broker, returns
// nil). No broker is needed: the stop comes first.
func TestRunOnce(t *testing.T) {
	cfg, err := config.Parse([]byte(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m}
histograms:
  - {name: devices, field: device, bins: [mobile, desktop]}
privacy: {mechanism: gaussian, budget: {epsilon: 1, delta: 1.0e-6, period: 1h}}
state: {dir: `+t.TempDir()+`}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := pipeline.New(pipeline.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := st.Run(ctx); err != nil {
		t.Fatalf("first Run (stopped): %v", err)
	}
	// Without the guard the second Run would wait for the broker until
	// this timeout and return nil.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := st.Run(ctx2); !errors.Is(err, pipeline.ErrRunTwice) {
		t.Fatalf("second Run: %v, want ErrRunTwice", err)
	}
}
