package release_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/interval"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// TestTotalShareDefault measures what privacy.total_share does, to justify
// its default (config.DefaultTotalShare): on the Dirichlet configs the
// repository ships — examples/quickstart.yaml (optimal at 1,500 events,
// K = 5 of 17,280 windows), deploy/stage.yaml (optimal at 3,000, 1,440
// windows, no window bound) and examples/returning-users.yaml run with
// the dirichlet mechanism (optimal at 3,000; minute, hour and day views in
// one budget at its budget_share: the minute view 65 %) — for each share: the histogram's expected ℓ2 error at the
// planning figure N (plan.ExpectedL2, exact for the calibrated mechanism),
// the mean width of its 95% intervals (the demo's weights 40/25/15/8/12,
// 400 releases) and the total's 95% half-width, next to a share of 10⁻⁴
// (the histogram keeps almost all of the budget, the total is useless).
// The table is in docs/intervals.md.
//
// Asserted (what the default is chosen for): at the default the
// histogram's expected error is within 5% of the 10⁻⁴ share's (exact, no
// sampling), and its mean interval width within 10% of the narrowest of
// the shares measured (measured: 0.2–2.5%). The seed is fixed, so the test
// is deterministic; over seeds, a mean width of 2,000 (release, bin) pairs
// has a relative standard error of 1.1% on returning-users (0.1% on
// deploy/stage.yaml, measured over 20 seeds), so a difference of two has
// about 1.5%, and 10% is 5 of them above the 2.5% measured: a false
// failure under another seed has probability below 10⁻⁶.
func TestTotalShareDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	truth := []float64{0.40, 0.25, 0.15, 0.08, 0.12}
	type setup struct {
		name string
		path string
		mech string
		n    int
	}
	shares := []float64{1e-4, 0.02, 0.05, config.DefaultTotalShare, 0.2, 0.3, 0.5}
	for _, s := range []setup{
		{"quickstart (5 s windows, K = 5)", "../examples/quickstart.yaml", "", 1500},
		{"deploy/stage.yaml (1 min windows)", "../deploy/stage.yaml", "", 3000},
		{"returning-users, dirichlet (minute view)", "../examples/returning-users.yaml", "dirichlet", 3000},
	} {
		var base, best, atDefault, errDefault float64
		var rows []string
		for _, share := range shares {
			cfg, err := config.Load(s.path)
			if err != nil {
				t.Fatal(err)
			}
			if s.mech != "" {
				cfg.Privacy.Mechanism, cfg.Privacy.Calibration = s.mech, config.CalibrationOptimal
			}
			cfg.Privacy.TotalShare = share
			p, err := plan.DerivePlan(cfg)
			if err != nil {
				t.Fatalf("%s share %v: %v", s.name, share, err)
			}
			l2 := plan.ExpectedL2(p.Count.Mechanism, len(truth), float64(s.n))
			width, half := simulateShare(t, p, truth, s.n, 400)
			if share == 1e-4 {
				base, best = l2, math.Inf(1)
			} else {
				best = math.Min(best, width)
			}
			if share == config.DefaultTotalShare {
				atDefault, errDefault = width, l2
			}
			rows = append(rows, fmt.Sprintf("| %s | %g | %.4f | %+.1f%% | %.4f | ±%.0f (%.1f%% of N) |", s.name, share, l2, 100*(l2/base-1), width, half, 100*half/float64(s.n)))
		}
		t.Logf("\n| config | total_share | expected ℓ2 | vs 10⁻⁴ | mean 95%% interval width | total 95%% |\n|---|---|---|---|---|---|\n%s", strings.Join(rows, "\n"))
		if errDefault > 1.05*base {
			t.Errorf("%s: at the default share the histogram's expected ℓ2 %.4f is more than 5%% above %.4f", s.name, errDefault, base)
		}
		if atDefault > 1.10*best {
			t.Errorf("%s: at the default share the intervals' mean width %.4f is more than 10%% above the narrowest %.4f", s.name, atDefault, best)
		}
	}
}

// simulateShare releases the first count histogram's mechanism of p on N
// events with the shares truth, reps times (a fixed seed), and returns the
// mean interval width and the total's half-width.
func simulateShare(t *testing.T, p *plan.Plan, truth []float64, n, reps int) (width, half float64) {
	return simulateShareSeed(t, p, truth, n, reps, 29)
}

func simulateShareSeed(t *testing.T, p *plan.Plan, truth []float64, n, reps int, seed byte) (width, half float64) {
	t.Helper()
	m, tot := p.Count.Mechanism, p.Totals.Count
	sigma := p.Totals.CountSigma()
	counts := make([]float64, len(truth))
	for i, v := range truth {
		counts[i] = math.Round(v * float64(n))
	}
	rng := mechanism.NewSeededRand([32]byte{seed})
	d := len(truth)
	y, lo, hi := make([]float64, d), make([]float64, d), make([]float64, d)
	grid := mechanism.ReleaseGrid(d)
	for range reps {
		if err := m.Release(rng, counts, y); err != nil {
			t.Fatal(err)
		}
		nt, err := tot.NoisyCount(rng, float64(n))
		if err != nil {
			t.Fatal(err)
		}
		par := m.Params()
		if err := interval.Dirichlet(y, grid, par.R, par.Alpha, nt, sigma, 0.95, lo, hi); err != nil {
			t.Fatal(err)
		}
		for i := range y {
			width += hi[i] - lo[i]
		}
	}
	c, err := interval.Count(1e9, sigma, 0.95, math.Inf(1))
	if err != nil {
		t.Fatal(err)
	}
	return width / float64(reps*d), c.High - 1e9
}
