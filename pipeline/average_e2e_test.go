package pipeline_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
	"github.com/segmentio/kafka-go"
)

// The stage with a histogram of kind average, released by the simplex
// Dirichlet mechanism (mechanism/average.go), end to end over the embedded
// broker, next to the count histograms of the harness.

// TestEndToEndAverage checks every average release against its exact mean:
//
//   - window 0: 30 users (fewer than users: 50), one of them with two
//     vectors (averaged into one), so p̄ = (Σ vectors + 20·uniform)/50;
//   - window 1: 120 users with the same vector v: whichever 50 are kept,
//     p̄ = v;
//   - window 2: no vectors: p̄ is uniform — the release is made anyway;
//
// plus malformed vectors (dropped as bad_vector / wrong_type, never
// averaged). Each release is one draw of Dir(k·p), p = (1 − 3η)·p̄ + η, with
// k = 10⁶: Var = p_i(1 − p_i)/(k + 1), and the test allows 6σ per
// coordinate (false-failure rate below 9 × 2·10⁻⁹), plus 1/Q for the
// rounding of the release to its grid (params.grid).
func TestEndToEndAverage(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigExtra("mechanism: gaussian", 1e9, e2e.AverageHist)
	const users, eta, k = 50.0, 0.001, 1e6

	var msgs []kafka.Message
	sum := []float64{0, 0, 0}
	for u := 0; u < 30; u++ {
		v := []float64{0, 0, 0}
		v[u%3] = 1
		if u == 0 {
			// Two vectors in the window: the user counts as their mean.
			msgs = append(msgs, e2e.VectorEvent("u0", e2e.Base.Add(time.Second), []float64{0, 1, 0}))
			v = []float64{0.5, 0.5, 0}
		}
		vec := v
		if u == 0 {
			vec = []float64{1, 0, 0}
		}
		msgs = append(msgs, e2e.VectorEvent(fmt.Sprintf("u%d", u), e2e.Base.Add(time.Duration(u+2)*time.Second), vec))
		for i := range sum {
			sum[i] += v[i]
		}
	}
	// Malformed vectors of users with nothing else: never averaged.
	msgs = append(msgs,
		e2e.VectorEvent("bad1", e2e.Base.Add(40*time.Second), []float64{0.5, 0.6, 0}), // sums to 1.1
		e2e.VectorEvent("bad2", e2e.Base.Add(41*time.Second), []float64{1, 0}),        // wrong length
		e2e.VectorEvent("bad3", e2e.Base.Add(42*time.Second), []float64{-0.5, 1, 0.5}),
		e2e.VectorEvent("bad4", e2e.Base.Add(43*time.Second), "news"))
	v1 := []float64{0.7, 0.2, 0.1}
	for u := 0; u < 120; u++ {
		msgs = append(msgs, e2e.VectorEvent(fmt.Sprintf("w%d", u), e2e.Base.Add(time.Minute+time.Duration(u)*100*time.Millisecond), v1))
	}
	want0 := make([]float64, 3)
	for i := range want0 {
		want0[i] = (sum[i] + 20.0/3) / users
	}
	wantMean := map[int][]float64{0: want0, 1: v1, 2: {1.0 / 3, 1.0 / 3, 1.0 / 3}}

	// Count histograms' events too: the two kinds share the stage.
	evs := e2e.Stream(3, 50)
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	h.Produce(msgs...)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))

	plan := run.Stage.Plan()
	if len(plan.Averages) != 1 || plan.Count.UnitsPerWindow != 2 {
		t.Fatalf("plan: %d averages, %d count units per window", len(plan.Averages), plan.Count.UnitsPerWindow)
	}
	ap := plan.Averages[0]
	if !(ap.Epsilon > 0) || !(ap.Delta > 0) || ap.Delta > 1e-6/2/60*(1+1e-9) {
		t.Fatalf("average release guarantee (%g, %g): want ε > 0 and δ ≤ the default share δ/2/60", ap.Epsilon, ap.Delta)
	}
	if math.Abs(plan.ApproxEpsilon-60*ap.Epsilon) > 1e-9*plan.ApproxEpsilon || plan.Count.RDPEpsilon != 1e9-plan.ApproxEpsilon {
		t.Errorf("budget split: approx ε %g (60 × %g), RDP ε %g", plan.ApproxEpsilon, ap.Epsilon, plan.Count.RDPEpsilon)
	}

	want := 3 * (len(e2e.Groups) + 1 + 1)
	out := h.ReadOutput(want, 60*time.Second, 2*time.Second)
	if len(out.Releases) != want || len(out.Statuses) != 0 {
		t.Fatalf("got %d releases and %d statuses, want %d releases", len(out.Releases), len(out.Statuses), want)
	}
	seen := map[int]bool{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		w := int(ws.Sub(e2e.Base) / time.Minute)
		if r.Histogram != "interests" {
			if r.Histogram == "devices" || r.Histogram == "pages" {
				kk := e2e.Key(r.Histogram, r.Group, ws)
				e2e.CheckExact(t, kk, r, tr[kk])
			}
			continue
		}
		if seen[w] {
			t.Errorf("window %d released twice", w)
		}
		seen[w] = true
		e2e.CheckSimplex(t, r, e2e.Interests)
		if r.Mechanism != "simplex-average" || r.Group != "*" { // the contract (README: Output messages)
			t.Errorf("window %d: mechanism %q group %q", w, r.Mechanism, r.Group)
		}
		if r.Params.K != k || r.Params.Eta != eta || r.Params.Users != users || !(r.Params.Gamma > 0) {
			t.Errorf("window %d: params %+v", w, r.Params)
		}
		// The (ε, δ) of the release, and in RDP its total's (issue 29).
		if r.Privacy.ReleaseEpsilon != ap.Epsilon || r.Privacy.ReleaseDelta != ap.Delta || !(r.Privacy.RDPEpsilon > 0) || r.Privacy.RDPEpsilon != r.Privacy.TotalRDPEpsilon {
			t.Errorf("window %d: privacy %+v, want release (ε, δ) = (%g, %g) and the total's RDP", w, r.Privacy, ap.Epsilon, ap.Delta)
		}
		if r.Intervals == nil || len(r.Intervals.Low) != len(e2e.Interests) || r.Total == nil || r.Total.High > float64(users) || !(r.Params.TotalSigma > 0) {
			t.Errorf("window %d: intervals %+v total %+v total_sigma %v", w, r.Intervals, r.Total, r.Params.TotalSigma)
		}
		pbar := wantMean[w]
		for i, x := range r.Probabilities {
			p := (1-3*eta)*pbar[i] + eta
			sd := math.Sqrt(p * (1 - p) / (k + 1))
			if tol := 6*sd + 1/float64(r.Params.Grid); math.Abs(x-p) > tol {
				t.Errorf("window %d %s: released %.6f, mean %.6f (p̄ %.6f), more than 6σ + 1/Q = %.2g away", w, e2e.Interests[i], x, p, pbar[i], tol)
			}
		}
	}
	for w := 0; w < 3; w++ {
		if !seen[w] {
			t.Errorf("no average release for window %d", w)
		}
	}
	d := run.Stage.Stats().Dropped()
	if d["bad_vector"] != 3 || d["wrong_type"] < 1 {
		t.Errorf("drops %v: want 3 bad_vector (sum, length, negative) and a wrong_type", d)
	}
	// Window 1's 120 users: 50 kept; a user refused at arrival counts as not
	// selected, one evicted later (a smaller hash arrived) was averaged
	// first, so the split depends on the order but the total does not.
	av, ns := run.Stage.Stats().Averaged.Load(), run.Stage.Stats().AverageNotSelected.Load()
	if av+ns != 31+120 || ns > 70 || av < 31+50 {
		t.Errorf("averaged %d + not selected %d vectors, want 151 in all, at most 70 not selected", av, ns)
	}
	run.Stop(t)

	// The ledger holds the (ε, δ) charges of the 3 average units, apart
	// from the RDP spend.
	l, err := ledger.Open(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	period := e2e.Base.Truncate(time.Hour).UnixMilli()
	a, ok, err := l.ApproxSpent(period)
	if err != nil || !ok || a.Releases != 3 || math.Abs(a.Epsilon-3*ap.Epsilon) > 1e-9*a.Epsilon || math.Abs(a.Delta-3*ap.Delta) > 1e-9*a.Delta {
		t.Errorf("approx spend %+v (ok %v, err %v), want 3 releases of (%g, %g)", a, ok, err, ap.Epsilon, ap.Delta)
	}
	if _, ok, _ := l.Spent(period); !ok {
		t.Error("no RDP spend recorded for the count histograms")
	}
}

// TestAveragePlanErrors: a configuration whose average releases cannot fit
// the budget is refused with what to change.
func TestAveragePlanErrors(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigExtra("mechanism: gaussian", 1, e2e.AverageHist)
	_, err := plan.DerivePlan(cfg)
	if err == nil || !strings.Contains(err.Error(), "raise average.users") {
		t.Fatalf("DerivePlan with ε = 1: %v, want an error saying what to change", err)
	}
}
