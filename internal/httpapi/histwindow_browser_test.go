package httpapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/httpapi"
)

// TestBrowserHistogramWindows: with a histogram released hourly
// (histograms[].window: 1h) next to minute ones, the dashboard shows each
// at its own cadence — the hourly card shows its release although a
// hundred minute windows were released after its window started (one
// query over all histograms, newest window first, left it out: the card
// said "waiting for the first window") — and says how often it is
// released. /api/layout carries each histogram's window. With
// privacy.expected_windows_per_user each view shows the plan's prediction
// (a blind minute view, a healthy hourly one).
func TestBrowserHistogramWindows(t *testing.T) {
	bin := chromium(t)
	cfg := testConfig(t, "", nil)
	cfg.Histograms = append(cfg.Histograms, cfg.Histograms[0])
	cfg.Histograms[1].Name = "hourly"
	cfg.Histograms[1].GroupBy, cfg.Histograms[1].Groups = "", nil
	cfg.Histograms[1].Window = 3600e9
	// Views with their own bounds (issue #23 item 2): the page says each.
	cfg.Contribution.MaxWindowsPerUser, cfg.Contribution.MaxTrackedUsers = 2, 0
	cfg.Histograms[1].MaxWindowsPerUser = 24
	// The planned views (issue 23): users active in half of a day's
	// minutes; the page shows each view's prediction from the config.
	cfg.Privacy.ExpectedWindowsPerUser = 720
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(hist, group string, start time.Time, size time.Duration) string {
		return addRelease(t, srv, hist, group, start, size, nil)
	}
	hourly := add("hourly", "*", base, time.Hour)
	for m := range 100 {
		for _, g := range []string{"US", "DE"} {
			add("pages", g, base.Add(time.Duration(m)*time.Minute), time.Minute)
		}
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	_, _, body := get(t, ts.URL+"/api/layout", "")
	var l httpapi.Layout
	if err := json.Unmarshal(body, &l); err != nil || len(l.Histograms) != 2 || l.Histograms[0].WindowSeconds != 60 || l.Histograms[1].WindowSeconds != 3600 {
		t.Fatalf("layout %s (%v): want pages every 60 s and hourly every 3600 s", body, err)
	}
	dom := string(runChromium(t, bin, ts.URL+"/", "--dump-dom"))
	var found bool
	for _, loc := range cardRE.FindAllStringIndex(dom, -1) {
		a := attrs(dom[loc[0]:loc[1]])
		if a["data-histogram"] != "hourly" {
			continue
		}
		found = true
		if a["data-release-id"] != hourly {
			t.Errorf("the hourly card shows release %q, want %q", a["data-release-id"], hourly)
		}
	}
	if !found {
		t.Fatalf("no hourly card in the page:\n%s", dom)
	}
	if !strings.Contains(dom, "every 1 hour") {
		t.Errorf("the page does not say the hourly histogram is released every hour")
	}
	for _, want := range []string{"a user counts in at most 2 of its 1440 windows a period", "a user counts in at most 24 of its 24 windows a period",
		`data-planned="pages">Planned for users active in up to 720 of the 1,440 windows`, "this view counts (almost) none of them after about",
		`data-planned="hourly">Planned for users`, "this view counts every active user all day",
		"This is a prediction from the public configuration, not a measurement of the data."} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
}
