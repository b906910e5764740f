package pipeline_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// The stage with privacy.mechanism: laplace-posterior, end to end over the
// embedded broker (the harness of e2e_test.go), and its plan.

// checkPosteriorRelease checks the structure every laplace-posterior release
// must have: posterior_alpha over the declared bins, every entry ≥ the
// prior > 0 and the prior plus a whole number, probabilities = α̃/Σα̃.
func checkPosteriorRelease(t *testing.T, r release.Release, bins []string, prior float64) {
	t.Helper()
	e2e.CheckSimplex(t, r, bins)
	if r.Mechanism != "laplace-posterior" || r.Calibration != "" {
		t.Errorf("%s/%s: mechanism %q calibration %q", r.Histogram, r.Group, r.Mechanism, r.Calibration)
	}
	if r.Params.PriorAlpha != prior || !(r.Params.Scale > 0) || r.Params.Alpha != 0 || r.Params.Sigma != 0 {
		t.Errorf("%s/%s: params %+v, want prior_alpha %v and a laplace scale only", r.Histogram, r.Group, r.Params, prior)
	}
	if len(r.PosteriorAlpha) != len(bins) {
		t.Fatalf("%s/%s: posterior_alpha %v has %d entries, want %d (one per declared bin)", r.Histogram, r.Group, r.PosteriorAlpha, len(r.PosteriorAlpha), len(bins))
	}
	sum := 0.0
	for i, a := range r.PosteriorAlpha {
		if !(a >= prior) || !(prior > 0) {
			t.Errorf("%s/%s bin %s: α̃ = %v below the prior %v", r.Histogram, r.Group, bins[i], a, prior)
		}
		if x := a - prior; x != math.Trunc(x) {
			t.Errorf("%s/%s bin %s: α̃ − prior = %v is not a clamped noisy count (whole number)", r.Histogram, r.Group, bins[i], x)
		}
		sum += a
	}
	for i, p := range r.Probabilities {
		if want := r.PosteriorAlpha[i] / sum; math.Abs(p-want) > 1e-12*want {
			t.Errorf("%s/%s bin %s: probability %v, α̃/Σα̃ = %v", r.Histogram, r.Group, bins[i], p, want)
		}
	}
}

// TestEndToEndLaplacePosteriorExact: with a huge ε the calibrated discrete
// Laplace scale is ≤ 0.01 (asserted), so a noise value ≠ 0 has probability
// 2q/(1+q) < 2e^{-100} per bin (q = e^{−1/b}), and every release's
// posterior_alpha must equal prior_alpha + the true bounded counts exactly,
// for every declared (histogram, group, window) — FR, which never occurs,
// included (posterior_alpha = the prior).
func TestEndToEndLaplacePosteriorExact(t *testing.T) {
	h := e2e.New(t)
	const prior = 0.5
	cfg := h.ConfigWith("mechanism: laplace-posterior\n  prior_alpha: 0.5", 1e7)
	evs := e2e.Stream(3, 200)
	for i := 0; i < 2000; i++ { // a heavy user, bounded to one event
		evs = append(evs, e2e.Event{User: "heavy", At: e2e.Base.Add(time.Minute + time.Duration(i)*time.Millisecond), Page: "checkout", Country: "DE", Device: "desktop"})
	}
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	if b := run.Stage.Plan().Count.Mechanism.Params().Scale; !(b <= 0.01) {
		t.Fatalf("calibrated scale %v: too large for an exact comparison", b)
	}
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))

	want := 3 * (len(e2e.Groups) + 1)
	out := h.ReadOutput(want, 60*time.Second, 2*time.Second)
	if len(out.Releases) != want || len(out.Statuses) != 0 {
		t.Fatalf("got %d releases and %d statuses, want exactly %d releases (one per declared (histogram, group, window))", len(out.Releases), len(out.Statuses), want)
	}
	seen := map[string]bool{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		if seen[k] {
			t.Errorf("duplicate release %s", k)
		}
		seen[k] = true
		bins := e2e.Pages
		if r.Histogram == "devices" {
			bins = e2e.Devices
		}
		checkPosteriorRelease(t, r, bins, prior)
		counts := tr[k]
		if counts == nil {
			counts = make([]float64, len(bins))
		}
		for i, a := range r.PosteriorAlpha {
			if a != prior+counts[i] {
				t.Errorf("%s bin %s: posterior_alpha %v, want prior + true bounded count = %v (counts %v)", k, bins[i], a, prior+counts[i], counts)
			}
		}
		// Charges are rounded up (mechanism.UpperRDPOf): the release states
		// the charged value, never below the mechanism's exact RDP.
		m := run.Stage.Plan().Count.Mechanism
		if want := mechanism.UpperRDPOf(m, 2); r.Privacy.RDPEpsilon != want || r.Privacy.ChargeRDPEpsilon != r.Privacy.RDPEpsilon || !(want >= m.RDP(2)) {
			t.Errorf("%s: privacy %+v, plan charged RDP(2) %v (exact %v)", k, r.Privacy, want, m.RDP(2))
		}
	}
	for w := 0; w < 3; w++ {
		ws := e2e.Base.Add(time.Duration(w) * time.Minute)
		for _, g := range e2e.Groups {
			if !seen[e2e.Key("pages", g, ws)] {
				t.Errorf("missing release pages/%s window %d", g, w)
			}
		}
		if !seen[e2e.Key("devices", "*", ws)] {
			t.Errorf("missing release devices window %d", w)
		}
	}
	// The heavy user's 2000 events counted once: DE's checkout in window 1.
	if c := tr[e2e.Key("pages", "DE", e2e.Base.Add(time.Minute))]; c == nil || c[3] < 1 {
		t.Fatalf("truth lacks the heavy user's event: %v", c)
	}
	if d := run.Stage.Stats().Dropped(); d["bound_user_events"]+d["bound_displaced"] < 1999 {
		t.Errorf("the heavy user's extra events were not bounded away: %v", d)
	}
}

// TestEndToEndLaplacePosteriorNoisy: at a moderate budget, with prior_alpha
// left out (default 1), the releases keep their structure, carry noise of
// the calibrated scale b, and stay within 40·b of prior + truth per bin: for
// a clamped value |max(c+Z, 0) − c| ≤ |Z| and P[|Z| ≥ 40b] ≤ 2e^{−40}, so
// with 16 bins the false-failure rate is below 1e-15. That some bin differs
// from prior + truth is asserted too: each bin is exactly equal with
// probability P[Z = 0] = (1−q)/(1+q) < 0.125 at the scales asserted (b ≥ 4,
// q = e^{−1/b}), so all 16 with probability < 0.125^16 < 1e-14 (the test
// seeds nothing, so these bounds are its false-failure rate).
func TestEndToEndLaplacePosteriorNoisy(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigWith("mechanism: laplace-posterior", 5)
	if cfg.Privacy.PriorAlpha != 1 {
		t.Fatalf("prior_alpha default %v, want 1", cfg.Privacy.PriorAlpha)
	}
	evs := e2e.Stream(2, 300)
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	b := run.Stage.Plan().Count.Mechanism.Params().Scale
	if !(b >= 4) {
		t.Fatalf("calibrated scale %v < 4: the noise check below assumes b ≥ 4", b)
	}
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	want := 2 * (len(e2e.Groups) + 1)
	out := h.ReadOutput(want, 60*time.Second, 2*time.Second)
	if len(out.Releases) != want {
		t.Fatalf("got %d releases, want %d", len(out.Releases), want)
	}
	differs := false
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		bins := e2e.Pages
		if r.Histogram == "devices" {
			bins = e2e.Devices
		}
		checkPosteriorRelease(t, r, bins, 1)
		if r.Params.Scale != b {
			t.Errorf("%s: scale %v, plan %v", k, r.Params.Scale, b)
		}
		counts := tr[k]
		if counts == nil {
			counts = make([]float64, len(bins))
		}
		for i, a := range r.PosteriorAlpha {
			if math.Abs(a-1-counts[i]) >= 40*b {
				t.Errorf("%s bin %s: posterior_alpha %v, prior + truth %v: beyond 40·b = %v", k, bins[i], a, 1+counts[i], 40*b)
			}
			if a != 1+counts[i] {
				differs = true
			}
		}
	}
	if !differs {
		t.Error("every posterior_alpha equals prior + truth exactly: no noise was added")
	}
}

// The plan of laplace-posterior is the laplace baseline's: same spec (kind
// laplace, derived sensitivities), same scale, same per-unit charge at every
// order, same planned ε — with the rdp_epsilon-fixed calibration too.
func TestLaplacePosteriorPlanIsLaplaceBaseline(t *testing.T) {
	yml := func(privacy string) *config.Config {
		y := `
kafka: {brokers: ["localhost:9092"]}
window: {size: 1m}
histograms:
  - {name: pages, field: page, bins: [a, b, c], group_by: g, groups: [x, y]}
  - {name: dev, field: d, bins: [m, n]}
contribution: {max_events_per_user: 2}
privacy:
` + privacy + `
  neighbour: replace
  order: 3
  budget: {epsilon: 2, delta: 1.0e-6, period: 1h}
`
		cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}
	for _, extra := range []string{"", "\n  rdp_epsilon: 0.01"} {
		postPlan, err := plan.DerivePlan(yml("  mechanism: laplace-posterior\n  prior_alpha: 2" + extra))
		if err != nil {
			t.Fatal(err)
		}
		lapPlan, err := plan.DerivePlan(yml("  mechanism: laplace" + extra))
		if err != nil {
			t.Fatal(err)
		}
		post, lap := postPlan.Count, lapPlan.Count
		pm, ok := post.Mechanism.(*mechanism.CountPosterior)
		if !ok {
			t.Fatalf("laplace-posterior plan mechanism is %T, want *mechanism.CountPosterior", post.Mechanism)
		}
		if pm.Prior() != 2 || pm.Params().Prior != 2 {
			t.Errorf("prior %v / %v, want 2", pm.Prior(), pm.Params().Prior)
		}
		if post.Sensitivity != (mechanism.Sensitivity{L1: 4, L2Sq: 8, LInf: 2}) || post.Sensitivity != lap.Sensitivity {
			t.Errorf("sensitivity %+v, laplace %+v, want replace with m=2: Δ1=4, Δ2²=8, Δ∞=2", post.Sensitivity, lap.Sensitivity)
		}
		ps, ls := post.Mechanism.Spec(), lap.Mechanism.Spec()
		if ps.Kind != mechanism.Laplace || ps.RDPEpsilon != ls.RDPEpsilon || ps.Sensitivity != ls.Sensitivity || ps.Order != ls.Order {
			t.Errorf("spec %+v, laplace %+v", ps, ls)
		}
		if post.Mechanism.Params().Scale != lap.Mechanism.Params().Scale {
			t.Errorf("scale %v, laplace %v", post.Mechanism.Params().Scale, lap.Mechanism.Params().Scale)
		}
		pc, lc := post.Charge.Epsilons(), lap.Charge.Epsilons()
		if len(pc) == 0 || strings.Join(fmtAll(pc), ",") != strings.Join(fmtAll(lc), ",") {
			t.Errorf("charge %v, laplace %v", pc, lc)
		}
		for i, o := range post.Charge.Orders() {
			if want := mechanism.UpperRDPOf(post.Mechanism, o); pc[i] != want || !(pc[i] >= post.Mechanism.RDP(o)) {
				t.Errorf("charge at order %v is %v, want the mechanism's RDP %v rounded up: %v", o, pc[i], post.Mechanism.RDP(o), want)
			}
		}
		if post.PlannedEpsilon != lap.PlannedEpsilon || post.Units != lap.Units || post.FitUnits != lap.FitUnits || !(post.PlannedEpsilon <= 2) {
			t.Errorf("planned ε %v units %d fit %d, laplace %v %d %d", post.PlannedEpsilon, post.Units, post.FitUnits, lap.PlannedEpsilon, lap.Units, lap.FitUnits)
		}
	}
}

func fmtAll(v []float64) []string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return s
}
