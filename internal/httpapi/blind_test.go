package httpapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
)

// blindSource is a ready stage under the cross-window bound whose "pages"
// histogram went blind: its last window's drop share is 0.9731 (distinctive
// counts, so that any of them showing up is found).
type blindSource struct{ countingSource }

func (blindSource) Readiness() pipeline.Readiness {
	return pipeline.Readiness{StateLoaded: true, Connected: true, Assigned: true, Releasing: true}
}

func (blindSource) WindowBound() []aggregate.WindowShare {
	return []aggregate.WindowShare{
		{Histogram: "pages", Closed: true, Start: 0, End: 60_000, Counted: 2_689, Dropped: 97_310, Share: 0.9731, Blind: true,
			TotalCounted: 5_551_212, TotalDropped: 7_364_519},
		{Histogram: "devices", Closed: true, Start: 0, End: 60_000, Counted: 41_203, Dropped: 3, Share: 3.0 / 41_206, TotalCounted: 8_080_801, TotalDropped: 6_174},
	}
}

// TestWindowBoundOperatorOnly (issue 23 item 3): the operator sees the
// bound's drop share per histogram on /metrics and the blind histograms
// under window_bound_blind on its /readyz, which stays ready (200) — and
// nothing of it reaches the public listener: not the share, not the
// counts, not the condition (a thresholded boolean is still a function of
// private drop counts).
func TestWindowBoundOperatorOnly(t *testing.T) {
	cfg := testConfig(t, "contribution:\n  max_windows_per_user: 5\n", nil)
	srv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	srv.Attach(blindSource{countingSource{&pipeline.Stats{}}})
	srv.OnRelease(&ledger.Unit{Messages: []ledger.Message{{Value: releaseMsg("pages", "US", 1, 0.4)}}}, 0)
	pub := httptest.NewServer(srv.Handler())
	defer pub.Close()
	op := httptest.NewServer(srv.OperatorHandler())
	defer op.Close()

	code, _, body := get(t, op.URL+"/readyz", "")
	var rd struct {
		Ready            bool     `json:"ready"`
		WindowBoundBlind []string `json:"window_bound_blind"`
	}
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatalf("operator /readyz: %v: %s", err, body)
	}
	if code != 200 || !rd.Ready || len(rd.WindowBoundBlind) != 1 || rd.WindowBoundBlind[0] != "pages" {
		t.Errorf("operator /readyz: %d %s; want 200, ready, window_bound_blind [pages] (not a condition of ready)", code, body)
	}

	_, _, metrics := get(t, op.URL+"/metrics", "")
	for _, want := range []string{
		`dpstage_window_bound_dropped_share{histogram="pages"} 0.9731`,
		`dpstage_window_bound_blind{histogram="pages"} 1`,
		`dpstage_window_bound_blind{histogram="devices"} 0`,
		`dpstage_window_bound_counted_total{histogram="pages"} 5.551212e+06`,
		`dpstage_window_bound_dropped_total{histogram="pages"} 7.364519e+06`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("operator /metrics lacks %s", want)
		}
	}

	// With http.operator_token the open probe does not show it either;
	// with the token it does.
	cfg = testConfig(t, "contribution:\n  max_windows_per_user: 5\nhttp:\n  operator_token: ${OP}\n", map[string]string{"OP": "op-token"})
	tokSrv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	tokSrv.Attach(blindSource{countingSource{&pipeline.Stats{}}})
	tokOp := httptest.NewServer(tokSrv.OperatorHandler())
	defer tokOp.Close()
	if code, _, body := get(t, tokOp.URL+"/readyz", ""); code != 200 || strings.Contains(string(body), "window_bound") {
		t.Errorf("operator /readyz without the operator token: %d %s; want 200 without window_bound_blind", code, body)
	}
	if _, _, body := get(t, tokOp.URL+"/readyz", "Bearer op-token"); !strings.Contains(string(body), `"window_bound_blind":["pages"]`) {
		t.Errorf("operator /readyz with the operator token: %s; want window_bound_blind", body)
	}

	secrets := regexp.MustCompile(`window_bound|blind|0\.9731|2689|97310|5551212|7364519|8080801|6174|2\.689|9\.731`)
	for _, path := range []string{"/", "/api/releases", "/api/budget", "/api/layout", "/healthz", "/readyz"} {
		code, _, body := get(t, pub.URL+path, "")
		if code != 200 {
			t.Errorf("public %s: %d %s", path, code, body)
		}
		if m := secrets.Find(body); m != nil {
			t.Errorf("public %s shows %q", path, m)
		}
	}
}

// TestBudgetReservationWording (issue 23 item 3): with the period
// reservation (max_windows_per_user) /api/budget and the dashboard say
// "reserved for the period; later releases of the period are covered",
// not "spent … when it is used up, releases stop" (read as an exhausted
// budget while releases kept coming); without it, the old words.
func TestBudgetReservationWording(t *testing.T) {
	for _, tc := range []struct {
		name, extra, charging string
		note, page, notPage   []string
		refused               []string // the current period's refused reservations
	}{
		{"reservation", "contribution:\n  max_windows_per_user: 5\n", httpapi.ChargingReservation,
			[]string{"reserved for the period; later releases of the period are covered"},
			[]string{"reserved for the period, of ε = 1 (100%)", "Reserved for the period; later releases of the period are covered.", "whole budget for the period"},
			[]string{"releases stop", "spent of ε", "is used up"}, nil},
		// A histogram whose reservation the book refused (a config change
		// in the middle of the period): the note does not say its later
		// releases are covered.
		{"reservation refused", "contribution:\n  max_windows_per_user: 5\n", httpapi.ChargingReservation,
			[]string{"later releases of the period are covered, except for the histograms whose reservation was refused", "not released until the period ends: devices (until "},
			[]string{"reserved for the period, of ε = 1 (100%)", "covered, except for devices: their reservation was refused", "not released until the period ends."},
			[]string{"releases stop", "spent of ε", "is used up", "Reserved for the period; later releases of the period are covered."}, []string{"devices"}},
		{"per window", "", httpapi.ChargingPerWindow,
			[]string{"releases stop until the next period"},
			[]string{"spent of ε = 1 (100%)", "When it is used up, releases stop until the next period."},
			[]string{"reserved for the period", "covered"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, tc.extra, nil)
			srv, err := httpapi.New(httpapi.Options{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			srv.Attach(reservedSource{countingSource{&pipeline.Stats{}}, tc.refused})
			srv.OnRelease(&ledger.Unit{Messages: []ledger.Message{{Value: releaseMsg("pages", "US", 1, 0.4)}}}, 0)
			pub := httptest.NewServer(srv.Handler())
			defer pub.Close()
			_, _, body := get(t, pub.URL+"/api/budget", "")
			var v httpapi.BudgetView
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if v.Charging != tc.charging {
				t.Errorf("/api/budget charging %q, want %q", v.Charging, tc.charging)
			}
			for _, want := range tc.note {
				if !strings.Contains(v.Note, want) {
					t.Errorf("/api/budget note %q lacks %q", v.Note, want)
				}
			}
			page := string(runChromium(t, chromium(t), pub.URL+"/", "--dump-dom"))
			// The rendered text only (the page's script holds both wordings).
			dom := budgetPanelRE.FindString(page) + explainRE.FindString(page)
			if !strings.Contains(dom, `id="budget-spent"`) || strings.Contains(dom, `data-spent=""`) || !strings.Contains(dom, "<li>") {
				t.Fatalf("the page did not render the budget and the explanations:\n%s", page)
			}
			for _, want := range tc.page {
				if !strings.Contains(dom, want) {
					t.Errorf("the page lacks %q", want)
				}
			}
			for _, not := range tc.notPage {
				if strings.Contains(dom, not) {
					t.Errorf("the page says %q", not)
				}
			}
		})
	}
}

var (
	budgetPanelRE = regexp.MustCompile(`(?s)<section class="panel budget".*?</section>`)
	explainRE     = regexp.MustCompile(`(?s)<ul id="explain">.*?</ul>`)
)

// reservedSource has charged its whole period: spent = budget.
// With refused, those histograms' reservations were refused in it.
type reservedSource struct {
	countingSource
	refused []string
}

func (r reservedSource) Budget() []pipeline.BudgetStatus {
	now := time.Now().UTC().Truncate(time.Hour)
	return []pipeline.BudgetStatus{{PeriodStart: now, PeriodEnd: now.Add(24 * time.Hour), SpentEpsilon: 1, BudgetEpsilon: 1, Remaining: 0, Delta: 1e-6,
		RefusedHistograms: r.refused}}
}
