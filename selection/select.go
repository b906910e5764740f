package selection

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dpstage/stage/internal/lib/keyhash"
	"github.com/dpstage/stage/mechanism"
)

// ErrOverLimit is Keys's error when the window's key-count test withholds
// its selection: nothing of the window's unlisted groups is released.
var ErrOverLimit = errors.New("selection: the window's distinct group keys are over selection.max_keys_per_window; no group selected")

// keyHash is the public hash of a group key that orders Keys's draws
// (package keyhash, which also decides the decoder's key sampling).
func keyHash(key string) uint64 { return keyhash.String(key) }

// Keys draws one window's selection over keys with their distinct users
// (users[i] is keys[i]'s count after bounding, ≥ 1; keys distinct): with
// th.KeyLimit, first the key-count test on len(keys) (ErrOverLimit), then
// keys[i] is selected iff users[i] + Z_i ≥ T. It returns the indices of the
// selected keys in ascending order of index. noise must sample
// N_Z(0, th.Sigma²) and keyNoise N_Z(0, th.KeySigma²) (Noiser; keyNoise
// unused without a limit).
//
// The draws go in the order of (keyHash, key): a function of the keys
// alone, not of the order they are given in, so the same counts give the
// same selection for the same seeded rng (tests only) in the single-process
// mode (aggregate's keys) and the distributed one (the merged partials').
func Keys(th Threshold, noise, keyNoise mechanism.CountNoiser, rng *mechanism.Rand, keys []string, users []int64) ([]int, error) {
	if err := th.Check(); err != nil {
		return nil, err
	}
	if len(keys) != len(users) {
		return nil, fmt.Errorf("selection: %d keys with %d user counts", len(keys), len(users))
	}
	if s := noise.Params().Sigma; s != th.Sigma {
		return nil, fmt.Errorf("selection: the sampler's σ %v is not the threshold's %v", s, th.Sigma)
	}
	if th.KeyLimit > 0 {
		if s := keyNoise.Params().Sigma; s != th.KeySigma {
			return nil, fmt.Errorf("selection: the key sampler's σ %v is not the threshold's %v", s, th.KeySigma)
		}
		v, err := keyNoise.NoisyCount(rng, float64(len(keys)))
		if err != nil {
			return nil, err
		}
		if v >= float64(th.KeyLimit) {
			return nil, ErrOverLimit
		}
	}
	type entry struct {
		h uint64
		i int
	}
	es := make([]entry, len(keys))
	for i, k := range keys {
		if users[i] < 1 {
			return nil, fmt.Errorf("selection: key %q has %d users (a tracked key has at least 1)", k, users[i])
		}
		es[i] = entry{keyHash(k), i}
	}
	slices.SortFunc(es, func(a, b entry) int {
		if a.h != b.h {
			return cmp.Compare(a.h, b.h)
		}
		return strings.Compare(keys[a.i], keys[b.i])
	})
	var out []int
	for j, e := range es {
		if j > 0 && keys[es[j-1].i] == keys[e.i] {
			return nil, fmt.Errorf("selection: key %q given twice", keys[e.i])
		}
		v, err := noise.NoisyCount(rng, float64(users[e.i]))
		if err != nil {
			return nil, err
		}
		if v >= float64(th.T) {
			out = append(out, e.i)
		}
	}
	slices.Sort(out)
	return out, nil
}
