package pipeline_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// TestArrowOutput: with output.arrow_dir, every published (histogram,
// window) is also an Arrow IPC file whose rows are exactly the published
// probabilities, (group, bin) by (group, bin) — and nothing else (no count).
func TestArrowOutput(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("concentrated", 10)
	cfg.Output.ArrowDir = filepath.Join(t.TempDir(), "arrow")
	h.ProduceEvents(e2e.Stream(1, 30))
	h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute + time.Second)))
	out := h.ReadOutput(len(e2e.Groups)+1, 60*time.Second, 0)
	want := map[string]float64{} // release_id/bin → probability
	for _, r := range out.Releases {
		for i, b := range r.Bins {
			want[r.ReleaseID+"/"+b] = r.Probabilities[i]
		}
	}
	got := map[string]float64{}
	deadline := time.Now().Add(10 * time.Second)
	for _, hist := range []string{"pages", "devices"} {
		path := filepath.Join(cfg.Output.ArrowDir, hist, e2e.Base.Format("20060102T150405.000Z")+".arrow")
		var f *os.File
		var err error
		for f, err = os.Open(path); err != nil && time.Now().Before(deadline); f, err = os.Open(path) {
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("arrow file: %v", err)
		}
		r, err := ipc.NewFileReader(f, ipc.WithAllocator(memory.DefaultAllocator))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Schema().Equal(release.ReleaseSchema) {
			t.Fatalf("schema %v", r.Schema())
		}
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.Record(i)
			if err != nil {
				t.Fatal(err)
			}
			ids, bins, ps := rec.Column(0).(*array.String), rec.Column(5).(*array.String), rec.Column(6).(*array.Float64)
			for j := 0; j < int(rec.NumRows()); j++ {
				got[ids.Value(j)+"/"+bins.Value(j)] = ps.Value(j)
			}
		}
		r.Close()
		f.Close()
	}
	if len(got) != len(want) {
		t.Fatalf("arrow holds %d (release, bin) rows, the topic %d", len(got), len(want))
	}
	for k, p := range want {
		if got[k] != p {
			t.Errorf("%s: arrow %v, topic %v", k, got[k], p)
		}
	}
}
