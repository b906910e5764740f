package distributed

import (
	"context"
	"sync"

	"github.com/dpstage/stage/node"
)

// onBounderMu serializes tests' use of the onBounder hook.
var onBounderMu sync.Mutex

// RunBounders runs n's bounder role alone until ctx ends (tests of the
// bounder: the releaser is not part of them), with fail as n's Fail.
// started is called once with the bounder's count of input records its
// group client fetched (must stay 0: the input is paused).
func RunBounders(ctx context.Context, n *node.Node, fail func(error), started func(stray func() int64)) error {
	s := &stage{Node: n}
	n.SetFail(fail)
	onBounderMu.Lock()
	onBounder = func(b *bounder) {
		onBounder = nil
		onBounderMu.Unlock()
		started(b.stray.Load)
	}
	return s.runBounders(ctx)
}

// The package's tests write every Partial with keys in parts, about one
// key a part (partial.Partial.Split: 4096 bytes is below its slack), so
// that a selecting histogram's test (TestFeatureSelectedGroups) merges
// parts through the releaser; Partials without keys are never split.
func init() { partialSplitBytes = 4096 }
