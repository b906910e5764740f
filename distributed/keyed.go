package distributed

import (
	"github.com/dpstage/stage/partial"
)

// Selecting histograms (group_by without groups: issue 30) in the
// distributed mode. A bounder writes, in each Partial, the group keys its
// partition's closed window tracked for each selecting histogram whose
// window ends with it, with their distinct users after bounding and their
// counts (partial.KeyedCell: the closed window's release.Keyed); the
// releaser's Merger sums them key by key over the partitions (each user is
// counted by one partition), and the merged *partial.Window is the
// window's release.Keyed, which the release package selects from.

// keyedCell is histogram h's (config index, bins counts per key) keyed
// cell of the boundary's closed windows; nil when it tracked no key.
func keyedCell(b partial.KeySource, h, bins int) *partial.KeyedCell {
	return partial.KeyedFrom(b, h, bins)
}

// partialSplitBytes, when > 0, is the record size beyond which a bounder
// writes a Partial in parts (tests: partial.Partial.Split; 0:
// partial.MaxRecordBytes).
var partialSplitBytes int
