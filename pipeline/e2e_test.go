package pipeline_test

import (
	"math"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// These tests run the whole stage against the embedded Kafka-protocol broker
// over loopback (no mock of the Kafka client): they produce a known event
// stream, read the output topic, and compare with the true bounded
// histograms computed here independently of the stage's code.

// TestEndToEndExactCounts: with a huge ε the Gaussian mechanism's noise is
// 0 with overwhelming probability (σ ≈ 0.01: P[|Z| ≥ 1] < 1e-1000), so every
// release must equal the true bounded histogram exactly. This checks
// decoding, bounding, windowing, grouping and commit through the whole path.
// A heavy user sending 10,000 events in one window is counted once.
func TestEndToEndExactCounts(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	evs := e2e.Stream(3, 200)
	for i := 0; i < 10000; i++ {
		// In the last window: produced after the stream, these follow its
		// window-2 events on their partition, and window 2 stays open
		// until the flush, so none of them can be late whatever the timing.
		evs = append(evs, e2e.Event{User: "heavy", At: e2e.Base.Add(2*time.Minute + time.Duration(i)*time.Millisecond), Page: "checkout", Country: "DE", Device: "desktop"})
	}
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	// Hostile and odd input, dropped and counted, never a crash.
	h.Produce(
		kafka.Message{Key: []byte("x"), Value: []byte("not json")},
		kafka.Message{Key: []byte("x"), Value: []byte(`{"ts":"yesterday","user_id":"x","page":"home","country":"US","device":"mobile"}`)},
		kafka.Message{Key: []byte("x"), Value: []byte(`{"ts":1767225600000,"page":"home","country":"US","device":"mobile"}`)},
		kafka.Message{Key: []byte("y"), Value: e2e.Event{User: "y", At: e2e.Base.Add(2*time.Minute + 30*time.Second), Page: "home", Country: "JP", Device: "tablet"}.JSON()},
		kafka.Message{Key: []byte("z"), Value: []byte("{\"ts\":1767225600000,\"user_id\":\"\xff\xfe\",\"page\":\"home\"}")},
	)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))

	want := 3 * (len(e2e.Groups) + 1)
	out := h.ReadOutput(want, 60*time.Second, 2*time.Second)
	if len(out.Releases) != want {
		t.Fatalf("got %d releases, want exactly %d (one per declared (histogram, group, window))", len(out.Releases), want)
	}
	seen := map[string]bool{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		if seen[k] {
			t.Errorf("duplicate release %s", k)
		}
		seen[k] = true
		if r.ReleaseID != release.ReleaseID(r.Histogram, r.Group, ws.UnixMilli()) {
			t.Errorf("%s: release_id %s is not the deterministic id", k, r.ReleaseID)
		}
		bins := e2e.Pages
		if r.Histogram == "devices" {
			bins = e2e.Devices
		}
		e2e.CheckSimplex(t, r, bins)
		e2e.CheckExact(t, k, r, tr[k])
	}
	for w := 0; w < 3; w++ {
		for _, g := range e2e.Groups {
			if !seen[e2e.Key("pages", g, e2e.Base.Add(time.Duration(w)*time.Minute))] {
				t.Errorf("missing release pages/%s window %d", g, w)
			}
		}
	}

	// A late event for a released window is dropped and counted.
	h.Produce(kafka.Message{Key: []byte("late"), Value: e2e.Event{User: "late", At: e2e.Base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"}.JSON()})
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return run.Stage.Stats().Late.Load() >= 1 })
	d := run.Stage.Stats().Dropped()
	for _, reason := range []string{"bad_json", "bad_time", "missing_user", "unknown_group", "out_of_domain", "invalid_utf8", "late", "bound_user_events"} {
		if d[reason] < 1 {
			t.Errorf("drop reason %q not counted (dropped: %v)", reason, d)
		}
	}
	// Each extra event is dropped on arrival or displaced later (counted
	// first, then pushed out by one ranked before it).
	if d["bound_user_events"]+d["bound_displaced"] < 9999 {
		t.Errorf("the heavy user's extra events were not bounded away: %v", d)
	}
}

// TestEndToEndDirichletUnbiasedAroundTruth: each Dirichlet release is one
// draw from Dir(r·x + α) with x the true bounded counts, so each coordinate
// lies within 6 standard deviations of its mean (r·x_i + α)/(r·N + dα)
// (Beta marginal) except with probability < 2e-9 per coordinate (Chebyshev
// would give 1/36; the Beta tails at these sizes are sub-Gaussian). With
// ~50 coordinates the false-failure rate is below 1e-7. The release is the
// draw rounded to the grid 1/Q (mechanism.RoundToGrid moves no coordinate
// by 1/Q or more), so the tolerance is 6 sd + 1/Q.
func TestEndToEndDirichletUnbiasedAroundTruth(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("diffuse", 1e4)
	evs := e2e.Stream(2, 1000)
	tr := e2e.ComputeTruth(evs)
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	out := h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, time.Second)
	params := run.Stage.Plan().Count.Mechanism.Params()
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		counts := tr[e2e.Key(r.Histogram, r.Group, ws)]
		if counts == nil {
			counts = make([]float64, len(r.Bins))
		}
		a0 := 0.0
		for _, c := range counts {
			a0 += params.R*c + params.Alpha
		}
		for i, p := range r.Probabilities {
			ai := params.R*counts[i] + params.Alpha
			mean := ai / a0
			sd := math.Sqrt(ai * (a0 - ai) / (a0 * a0 * (a0 + 1)))
			if math.Abs(p-mean) > 6*sd+1/float64(r.Params.Grid) {
				t.Errorf("%s/%s %s: released %v, Dirichlet mean %v ± %v (6 sd + 1/%d exceeded)", r.Histogram, r.Group, r.Bins[i], p, mean, sd, r.Params.Grid)
			}
		}
	}
}

// TestEndToEndRestartContinuesFromCommittedOffsets: a soft stop after the
// first window was released, more input, a restart: every window is released
// exactly once, and the windows open at the stop are complete (re-read from
// the committed offsets).
func TestEndToEndRestartContinuesFromCommittedOffsets(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	evs := e2e.Stream(3, 200)
	tr := e2e.ComputeTruth(evs)
	var first, second []e2e.Event
	for _, e := range evs {
		if e.At.Before(e2e.Base.Add(90 * time.Second)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	h.ProduceEvents(first)
	run := h.Start(cfg)
	// Close window 0 only: an event at 1m30s from a fresh user.
	h.Produce(kafka.Message{Key: []byte("w"), Value: e2e.Event{User: "w0", At: e2e.Base.Add(90 * time.Second), Page: "home", Country: "FR", Device: "mobile"}.JSON()})
	tr[e2e.Key("pages", "FR", e2e.Base.Add(time.Minute))] = []float64{1, 0, 0, 0, 0}
	tr[e2e.Key("devices", "*", e2e.Base.Add(time.Minute))][0]++
	h.ReadOutput(len(e2e.Groups)+1, 60*time.Second, 0)
	run.Stop(t)

	h.ProduceEvents(second)
	h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	out := h.ReadOutput(3*(len(e2e.Groups)+1), 60*time.Second, 2*time.Second)
	if len(out.Releases) != 3*(len(e2e.Groups)+1) {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 3*(len(e2e.Groups)+1))
	}
	for id, copies := range out.Raw {
		if len(copies) != 1 {
			t.Errorf("release %s published %d times", id, len(copies))
		}
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := e2e.Key(r.Histogram, r.Group, ws)
		e2e.CheckExact(t, k, r, tr[k])
	}
}
