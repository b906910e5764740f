package consume

import (
	"fmt"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/release"
)

// CloseWindow closes, in every window size, the windows ending with base
// window w (the releaser of the single-process mode, a bounder of the
// distributed mode) and counts what the bounds dropped at the close. With
// the cross-window bound it returns the users admitted to w (the base
// window's state, Session.Adm) and to each view's window ending with w
// (Session.ViewAdm, in order of window size): a window's eligible users
// are those with a part to count in any histogram of its size, each
// decided once (Admissions.Admit), the count and average histograms of
// that size sharing the decision. The caller releases counts.
func CloseWindow(s *node.Node, sess *Session, w int64) (counts *Boundary, admitted []uint64, views []ledger.ViewAdmitted, err error) {
	sess.closeMu.Lock()
	period := s.PeriodOf(w)
	var viewUsers []*ledger.ViewAdmitted // in the order the sizes close
	admitOf := func(set *WindowSet) func(uint64) bool {
		adm := sess.admOf(set, s.SizeMs)
		if adm == nil {
			return nil
		}
		adm.Forget(period) // earlier periods are over
		out := &admitted
		if set.sizeMs != s.SizeMs {
			v := &ledger.ViewAdmitted{WindowMs: set.sizeMs}
			viewUsers = append(viewUsers, v)
			out = &v.Users
		}
		decided := map[uint64]bool{}
		return func(u uint64) bool {
			u = aggregate.UserKey(u)
			ok, seen := decided[u]
			if !seen {
				ok = adm.Admit(period, u)
				decided[u] = ok
				if ok {
					*out = append(*out, u)
				}
			}
			return ok
		}
	}
	// The windows of every size ending with w (windows.go).
	counts, err = sess.closeBoundary(w+s.SizeMs, admitOf)
	sess.Next = w + s.SizeMs
	sess.closeMu.Unlock()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("close window %s: %w", release.RFC3339(w), err)
	}
	for _, v := range viewUsers {
		views = append(views, *v)
	}
	if d := counts.Displaced(); d > 0 { // counted on arrival, then the user was evicted
		s.Stats.DropN(decode.ReasonBoundDisplaced, d)
	}
	// Counted on arrival, then earlier windows took the user's K.
	if nc, na := counts.NotAdmitted(); nc+na > 0 {
		s.Stats.DropN(decode.ReasonBoundWindows, nc+na)
	}
	if n := counts.AverageNotSelected(); n > 0 {
		s.Stats.AverageNotSelected.Add(n)
	}
	if sess.Adm != nil {
		counts.Bounds = windowBounds(s, sess, counts, w+s.SizeMs)
	}
	return counts, admitted, views, nil
}

// windowBounds is, per histogram whose window ends at end, what its window
// counted and what the cross-window bound dropped of it: the parts (a count
// histogram's) or user vectors (an average histogram's) not admitted at
// the close, and the valid parts of events dropped on arrival
// (Session.Drops), each user's capped at what the window could have
// counted of it: max_events_per_user parts of a count histogram, one
// vector of an average histogram. The units on both sides are therefore
// a user's bounded contributions (counted: a count histogram's bounded
// total; an average histogram's eligible users, kept or left out by the
// average.users cap), and a window where most users count is not called
// blind because a few returning users sent many events.
func windowBounds(s *node.Node, sess *Session, b *Boundary, end int64) []node.WindowBound {
	var out []node.WindowBound
	for _, c := range b.sets {
		start := end - c.set.sizeMs
		for i, h := range c.set.hists {
			perUser := int64(s.Cfg.Contribution.MaxEventsPerUser)
			if s.Cfg.Histograms[h].IsAverage() {
				perUser = 1
			}
			wb := node.WindowBound{H: h, Start: start, End: end, Dropped: sess.Drops.Take(h, start, perUser)}
			if s.Cfg.Histograms[h].IsAverage() {
				if c.avgs != nil {
					wb.Counted = int64(c.avgs.Kept(h) + c.avgs.NotSelectedBy(h))
					wb.Dropped += int64(c.avgs.NotAdmittedBy(h))
				}
			} else {
				wb.Counted = c.counts.Total(i)
				wb.Dropped += c.counts.NotAdmittedBy(i)
			}
			out = append(out, wb)
		}
	}
	return out
}
