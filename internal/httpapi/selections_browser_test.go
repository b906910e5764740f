package httpapi_test

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/pipeline"
)

var (
	selStripRE = regexp.MustCompile(`<span class="selwin[^"]*"[^>]*>[^<]*</span>`)
	selNoteRE  = regexp.MustCompile(`<div class="selnote[^"]*"[^>]*data-selection-status="[^"]*"[^>]*>[^<]*</div>`)
	selTextRE  = regexp.MustCompile(`<p class="small selection" data-selection="paths">([^<]*)</p>`)
)

// TestBrowserSelectedGroups (issue 30): the page draws a histogram that
// selects its groups from the published messages only — the selection's
// parameters in words; the groups selected in each window (a withheld
// window in amber, in words); a card per group of the newest selection,
// largest released volume first — and nothing of a group not in the
// newest selection.
func TestBrowserSelectedGroups(t *testing.T) {
	bin := chromium(t)
	srv := selectingServer(t, httpapi.Options{},
		selWindow{groups: []string{"/a", "/b"}, totals: []float64{500, 900}},
		selWindow{groups: []string{"/a", "/c"}, totals: []float64{400, 700}},
		selWindow{withheld: true})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	dom := string(runChromium(t, bin, ts.URL+"/", "--dump-dom"))
	if dir := os.Getenv("DASHBOARD_SCREENSHOT_DIR"); dir != "" {
		runChromium(t, bin, ts.URL+"/", "--screenshot="+filepath.Join(dir, "selected-groups.png"), "--hide-scrollbars")
	}

	m := selTextRE.FindStringSubmatch(dom)
	if m == nil || !strings.Contains(m[1], "probability ½ at about 40 distinct users and 0.95 at about 56") ||
		!strings.Contains(m[1], "a group that appears and disappears is near the threshold — not a bug; absence never means zero users") {
		t.Errorf("the selection's parameters in words: %q", m)
	}
	var strip []map[string]string
	for _, tag := range selStripRE.FindAllString(dom, -1) {
		strip = append(strip, attrs(tag))
		strip[len(strip)-1]["text"] = tag[strings.Index(tag, ">")+1 : strings.LastIndex(tag, "<")]
	}
	want := []struct{ class, status, selected, text string }{
		{"selwin", "groups_selected", "2", "2"},
		{"selwin", "groups_selected", "2", "2"},
		{"selwin withheld", "selection_withheld", "0", "withheld"},
	}
	if len(strip) != len(want) {
		t.Fatalf("%d windows in the strip, want %d:\n%s", len(strip), len(want), dom)
	}
	for i, w := range want {
		s := strip[i]
		if s["class"] != w.class || s["data-status"] != w.status || s["data-selected"] != w.selected || s["text"] != w.text {
			t.Errorf("strip window %d (oldest first): %v, want %+v", i, s, w)
		}
	}
	note := selNoteRE.FindString(dom)
	if !strings.Contains(note, `class="selnote withheld"`) || !strings.Contains(note, httpapi.WithheldText) {
		t.Errorf("the newest window's note: %q, want it amber (selnote withheld) saying %q", note, httpapi.WithheldText)
	}
	var cards []string
	for _, loc := range cardRE.FindAllString(dom, -1) {
		a := attrs(loc)
		if a["data-histogram"] == "paths" {
			cards = append(cards, a["data-group"])
			if a["data-status"] != "" {
				t.Errorf("card %s drawn as a release not made (%s)", a["data-group"], a["data-status"])
			}
		}
	}
	if strings.Join(cards, ",") != "/c,/a" {
		t.Errorf("paths cards %v, want the newest selection's groups by released volume: /c, /a", cards)
	}
	if strings.Contains(dom, `data-group="/b"`) {
		t.Errorf("a card for /b, which the newest selection did not keep")
	}
	if strings.Contains(dom, `<div class="exhausted">`) {
		t.Errorf("a selection status drawn as a release not made")
	}
}

// readySource is a stage connected and assigned, with zero counts.
type readySource struct{ selSource }

func (readySource) Readiness() pipeline.Readiness {
	return pipeline.Readiness{StateLoaded: true, Connected: true, Assigned: true, Releasing: true}
}

// TestBrowserNoGroupSelected: windows in which no group passed are drawn
// as such, in words, with no card — and they count as published windows
// for the page's liveness (not "waiting for the first window").
func TestBrowserNoGroupSelected(t *testing.T) {
	bin := chromium(t)
	srv := selectingServer(t, httpapi.Options{}, selWindow{groups: []string{}}, selWindow{groups: []string{}})
	srv.Attach(readySource{})
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	dom := string(runChromium(t, bin, ts.URL+"/", "--dump-dom"))
	note := selNoteRE.FindString(dom)
	if !strings.Contains(note, `data-selection-status="groups_selected"`) || !strings.Contains(note, httpapi.NoneSelectedText) || strings.Contains(note, "withheld") {
		t.Errorf("the newest window's note: %q, want %q", note, httpapi.NoneSelectedText)
	}
	if strings.Contains(dom, `data-histogram="paths"`) {
		t.Errorf("a card for paths, whose windows selected no group")
	}
	status := regexp.MustCompile(`<span id="status" class="status">([^<]*)</span>`).FindStringSubmatch(dom)
	if status == nil || strings.Contains(status[1], "Reading events") || !strings.Contains(status[1], "window ended") {
		t.Errorf("header status %q: the selections are published windows", status)
	}
}

// TestBrowserSelectionsFromTheReleaser: the page over a real releaser's
// units (releasedServer) draws the selected groups' cards, the strip with
// the withheld window, and no key the selection did not keep.
func TestBrowserSelectionsFromTheReleaser(t *testing.T) {
	bin := chromium(t)
	srv, _ := releasedServer(t)
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	dom := string(runChromium(t, bin, ts.URL+"/", "--dump-dom"))
	var cards, strip []string
	for _, tag := range cardRE.FindAllString(dom, -1) {
		if a := attrs(tag); a["data-histogram"] == "campaigns" {
			cards = append(cards, a["data-group"])
		}
	}
	for _, tag := range selStripRE.FindAllString(dom, -1) {
		strip = append(strip, attrs(tag)["data-status"])
	}
	if strings.Join(cards, ",") != "big-1,big-2" {
		t.Errorf("campaigns cards %v, want big-1, big-2", cards)
	}
	if strings.Join(strip, ",") != "groups_selected,selection_withheld,groups_selected" {
		t.Errorf("strip %v", strip)
	}
	for _, key := range []string{"solo", "k0001"} {
		if strings.Contains(dom, key) {
			t.Errorf("the page names a key not selected (%q)", key)
		}
	}
}
