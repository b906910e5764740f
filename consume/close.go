package consume

import (
	"fmt"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/release"
)

// CloseWindow closes, in every window size, the windows ending with base
// window w (the releaser of the single-process mode, a bounder of the
// distributed mode) and counts what the bounds dropped at the close. With
// the cross-window bound it returns the users admitted to w: the window's
// eligible users are those with a part to count in any histogram, each
// decided once (Admissions.Admit), the count and average histograms
// sharing the decision. The caller releases counts.
func CloseWindow(s *node.Node, sess *Session, w int64) (counts *Boundary, admitted []uint64, err error) {
	sess.closeMu.Lock()
	var admit func(uint64) bool
	if sess.Adm != nil {
		period := s.PeriodOf(w)
		sess.Adm.Forget(period) // earlier periods are over
		decided := map[uint64]bool{}
		admit = func(u uint64) bool {
			u = aggregate.UserKey(u)
			ok, seen := decided[u]
			if !seen {
				ok = sess.Adm.Admit(period, u)
				decided[u] = ok
				if ok {
					admitted = append(admitted, u)
				}
			}
			return ok
		}
	}
	// The windows of every size ending with w (windows.go).
	counts, err = sess.closeBoundary(w+s.SizeMs, admit)
	sess.Next = w + s.SizeMs
	sess.closeMu.Unlock()
	if err != nil {
		return nil, nil, fmt.Errorf("close window %s: %w", release.RFC3339(w), err)
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
	return counts, admitted, nil
}
