package pipeline_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/release"
)

// checkOnGrid fails unless r's probabilities are n_i/Q for integers n_i ≥ 0
// summing to exactly Q = params.grid = mechanism.ReleaseGrid(len(bins)).
func checkOnGrid(t *testing.T, r release.Release) {
	t.Helper()
	q := mechanism.ReleaseGrid(len(r.Bins))
	if r.Params.Grid != q {
		t.Errorf("%s/%s %s: params.grid = %d, want %d", r.Histogram, r.Group, r.WindowStart, r.Params.Grid, q)
	}
	var total int64
	for i, p := range r.Probabilities {
		n := math.Round(p * float64(q))
		if !(n >= 0) || float64(n)/float64(q) != p {
			t.Errorf("%s/%s %s: %s = %v is not a multiple of 1/%d", r.Histogram, r.Group, r.WindowStart, r.Bins[i], p, q)
			return
		}
		total += int64(n)
	}
	if total != q {
		t.Errorf("%s/%s %s: grid units sum to %d, want %d", r.Histogram, r.Group, r.WindowStart, total, q)
	}
}

// TestEndToEndReleasesOnGrid: through the real stage (embedded broker,
// write-ahead ledger), every release made by a floating-point sampler —
// the dirichlet mechanism's count histograms and an average histogram — is
// published on its grid: probabilities n_i/Q with Σ n_i = Q exactly and
// params.grid = Q, so the unrounded draw, whose low-order bits identify
// the counts (mechanism's TestReleaseGridHidesShape), never leaves the
// process. The ledger holds the same bytes as the topic, so a republished
// release is the rounded one too. Fails on the code before the rounding
// (raw float64 draws, no params.grid). Deterministic.
func TestEndToEndReleasesOnGrid(t *testing.T) {
	h := e2e.New(t)
	const interestsHist = `  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average:
      users: 1000
      k: 1000
      eta: 0.01`
	cfg := h.ConfigExtra("mechanism: dirichlet\n  calibration: exact", 1e4, interestsHist)
	h.ProduceEvents(e2e.Stream(2, 200))
	var msgs []kafka.Message
	for u := 0; u < 40; u++ {
		msgs = append(msgs, e2e.VectorEvent(fmt.Sprintf("v%d", u), e2e.Base.Add(time.Duration(u)*time.Second), []float64{0.6, 0.3, 0.1}))
	}
	h.Produce(msgs...)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	want := 2 * (len(e2e.Groups) + 1 + 1)
	out := h.ReadOutput(want, 60*time.Second, time.Second)
	if len(out.Releases) != want || len(out.Statuses) != 0 {
		t.Fatalf("got %d releases, %d statuses; want %d releases", len(out.Releases), len(out.Statuses), want)
	}
	kinds := map[string]int{}
	for _, r := range out.Releases {
		kinds[r.Mechanism]++
		e2e.CheckSimplex(t, r, r.Bins)
		checkOnGrid(t, r)
	}
	if kinds["dirichlet"] != 2*(len(e2e.Groups)+1) || kinds[release.MechanismSimplexAverage] != 2 {
		t.Errorf("releases by mechanism %v", kinds)
	}
	run.Stop(t)

	l, err := ledger.Open(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	units := 0
	if err := l.Units(func(u *ledger.Unit) bool {
		units++
		for _, m := range u.Messages {
			found := false
			for _, raw := range out.Raw {
				for _, v := range raw {
					found = found || v == string(m.Value)
				}
			}
			if !found {
				t.Errorf("unit %s@%d: recorded message not byte-identical to any published one: %s", u.Histogram, u.WindowStart, m.Value)
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if units != 2*3 {
		t.Errorf("ledger holds %d units, want 6", units)
	}
}
