package httpapi_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/httpapi"
)

// TestBrowserFirstWindowAfterStart (issue 29 item 4): the window in
// progress when the stage started (window_start < /api/layout's started_at
// < window_end) says on its card that it may hold only part of its events;
// the windows after it do not.
func TestBrowserFirstWindowAfterStart(t *testing.T) {
	bin := chromium(t)
	cfg := testConfig(t, "", nil)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	srv, err := httpapi.New(httpapi.Options{Config: cfg, StartedAt: base.Add(25 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	addRelease(t, srv, "pages", "US", base, time.Minute, nil)                  // in progress at the start
	addRelease(t, srv, "pages", "DE", base.Add(time.Minute), time.Minute, nil) // after it
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	dom := string(runChromium(t, bin, ts.URL+"/", "--dump-dom"))
	cards := cardRE.FindAllStringIndex(dom, -1)
	seen := 0
	for i, loc := range cards {
		a := attrs(dom[loc[0]:loc[1]])
		g := a["data-group"]
		if a["data-histogram"] != "pages" || (g != "US" && g != "DE") {
			continue
		}
		seen++
		end := len(dom)
		if i+1 < len(cards) {
			end = cards[i+1][0]
		}
		section, _, _ := strings.Cut(dom[loc[1]:end], "</section>")
		marked := a["data-started-mid-window"] == "true" && strings.Contains(section, "First window after a start")
		if want := g == "US"; marked != want {
			t.Errorf("%s: marked as the first window after a start: %v, want %v:\n%s", g, marked, want, section)
		}
	}
	if seen != 2 {
		t.Fatalf("%d of the 2 cards found in the page:\n%s", seen, dom)
	}
}
