package httpapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/release"
)

// TestBrowserIncompleteWindow (issue 28 item 1): a distributed release
// whose coverage says "complete": false — the input topic's partitions
// changed around its window, or a rolling config change left partitions
// out — is drawn with amber bars and says why in words; a complete one is
// drawn as usual.
func TestBrowserIncompleteWindow(t *testing.T) {
	bin := chromium(t)
	cfg := testConfig(t, "", nil)
	srv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(group string, cov *release.Coverage) { addRelease(t, srv, "pages", group, base, time.Minute, cov) }
	add("US", &release.Coverage{Partitions: 6, Included: 5, Incomplete: []string{release.IncompleteConfigChange, release.IncompletePartitionsChanged}})
	add("DE", &release.Coverage{Partitions: 6, Included: 6, Complete: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	dom := string(runChromium(t, bin, ts.URL+"/", "--dump-dom"))
	want := map[string]struct{ attr, words string }{
		"US": {"config_change,partitions_changed", "Incomplete window: only 5 of 6 input partitions were counted (a configuration change was rolling out); " +
			"partitions were added to the input topic around this window, and events written with the old partition count were left out."},
		"DE": {},
	}
	cards := cardRE.FindAllStringIndex(dom, -1)
	seen := 0
	for i, loc := range cards {
		a := attrs(dom[loc[0]:loc[1]])
		w, ok := want[a["data-group"]]
		if a["data-histogram"] != "pages" || !ok {
			continue
		}
		seen++
		end := len(dom)
		if i+1 < len(cards) {
			end = cards[i+1][0]
		}
		section, _, _ := strings.Cut(dom[loc[1]:end], "</section>")
		g := a["data-group"]
		if a["data-incomplete"] != w.attr {
			t.Errorf("%s: data-incomplete %q, want %q", g, a["data-incomplete"], w.attr)
		}
		amber := strings.Count(section, `fill="#b7791f"`)
		if w.attr == "" {
			if amber != 0 || strings.Contains(section, "Incomplete window") {
				t.Errorf("%s: a complete window is drawn as incomplete:\n%s", g, section)
			}
			continue
		}
		if !strings.Contains(section, w.words) {
			t.Errorf("%s: the card does not say %q:\n%s", g, w.words, section)
		}
		if amber != 2 {
			t.Errorf("%s: %d amber bars, want 2 (one per bin)", g, amber)
		}
	}
	if seen != len(want) {
		t.Fatalf("%d of the %d cards found in the page:\n%s", seen, len(want), dom)
	}
}

// addRelease adds to srv's store a dirichlet release of hist/group for the
// window [start, start+size) with the given coverage (nil: none) and
// returns its id.
func addRelease(t *testing.T, srv *httpapi.Server, hist, group string, start time.Time, size time.Duration, cov *release.Coverage) string {
	t.Helper()
	ms := start.UnixMilli()
	r := release.Release{ReleaseID: release.ReleaseID(hist, group, ms), Histogram: hist, Group: group,
		WindowStart: release.RFC3339(ms), WindowEnd: release.RFC3339(ms + size.Milliseconds()),
		Bins: []string{"home", "other"}, Probabilities: []float64{0.25, 0.75}, Mechanism: "dirichlet",
		Params: release.Params{Alpha: 10, R: 1}, Privacy: release.Privacy{Order: 2, RDPEpsilon: 0.01}, Coverage: cov}
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	srv.Store().Add(b)
	return r.ReleaseID
}
