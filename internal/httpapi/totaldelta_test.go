package httpapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/dpstage/stage/internal/httpapi"
)

// TestBudgetStatesTheTotalDelta (issue 28 item 5): /api/budget states the
// guarantee's total δ — privacy.budget.delta plus the user-hash collision
// term 2n·2⁻⁶⁴ for n = privacy.expected_users — as total_delta, the number
// the page's guarantee sentence prints; without expected_users (n
// unknown) it is omitted and the page states δ + 2n·2⁻⁶⁴ as a formula.
func TestBudgetStatesTheTotalDelta(t *testing.T) {
	for _, tc := range []struct {
		name  string
		users int
		want  float64 // 0: omitted
	}{
		{"expected_users", 5000, 1e-6 + 2*5000*0x1p-64},
		{"no expected_users", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, "", nil)
			cfg.Privacy.ExpectedUsers = tc.users
			srv, err := httpapi.New(httpapi.Options{Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			pub := httptest.NewServer(srv.Handler())
			defer pub.Close()
			_, _, body := get(t, pub.URL+"/api/budget", "")
			checkKeys(t, "/api/budget", body, budgetSchema)
			var v map[string]any
			if err := json.Unmarshal(body, &v); err != nil {
				t.Fatal(err)
			}
			if v["delta"] != 1e-6 {
				t.Errorf("delta %v, want the budget's 1e-06", v["delta"])
			}
			got, ok := v["total_delta"].(float64)
			switch {
			case tc.want == 0 && ok:
				t.Errorf("total_delta %v without privacy.expected_users", got)
			case tc.want > 0 && (!ok || got < tc.want || got > tc.want*(1+1e-15)):
				t.Errorf("total_delta %v, want δ + 2n·2⁻⁶⁴ = %v", v["total_delta"], tc.want)
			}
		})
	}
}
