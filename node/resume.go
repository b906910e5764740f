package node

import (
	"context"
	"fmt"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/release"
)

// ResumeWindow is the first window a new session may count into: the
// window after the last recorded one (windows are recorded whole, so the
// last recorded window is complete; events for it are late, counted as
// such, never counted into a window that is not released again; a
// histogram added by a config change starts there), or the first window of
// the ledger's metadata. The last recorded base boundary is the largest
// window end recorded (a histogram's own, longer window ends at a base
// boundary but starts before the last base window); ledgers written before
// that was recorded hold base windows only.
func (s *Node) ResumeWindow() (int64, error) {
	end, ok, err := s.Ledger.LastWindowEnd()
	if err != nil || ok {
		return end, err
	}
	last, ok, err := s.Ledger.LastWindow()
	if err != nil || !ok {
		return s.Meta.FirstWindow, err
	}
	return last + s.SizeMs, nil
}

// loadUserKey sets the user hash key from the ledger's metadata, recording a
// new random one at the first start (unless Options.HashKey set it). The
// hash of a user must be the same after a restart: the cross-window bound's
// admissions are kept in the ledger under it.
func (s *Node) loadUserKey(ctx context.Context) error {
	if s.HashKeySet {
		return nil
	}
	b, err := s.Ledger.UserHashKey(ctx, func() ([]byte, error) {
		k, err := siphash.NewKey()
		return k.Bytes(), err
	})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	s.UserKey = siphash.KeyFromBytes(b)
	return nil
}

// restoreAdmissions returns the cross-window bound's state for a session
// whose first window is next (nil when contribution.max_windows_per_user
// is off): the users admitted to the recorded windows of next's period,
// from the ledger. Windows are recorded whole with their admissions, so
// this is exactly the state after the last recorded window, whatever was
// held in memory before (a window closed but not recorded is computed
// again from its events, with the same admissions).
// CheckNeighbour refuses to charge the budget period of next under
// privacy.neighbour add_remove when its first charge was made under
// replace: the period's guarantee is the replace relation's, and an
// add_remove calibration charges each unit its add_remove curve c_a, about
// half what the same unit costs under replace (c_r = 2c_a for the Gaussian
// and Theorem-2 Dirichlet). The weaker relation takes effect from the next
// period. (A change to replace is stricter and allowed: a replace curve
// bounds the add_remove one.)
func (s *Node) CheckNeighbour(next int64) error {
	p := s.PeriodOf(next)
	lim, ok, err := s.Ledger.PeriodLimit(p)
	if err != nil {
		return fmt.Errorf("read ledger: %w", err)
	}
	if ok && lim.Neighbour == config.NeighbourReplace && s.Cfg.Privacy.Neighbour == config.NeighbourAddRemove {
		return fmt.Errorf("%w: privacy.neighbour is add_remove, but the budget period starting %s was charged under replace, whose guarantee add_remove charges would not keep; "+
			"keep neighbour: replace until that period ends (%s), then change it",
			ErrConfigChanged, release.RFC3339(p), release.RFC3339(p+s.PeriodMs))
	}
	return nil
}

// LimitNewHistograms tells the releaser since when each histogram has been
// counted without a break (ledger.HistogramSince, keyed by name and window
// size): a histogram with a window of its own that the previous session
// did not have releases only its windows that start at or after next.
// Its window open at next began while another config committed offsets
// past some of its events, so what a restart would count into it depends
// on where those commits stopped — on other users' events (ground rule 7).
//
// moved reports that the windows from next on may have been counted
// elsewhere than where this session resumes: the log's last session ran in
// the other mode (single-process or distributed) or on another progress
// topic — or this session's home has released nothing since it took over
// — or the log holds no release yet (single.fromEarliest). since is the
// log's HistogramSince map of this session's keys (with extra).
func (s *Node) LimitNewHistograms(ctx context.Context, next int64, extra []string) (moved bool, since map[string]int64, err error) {
	keys, home := s.SinceKeys(extra)
	hists := len(s.Cfg.Histograms)
	since, err = s.Ledger.HistogramSince(ctx, keys, next)
	if err != nil {
		return false, nil, fmt.Errorf("read ledger: %w", err)
	}
	_, released, err := s.Ledger.LastWindow()
	if err != nil {
		return false, nil, fmt.Errorf("read ledger: %w", err)
	}
	moved = !released || since[home] == next && since[admissionsCanary] != next
	byIndex := make(map[int]int64, hists)
	for i, k := range keys[:hists] {
		byIndex[i] = since[k]
	}
	s.Rel.SetSince(byIndex)
	return moved, since, s.checkAdmissionsHome(next, since[home] == next, since[admissionsCanary] == next)
}

// SinceKeys are the release log's HistogramSince keys of the running
// config: one per histogram (its name and window size, in config order),
// then home, where the cross-window bound's admissions live
// (checkAdmissionsHome), admissionsCanary, and the caller's extra keys (the
// distributed releaser's progress topic id keys).
func (s *Node) SinceKeys(extra []string) (keys []string, home string) {
	keys = make([]string, 0, len(s.Cfg.Histograms)+2)
	for _, h := range s.Cfg.Histograms {
		keys = append(keys, fmt.Sprintf("%s@%d", h.Name, h.WindowSize(s.Cfg.Window.Size).D().Milliseconds()))
	}
	home = admissionsInLedger
	if s.Cfg.Kafka.Distributed.Enabled {
		home = admissionsInProgress + s.Cfg.Kafka.ProgressTopic()
	}
	return append(append(keys, home, admissionsCanary), extra...), home
}

// checkAdmissionsHome refuses, with contribution.max_windows_per_user, to
// run when the admissions of the current budget period were kept
// somewhere this session cannot read: a switch between the single-process
// and the distributed mode, or a new progress topic (a changed
// kafka.distributed.internal_topic_prefix or kafka.group_id over the same
// release log), after windows of the period were released. The users
// admitted to those windows would be admitted again — counted in more than
// K windows of the period, which the period's reservation does not cover.
// homeNew: this session's home key is new to the log; canaryNew: so is
// admissionsCanary (a log of an older, single-process version). A fresh
// log, or a session starting at a period's first window, has nothing to
// lose.
func (s *Node) checkAdmissionsHome(next int64, homeNew, canaryNew bool) error {
	if s.Cfg.Contribution.MaxWindowsPerUser <= 0 || s.PeriodOf(next) == next {
		return nil
	}
	moved := homeNew
	if !s.Cfg.Kafka.Distributed.Enabled && canaryNew {
		moved = false // an older single-process log: its admissions are in it
	}
	if !moved {
		return nil
	}
	where := "the release log (the single-process mode)"
	if s.Cfg.Kafka.Distributed.Enabled {
		where = "the progress topic " + s.Cfg.Kafka.ProgressTopic()
	}
	return fmt.Errorf("%w: contribution.max_windows_per_user is on, and windows of the budget period starting %s were released with the cross-window bound's admissions kept elsewhere than %s "+
		"(the stage switched between the single-process and the distributed mode, or kafka.distributed.internal_topic_prefix or kafka.group_id changed over the same release log): "+
		"users admitted to those windows would be admitted again; revert the change until that period ends (%s), then make it",
		ErrConfigChanged, release.RFC3339(s.PeriodOf(next)), where, release.RFC3339(s.PeriodOf(next)+s.PeriodMs))
}

// The release log's HistogramSince keys that say where the cross-window
// bound's admissions were kept: admissionsInLedger by the single-process
// mode (in the log itself), admissionsInProgress + the progress topic by
// the distributed mode (with each source partition's progress), and
// admissionsCanary by both (kept from the first session of this version
// on: a log lacking it was last run by an older single-process stage).
const (
	admissionsInLedger   = "admissions@ledger"
	admissionsInProgress = "admissions@progress:"
	admissionsCanary     = "admissions@known"
)
