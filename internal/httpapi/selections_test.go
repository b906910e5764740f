package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// selectingConfig has a listed histogram (pages) and one that selects its
// groups (paths: group_by without groups).
func selectingConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(`
histograms:
  - {name: pages, field: page, bins: [home, other], group_by: country, groups: [US, DE]}
  - {name: paths, field: device, bins: [home, other], group_by: path}
privacy:
  budget: {epsilon: 1}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// selWindow is one window of the paths histogram the tests publish: the
// selected groups (nil with withheld) and their releases' totals.
type selWindow struct {
	withheld bool
	groups   []string
	totals   []float64
}

// selectionOf is the Selection block the tests' messages carry.
var selectionOf = release.Selection{Threshold: 40, Sigma: 9.5, UsersAtHalf: 40, UsersAt95: 56, WindowDelta: 1e-9,
	MaxKeysPerWindow: 1000, KeySampleRate: 1, ChargeID: "sel", Epsilon: 0.25, Delta: 5e-7}

// selectionUnit is the unit a releaser publishes for one window of paths:
// the status message, then one release per selected group.
func selectionUnit(t *testing.T, start time.Time, w selWindow) *ledger.Unit {
	t.Helper()
	ms := start.UnixMilli()
	sel := selectionOf
	st := release.Status{Status: release.StatusGroupsSelected, ReleaseID: release.ReleaseID("paths", "", ms), Histogram: "paths",
		WindowStart: release.RFC3339(ms), WindowEnd: release.RFC3339(ms + time.Minute.Milliseconds()), Groups: w.groups, Selection: &sel}
	if w.withheld {
		st.Status, st.Groups, st.Message = release.StatusSelectionWithheld, nil, "the window's distinct group keys reached selection.max_keys_per_window"
		st.Selection.Withheld = true
	}
	u := &ledger.Unit{Histogram: "paths", WindowStart: ms, WindowEnd: ms + time.Minute.Milliseconds()}
	add := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		u.Messages = append(u.Messages, ledger.Message{Key: []byte("paths"), Value: b})
	}
	add(&st)
	for i, g := range w.groups {
		add(&release.Release{ReleaseID: release.ReleaseID("paths", g, ms), Histogram: "paths", Group: g,
			WindowStart: st.WindowStart, WindowEnd: st.WindowEnd, Bins: []string{"home", "other"}, Probabilities: []float64{0.25, 0.75},
			Mechanism: "dirichlet", Params: release.Params{Alpha: 10, R: 1}, Privacy: release.Privacy{Order: 2, RDPEpsilon: 0.01},
			Intervals: &release.Intervals{Level: 0.95, Low: []float64{0.1, 0.6}, High: []float64{0.4, 0.9}},
			Total:     &release.Total{Estimate: w.totals[i], Low: w.totals[i] - 10, High: w.totals[i] + 10}, Selection: &sel})
	}
	return u
}

// selectingServer is a server of the selecting config fed with windows,
// one minute apart from 2026-01-01 00:00 (oldest first), as published
// units (latency 1 s).
func selectingServer(t *testing.T, opts httpapi.Options, windows ...selWindow) *httpapi.Server {
	t.Helper()
	opts.Config = selectingConfig(t)
	srv, err := httpapi.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, w := range windows {
		srv.OnRelease(selectionUnit(t, base.Add(time.Duration(i)*time.Minute), w), time.Second)
	}
	return srv
}

// TestSelectionsAPI (issue 30): /api/selections lists a selecting
// histogram's windows newest first as their status messages say — the
// selected groups and their number, a withheld window in words — with the
// selection's parameters in words; /api/layout has the plan's parameters
// before any window; /api/releases answers a group of a selecting
// histogram from the store only (a group never selected answers like any
// other: the statuses, no release and no 404).
func TestSelectionsAPI(t *testing.T) {
	srv := selectingServer(t, httpapi.Options{},
		selWindow{groups: []string{"/a", "/b"}, totals: []float64{500, 900}},
		selWindow{groups: []string{}},
		selWindow{withheld: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	code, _, body := get(t, ts.URL+"/api/selections", "")
	if code != 200 {
		t.Fatalf("/api/selections: %d %s", code, body)
	}
	var v httpapi.SelectionsView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Histograms) != 1 || v.Histograms[0].Name != "paths" {
		t.Fatalf("/api/selections: %s, want the paths histogram alone (pages lists its groups)", body)
	}
	h := v.Histograms[0]
	want := []struct {
		status   string
		selected int
		groups   []string
		text     string
	}{
		{release.StatusSelectionWithheld, 0, []string{}, httpapi.WithheldText},
		{release.StatusGroupsSelected, 0, []string{}, httpapi.NoneSelectedText},
		{release.StatusGroupsSelected, 2, []string{"/a", "/b"}, "2 groups selected: /a, /b"},
	}
	if len(h.Windows) != len(want) {
		t.Fatalf("%d windows, want %d: %s", len(h.Windows), len(want), body)
	}
	for i, w := range want {
		got := h.Windows[i]
		if got.Status != w.status || got.Selected != w.selected || !slices.Equal(got.Groups, w.groups) || got.Text != w.text {
			t.Errorf("window %d: %+v, want %+v", i, got, w)
		}
	}
	if h.Windows[0].WindowStart != "2026-01-01T00:02:00Z" {
		t.Errorf("newest window %s, want 00:02", h.Windows[0].WindowStart)
	}
	if h.Selection == nil || h.Selection.UsersAtHalf != 40 || h.Selection.UsersAt95 != 56 ||
		!strings.Contains(h.Selection.Text, "probability ½ at about 40 distinct users and 0.95 at about 56") ||
		!strings.Contains(h.Selection.Text, "absence never means zero users") {
		t.Errorf("selection %+v: want the messages' parameters in words", h.Selection)
	}
	if code, _, _ := get(t, ts.URL+"/api/selections?histogram=pages", ""); code != 404 {
		t.Errorf("/api/selections?histogram=pages (listed groups): %d, want 404", code)
	}
	if code, _, _ := get(t, ts.URL+"/api/selections?limit=0", ""); code != 400 {
		t.Errorf("limit=0: %d, want 400", code)
	}
	code, _, body = get(t, ts.URL+"/api/selections?histogram=paths&limit=1", "")
	if code != 200 || json.Unmarshal(body, &v) != nil || len(v.Histograms[0].Windows) != 1 {
		t.Errorf("limit=1: %d %s", code, body)
	}

	// The layout: the plan's parameters, before any window.
	var lay httpapi.Layout
	_, _, body = get(t, ts.URL+"/api/layout", "")
	if err := json.Unmarshal(body, &lay); err != nil {
		t.Fatal(err)
	}
	p, err := plan.DerivePlan(selectingConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	th := p.Selection.Selection.Threshold
	for _, lh := range lay.Histograms {
		switch lh.Name {
		case "pages":
			if lh.Selects || lh.Selection != nil {
				t.Errorf("pages (listed groups) in the layout: %+v", lh)
			}
		case "paths":
			if !lh.Selects || lh.Groups == nil || len(lh.Groups) != 0 || lh.Selection == nil ||
				lh.Selection.Threshold != th.T || lh.Selection.UsersAtHalf != th.UsersAt(0.5) || lh.Selection.UsersAt95 != th.UsersAt(0.95) ||
				!strings.Contains(lh.Selection.Text, "absence never means zero users") {
				t.Errorf("paths in the layout: %+v, want the plan's selection (T=%d, ½ at %d, 0.95 at %d)", lh, th.T, th.UsersAt(0.5), th.UsersAt(0.95))
			}
		}
	}

	// A group of a selecting histogram: its releases, or none.
	for group, releases := range map[string]int{"/a": 1, "/never-selected": 0} {
		code, _, body := get(t, ts.URL+"/api/releases?histogram=paths&group="+group, "")
		var msgs []map[string]any
		if code != 200 || json.Unmarshal(body, &msgs) != nil {
			t.Fatalf("group %s: %d %s", group, code, body)
		}
		n := 0
		for _, m := range msgs {
			if _, ok := m["status"]; !ok {
				n++
			}
		}
		if n != releases || len(msgs) != releases+3 {
			t.Errorf("group %s: %d releases of %d messages, want %d and the 3 statuses", group, n, len(msgs), releases)
		}
	}
	// Nothing names a group but the selected ones.
	for _, path := range []string{"/api/releases?limit=1000", "/api/selections", "/api/layout", "/api/budget", "/"} {
		_, _, body := get(t, ts.URL+path, "")
		if strings.Contains(string(body), "never-selected") {
			t.Errorf("%s names a group never selected", path)
		}
	}
}

// selSource is a stage with zero counts whose selecting histogram tracked
// keys in its last closed window.
type selSource struct{ keys map[string]int }

func (selSource) Stats() *pipeline.Stats          { return &pipeline.Stats{} }
func (selSource) Readiness() pipeline.Readiness   { return pipeline.Readiness{} }
func (selSource) Lag() map[int]int64              { return nil }
func (selSource) Budget() []pipeline.BudgetStatus { return nil }
func (selSource) Plan() *plan.Plan                { return nil }
func (s selSource) SelectionKeys() map[string]int { return s.keys }

// metricValue is the sample of name{histogram="paths"} on the operator
// listener's /metrics, and whether it is served.
func metricValue(t *testing.T, srv *httpapi.Server, name string) (float64, bool) {
	t.Helper()
	return metricValueOf(t, srv, name, "paths")
}

// metricValueOf is the sample of name{histogram=hist}.
func metricValueOf(t *testing.T, srv *httpapi.Server, name, hist string) (float64, bool) {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.OperatorHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+`{histogram="`+hist+`"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// TestSelectionMetrics (issue 30): the operator listener serves, per
// selecting histogram, the groups selected in its newest window and the
// withheld windows (from the published status messages: a unit
// republished after a restart is not counted again), the keys tracked in
// its last closed window (from the stage: private) and the limit; the
// public listener serves none of them.
func TestSelectionMetrics(t *testing.T) {
	srv := selectingServer(t, httpapi.Options{})
	if v, ok := metricValue(t, srv, httpapi.MetricSelectionWithheld); !ok || v != 0 {
		t.Errorf("before any window: %s %v (served %v), want 0 from the start", httpapi.MetricSelectionWithheld, v, ok)
	}
	if _, ok := metricValue(t, srv, httpapi.MetricGroupsSelected); ok {
		t.Errorf("%s served before any window", httpapi.MetricGroupsSelected)
	}
	const keys = 48_271_193 // private: the exact keys of a window
	srv.Attach(selSource{map[string]int{"paths": keys}})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		minute    int
		w         selWindow
		published bool // handed over again after a restart
		selected  float64
		withheld  float64
	}{
		{0, selWindow{groups: []string{"/a", "/b"}, totals: []float64{1, 2}}, false, 2, 0},
		{1, selWindow{withheld: true}, false, 0, 1},
		{1, selWindow{withheld: true}, false, 0, 1}, // a copy of the same window
		{2, selWindow{groups: []string{"/c"}, totals: []float64{3}}, false, 1, 1},
		{3, selWindow{withheld: true}, true, 0, 1}, // replayed: the gauge follows, the counter does not
		{4, selWindow{withheld: true}, false, 0, 2},
	}
	for i, s := range steps {
		u := selectionUnit(t, base.Add(time.Duration(s.minute)*time.Minute), s.w)
		u.Published = s.published
		srv.OnRelease(u, 0)
		sel, _ := metricValue(t, srv, httpapi.MetricGroupsSelected)
		wh, _ := metricValue(t, srv, httpapi.MetricSelectionWithheld)
		if sel != s.selected || wh != s.withheld {
			t.Errorf("after window %d: groups selected %v, withheld %v; want %v, %v", i, sel, wh, s.selected, s.withheld)
		}
	}
	// An older window published late does not move the gauge back.
	srv.OnRelease(selectionUnit(t, base, selWindow{groups: []string{"/a", "/b"}, totals: []float64{1, 2}}), time.Second)
	if sel, _ := metricValue(t, srv, httpapi.MetricGroupsSelected); sel != 0 {
		t.Errorf("an older window moved %s to %v", httpapi.MetricGroupsSelected, sel)
	}
	if v, ok := metricValue(t, srv, httpapi.MetricSelectionKeys); !ok || v != keys {
		t.Errorf("%s %v (served %v), want the stage's %d", httpapi.MetricSelectionKeys, v, ok, keys)
	}
	if v, ok := metricValue(t, srv, httpapi.MetricSelectionKeysLimit); !ok || v != 1000000 {
		t.Errorf("%s %v (served %v), want selection.max_keys_per_window", httpapi.MetricSelectionKeysLimit, v, ok)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	if code, _, _ := get(t, ts.URL+"/metrics", ""); code != 404 {
		t.Errorf("public /metrics: %d, want 404", code)
	}
	for _, path := range []string{"/", "/api/releases?limit=1000", "/api/selections", "/api/layout", "/api/budget", "/readyz"} {
		_, _, body := get(t, ts.URL+path, "")
		for _, secret := range []string{strconv.Itoa(keys), strconv.FormatFloat(keys, 'g', -1, 64), "dpstage_"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("public %s shows %q", path, secret)
			}
		}
	}
}

// TestSelectedReleasesBounded: the store keeps at most
// Options.SelectedReleases releases of a selecting histogram, whole recent
// windows first, however many groups its windows select; the statuses
// keep Options.History windows.
func TestSelectedReleasesBounded(t *testing.T) {
	var windows []selWindow
	for i := range 30 {
		w := selWindow{}
		for g := range 7 {
			w.groups = append(w.groups, fmt.Sprintf("/w%02d/g%d", i, g))
			w.totals = append(w.totals, 1)
		}
		windows = append(windows, w)
	}
	srv := selectingServer(t, httpapi.Options{History: 10, SelectedReleases: 30}, windows...)
	msgs, _ := srv.Store().Query("paths", "", 1000)
	var releases, statuses []string
	for _, m := range msgs {
		var h struct {
			Group  *string `json:"group"`
			Status string  `json:"status"`
		}
		if err := json.Unmarshal(m, &h); err != nil {
			t.Fatal(err)
		}
		if h.Group != nil {
			releases = append(releases, *h.Group)
		} else {
			statuses = append(statuses, h.Status)
		}
	}
	if len(statuses) != 10 {
		t.Errorf("%d statuses kept, want History = 10", len(statuses))
	}
	// 30 releases: the 4 newest windows (28) and the first 2 groups of the
	// fifth newest.
	var want []string
	for i := 29; i >= 25; i-- {
		for g := range 7 {
			if i > 25 || g < 2 {
				want = append(want, fmt.Sprintf("/w%02d/g%d", i, g))
			}
		}
	}
	if !slices.Equal(releases, want) {
		t.Errorf("kept releases %v, want %v", releases, want)
	}
}
