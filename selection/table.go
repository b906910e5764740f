package selection

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dpstage/stage/internal/lib/keyhash"
	"github.com/dpstage/stage/mechanism"
)

// Table is one (histogram, window)'s group keys and each key's count of
// distinct users after bounding. The bounder calls Add(key, +1) when a
// user's kept groups gain key and Add(key, −1) when they lose it (a group
// ranked earlier displaced it: package aggregate's order-independent
// bounding), so that at the window's close each key holds c_g, the users
// whose kept groups include it, and a key no user keeps is gone — as if
// never seen.
//
// Memory. A key is tracked only if it is sampled: a public hash of the key
// alone falls below rate·2⁶⁴ (Sampled; ground rule 7 — never which keys
// came first or how many there are), so the map holds at most the sampled
// keys that some user of the window keeps: ≤ rate × max_groups_per_user ×
// the window's users, the same order as the bounder's own per-user state
// (bounded by contribution.max_tracked_users where that is set). A key
// not sampled is never selected (accuracy: each group is missed with
// probability 1 − rate whatever its users). The configured limit of keys
// per window (Threshold.KeyLimit) is enforced at the close by a charged
// noisy test on the window's distinct keys, never by refusing keys as
// they come (first-come): above it the window's selection is withheld,
// and that is visible (ErrOverLimit). Bytes per key: BenchmarkTable.
//
// A Table is not safe for concurrent use: its owner (one window of one
// histogram in one bounder) serializes Add and Select.
type Table struct {
	counts map[string]int32
	rate   uint64 // a key is sampled iff keyHash(key) < rate; MaxUint64: every key
}

// NewTable returns an empty table sampling keys at rate ∈ (0, 1].
func NewTable(rate float64) (*Table, error) {
	if !(rate > 0 && rate <= 1) {
		return nil, fmt.Errorf("selection: the key sample rate must be in (0, 1], got %v", rate)
	}
	return &Table{counts: make(map[string]int32), rate: keyhash.Threshold(rate)}, nil
}

// Sampled reports whether key is tracked: a function of the key alone.
func (t *Table) Sampled(key string) bool {
	return keyhash.Sampled(keyHash(key), t.rate)
}

// Add applies one user's change to key's distinct users: d = +1 when the
// user's kept groups gain it, −1 when they lose it. A key not sampled is
// ignored. Removing a user a key does not have is an error (the bounder's
// bookkeeping is wrong), never a negative count.
func (t *Table) Add(key string, d int32) error {
	old, ok := t.counts[key]
	if !ok {
		if d <= 0 {
			if t.Sampled(key) {
				return fmt.Errorf("selection: key %q would have %d users", key, d)
			}
			return nil
		}
		if !t.Sampled(key) {
			return nil
		}
		t.counts[strings.Clone(key)] = d // its own copy, not the decoded event's buffer
		return nil
	}
	switch c := old + d; {
	case c < 0:
		return fmt.Errorf("selection: key %q would have %d users", key, c)
	case c == 0:
		delete(t.counts, key)
	default:
		t.counts[key] = c
	}
	return nil
}

// Len is the number of keys with at least one user.
func (t *Table) Len() int { return len(t.counts) }

// Count is key's distinct users (0 if untracked).
func (t *Table) Count(key string) int32 { return t.counts[key] }

// ErrOverLimit is Select's error when the window's key-count test withholds
// its selection: nothing of the window's unlisted groups is released.
var ErrOverLimit = errors.New("selection: the window's distinct group keys are over selection.max_keys_per_window; no group selected")

// Select draws the window's selection: with th.KeyLimit, first the
// key-count test (F + Z_k ≥ KeyLimit: ErrOverLimit), then for every key
// c + Z ≥ T. It returns the selected keys, sorted. noise
// must sample N_Z(0, th.Sigma²) and keyNoise N_Z(0, th.KeySigma²)
// (Noiser; keyNoise unused without a limit); the draws are in a fixed
// order, so a seeded rng (tests only) gives the same selection for the
// same counts wherever they were counted.
func (t *Table) Select(th Threshold, noise, keyNoise mechanism.CountNoiser, rng *mechanism.Rand) ([]string, error) {
	keys := make([]string, 0, len(t.counts))
	for k := range t.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	users := make([]int64, len(keys))
	for i, k := range keys {
		users[i] = int64(t.counts[k])
	}
	idx, err := Keys(th, noise, keyNoise, rng, keys, users)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(idx))
	for j, i := range idx {
		out[j] = keys[i]
	}
	return out, nil
}

// keyHash is the public hash of a group key that decides its sampling and
// the order of Select's draws (package keyhash, shared with the decoder,
// which drops the parts of unsampled keys).
func keyHash(key string) uint64 { return keyhash.String(key) }
