package pipeline_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// devices3 is the harness's devices histogram again, in 3-minute windows of
// its own next to the 1-minute base windows.
const devices3 = `  - name: devices3
    field: device
    bins: [mobile, desktop]
    window: 3m
`

// TestEndToEndHistogramWindows: a 1-minute histogram and a 3-minute one
// (histograms[].window) over the same events, through the embedded broker,
// with the near-noiseless Gaussian (exact counts: σ ≈ 0.01, P[|Z| ≥ 1] <
// 1e-1000 per coordinate):
//
//   - each histogram is released once per window of its own, exactly the
//     bounded counts of that window — max_events_per_user 1 binds per
//     3-minute window for devices3 (the stream's users come back in
//     several minutes of one 3-minute window), per minute for the others;
//   - at its own cadence: after the base windows 0–3 closed, devices3 has
//     released [0, 3m) and not [3m, 6m), and its messages carry its own
//     window_end;
//   - a restart between a base close and a coarse close (stopped after
//     base window [3m, 4m) was released, [3m, 6m) still open) loses and
//     doubles nothing: the restarted stage re-reads minute 3's events
//     (offsets are not committed past an open long window) and counts
//     them into [3m, 6m) only, minute 3 staying released once.
func TestEndToEndHistogramWindows(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.ConfigExtra("mechanism: gaussian", 1e7, devices3)
	base := e2e.Base
	evs := e2e.Stream(6, 60)
	flushA := e2e.Event{User: "flush", At: base.Add(4*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	flushB := e2e.Event{User: "flush", At: base.Add(6*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	all := append(append([]e2e.Event{}, evs...), flushA, flushB)
	tr := e2e.ComputeTruth(all)
	for k, v := range e2e.ComputeTruthIn(all, 3*time.Minute, 1, 1, 0) {
		if strings.HasPrefix(k, "devices/") {
			tr["devices3/"+strings.TrimPrefix(k, "devices/")] = v
		}
	}
	// The 3-minute bound binds: fewer events count in a 3-minute window than
	// in its three minutes together (else the test could not tell).
	sum := func(v []float64) (n float64) {
		for _, x := range v {
			n += x
		}
		return n
	}
	perMinute := 0.0
	for m := range 3 {
		perMinute += sum(tr[e2e.Key("devices", "*", base.Add(time.Duration(m)*time.Minute))])
	}
	if long := sum(tr[e2e.Key("devices3", "*", base)]); !(long < perMinute) {
		t.Fatalf("the stream does not make the 3-minute bound bind: %v counted in [0, 3m), %v in its minutes", long, perMinute)
	}

	var first, second []e2e.Event
	for _, e := range evs {
		if e.At.Before(base.Add(4 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	perMin := len(e2e.Groups) + 1 // pages × 3 groups + devices
	check := func(out e2e.Output) map[string]int {
		t.Helper()
		n := map[string]int{}
		for id, copies := range out.Raw {
			if len(copies) != 1 {
				t.Errorf("release %s published %d times", id, len(copies))
			}
		}
		for _, r := range out.Releases {
			ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
			we, _ := time.Parse(time.RFC3339Nano, r.WindowEnd)
			k := e2e.Key(r.Histogram, r.Group, ws)
			n[r.Histogram]++
			size := time.Minute
			if r.Histogram == "devices3" {
				size = 3 * time.Minute
			}
			if we.Sub(ws) != size || ws.UnixMilli()%size.Milliseconds() != 0 {
				t.Errorf("%s: window [%s, %s), want an aligned window of %s", k, r.WindowStart, r.WindowEnd, size)
			}
			if r.ReleaseID != release.ReleaseID(r.Histogram, r.Group, ws.UnixMilli()) {
				t.Errorf("%s: release_id %s is not the deterministic id", k, r.ReleaseID)
			}
			e2e.CheckExact(t, k, r, tr[k])
		}
		return n
	}

	h.ProduceEvents(first)
	h.ProduceEvents([]e2e.Event{flushA})
	run := h.Start(cfg)
	// Base windows 0–3 close; devices3 closes [0, 3m) with window 2.
	out := h.ReadOutput(4*perMin+1, 60*time.Second, 2*time.Second)
	n := check(out)
	if len(out.Releases) != 4*perMin+1 || n["devices3"] != 1 || n["devices"] != 4 {
		t.Fatalf("after base windows 0–3: %d releases %v, want %d (devices3 once: [0, 3m) only)", len(out.Releases), n, 4*perMin+1)
	}
	run.Stop(t)

	h.ProduceEvents(second)
	h.ProduceEvents([]e2e.Event{flushB})
	h.Start(cfg)
	out = h.ReadOutput(6*perMin+2, 60*time.Second, 2*time.Second)
	n = check(out)
	if len(out.Releases) != 6*perMin+2 || n["devices3"] != 2 || n["devices"] != 6 || n["pages"] != 6*len(e2e.Groups) {
		t.Fatalf("after base windows 0–5 and a restart: %d releases %v, want %d", len(out.Releases), n, 6*perMin+2)
	}
}

// TestEndToEndAverageHistogramWindow: an average histogram with a 2-minute
// window of its own averages its users over the whole window — a user with
// vectors in both minutes counts once, as the mean of its vectors — and is
// released once per 2 minutes with its own window and its plan's
// per-release guarantee, W_h = 30 releases per hour reserved. Minute 0: 20
// users with e₀ (news), minute 1: 20 others with e₁ (sport), and user "b"
// with e₂ (music) in minute 0 and e₀ in minute 1: 41 users ≤ users 50, so
// p̄ = (20e₀ + 20e₁ + (e₂+e₀)/2 + 9·uniform)/50 exactly. A per-minute
// average would release twice, and neither window's mean is that p̄. The
// tolerance is the simplex mechanism's 6σ + 1/Q per coordinate, as in
// TestEndToEndAverage (false-failure rate below 3 × 2·10⁻⁹).
func TestEndToEndAverageHistogramWindow(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigExtra("mechanism: gaussian", 1e9, e2e.AverageHist+"\n    window: 2m\n")
	const users, eta, k = 50.0, 0.001, 1e6
	var msgs []kafka.Message
	for u := range 20 {
		msgs = append(msgs, e2e.VectorEvent(fmt.Sprintf("a%d", u), e2e.Base.Add(time.Duration(u+1)*time.Second), []float64{1, 0, 0}))
		msgs = append(msgs, e2e.VectorEvent(fmt.Sprintf("c%d", u), e2e.Base.Add(time.Minute+time.Duration(u+1)*time.Second), []float64{0, 1, 0}))
	}
	msgs = append(msgs, e2e.VectorEvent("b", e2e.Base.Add(30*time.Second), []float64{0, 0, 1}),
		e2e.VectorEvent("b", e2e.Base.Add(90*time.Second), []float64{1, 0, 0}))
	pbar := []float64{(20 + 0.5 + 3) / users, (20 + 3) / users, (0.5 + 3) / users}
	h.Produce(msgs...)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	ap := run.Stage.Plan().Averages[0]
	if ap.Windows != 30 {
		t.Fatalf("the plan reserves %d average releases per hour, want 30", ap.Windows)
	}
	want := 2*(len(e2e.Groups)+1) + 1
	out := h.ReadOutput(want, 60*time.Second, 2*time.Second)
	if len(out.Releases) != want {
		t.Fatalf("got %d releases, want %d (the average one once)", len(out.Releases), want)
	}
	n := 0
	for _, r := range out.Releases {
		if r.Histogram != "interests" {
			continue
		}
		n++
		if r.WindowStart != "2026-01-01T00:00:00Z" || r.WindowEnd != "2026-01-01T00:02:00Z" {
			t.Errorf("average release window [%s, %s), want [00:00, 00:02)", r.WindowStart, r.WindowEnd)
		}
		if r.Privacy.ReleaseEpsilon != ap.Epsilon || r.Privacy.ReleaseDelta != ap.Delta {
			t.Errorf("privacy %+v, want release (ε, δ) = (%g, %g)", r.Privacy, ap.Epsilon, ap.Delta)
		}
		for i, x := range r.Probabilities {
			p := (1-3*eta)*pbar[i] + eta
			sd := math.Sqrt(p * (1 - p) / (k + 1))
			if tol := 6*sd + 1/float64(r.Params.Grid); math.Abs(x-p) > tol {
				t.Errorf("%s: released %.6f, mean %.6f (p̄ %.6f), more than 6σ + 1/Q = %.2g away", e2e.Interests[i], x, p, pbar[i], tol)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d average releases, want 1", n)
	}
}
