package pipeline_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// pages3 is the harness's pages histogram in 3-minute windows of its own.
const pages3 = `  - name: pages3
    field: page
    bins: [home, search, cart, checkout, other]
    overflow_bin: other
    group_by: country
    groups: [US, DE, FR]
    window: 3m
`

// histWindowAdded runs: config A (the base histograms only), user x's
// event of minute 1 (US) — preceded in its partition, when withV, by an
// event of another user v of minute 2 (DE) — minutes 0–1 released, minute 2
// still open; a soft stop; then config B = A + pages3 (a histogram added
// with histograms[].window = 3m; its first window [0, 3m) began before the
// restart) and minutes 2–5 closed. It returns pages3's releases by window
// start and group.
func histWindowAdded(t *testing.T, withV bool) map[string][]float64 {
	h := e2e.New(t)
	mk := func(extra string) *config.Config {
		cfg := h.ConfigExtra("mechanism: gaussian\n  rdp_epsilon: 1e6", 1e9, extra)
		cfg.Window.AllowedLateness = config.Duration(time.Minute)
		return cfg
	}
	at := func(d time.Duration) time.Time { return e2e.Base.Add(d) }
	x := e2e.Event{User: "x", At: at(time.Minute + 10*time.Second), Page: "home", Country: "US", Device: "mobile"}
	v := e2e.Event{User: "v", At: at(2*time.Minute + 5*time.Second), Page: "cart", Country: "DE", Device: "desktop"}
	w := e2e.Event{User: "w", At: at(2*time.Minute + 20*time.Second), Page: "search", Country: "US", Device: "desktop"}
	f1 := e2e.Event{User: "f", At: at(3*time.Minute + 10*time.Second), Page: "other", Country: "FR", Device: "mobile"}
	f2 := e2e.Event{User: "f", At: at(4*time.Minute + 30*time.Second), Page: "other", Country: "FR", Device: "mobile"}
	y := e2e.Event{User: "y", At: at(5*time.Minute + 40*time.Second), Page: "checkout", Country: "US", Device: "mobile"}
	g := e2e.Event{User: "g", At: at(7*time.Minute + 10*time.Second), Page: "home", Country: "DE", Device: "mobile"}
	perWindow := len(e2e.Groups) + 1

	run := h.Start(mk(""))
	first := []e2e.Event{x}
	if withV {
		first = []e2e.Event{v, x}
	}
	h.ProduceTo(0, first)
	for i := 0; i < 300 && run.Stage.Stats().Counted.Load() < int64(2*len(first)); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	h.ProduceTo(1, []e2e.Event{f1}) // closes minutes 0–1 (lateness 1m), not minute 2
	h.ReadOutput(2*perWindow, 60*time.Second, time.Second)
	run.Stop(t)

	run = h.Start(mk(pages3))
	h.ProduceTo(2, []e2e.Event{w, y}) // in both runs
	time.Sleep(700 * time.Millisecond)
	h.ProduceTo(1, []e2e.Event{f2, g}) // closes minutes 2–5, and pages3's [3m, 6m)
	out := h.ReadOutput(6*perWindow+len(e2e.Groups), 60*time.Second, 2*time.Second)
	run.Stop(t)
	got := map[string][]float64{}
	for _, r := range out.Releases {
		if r.Histogram == "pages3" {
			got[r.WindowStart+"/"+r.Group] = r.Probabilities
		}
	}
	return got
}

// TestHistogramWindowAddedMidWindowSkipsTheOpenWindow: a histogram with
// its own 3-minute window added by a config change while its window
// [0, 3m) is under way would count the events of the already released
// minutes that a restart happens to re-read — those after the committed
// offset, which another user's event still held for an open window decides
// (review of issue #13: user x's minute-1 event counted in pages3's
// [0, 3m) with user v's earlier minute-2 event in the partition and not
// without it; rule 7). The stage does not release that window
// (ledger.HistogramSince); pages3 releases from its first window that
// starts after the restart's resume point, the same with and without v.
func TestHistogramWindowAddedMidWindowSkipsTheOpenWindow(t *testing.T) {
	t.Parallel()
	var without, with map[string][]float64
	t.Run("without_v", func(t *testing.T) { without = histWindowAdded(t, false) })
	t.Run("with_v", func(t *testing.T) { with = histWindowAdded(t, true) })
	t.Logf("pages3 releases: without v %v, with v %v", without, with)
	w0, w3 := e2e.Base.Format(time.RFC3339), e2e.Base.Add(3*time.Minute).Format(time.RFC3339)
	for name, got := range map[string]map[string][]float64{"without v": without, "with v": with} {
		for _, g := range e2e.Groups {
			if p, ok := got[w0+"/"+g]; ok {
				t.Errorf("%s: pages3/%s released for [0, 3m), which began before it was added: %v", name, g, p)
			}
			if _, ok := got[w3+"/"+g]; !ok {
				t.Errorf("%s: no pages3/%s release for [3m, 6m)", name, g)
			}
		}
	}
	if !reflect.DeepEqual(without, with) {
		t.Errorf("pages3 releases differ with user v's event: %v vs %v (rule 7)", without, with)
	}
}
