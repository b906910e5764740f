package node

import (
	"go.uber.org/zap"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/release"
)

// WindowBound is one histogram's closed window under the cross-window
// bound: what it counted and what the bound dropped (on arrival and at the
// close). Private: it feeds the operator's drop share (Node.Blind), never a
// release.
type WindowBound struct {
	H                int   // config histogram index
	Start, End       int64 // the histogram's window, Unix ms
	Counted, Dropped int64
}

// blindWatch follows cfg's histograms' window-bound shares, each with the
// config key of its bound (a view's own histograms[i].max_windows_per_user,
// else contribution.max_windows_per_user); nil without the bound.
func blindWatch(cfg *config.Config) *aggregate.BlindWatch {
	if cfg.Contribution.MaxWindowsPerUser <= 0 {
		return nil
	}
	hists := make([]aggregate.BlindHist, len(cfg.Histograms))
	for i, h := range cfg.Histograms {
		hists[i] = aggregate.BlindHist{Name: h.Name, Bound: cfg.HistWindowBoundKey(i), K: cfg.HistWindowBound(i)}
	}
	return aggregate.NewBlindWatch(hists, cfg.Contribution.BlindWarningShare)
}

// NoteWindowBound records closed windows' window-bound counts in s.Blind
// and logs what it says: a warning for a blind window (its drop share
// above contribution.blind_warning_share; rate-limited by
// aggregate.BlindWatch), an info line when a histogram counts again. The
// log is operator-side, like /metrics. No-op without the bound.
func (s *Node) NoteWindowBound(bounds []WindowBound) {
	if s.Blind == nil {
		return
	}
	for _, b := range bounds {
		v := s.Blind.Closed(b.H, b.Start, b.End, b.Counted, b.Dropped)
		fields := []zap.Field{zap.String("histogram", v.Histogram), zap.String("window_start", release.RFC3339(v.Start)),
			zap.String("window_end", release.RFC3339(v.End)), zap.Float64("window_bound_dropped_share", v.Share),
			zap.Int64("counted", v.Counted), zap.Int64("dropped", v.Dropped), zap.Float64("blind_warning_share", v.Threshold)}
		switch {
		case v.Warn:
			s.Log.Warn(v.Message(), append(fields, zap.Int("blind_windows_not_logged", v.Suppressed))...)
		case v.Recovered:
			s.Log.Info("window bound: histogram "+v.Histogram+"'s drop share is back at or under contribution.blind_warning_share", fields...)
		}
	}
}

// WindowBound returns each histogram's window-bound share in its last
// closed window (nil without contribution.max_windows_per_user). Private:
// for the operator listener only.
func (s *Node) WindowBound() []aggregate.WindowShare { return s.Blind.Shares() }
