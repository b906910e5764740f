package config

import (
	"strings"
	"testing"
)

// privacy.prior_alpha: default 1 for laplace-posterior only, an explicit
// value kept, left at 0 for the other mechanisms, and rejected there when
// given.
func TestPriorAlpha(t *testing.T) {
	with := func(privacy string) string {
		return strings.Replace(base, "privacy:\n", "privacy:\n"+privacy, 1)
	}
	if !strings.Contains(base, "privacy:\n") {
		t.Fatal("base config has no privacy section to extend")
	}
	for _, c := range []struct {
		name, privacy string
		mech          string
		prior         float64
	}{
		{"default for laplace-posterior", "  mechanism: laplace-posterior\n", MechanismLaplacePosterior, DefaultPriorAlpha},
		{"explicit", "  mechanism: laplace-posterior\n  prior_alpha: 0.5\n", MechanismLaplacePosterior, 0.5},
		{"dirichlet leaves it 0", "", MechanismDirichlet, 0},
		{"laplace leaves it 0", "  mechanism: laplace\n", MechanismLaplace, 0},
		{"explicit 0 with dirichlet (the String form)", "  prior_alpha: 0\n", MechanismDirichlet, 0},
	} {
		cfg := mustParse(t, with(c.privacy), nil)
		if cfg.Privacy.Mechanism != c.mech || cfg.Privacy.PriorAlpha != c.prior {
			t.Errorf("%s: mechanism %q prior_alpha %v, want %q %v", c.name, cfg.Privacy.Mechanism, cfg.Privacy.PriorAlpha, c.mech, c.prior)
		}
		if c.mech == MechanismLaplacePosterior && cfg.Privacy.Calibration != "" {
			t.Errorf("%s: calibration defaulted to %q for laplace-posterior", c.name, cfg.Privacy.Calibration)
		}
	}
	for _, c := range []struct{ name, privacy, frag string }{
		{"with dirichlet", "  prior_alpha: 1\n", "only applies to mechanism laplace-posterior"},
		{"with gaussian", "  mechanism: gaussian\n  prior_alpha: 3\n", "only applies to mechanism laplace-posterior"},
		{"explicit 0", "  mechanism: laplace-posterior\n  prior_alpha: 0\n", "greater than 0"},
		{"negative", "  mechanism: laplace-posterior\n  prior_alpha: -0.5\n", "greater than 0"},
	} {
		_, err := Parse([]byte(with(c.privacy)), envOf(nil))
		if err == nil || !strings.Contains(err.Error(), "privacy.prior_alpha") || !strings.Contains(err.Error(), c.frag) {
			t.Errorf("%s: err %v, want privacy.prior_alpha: ...%s...", c.name, err, c.frag)
		}
	}
}
