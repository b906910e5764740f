package pipeline

import (
	"context"
	"sync"
)

// onBounderMu serializes tests' use of the onBounder hook.
var onBounderMu sync.Mutex

// RunBounders runs s's bounder role alone until ctx ends (tests of the
// bounder: the releaser is not part of them), with fail as Stage.fail.
// started is called once with the bounder's count of input records its
// group client fetched (must stay 0: the input is paused).
func RunBounders(ctx context.Context, s *Stage, fail func(error), started func(stray func() int64)) error {
	s.fail = fail
	onBounderMu.Lock()
	onBounder = func(b *bounder) {
		onBounder = nil
		onBounderMu.Unlock()
		started(b.stray.Load)
	}
	return s.runBounders(ctx)
}
