package httpapi_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/pipeline"
)

// unreachableSource is a stage whose brokers do not answer.
type unreachableSource struct{ countingSource }

const dialErr = "no broker answers: 127.0.0.1:9: dial tcp 127.0.0.1:9: connect: connection refused — check kafka.brokers"

func (unreachableSource) Readiness() pipeline.Readiness {
	return pipeline.Readiness{StateLoaded: true, ConnectError: dialErr}
}

// TestReadyzConnectError (issue 28 item 6): while the brokers do not
// answer, both listeners' /readyz say connected: false (503); the
// operator's also gives the reason — each broker's dial error — and only
// it, behind http.operator_token when set: the reason names the brokers.
func TestReadyzConnectError(t *testing.T) {
	for _, tok := range []string{"", "op-token"} {
		cfg := testConfig(t, "", nil)
		cfg.HTTP.OperatorToken = tok
		srv, err := httpapi.New(httpapi.Options{Config: cfg})
		if err != nil {
			t.Fatal(err)
		}
		srv.Attach(unreachableSource{countingSource{&pipeline.Stats{}}})
		pub := httptest.NewServer(srv.Handler())
		op := httptest.NewServer(srv.OperatorHandler())
		auth := ""
		if tok != "" {
			auth = "Bearer " + tok
		}
		for _, c := range []struct {
			url, auth  string
			withReason bool
		}{{pub.URL, "", false}, {op.URL, auth, true}, {op.URL, "", tok == ""}} {
			code, _, body := get(t, c.url+"/readyz", c.auth)
			if code != 503 || !strings.Contains(string(body), `"connected":false`) {
				t.Errorf("token %q, %s: /readyz %d %s; want 503, connected false", tok, c.url, code, body)
			}
			if got := strings.Contains(string(body), `"connect_error":"`+dialErr+`"`); got != c.withReason {
				t.Errorf("token %q, %s (auth %q): /readyz %s; reason shown %v, want %v", tok, c.url, c.auth, body, got, c.withReason)
			}
		}
		pub.Close()
		op.Close()
	}
}
