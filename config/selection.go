package config

import "fmt"

// Selection configures the private selection of unlisted groups (issue
// 30; package selection): a histogram with group_by and no groups selects,
// in each window, the group keys whose noisy count of distinct users
// passes a threshold calibrated from the selection's share of the budget.
// It applies only when some histogram selects.
type Selection struct {
	// EpsilonShare is the share of privacy.budget.epsilon the period's
	// selections get, in (0, 0.9]; the releases get the rest (the two
	// compose by basic composition, as the average histograms' releases
	// do: plan.SelectionPlan). Default DefaultSelectionEpsilonShare.
	EpsilonShare float64 `yaml:"epsilon_share"`
	// DeltaShare is the share of privacy.budget.delta the selections get,
	// in (0, 0.9]: part of it bounds the chance that a group only one
	// user created is selected (the threshold), the rest converts their
	// RDP curve. Default DefaultSelectionDeltaShare.
	DeltaShare float64 `yaml:"delta_share"`
	// MaxKeysPerWindow bounds the group keys one selecting histogram
	// tracks per window (≥ 1). Default DefaultMaxKeysPerWindow.
	MaxKeysPerWindow int `yaml:"max_keys_per_window"`
	// KeySampleRate is the share of group keys tracked, in (0, 1]: a key is
	// tracked iff a keyed hash of the key alone falls below the rate
	// (never which keys came first: ground rule 7). A key not sampled is
	// never released, whatever its users. Default 1 (every key).
	KeySampleRate float64 `yaml:"key_sample_rate"`
}

// Selection defaults.
const (
	DefaultSelectionEpsilonShare = 0.25
	DefaultSelectionDeltaShare   = 0.5
	DefaultMaxKeysPerWindow      = 1_000_000
	DefaultKeySampleRate         = 1.0
)

// MaxSelectingBins is the most bins a histogram that selects its groups
// may have (aggregate's maxKeyedBinBits: 8 bits of bin index beside 24 of
// key id).
const MaxSelectingBins = 256

// Selects reports whether h selects its groups privately: group_by with
// no listed groups.
func (h Histogram) Selects() bool { return h.GroupBy != "" && len(h.Groups) == 0 && !h.IsAverage() }

// Selecting reports whether some histogram of c selects its groups.
func (c *Config) Selecting() bool {
	for _, h := range c.Histograms {
		if h.Selects() {
			return true
		}
	}
	return false
}

// selectionDefaults fills the selection section's defaults.
func (c *Config) selectionDefaults(flt func(*float64, string, float64), num func(*int, string, int)) {
	flt(&c.Selection.EpsilonShare, "selection.epsilon_share", DefaultSelectionEpsilonShare)
	flt(&c.Selection.DeltaShare, "selection.delta_share", DefaultSelectionDeltaShare)
	num(&c.Selection.MaxKeysPerWindow, "selection.max_keys_per_window", DefaultMaxKeysPerWindow)
	flt(&c.Selection.KeySampleRate, "selection.key_sample_rate", DefaultKeySampleRate)
}

// selection checks the selection section (NaN and ±Inf refused like any
// value out of range).
func (k *checker) selection() {
	s := k.c.Selection
	if !finite(s.EpsilonShare) || s.EpsilonShare <= 0 || s.EpsilonShare > 0.9 {
		k.add("selection.epsilon_share", "must be a finite number greater than 0 and at most 0.9 (the selections' share of privacy.budget.epsilon)")
	}
	if !finite(s.DeltaShare) || s.DeltaShare <= 0 || s.DeltaShare > 0.9 {
		k.add("selection.delta_share", "must be a finite number greater than 0 and at most 0.9 (the selections' share of privacy.budget.delta)")
	}
	k.atLeast1("selection.max_keys_per_window", s.MaxKeysPerWindow)
	if !finite(s.KeySampleRate) || s.KeySampleRate <= 0 || s.KeySampleRate > 1 {
		k.add("selection.key_sample_rate", "must be a finite number greater than 0 and at most 1 (1: every key)")
	}
	for i, h := range k.c.Histograms {
		if h.Selects() && len(h.Bins) > MaxSelectingBins {
			k.add(fmt.Sprintf("histograms[%d].bins", i), "%d bins: a histogram that selects its groups (group_by without groups) takes at most %d (its entries hold the key's id beside the bin; aggregate's maxKeyedBinBits); list the groups or merge bins", len(h.Bins), MaxSelectingBins)
		}
	}
	if d := k.c.Kafka.Distributed; d.Enabled && d.PartialsFormat == PartialsJSON {
		for i, h := range k.c.Histograms {
			if h.Selects() {
				// The JSON partials (an upgrade's first roll, for releasers
				// of versions before the Arrow encoding) carry no group keys.
				k.add("kafka.distributed.partials_format", "json cannot carry the group keys of histograms[%d] (%s: group_by without groups, selected privately); set partials_format: arrow (the releasers reading only JSON predate the selection too), or list the groups in histograms[%d].groups", i, h.Name, i)
				return
			}
		}
	}
}
