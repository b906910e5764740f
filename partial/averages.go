package partial

import "slices"

// Average histograms (histograms[].kind: average) in the distributed mode.
//
// An average histogram's users cap (average.users = N) keeps the N users
// of a window with the smallest user hashes, among all the window's users.
// A partition's bounder cannot apply it alone, and a sum of its kept
// users' vectors would not do: the releaser must choose among all
// partitions' users. So a Partial carries, for each average histogram
// whose window ends with it, the partition's N smallest hashes with each
// user's averaged vector (an AverageCell); the releaser keeps the N
// smallest of their union (aggregate.MergeKept), which are the window's N
// smallest: the single-process mode's kept set, so its sensitivity
// argument and its charge stand unchanged (aggregate/average_merge.go).
//
// These are per-user (keyed-hash) records of exact data: the partials
// topic, already holding exact counts, needs the input topic's ACLs
// (docs/distributed.md). The record size grows with N × (bins + 1)
// numbers per average histogram (config validation counts them against
// the partial record's cell budget).

// AverageCell is one input partition's kept users of one average
// histogram in one window.
type AverageCell struct {
	// H is the histogram's index in the config's histograms list.
	H int `json:"h"`
	// Users are the kept users' hashes, increasing; Vectors[i] is the
	// mean of user Users[i]'s vectors in the window.
	Users   []uint64    `json:"users"`
	Vectors [][]float64 `json:"vectors"`
}

// checkAverages checks a decoded Partial's AverageCells.
func checkAverages(p *Partial) error {
	seen := map[int]bool{}
	for _, a := range p.Averages {
		if a.H < 0 || seen[a.H] || len(a.Users) != len(a.Vectors) || !slices.IsSorted(a.Users) {
			return Refuse(ReasonShape, "partial of window %d partition %d: average cell of histogram %d (%d users, %d vectors)",
				p.WindowStart, p.Partition, a.H, len(a.Users), len(a.Vectors))
		}
		seen[a.H] = true
		for i, v := range a.Vectors {
			if !checkVector(v) {
				return Refuse(ReasonAverage, "partial of window %d partition %d: average cell of histogram %d: the vector of user %d is not a probability vector (components in [0, 1], sum within 1 ± %g)",
					p.WindowStart, p.Partition, a.H, i, VectorTolerance)
			}
		}
	}
	return nil
}
