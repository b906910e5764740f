package distributed

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dpstage/stage/node"
)

// leaveLimit returns how long the distributed roles' group clients may
// take to leave their group and close, from now: what remains of the drain
// timeout since ctx ended (all of it while ctx has not), at most one
// session timeout, at least minLeave. Every leave and close of both groups
// is bounded by it (kafkapartial.CloseGroupClient), so that a stop ends
// the process within the drain timeout in every state of both groups. A
// leave normally takes milliseconds; one the coordinator holds longer than
// a session timeout (a JoinGroup in flight while it waits out killed
// members) saves the group nothing over being dropped when this member's
// session expires. minLeave lets a stop whose drain was used up by the
// release in flight still try to leave, so that its partitions move at
// once rather than after a session timeout.
func (s *stage) leaveLimit(ctx context.Context) func() time.Duration {
	var at atomic.Int64
	context.AfterFunc(ctx, func() { at.Store(time.Now().UnixNano()) })
	return func() time.Duration {
		left := s.Drain
		if t := at.Load(); t != 0 {
			left -= time.Since(time.Unix(0, t))
		}
		if st := s.Cfg.Kafka.SessionTimeout.D(); st > 0 {
			left = min(left, st)
		}
		return max(left, minLeave)
	}
}

// minLeave: see leaveLimit.
const minLeave = 200 * time.Millisecond

// stage is the distributed mode's roles on one Node.
type stage struct {
	*node.Node
	// progressID is the progress topic's Kafka topic id (progressid.go);
	// written and read by the active releaser only (one lead at a time,
	// runReleaser).
	progressID string
	// leadCut, when set (tests), is called when the active releaser has
	// been told to stop (lost: its group session was lost) — after its
	// loop's context ended, before it is waited for.
	leadCut func(lost bool)
}

// Run runs both roles of the distributed mode on n until ctx ends (a soft
// stop) or one of them fails (n.Fail).
func Run(ctx context.Context, n *node.Node) error {
	s := &stage{Node: n}
	if err := s.ensureInternalTopics(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Readiness in this mode: state_loaded once the internal topics are
	// there, assigned while the bounder has input partitions, connected as
	// in single mode. A replica the bounders' group gave no partition
	// (more replicas than partitions) is a standby, and ready: it does its
	// job by waiting to take partitions or the release over, and a
	// PodDisruptionBudget must be able to drain it.
	s.Ready.StateLoaded.Store(true)
	defer s.Ready.Draining.Store(true)
	context.AfterFunc(ctx, func() { s.Ready.Draining.Store(true) })
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // owner: Run; ends with ctx
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				s.LogProgress()
				return
			case <-progress.C:
				s.LogProgress()
			}
		}
	}()
	go func() { // owner: Run
		defer wg.Done()
		if err := s.runBounders(ctx); err != nil && ctx.Err() == nil {
			s.Fail(err)
		}
	}()
	go func() { // owner: Run
		defer wg.Done()
		if err := s.runReleaser(ctx); err != nil && ctx.Err() == nil {
			s.Fail(err)
		}
	}()
	wg.Wait()
	return nil
}
