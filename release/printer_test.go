package release_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dpstage/stage/release"
)

// TestPrinter: the bars and the privacy line; under the cross-window bound
// the line says the period's charge is a reservation made up front, so a
// period "charged ε=1 of 1" on its first release does not read as an
// exhausted budget.
func TestPrinter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		windows int
		want    []string
		not     string
	}{
		{"per window", 0, []string{"home    75.0% ██████████████████████████████", "period spent ε=0.5 of 1 at δ=1e-06"}, "reserved"},
		{"reservation", 5, []string{"period charged ε=1 of 1 at δ=1e-06 (reserved up front for 5 windows per user; later releases are covered)"}, "period spent"},
		{"total δ", 5, []string{"at δ=1e-06 (reserved up front for 5 windows per user; later releases are covered); guarantee total δ=1e-06 with user-hash collisions"}, "period spent"},
		{"intervals", -1, []string{"home    75.0% ██████████████████████████████            62.5–88.0%", "total ≈ 1234 (1180–1290); ranges: 95% intervals"}, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			r := &release.Release{Histogram: "pages", Group: "US", WindowStart: "a", WindowEnd: "b", Mechanism: "dirichlet", Calibration: "optimal",
				Bins: []string{"home", "search"}, Probabilities: []float64{0.75, 0.25}}
			r.Privacy.Order, r.Privacy.RDPEpsilon, r.Privacy.BudgetEpsilon, r.Privacy.Delta = 2, 0.01, 1, 1e-6
			r.Privacy.SpentEpsilon, r.Privacy.ChargeWindows = 0.5, max(tc.windows, 0)
			if tc.windows < 0 {
				r.Intervals = &release.Intervals{Level: 0.95, Low: []float64{0.625, 0.12}, High: []float64{0.88, 0.375}}
				r.Total = &release.Total{Estimate: 1234, Low: 1180, High: 1290}
			}
			if tc.windows > 0 {
				r.Privacy.SpentEpsilon = 1
			}
			if tc.name == "total δ" { // issue 28 item 5: δ + 2n·2⁻⁶⁴
				r.Privacy.TotalDelta = 1.0000032e-6
			}
			release.NewPrinter(&out).Print(r)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), tc.not) {
				t.Errorf("output has %q:\n%s", tc.not, out.String())
			}
		})
	}
}
