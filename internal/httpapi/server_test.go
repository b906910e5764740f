package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

func testConfig(t *testing.T, extra string, env map[string]string) *config.Config {
	t.Helper()
	y := `
histograms:
  - {name: pages, field: page, bins: [home, other], group_by: country, groups: [US, DE]}
privacy:
  budget: {epsilon: 1}
` + extra
	cfg, err := config.Parse([]byte(y), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestBearerToken(t *testing.T) {
	const token = "s3cret-token"
	cfg := testConfig(t, "http:\n  bearer_token: ${TOKEN}\n", map[string]string{"TOKEN": token})
	srv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	basic := func(user, pw string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pw))
	}
	for _, path := range []string{"/", "/api/releases", "/api/budget", "/api/layout", "/api/selections"} {
		for _, tc := range []struct {
			authz string
			code  int
		}{
			{"", 401},
			{"Bearer wrong", 401},
			{"Bearer " + token + "x", 401},
			{"Bearer " + token[:len(token)-1], 401},
			{"Token " + token, 401},
			{basic("me", "wrong"), 401},
			{"Bearer " + token, 200},
			{"bearer " + token, 200},
			{basic("analyst", token), 200},
		} {
			code, h, body := get(t, ts.URL+path, tc.authz)
			if code != tc.code {
				t.Errorf("%s with %q: %d, want %d", path, tc.authz, code, tc.code)
			}
			if code == 401 {
				if !strings.Contains(strings.Join(h.Values("WWW-Authenticate"), " "), "Basic") {
					t.Errorf("%s: 401 without a Basic challenge (browsers could not log in)", path)
				}
				if strings.Contains(string(body), token) {
					t.Errorf("%s: the 401 body shows the token", path)
				}
			}
		}
	}
	// Probes stay open.
	if code, _, _ := get(t, ts.URL+"/healthz", ""); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, _, _ := get(t, ts.URL+"/readyz", ""); code != 503 {
		t.Errorf("/readyz without a stage: %d, want 503", code)
	}
}

func TestNoTokenNoAuth(t *testing.T) {
	srv, err := httpapi.New(httpapi.Options{Config: testConfig(t, "", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	op := httptest.NewServer(srv.OperatorHandler())
	defer op.Close()
	for _, path := range []string{"/", "/api/releases", "/api/budget", "/api/layout", "/healthz"} {
		if code, _, body := get(t, ts.URL+path, ""); code != 200 {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/metrics", "/healthz"} {
		if code, _, body := get(t, op.URL+path, ""); code != 200 {
			t.Errorf("operator %s: %d %s", path, code, body)
		}
	}
	for path, want := range map[string]int{"/nope": 404, "/index.html": 404, "/api/": 404} {
		if code, _, _ := get(t, ts.URL+path, ""); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
	res, err := http.Post(ts.URL+"/api/releases", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/releases: %d", res.StatusCode)
	}
}

// TestPageIsSelfContained: the page loads nothing from anywhere (no CDN, no
// font, no external script), and its CSP would block it if it tried.
func TestPageIsSelfContained(t *testing.T) {
	srv, err := httpapi.New(httpapi.Options{Config: testConfig(t, "", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	code, h, body := get(t, ts.URL+"/", "")
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("/: %d %s", code, h.Get("Content-Type"))
	}
	page := string(body)
	// The only URL in the page is the SVG namespace.
	for _, u := range regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}[^\s"')]*`).FindAllString(page, -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("page refers to %s", u)
		}
	}
	for _, bad := range []string{"<script src", "<link rel=\"stylesheet\"", "@import", "@font-face", "url(", "<iframe", "<img"} {
		if strings.Contains(strings.ToLower(page), strings.ToLower(bad)) {
			t.Errorf("page contains %q", bad)
		}
	}
	csp := h.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "http") {
		t.Errorf("CSP too loose: %q", csp)
	}
}

func releaseMsg(hist, group string, window int, p0 float64) []byte {
	r := release.Release{
		ReleaseID: release.ReleaseID(hist, group, int64(window)*60000), Histogram: hist, Group: group,
		WindowStart: fmt.Sprintf("2026-01-01T00:%02d:00Z", window), WindowEnd: fmt.Sprintf("2026-01-01T00:%02d:00Z", window+1),
		Bins: []string{"home", "other"}, Probabilities: []float64{p0, 1 - p0}, Mechanism: "dirichlet",
	}
	b, _ := json.Marshal(&r)
	return b
}

func TestStore(t *testing.T) {
	s := httpapi.NewStore(3)
	for w := range 5 {
		s.Observe(&ledger.Unit{Messages: []ledger.Message{
			{Value: releaseMsg("pages", "US", w, 0.5)}, {Value: releaseMsg("pages", "DE", w, 0.5)},
		}})
	}
	// Out of order, and a republished copy (same release id) replacing its original.
	s.Add(releaseMsg("pages", "US", 2, 0.9))
	s.Add([]byte(`{"not":"a release"}`))
	st := release.Status{Status: "budget_exhausted", ReleaseID: release.ReleaseID("pages", "", 5*60000), Histogram: "pages",
		WindowStart: "2026-01-01T00:05:00Z", WindowEnd: "2026-01-01T00:06:00Z"}
	sb, _ := json.Marshal(&st)
	s.Add(sb)

	all, v1 := s.Query("", "", 100)
	if len(all) != 7 { // 3 per group + the status
		t.Fatalf("%d messages, want 7", len(all))
	}
	var first release.Status
	e2e.DecodeJSON(t, all[0], &first)
	if first.Status != "budget_exhausted" {
		t.Errorf("newest is %s, want the status", all[0])
	}
	us, _ := s.Query("pages", "US", 100)
	var windows []string
	for _, m := range us {
		var r release.Release
		e2e.DecodeJSON(t, m, &r)
		if r.Group == "" {
			continue // the status message
		}
		windows = append(windows, r.WindowStart)
		if r.WindowStart == "2026-01-01T00:02:00Z" && r.Probabilities[0] != 0.9 {
			t.Errorf("republished copy did not replace the original: %v", r.Probabilities)
		}
	}
	if strings.Join(windows, ",") != "2026-01-01T00:04:00Z,2026-01-01T00:03:00Z,2026-01-01T00:02:00Z" {
		t.Errorf("US windows %v: want the 3 newest, newest first", windows)
	}
	if lim, _ := s.Query("", "", 2); len(lim) != 2 {
		t.Errorf("limit 2 gave %d", len(lim))
	}
	s.Add(releaseMsg("pages", "DE", 9, 0.1))
	if v2 := s.Version(); v2 <= v1 {
		t.Errorf("version did not move: %d → %d", v1, v2)
	}
}
