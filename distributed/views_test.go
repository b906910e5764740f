package distributed_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// TestFeatureViews (issue #23 item 2): a base view and a coarser view in
// one budget, each with its own cross-window bound, in the single-process
// and the distributed mode. 1 s base windows with
// contribution.max_windows_per_user = 2 (pages, devices) and devices3, the
// devices histogram in 3 s windows of its own with
// histograms[].max_windows_per_user = 1, over 6 s budget periods (6 base
// windows, 2 devices3 windows). "all-*" users have an event in every base
// window of the period: they count in base windows 0 and 1 only, and in
// devices3's first window only; "late-*" users come in windows 3 to 5
// only: they count in 3 and 4, and in devices3's second window. After base
// window 2 (devices3's first window) is released, one stage stops (single:
// a new one starts and restores both admission states from the release
// log; distributed: the other stage takes the partitions over and restores
// them from the progress topic). Every release is exactly the truth worked
// out from the event set alone under each view's own bound; a third
// devices3 window for the "all-*" users would have released more.
func TestFeatureViews(t *testing.T) {
	const base, view, period = time.Second, 3 * time.Second, 6 * time.Second
	for _, mode := range featureModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			cfg := featureConfig(t, h, mode.distributed, func(c *config.Config) {
				c.Window.Size = config.Duration(base)
				c.Window.AllowedLateness = config.Duration(completeLateness)
				c.Privacy.Budget.Period = config.Duration(period)
				c.Contribution.MaxWindowsPerUser = 2
				for _, hc := range c.Histograms {
					if hc.Name == "devices" {
						hc.Name, hc.Window, hc.MaxWindowsPerUser = "devices3", config.Duration(view), 1
						c.Histograms = append(c.Histograms, hc)
						break
					}
				}
			})
			stages := startFeature(t, h, cfg)
			var evs []e2e.Event
			w0 := nextWindow(period)
			var last time.Time
			for i := range 6 {
				b := w0
				if i > 0 {
					b = nextWindow(base)
				}
				batch := e2e.StreamFrom(b.Add(50*time.Millisecond), base/2, 1, 24)
				for j := range batch {
					batch[j].User = fmt.Sprintf("all-%d", j)
					if j%3 == 0 {
						batch[j].User = fmt.Sprintf("late-%d", j)
					}
				}
				if i < 3 { // the late users come in windows 3 to 5 only
					batch = slices.DeleteFunc(batch, func(e e2e.Event) bool { return e.User[0] == 'l' })
				}
				produceKeyed(t, h, batch)
				evs, last = append(evs, batch...), b
				if i == 3 {
					// Base window 2 and devices3's first window released:
					// the stage stops, devices3's second window open.
					e2e.WaitFor(t, "devices3's first window", 20*time.Second, func() bool {
						out := h.ReadOutput(1, 2*time.Second, 300*time.Millisecond)
						return slices.ContainsFunc(out.Releases, func(r release.Release) bool { return e2e.ReleaseKey(r) == e2e.Key("devices3", "*", w0) })
					})
					if time.Now().After(w0.Add(period)) {
						t.Fatal("the first view window was released too late for the test")
					}
					stages[0].Cancel()
					if !mode.distributed {
						stages = append(stages, h.Start(cfg))
					}
				}
			}
			e2e.WaitPast(last.Add(base + completeLateness + 200*time.Millisecond))
			tr := e2e.ComputeTruthIn(e2e.AdmittedEvents(evs, base, period, 2), base, 1, 1, 0)
			trView := e2e.ComputeTruthIn(e2e.AdmittedEvents(evs, view, period, 1), view, 1, 1, 0)
			unbounded := e2e.ComputeTruthIn(evs, view, 1, 1, 0)
			var keys []string
			for b := w0; !b.After(last); b = b.Add(base) {
				keys = append(keys, windowKeys(b)...)
			}
			differs := 0
			for vw := w0; vw.Before(w0.Add(period)); vw = vw.Add(view) {
				k := e2e.Key("devices3", "*", vw)
				tr[k] = trView[e2e.Key("devices", "*", vw)]
				keys = append(keys, k)
				if sum(tr[k]) < sum(unbounded[e2e.Key("devices", "*", vw)]) {
					differs++
				}
			}
			if differs != 1 || sum(tr[e2e.Key("devices", "*", w0.Add(2*base))]) != 0 || sum(tr[e2e.Key("devices", "*", w0.Add(3*base))]) == 0 {
				t.Fatalf("the stream does not test the views' own bounds: %d devices3 windows bounded, base windows 2, 3 count %v, %v",
					differs, tr[e2e.Key("devices", "*", w0.Add(2*base))], tr[e2e.Key("devices", "*", w0.Add(3*base))])
			}
			got := releasesOf(t, h, keys)
			for _, k := range keys {
				e2e.CheckExact(t, k, got[k], tr[k])
			}
			for vw := w0; vw.Before(w0.Add(period)); vw = vw.Add(view) {
				r := got[e2e.Key("devices3", "*", vw)]
				if r.Privacy.ChargeWindows != 1 {
					t.Errorf("devices3 release at %s: charge over %d windows, want its own bound 1", r.WindowStart, r.Privacy.ChargeWindows)
				}
			}
			if r := got[e2e.Key("devices", "*", w0)]; r.Privacy.ChargeWindows != 2 {
				t.Errorf("devices release: charge over %d windows, want 2", r.Privacy.ChargeWindows)
			}
		})
	}
}
