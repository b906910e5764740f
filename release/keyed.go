package release

import "github.com/dpstage/stage/ledger"

// # Unlisted groups (issue 30)
//
// A histogram with group_by and no listed groups (config.Histogram.Selects)
// releases, in each window, only the groups the private selection keeps
// (package selection): their keys are the ones whose distinct users after
// bounding, plus discrete Gaussian noise, pass the plan's threshold. The
// window's counts come with the histogram's tracked keys (Keyed); the
// releaser charges the period's selection reservation (plan.SelectionPlan)
// before anything of the window is drawn, draws the selection, and makes
// one release per selected key, plus one GroupsSelected message per
// (histogram, window) that names them — also when none passed, so that a
// dashboard can tell "no group passed" from "no release".

// Keyed are a closed window's tracked group keys of the histograms that
// select their groups, by config histogram index h. Implemented by
// *aggregate.WindowCounts (by its Spec index), consume.Boundary and
// *partial.Window (by config index) alongside Counts.
//
// The keys of one histogram are in ascending byte order, each once; a key
// is there iff at least one user counted toward it after bounding (and, in
// the distributed mode, after the merge), so Users ≥ 1. What Key returns is
// private: only the selection's output leaves the process.
type Keyed interface {
	// Keys is the number of histogram h's tracked keys (0 for a histogram
	// that does not select, or a window without any).
	Keys(h int) int
	// Key returns histogram h's i-th key (0 ≤ i < Keys(h)), its distinct
	// users after bounding — the count the selection thresholds — and
	// appends its count vector, in declared bin order, to dst[:0].
	Key(h, i int, dst []float64) (key string, users int64, counts []float64)
}

// StatusGroupsSelected is the Status of the message that names the groups
// selected for one (histogram, window) of a selecting histogram
// (Status.Groups, possibly empty; Status.Selection says how they were
// selected). StatusSelectionWithheld: the window's distinct keys were over
// selection.max_keys_per_window by the noisy test, and no group of it is
// released (Status.Selection.Withheld).
const (
	StatusGroupsSelected    = "groups_selected"
	StatusSelectionWithheld = "selection_withheld"
)

// Selection is how a selecting histogram's groups were chosen in a window,
// all public (plan and config): a group is released iff its distinct users
// after bounding plus discrete Gaussian noise N_Z(0, Sigma²) reach
// Threshold. A group of UsersAtHalf distinct users is released with
// probability ½ in a window, one of UsersAt95 with probability 0.95; a
// group of one user with probability at most WindowDelta. So a group that
// appears and disappears between windows is one near the threshold, and
// the absence of a group says only that it had too few users to be shown
// reliably — never that it had none.
type Selection struct {
	Threshold   int64   `json:"threshold"`
	Sigma       float64 `json:"sigma"`
	UsersAtHalf int64   `json:"users_at_half"`
	UsersAt95   int64   `json:"users_at_95"`
	WindowDelta float64 `json:"window_delta"`
	// MaxKeysPerWindow is selection.max_keys_per_window, KeySampleRate
	// selection.key_sample_rate: a key not sampled (a public hash of the
	// key alone) is never released.
	MaxKeysPerWindow int     `json:"max_keys_per_window"`
	KeySampleRate    float64 `json:"key_sample_rate"`
	// ChargeID is the key of the period's selection reservation, and
	// Epsilon, Delta what it charges: every selection of the period, of
	// every selecting histogram, is within it (plan.SelectionPlan).
	ChargeID string  `json:"charge_id"`
	Epsilon  float64 `json:"epsilon"`
	Delta    float64 `json:"delta"`
	// Withheld: the window's key-count test withheld the selection.
	Withheld bool `json:"withheld,omitempty"`
}

// ReleaseMessages are the messages of u that are releases: all of a
// released unit's but, for a selecting histogram's (u.Selection set), the
// leading status message that names the selected groups. None for a unit
// that is not released.
func ReleaseMessages(u *ledger.Unit) []ledger.Message {
	if u.Status != ledger.StatusReleased {
		return nil
	}
	if u.Selection != nil && len(u.Messages) > 0 {
		return u.Messages[1:]
	}
	return u.Messages
}
