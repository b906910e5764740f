package aggregate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Averages over N bounders (the distributed mode).
//
// Each input partition's bounder keeps, per (window, average histogram),
// the Users users of its partition with the smallest user hashes (each
// partition's hashes are keyed by its own secret key; a user's partition
// is a function of the user), and hands them on with their averaged
// vectors ([AverageWindow.KeptUsers]). The releaser keeps the Users
// smallest hashes among all partitions' kept users and pads and averages
// them ([MergeKept]). Any user among the Users smallest of the whole
// window is among the Users smallest of its own partition, so the users
// MergeKept keeps are exactly the Users smallest hashes of the window's
// users: the kept set K(U) of the sensitivity argument above, a function
// of the user set alone. Adding, removing or swapping one user (in any
// partition) therefore still changes it by at most one member out and one
// in, and ‖p̄ − p̄′‖₁ ≤ 2/Users: the single-process β, whatever the
// partitioning. With the cross-window bound each partition's kept users
// are the Users smallest among its admitted users (CloseAdmitted), whose
// union's Users smallest are the window's admitted Users smallest.
// TestMergeKeptIsSingleProcessMean checks MergeKept against one
// Averager over the same events.

// KeptUser is one kept user of a (window, average histogram): its user
// hash and its averaged probability vector. Raw data: for the distributed
// mode's internal partials only, never for output.
type KeptUser struct {
	User   uint64
	Vector []float64
}

// KeptUsers returns the kept users of the average histogram of config
// index hist, by increasing hash, each with the mean of its vectors.
func (w *AverageWindow) KeptUsers(hist int) []KeptUser {
	i := w.position(hist)
	if w.kept == nil || w.kept[i] == nil {
		return nil
	}
	out := make([]KeptUser, 0, len(w.kept[i].h))
	for _, e := range w.kept[i].h {
		inv := 1 / float64(e.count)
		v := make([]float64, len(e.sum))
		for j, s := range e.sum {
			v[j] = s * inv
		}
		out = append(out, KeptUser{User: e.user, Vector: v})
	}
	slices.SortFunc(out, func(a, b KeptUser) int { return cmp.Compare(a.User, b.User) })
	return out
}

// MergeKept writes into out (grown to bins) the padded average p̄ of the
// users smallest hashes among parts (one list of kept users per input
// partition; equal hashes of two partitions are two users, ordered by
// partition) and returns it. A vector of another length than bins is an
// error.
func MergeKept(users, bins int, parts [][]KeptUser, out []float64) ([]float64, error) {
	if users < 1 || bins < 2 {
		return nil, fmt.Errorf("aggregate: merge kept users: users %d (want ≥ 1), bins %d (want ≥ 2)", users, bins)
	}
	type ref struct {
		user uint64
		part int
		vec  []float64
	}
	var all []ref
	for p, ks := range parts {
		for _, k := range ks {
			if len(k.Vector) != bins {
				return nil, fmt.Errorf("aggregate: merge kept users: a vector of %d bins, the histogram has %d", len(k.Vector), bins)
			}
			all = append(all, ref{k.User, p, k.Vector})
		}
	}
	slices.SortFunc(all, func(a, b ref) int { return cmp.Or(cmp.Compare(a.user, b.user), cmp.Compare(a.part, b.part)) })
	all = all[:min(len(all), users)]
	out = slices.Grow(out[:0], bins)[:bins]
	clear(out)
	for _, r := range all {
		for j, x := range r.vec {
			out[j] += x
		}
	}
	pad := float64(users - len(all))
	n := float64(bins)
	for j := range out {
		out[j] = (out[j] + pad/n) / float64(users)
	}
	var s float64
	for _, v := range out {
		s += v
	}
	if s > 0 && !math.IsInf(s, 0) {
		for j := range out {
			out[j] /= s
		}
	}
	return out, nil
}
