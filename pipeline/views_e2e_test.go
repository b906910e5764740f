package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestEndToEndViewsRestart (issue #23 item 2): the single-process stage
// over the bbolt release log, minute windows under
// contribution.max_windows_per_user = 2 and devices3, the devices
// histogram in 3-minute windows of its own with
// histograms[].max_windows_per_user = 1, over 6-minute budget periods.
// Every user's events count in its 2 earliest minute windows of the period
// in pages and devices, and in its earliest 3-minute window in devices3 —
// exact releases (near-noiseless Gaussian) against the truth worked out
// from the event set alone — across a restart in the middle of the second
// 3-minute window: the minute and the 3-minute admissions of the released
// windows come back from the ledger, each its own.
func TestEndToEndViewsRestart(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Contribution.MaxWindowsPerUser = 2
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.Privacy.Budget.Period = config.Duration(6 * time.Minute)
	dev := cfg.Histograms[slices.IndexFunc(cfg.Histograms, func(h config.Histogram) bool { return h.Name == "devices" })]
	dev.Name, dev.Window, dev.MaxWindowsPerUser = "devices3", config.Duration(3*time.Minute), 1
	cfg.Histograms = append(cfg.Histograms, dev)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	evs := windowBoundEvents()
	first, second := []e2e.Event{}, []e2e.Event{}
	for _, e := range evs {
		if e.At.Before(e2e.Base.Add(4 * time.Minute)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	flush1 := e2e.Event{User: "flush", At: e2e.Base.Add(4*time.Minute + 30*time.Second), Page: "home", Country: "US", Device: "mobile"}
	flush2 := e2e.Event{User: "flush", At: e2e.Base.Add(7*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}
	all := append(append([]e2e.Event{}, evs...), flush1, flush2)
	tr := e2e.ComputeTruth(e2e.AdmittedEvents(all, time.Minute, 6*time.Minute, 2))
	trView := e2e.ComputeTruthIn(e2e.AdmittedEvents(all, 3*time.Minute, 6*time.Minute, 1), 3*time.Minute, 1, 1, 0)
	unbounded := e2e.ComputeTruthIn(all, 3*time.Minute, 1, 1, 0)
	bounded := 0
	for _, vw := range []time.Time{e2e.Base, e2e.Base.Add(3 * time.Minute)} {
		tr[e2e.Key("devices3", "*", vw)] = trView[e2e.Key("devices", "*", vw)]
		if !slices.Equal(trView[e2e.Key("devices", "*", vw)], unbounded[e2e.Key("devices", "*", vw)]) {
			bounded++
		}
	}
	if bounded != 1 {
		t.Fatalf("the 3-minute bound changes %d of the 2 devices3 windows: the stream does not test it", bounded)
	}
	perWindow := len(e2e.Groups) + 1

	// Windows 0–3 (and devices3's [0, 3m)), then a restart inside
	// devices3's [3m, 6m), then windows 4–6 (and [3m, 6m)).
	run := h.Start(cfg)
	h.ProduceEvents(first)
	h.Produce(flush1.Message(false))
	h.ReadOutput(4*perWindow+1, 60*time.Second, 0)
	run.Stop(t)
	run = h.Start(cfg)
	h.ProduceEvents(second)
	h.Produce(flush2.Message(false))
	out := h.ReadOutput(7*perWindow+2, 60*time.Second, time.Second)
	if len(out.Releases) != 7*perWindow+2 {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 7*perWindow+2)
	}
	for _, r := range out.Releases {
		key := e2e.ReleaseKey(r)
		e2e.CheckExact(t, key, r, tr[key])
	}
	if d := run.Stage.Stats().Dropped(); d["bound_windows"] == 0 {
		t.Errorf("no bound_windows drops counted in the second run: %v", d)
	}
}
