package pipeline

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Distributed mode (kafka.distributed.enabled).
//
// Every instance runs two roles, each a member of its own consumer group:
//
//   - the bounder (dist_bound.go) is a member of kafka.group_id on the
//     input topic, with a cooperative-sticky assignment, and reads, per
//     assigned input partition p, with today's consume loop on a session of
//     its own: decode → window rule → bound → count. When p's watermark
//     passes a window it writes, in one Kafka transaction under the
//     transactional id of p (config.Kafka.BoundTransactionalID), the
//     window's exact bounded partial counts to the partials topic and p's
//     progress (input offset, next window, admissions) to the progress
//     topic. The new owner of p fences the old one with that id, restores
//     the progress and goes on: nothing but Kafka holds a bounder's state.
//   - the releaser (dist_release.go) is a member of
//     config.Kafka.ReleaseGroupID on the partials topic (one partition):
//     the member assigned it opens the release log (fencing the previous
//     releaser, ledger/kafkalog), merges the partials of a window once
//     every input partition's partial of it was read (a partition that
//     passed it without one holds it: partial.Merger, "Gaps"), and
//     records, publishes and marks
//     it as the single-process stage does (release.go), then commits its
//     partials offset.
//
// Package partial holds the wire format and its argument; the package doc
// of ledger/kafkalog the release log's fencing argument.

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
func (s *Stage) leaveLimit(ctx context.Context) func() time.Duration {
	var at atomic.Int64
	context.AfterFunc(ctx, func() { at.Store(time.Now().UnixNano()) })
	return func() time.Duration {
		left := s.drain
		if t := at.Load(); t != 0 {
			left -= time.Since(time.Unix(0, t))
		}
		if st := s.cfg.Kafka.SessionTimeout.D(); st > 0 {
			left = min(left, st)
		}
		return max(left, minLeave)
	}
}

// minLeave: see leaveLimit.
const minLeave = 200 * time.Millisecond

// runDistributed runs both roles until ctx ends (a soft stop) or one of
// them fails (Stage.fail).
func (s *Stage) runDistributed(ctx context.Context) error {
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
	s.ready.stateLoaded.Store(true)
	defer s.ready.draining.Store(true)
	context.AfterFunc(ctx, func() { s.ready.draining.Store(true) })
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // owner: runDistributed; ends with ctx
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				s.logProgress()
				return
			case <-progress.C:
				s.logProgress()
			}
		}
	}()
	go func() { // owner: runDistributed
		defer wg.Done()
		if err := s.runBounders(ctx); err != nil && ctx.Err() == nil {
			s.fail(err)
		}
	}()
	go func() { // owner: runDistributed
		defer wg.Done()
		if err := s.runReleaser(ctx); err != nil && ctx.Err() == nil {
			s.fail(err)
		}
	}()
	wg.Wait()
	return nil
}
