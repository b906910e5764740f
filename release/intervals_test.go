package release_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/interval"
	"github.com/dpstage/stage/release"
)

// TestReleasesCarryIntervalsAndTotal: every release of every mechanism
// carries intervals at output.interval_level (one per bin, within [0, 1],
// low ≤ high) and a total; under the near-noiseless budget of testConfig
// the intervals hold the true shares and the total's interval the true
// count (the additive noise and the totals' σ are at their minimum, so a
// miss has probability below 10⁻⁹). The additive mechanisms' totals are
// free (no total_sigma, no total_rdp_epsilon), the Dirichlet's charged.
func TestReleasesCarryIntervalsAndTotal(t *testing.T) {
	for _, mech := range []string{"gaussian", "laplace", "laplace-posterior", "dirichlet"} {
		t.Run(mech, func(t *testing.T) {
			cfg := testConfig(t, "")
			cfg.Privacy.Mechanism = mech
			cfg.Privacy.Calibration = ""
			cfg.Privacy.PriorAlpha = 0
			cfg.Output.IntervalLevel = 0.9
			cfg.ApplyDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			f := newFixture(t, cfg)
			w := int64(29_000_000) * minute
			units := f.window(t, w, [][4]string{
				{"a", "home", "US", "mobile"}, {"b", "cart", "US", "desktop"}, {"c", "home", "US", "mobile"}, {"d", "home", "DE", "mobile"},
			})
			truth := map[string][]float64{"pages/US": {2.0 / 3, 1.0 / 3}, "pages/DE": {1, 0}, "devices/*": {0.75, 0.25}}
			totals := map[string]float64{"pages/US": 3, "pages/DE": 1, "devices/*": 4}
			for _, u := range units {
				for g, r := range releases(t, u) {
					key := u.Histogram + "/" + g
					iv, tot := r.Intervals, r.Total
					if iv == nil || tot == nil || iv.Level != 0.9 || len(iv.Low) != len(r.Bins) || len(iv.High) != len(r.Bins) {
						t.Fatalf("%s: intervals %+v, total %+v", key, iv, tot)
					}
					for i := range r.Bins {
						if !(0 <= iv.Low[i] && iv.Low[i] <= iv.High[i] && iv.High[i] <= 1) {
							t.Errorf("%s bin %d: [%v, %v]", key, i, iv.Low[i], iv.High[i])
						}
						if s := truth[key][i]; mech != "dirichlet" && (s < iv.Low[i] || s > iv.High[i]) {
							t.Errorf("%s bin %d: true share %v outside [%v, %v] (near-noiseless)", key, i, s, iv.Low[i], iv.High[i])
						}
					}
					if n := totals[key]; n < tot.Low || n > tot.High || tot.Low > tot.Estimate || tot.Estimate > tot.High {
						t.Errorf("%s: total %+v, true %v", key, tot, n)
					}
					charged := mech == "dirichlet"
					if charged != (r.Params.TotalSigma > 0) || charged != (r.Privacy.TotalRDPEpsilon > 0) {
						t.Errorf("%s: total_sigma %v, total_rdp_epsilon %v (charged: %v)", key, r.Params.TotalSigma, r.Privacy.TotalRDPEpsilon, charged)
					}
					if mech == "laplace-posterior" {
						// Σα̃ − d·α₀ is the clipped noisy sum: the total when no
						// noisy count is negative (near-noiseless).
						s := 0.0
						for _, a := range r.PosteriorAlpha {
							s += a - r.Params.PriorAlpha
						}
						if math.Abs(s-tot.Estimate) > 1e-9 {
							t.Errorf("%s: posterior total %v, total estimate %v", key, s, tot.Estimate)
						}
					}
				}
			}
		})
	}
}

// TestAverageReleaseCarriesItsTotal: an average histogram's release
// carries intervals and its kept users' total within [0, users], and its
// unit is charged the total's RDP curve with its (ε, δ) — with the
// cross-window bound the reservation's (AverageReservation).
func TestAverageReleaseCarriesItsTotal(t *testing.T) {
	cfg := averageConfig(t)
	f := newFixture(t, cfg)
	p := mustPlan(t, cfg)
	avg, err := aggregate.NewAverager(consume.AverageHists(cfg))
	if err != nil {
		t.Fatal(err)
	}
	w := int64(29_000_000) * minute
	counts, err := f.agg.Close(w)
	if err != nil {
		t.Fatal(err)
	}
	units, err := f.rel.Record(w, counts, avg.Close(w))
	counts.Release()
	if err != nil {
		t.Fatal(err)
	}
	u := units[1]
	want := p.AverageReservation(1)
	if u.Approx == nil || len(u.Charge.Epsilons) == 0 || u.Charge.Epsilons[5] != want.Epsilons()[5] {
		t.Errorf("average unit charged approx %+v, curve %v; want its total's reservation curve %v", u.Approx, u.Charge.Epsilons, want.Epsilons())
	}
	var r release.Release
	if err := json.Unmarshal(u.Messages[0].Value, &r); err != nil {
		t.Fatal(err)
	}
	if r.Intervals == nil || len(r.Intervals.Low) != 3 || r.Total == nil || r.Total.High > 1e6 || r.Total.Low < 0 || r.Params.TotalSigma != p.Totals.AverageSigma() {
		t.Errorf("average release: intervals %+v total %+v total_sigma %v", r.Intervals, r.Total, r.Params.TotalSigma)
	}
	if r.Privacy.TotalRDPEpsilon != p.Totals.AverageRDP(2) || r.Privacy.ChargeRDPEpsilon <= r.Privacy.TotalRDPEpsilon {
		t.Errorf("average release privacy %+v", r.Privacy)
	}
}

// TestIntervalLevelBounds: config's bounds of output.interval_level are
// package interval's.
func TestIntervalLevelBounds(t *testing.T) {
	if config.MinIntervalLevel != interval.MinLevel || config.MaxIntervalLevel != interval.MaxLevel || config.DefaultIntervalLevel != interval.DefaultLevel {
		t.Errorf("config [%v, %v] default %v, interval [%v, %v] default %v", config.MinIntervalLevel, config.MaxIntervalLevel,
			config.DefaultIntervalLevel, interval.MinLevel, interval.MaxLevel, interval.DefaultLevel)
	}
}
