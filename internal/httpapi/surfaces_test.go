package httpapi_test

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
)

// countingSource is a stage whose counters hold distinctive numbers, so
// that any of them showing up in a response is found.
type countingSource struct{ st *pipeline.Stats }

func (c countingSource) Stats() *pipeline.Stats        { return c.st }
func (c countingSource) Readiness() pipeline.Readiness { return pipeline.Readiness{StateLoaded: true} }
func (c countingSource) Lag() map[int]int64            { return map[int]int64{0: 73_914_851} }
func (c countingSource) Budget() []pipeline.BudgetStatus {
	return []pipeline.BudgetStatus{{PeriodStart: time.Unix(0, 0).UTC(), PeriodEnd: time.Unix(3600, 0).UTC(),
		SpentEpsilon: 0.25, BudgetEpsilon: 1, Remaining: 0.75, Delta: 1e-6}}
}
func (c countingSource) Plan() *plan.Plan { return nil }

// TestSurfacesApart (issue #21, item 8): the public listener (page, /api)
// serves no count — no event total, drop count or lag, and none of the
// operator routes (404) — and the operator listener serves /metrics, with
// the counts, behind its own token: the public token does not open it, nor
// the operator token the public surface; the public routes are 404 there.
func TestSurfacesApart(t *testing.T) {
	const pubTok, opTok = "dashboard-token", "operator-token"
	cfg := testConfig(t, "http:\n  bearer_token: ${PUB}\n  operator_token: ${OP}\n", map[string]string{"PUB": pubTok, "OP": opTok})
	srv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	st := &pipeline.Stats{}
	st.Consumed.Store(918_273_645)
	st.Decoded.Store(918_273_601)
	st.Counted.Store(846_152_937)
	st.Late.Store(31_415_926)
	st.DropN(decode.ReasonBadJSON, 27_182_818)
	srv.Attach(countingSource{st})
	srv.OnRelease(&ledger.Unit{Messages: []ledger.Message{{Value: releaseMsg("pages", "US", 1, 0.4)}}}, 0)
	// Every count, as an integer and as Prometheus prints it, and the
	// metrics' names and words.
	secrets := []string{"dpstage_", "# TYPE", "consumed", "dropped", "bad_json"}
	for _, n := range []int64{918_273_645, 918_273_601, 846_152_937, 31_415_926, 27_182_818, 73_914_851} {
		secrets = append(secrets, strconv.FormatInt(n, 10), strconv.FormatFloat(float64(n), 'g', -1, 64))
	}

	pub := httptest.NewServer(srv.Handler())
	defer pub.Close()
	op := httptest.NewServer(srv.OperatorHandler())
	defer op.Close()
	bearer := func(tok string) string { return "Bearer " + tok }

	publicRoutes := []string{"/", "/api/releases", "/api/releases?histogram=pages&group=US&limit=1000", "/api/budget", "/api/layout", "/api/selections", "/healthz", "/readyz"}
	for _, path := range publicRoutes {
		code, _, body := get(t, pub.URL+path, bearer(pubTok))
		if code != 200 && !(path == "/readyz" && code == 503) {
			t.Errorf("public %s: %d %s", path, code, body)
		}
		for _, s := range secrets {
			if strings.Contains(string(body), s) {
				t.Errorf("public %s shows %q", path, s)
			}
		}
	}
	if _, _, body := get(t, pub.URL+"/api/releases", bearer(pubTok)); !strings.Contains(string(body), `"pages"`) {
		t.Errorf("public /api/releases: %s; want the stored release (the check above would be empty)", body)
	}
	if _, _, body := get(t, pub.URL+"/api/budget", bearer(pubTok)); !strings.Contains(string(body), `"spent_epsilon":0.25`) {
		t.Errorf("public /api/budget: %s; want the period's spend", body)
	}
	for _, path := range []string{"/metrics", "/metrics/", "/api/metrics"} {
		for _, tok := range []string{pubTok, opTok} {
			if code, _, body := get(t, pub.URL+path, bearer(tok)); code != 404 {
				t.Errorf("public %s with a token: %d %s, want 404", path, code, body)
			}
		}
	}
	// The operator token does not open the public surface.
	if code, _, _ := get(t, pub.URL+"/api/releases", bearer(opTok)); code != 401 {
		t.Errorf("public /api/releases with the operator token: %d, want 401", code)
	}

	// The operator listener: /metrics behind its own token, with the counts.
	for _, tc := range []struct {
		authz string
		code  int
	}{{"", 401}, {bearer(pubTok), 401}, {bearer("operator"), 401}, {bearer(opTok), 200}} {
		code, _, body := get(t, op.URL+"/metrics", tc.authz)
		if code != tc.code {
			t.Errorf("operator /metrics with %q: %d, want %d", tc.authz, code, tc.code)
		}
		if code == 200 && !strings.Contains(string(body), "dpstage_events_consumed_total 9.18273645e+08") {
			t.Errorf("operator /metrics lacks the consumed count:\n%s", body)
		}
	}
	for _, path := range []string{"/", "/api/releases", "/api/budget", "/api/layout", "/api/selections"} {
		if code, _, _ := get(t, op.URL+path, bearer(opTok)); code != 404 {
			t.Errorf("operator %s: %d, want 404 (the public surface is on http.address)", path, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, _ := get(t, op.URL+path, ""); code != 200 && code != 503 {
			t.Errorf("operator %s: %d, want the probe without a token", path, code)
		}
	}
}
