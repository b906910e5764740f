package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release/releasetest"
)

// windowKeys is a closed window's counts as the releaser gets them:
// campaigns (histogram 0) selects its groups from these keys, devices
// (histogram 1) has one group.
type windowKeys struct {
	keys  []string
	users []int64
}

func (k windowKeys) Counts(h, g int, dst []float64) []float64 { return append(dst[:0], 7, 3) }
func (k windowKeys) Keys(h int) int {
	if h != 0 {
		return 0
	}
	return len(k.keys)
}
func (k windowKeys) Key(h, i int, dst []float64) (string, int64, []float64) {
	return k.keys[i], k.users[i], append(dst[:0], float64(k.users[i]), float64(k.users[i])/2)
}

// releasedServer runs a real releaser (package release, seeded) over three
// one-minute windows of campaigns — two with two groups of 50,000 and more
// users and three keys of one user each, one with 2,000 keys over
// selection.max_keys_per_window = 1,000 (withheld: the key-count test's σ
// is 177 here, so 5 keys pass it and 2,000 do not, each but with
// probability under 10⁻⁸) — and feeds its units to a server, as the node
// does once the output topic acknowledged them.
func releasedServer(t *testing.T) (*httpapi.Server, *plan.Plan) {
	t.Helper()
	dir := t.TempDir()
	cfg := releasetest.Config(t, fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: campaigns, field: page, bins: [home, cart], group_by: campaign}
  - {name: devices, field: device, bins: [mobile, desktop]}
privacy:
  mechanism: gaussian
  neighbour: replace
  budget: {epsilon: 1, delta: 1.0e-6, period: 5m}
selection: {max_keys_per_window: 1000}
state: {dir: %q}
`, dir))
	rel, p, _ := releasetest.Releaser(t, cfg, nil, [32]byte{7})
	srv, err := httpapi.New(httpapi.Options{Config: cfg, Plan: p})
	if err != nil {
		t.Fatal(err)
	}
	some := windowKeys{keys: []string{"a-solo", "big-1", "big-2", "m-solo", "z-solo"}, users: []int64{1, 100000, 50000, 1, 1}}
	var many windowKeys
	for i := range 2000 {
		many.keys = append(many.keys, fmt.Sprintf("k%04d", i))
		many.users = append(many.users, 100000)
	}
	for i, w := range []windowKeys{some, many, some} {
		units, err := rel.Record(int64(i)*60_000, w, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range units {
			srv.OnRelease(u, time.Second)
		}
	}
	return srv, p
}

// TestSelectionsFromTheReleaser (issue 30): the public surface reads the
// releaser's own units — /api/selections names the groups each window
// selected and the withheld window, with the releaser's selection block
// (the plan's, as /api/layout has it); a key that was tracked but not
// selected (one user each, or any key of the withheld window) appears on
// no public path; the operator metrics count the window withheld and the
// groups of the newest.
func TestSelectionsFromTheReleaser(t *testing.T) {
	srv, p := releasedServer(t)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	_, _, body := get(t, ts.URL+"/api/selections?histogram=campaigns", "")
	var v httpapi.SelectionsView
	if err := json.Unmarshal(body, &v); err != nil || len(v.Histograms) != 1 {
		t.Fatalf("/api/selections: %s (%v)", body, err)
	}
	h := v.Histograms[0]
	var got []string
	for _, w := range h.Windows {
		got = append(got, fmt.Sprintf("%s %s %d %v", w.WindowStart[11:16], w.Status, w.Selected, w.Groups))
	}
	want := []string{
		"00:02 groups_selected 2 [big-1 big-2]",
		"00:01 selection_withheld 0 []",
		"00:00 groups_selected 2 [big-1 big-2]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("windows %q, want %q", got, want)
	}
	th := p.Selection.Selection.Threshold
	if s := h.Selection; s == nil || s.Threshold != th.T || s.UsersAtHalf != th.UsersAt(0.5) || s.UsersAt95 != th.UsersAt(0.95) || s.ChargeID == "" ||
		!strings.Contains(s.Text, fmt.Sprintf("probability ½ at about %s distinct users", fmtThousands(th.UsersAt(0.5)))) {
		t.Errorf("selection %+v, want the plan's (T=%d, ½ at %d, 0.95 at %d) with the releaser's charge id", h.Selection, th.T, th.UsersAt(0.5), th.UsersAt(0.95))
	}
	for _, path := range []string{"/api/selections", "/api/releases?limit=1000", "/api/releases?histogram=campaigns&group=a-solo",
		"/api/releases?histogram=campaigns&group=k0001", "/api/layout", "/api/budget"} {
		code, _, body := get(t, ts.URL+path, "")
		if code != 200 {
			t.Errorf("%s: %d", path, code)
		}
		for _, key := range []string{"solo", "k0"} {
			if strings.Contains(string(body), key) {
				t.Errorf("%s names a key not selected (%q)", path, key)
			}
		}
	}
	_, _, body = get(t, ts.URL+"/api/releases?histogram=campaigns&group=big-2", "")
	if !strings.Contains(string(body), `"group":"big-2"`) {
		t.Errorf("/api/releases of a selected group: %s", body)
	}
	if v, _ := metricValueOf(t, srv, httpapi.MetricSelectionWithheld, "campaigns"); v != 1 {
		t.Errorf("%s %v, want 1", httpapi.MetricSelectionWithheld, v)
	}
	if v, _ := metricValueOf(t, srv, httpapi.MetricGroupsSelected, "campaigns"); v != 2 {
		t.Errorf("%s %v, want 2", httpapi.MetricGroupsSelected, v)
	}
}

// fmtThousands writes n as the selection's text does.
func fmtThousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
