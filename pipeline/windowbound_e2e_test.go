package pipeline_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/plan"
)

// skipUnlessAccounted skips a test of contribution.max_windows_per_user
// while plan.DerivePlan still refuses it ("not accounted by this build
// yet": the accounting lands separately from the enforcement).
func skipUnlessAccounted(t *testing.T, cfg *config.Config) {
	t.Helper()
	if _, err := plan.DerivePlan(cfg); err != nil {
		t.Skipf("plan.DerivePlan refuses contribution.max_windows_per_user (%v): enable with the K-window accounting", err)
	}
}

// windowBoundEvents: users u0..u11 over windows 0..6 (one minute each from
// e2e.Base), present in about three windows of four, some with a second
// event in a window (max_events_per_user 1 keeps one by its hash).
func windowBoundEvents() []e2e.Event {
	var evs []e2e.Event
	for w := range 7 {
		for i := range 12 {
			if (i*5+w*3)%4 == 0 {
				continue
			}
			at := e2e.Base.Add(time.Duration(w)*time.Minute + time.Duration(i+1)*time.Second)
			user := fmt.Sprintf("u%d", i)
			e := e2e.Event{User: user, At: at, Page: e2e.Pages[(i+w)%5], Country: e2e.Groups[i%2], Device: e2e.Devices[(i*i+w)%2]}
			evs = append(evs, e)
			if (i+w)%3 == 0 {
				e.At, e.Page = e.At.Add(time.Millisecond), e2e.Pages[(i+2*w+1)%5]
				evs = append(evs, e)
			}
		}
	}
	return evs
}

// TestEndToEndWindowBound: with contribution.max_windows_per_user = 2 and
// 3-minute budget periods, every user's events count in exactly its 2
// earliest windows of each period — through the broker, with exact
// releases (near-noiseless Gaussian) compared with the truth worked out
// from the event set alone — also across a restart in the middle of a
// period (the admissions of the windows released before it come back from
// the ledger). Events of later windows arrive while earlier ones are open,
// so users are tentatively present in windows they turn out not to be
// admitted to.
func TestEndToEndWindowBound(t *testing.T) {
	const k = 2
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Contribution.MaxWindowsPerUser = k
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Period = config.Duration(3 * time.Minute)
	skipUnlessAccounted(t, cfg)

	evs := windowBoundEvents()
	first, second := []e2e.Event{}, []e2e.Event{}
	for _, e := range evs {
		if e.At.Before(e2e.Base.Add(4 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	// The flush events count too (user "flush"): one in window 4, one in
	// window 7 (not released here).
	flush1 := e2e.Event{User: "flush", At: e2e.Base.Add(4*time.Minute + 30*time.Second), Page: "home", Country: "US", Device: "mobile"}
	flush2 := e2e.Event{User: "flush", At: e2e.Base.Add(7*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	all := append(append([]e2e.Event{}, evs...), flush1, flush2)
	tr := e2e.ComputeTruth(e2e.AdmittedEvents(all, time.Minute, 3*time.Minute, k))
	unbounded := e2e.ComputeTruth(all)
	perWindow := len(e2e.Groups) + 1

	// Windows 0–3, then a restart in the middle of the period of windows
	// 3–5, then windows 4–6.
	run := h.Start(cfg)
	h.ProduceEvents(first)
	h.Produce(flush1.Message(false))
	h.ReadOutput(4*perWindow, 60*time.Second, 0)
	run.Stop(t)
	run = h.Start(cfg)
	h.ProduceEvents(second)
	h.Produce(flush2.Message(false))
	out := h.ReadOutput(7*perWindow, 60*time.Second, time.Second)
	if len(out.Releases) != 7*perWindow {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 7*perWindow)
	}
	differs := 0
	for _, r := range out.Releases {
		key := e2e.ReleaseKey(r)
		e2e.CheckExact(t, key, r, tr[key])
		if !slices.Equal(tr[key], unbounded[key]) {
			differs++
		}
	}
	if differs == 0 {
		t.Fatalf("the bound changes no release: the stream does not test it")
	}
	if d := run.Stage.Stats().Dropped(); d["bound_windows"] == 0 {
		t.Errorf("no bound_windows drops counted in the second run: %v", d)
	}
}

// TestEndToEndWindowBoundAverage: the cross-window bound covers average
// histograms, sharing the admission with the count histograms. K = 1,
// average.users 50: users a0..a9 send [1,0,0] in window 0 and [0,1,0] in
// window 1; users b0..b9 send [0,0,1] in window 1 only. The a users are
// admitted to window 0 only, so window 1 averages the b users' vectors
// with 40 uniform paddings: p̄ = (0.2667, 0.2667, 0.4667), where counting
// the a users again would give (0.2, 0.4, 0.4). The events carry no count
// histogram's fields: their users are eligible through the average
// histogram alone. Each release is one draw of Dir(k·p), k = 10⁶, checked
// within 6σ per coordinate plus 1/Q (false-failure rate below 2·10⁻⁸, as
// TestEndToEndAverage).
func TestEndToEndWindowBoundAverage(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigExtra("mechanism: gaussian", 1e9, e2e.AverageHist)
	cfg.Contribution.MaxWindowsPerUser = 1
	cfg.Contribution.MaxTrackedUsers = 0
	skipUnlessAccounted(t, cfg)
	const users, eta, k = 50.0, 0.001, 1e6
	var msgs []kafka.Message
	for u := range 10 {
		msgs = append(msgs,
			e2e.VectorEvent(fmt.Sprintf("a%d", u), e2e.Base.Add(time.Duration(u+1)*time.Second), []float64{1, 0, 0}),
			e2e.VectorEvent(fmt.Sprintf("a%d", u), e2e.Base.Add(time.Minute+time.Duration(u+1)*time.Second), []float64{0, 1, 0}),
			e2e.VectorEvent(fmt.Sprintf("b%d", u), e2e.Base.Add(time.Minute+time.Duration(u+20)*time.Second), []float64{0, 0, 1}))
	}
	run := h.Start(cfg)
	h.Produce(msgs...)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	want := 2 * (len(e2e.Groups) + 2)
	out := h.ReadOutput(want, 60*time.Second, time.Second)
	u := 1 / users / 3
	wantMean := [][]float64{
		{(10 + 40.0/3) / users, 40 * u, 40 * u},
		{40 * u, 40 * u, (10 + 40.0/3) / users},
	}
	seen := 0
	for _, r := range out.Releases {
		if r.Histogram != "interests" {
			continue
		}
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		w := int(ws.Sub(e2e.Base) / time.Minute)
		seen++
		for i, x := range r.Probabilities {
			p := (1-3*eta)*wantMean[w][i] + eta
			sd := math.Sqrt(p * (1 - p) / (k + 1))
			if tol := 6*sd + 1/float64(r.Params.Grid); math.Abs(x-p) > tol {
				t.Errorf("window %d %s: released %.6f, mean %.6f (p̄ %.6f), more than 6σ + 1/Q = %.2g away", w, e2e.Interests[i], x, p, wantMean[w][i], tol)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("%d interests releases of windows 0–1, want 2 (%d releases read)", seen, len(out.Releases))
	}
	if d := run.Stage.Stats().Dropped(); d["bound_windows"] != 10 {
		t.Errorf("bound_windows %d, want the a users' 10 vectors of window 1", d["bound_windows"])
	}
}
