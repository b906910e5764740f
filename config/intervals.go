package config

// The bounds of output.interval_level (package interval's MinLevel and
// MaxLevel; config imports no step of the stage, a test pins them equal)
// and of privacy.total_share.
const (
	MinIntervalLevel = 0.5
	MaxIntervalLevel = 0.999
	MaxTotalShare    = 0.5
)

// intervals checks output.interval_level and privacy.total_share.
func (k *checker) intervals() {
	if l := k.c.Output.IntervalLevel; !finite(l) || l < MinIntervalLevel || l > MaxIntervalLevel {
		k.add("output.interval_level", "must be a confidence level in [%g, %g] (e.g. 0.95), got %v", MinIntervalLevel, MaxIntervalLevel, l)
	}
	if s := k.c.Privacy.TotalShare; !finite(s) || s <= 0 || s > MaxTotalShare {
		k.add("privacy.total_share", "must be a share of the budget greater than 0 and at most %g (default %g: the totals the dirichlet and average releases carry), got %v", MaxTotalShare, DefaultTotalShare, s)
	}
}
