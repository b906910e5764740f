package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// TestSelectionEndToEnd (issue 30): a histogram with group_by and no
// groups, through the whole stage on the embedded broker. Each window's
// countries US and DE have about 100 users each and are selected (with
// ε = 10⁷ the selection's noise is tiny and its threshold a few users); a
// country only one user sent (JP) is never released, and neither is FR,
// which no event has — whereas the listed pages histogram releases FR
// every window and never JP. Before every window's campaigns releases comes
// its groups_selected status naming exactly the released groups.
func TestSelectionEndToEnd(t *testing.T) {
	h := e2e.New(t)
	cfg := h.ConfigExtra("mechanism: gaussian", 1e7,
		"  - {name: campaigns, field: page, bins: ["+e2e.PagesBins+"], group_by: country}\n")
	evs := e2e.Stream(3, 200)
	evs = append(evs, e2e.Event{User: "lone", At: e2e.Base.Add(30 * time.Second), Page: "home", Country: "JP", Device: "mobile"})
	h.ProduceEvents(evs)
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
	// Per window: pages 3 groups, devices 1, campaigns US and DE.
	out := h.ReadOutput(3*6, 60*time.Second, 2*time.Second)
	if len(out.Releases) != 3*6 {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 3*6)
	}
	sel := run.Stage.Plan().Selection
	if sel == nil {
		t.Fatal("no selection plan")
	}
	got := map[string][]string{} // window start → campaigns groups released
	for _, r := range out.Releases {
		switch r.Histogram {
		case "campaigns":
			if r.Selection == nil || r.Selection.Threshold != sel.Selection.Threshold.T {
				t.Errorf("campaigns/%s: selection block %+v", r.Group, r.Selection)
			}
			e2e.CheckSimplex(t, r, e2e.Pages)
			got[r.WindowStart] = append(got[r.WindowStart], r.Group)
		case "pages":
			if r.Group == "JP" {
				t.Errorf("the listed pages histogram released the unlisted group JP")
			}
		}
	}
	statuses := map[string][]string{}
	for _, s := range out.Statuses {
		if s.Histogram != "campaigns" {
			t.Errorf("status %s of %s", s.Status, s.Histogram)
			continue
		}
		if s.Status != release.StatusGroupsSelected || s.Selection == nil {
			t.Errorf("campaigns status %+v", s)
			continue
		}
		statuses[s.WindowStart] = s.Groups
	}
	// The operator's private capacity figure (dpstage_selection_keys): the
	// last window tracked US and DE.
	if k := run.Stage.SelectionKeys(); k["campaigns"] != 2 {
		t.Errorf("tracked keys %v, want campaigns: 2", k)
	}
	for w := range 3 {
		ws := release.RFC3339(e2e.Base.Add(time.Duration(w) * time.Minute).UnixMilli())
		g := got[ws]
		slices.Sort(g)
		if want := []string{"DE", "US"}; !slices.Equal(g, want) || !slices.Equal(statuses[ws], want) {
			t.Errorf("window %s: campaigns released %v, status named %v; want %v", ws, g, statuses[ws], want)
		}
	}
}
