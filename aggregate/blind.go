package aggregate

import (
	"fmt"
	"sync"
	"time"
)

// Going blind under the cross-window bound (issue 23 item 3).
//
// With contribution.max_windows_per_user (K) a user counts in its K
// earliest windows of a budget period; its events in later windows are
// dropped (bound_windows). When the same users come back all day, each has
// used its K windows early in the period, and from then on a window counts
// (almost) nobody: its release is noise over a nearly empty count, while
// the dashboard keeps updating. The share of a closed window's
// contributions the bound dropped says so:
//
//	share = dropped / (counted + dropped)
//
// per histogram, where dropped counts the contributions (a count
// histogram's selected parts, an average histogram's user vectors) dropped
// by the bound on arrival (the user had used its K windows already) and at
// the window's close (not admitted), and counted what the window counts.
//
// The share is private — a function of the window's exact counts — so it
// is for the operator only: BlindWatch feeds the operator listener's
// metrics and /readyz and the log, never a release, the output topic or
// the public listener.
//
// Nor is it advice to tune the bound by (issue 28 item 5). K and the
// window are public: every release states them (charge_windows, the
// layout) and the period's reservation is computed from them. A K or a
// window chosen because the share said "blind" is a function of the
// protected stream published without noise, which no charge covers: the
// guarantee is for a config fixed independently of the data. The warning
// therefore says what happened (operator-side) and points at the public
// route — privacy.expected_windows_per_user, a public or differentially
// private activity figure, and stage plan, which predicts from it when
// each view goes blind and recommends its window and K — rather than
// "raise K". (Making the share itself differentially private and charged
// would let it steer the config inside the guarantee; it is not done: the
// planning figure already carries what the choice needs.)

// WindowDrops counts the contributions the cross-window bound dropped on
// arrival, per (histogram, window start) and user, until the window closes
// ([WindowDrops.Take]). Counting per user lets Take state the drops in the
// units of what the window counts: a user's bounded contributions (at most
// max_events_per_user of a count histogram, one vector of an average
// histogram), not its raw events. Safe for concurrent use.
type WindowDrops struct {
	mu sync.Mutex // guards n
	n  map[dropKey]map[uint64]int64
}

type dropKey struct {
	h     int   // config histogram index
	start int64 // the histogram's window start, Unix ms
}

// Drop is one user's contributions to one histogram's window dropped on
// arrival (WindowDrops.AddAll).
type Drop struct {
	H     int    // config histogram index
	Start int64  // the histogram's window start, Unix ms
	User  uint64 // decode.Event.User
	N     int64  // contributions (valid parts of its events)
}

// AddAll counts drops (one lock for a batch).
func (d *WindowDrops) AddAll(drops []Drop) {
	if d == nil || len(drops) == 0 {
		return
	}
	d.mu.Lock()
	if d.n == nil {
		d.n = map[dropKey]map[uint64]int64{}
	}
	for _, x := range drops {
		if x.N <= 0 {
			continue
		}
		k := dropKey{x.H, x.Start}
		m := d.n[k]
		if m == nil {
			m = map[uint64]int64{}
			d.n[k] = m
		}
		m[x.User] += x.N
	}
	d.mu.Unlock()
}

// Take returns the drops counted for histogram h's window starting at
// start, each user's capped at perUser (≤ 0: uncapped), and forgets them
// with those of h's earlier windows (closed already: an event of a closed
// window dropped on arrival would have been late anyway).
func (d *WindowDrops) Take(h int, start, perUser int64) int64 {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for k, users := range d.n {
		if k.h != h || k.start > start {
			continue
		}
		if k.start == start {
			for _, c := range users {
				if perUser > 0 {
					c = min(c, perUser)
				}
				n += c
			}
		}
		delete(d.n, k)
	}
	return n
}

// Reset forgets every count (the windows are re-read).
func (d *WindowDrops) Reset() {
	if d == nil {
		return
	}
	d.mu.Lock()
	clear(d.n)
	d.mu.Unlock()
}

// WindowShare is one histogram's window-bound share in its last closed
// window. Private: operator surfaces only.
type WindowShare struct {
	Histogram string
	// Bound is the config key of the histogram's cross-window bound
	// (config.Config.HistWindowBoundKey) and K its value (0: unknown).
	Bound string
	K     int
	// Closed: a window of the histogram was closed since the start; the
	// fields below describe the last one.
	Closed     bool
	Start, End int64 // Unix ms
	// Counted and Dropped are the window's contributions counted and
	// dropped by the bound; Share is Dropped / (Counted + Dropped), 0 for
	// a window without either.
	Counted, Dropped int64
	Share            float64
	// Blind: Share is above the threshold (contribution.blind_warning_share).
	Blind bool
	// TotalCounted and TotalDropped add up the closed windows since the
	// start.
	TotalCounted, TotalDropped int64
}

// BlindVerdict is what [BlindWatch.Closed] tells the caller to log.
type BlindVerdict struct {
	WindowShare
	Threshold float64
	// Warn: log a warning for this window; Suppressed blind windows of the
	// histogram were not warned about since its last warning.
	Warn       bool
	Suppressed int
	// Recovered: the histogram was blind in its previous closed window and
	// is not in this one.
	Recovered bool
}

// BlindRepeat is how often, in event time, the warning repeats for a
// histogram that stays blind: its first blind window is warned about, then
// at most one window per BlindRepeat (or per window, for windows longer
// than that), with the count of blind windows in between.
const BlindRepeat = time.Hour

// BlindWatch follows each histogram's window-bound share through its
// closed windows. Safe for concurrent use; a nil *BlindWatch does nothing.
type BlindWatch struct {
	threshold float64
	mu        sync.Mutex // guards hists
	hists     []blindHist
}

type blindHist struct {
	share WindowShare
	// warned: the end of the last window warned about (0: none);
	// quiet: blind windows not warned about since.
	warned int64
	quiet  int
}

// BlindHist is one histogram a BlindWatch follows: its name, and the
// config key and value of the cross-window bound that drops its users
// (config.Config.HistWindowBoundKey, HistWindowBound), which the warning
// names.
type BlindHist struct {
	Name, Bound string
	K           int
}

// NewBlindWatch follows the histograms given (config order); threshold is
// contribution.blind_warning_share, in (0, 1].
func NewBlindWatch(hists []BlindHist, threshold float64) *BlindWatch {
	b := &BlindWatch{threshold: threshold, hists: make([]blindHist, len(hists))}
	for i, h := range hists {
		b.hists[i].share.Histogram, b.hists[i].share.Bound, b.hists[i].share.K = h.Name, h.Bound, h.K
	}
	return b
}

// Threshold is contribution.blind_warning_share.
func (b *BlindWatch) Threshold() float64 {
	if b == nil {
		return 0
	}
	return b.threshold
}

// Closed records histogram h's window [start, end) closed with counted
// contributions counted and dropped dropped by the bound, and says what to
// log: a warning for a blind window (share > threshold) unless one was
// logged for the histogram less than BlindRepeat of event time before;
// never one for a window at or below the threshold.
func (b *BlindWatch) Closed(h int, start, end, counted, dropped int64) BlindVerdict {
	if b == nil || h < 0 || h >= len(b.hists) {
		return BlindVerdict{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := &b.hists[h]
	wasBlind := st.share.Closed && st.share.Blind
	s := &st.share
	s.Closed, s.Start, s.End = true, start, end
	s.Counted, s.Dropped = max(counted, 0), max(dropped, 0)
	s.TotalCounted += s.Counted
	s.TotalDropped += s.Dropped
	s.Share = 0
	if n := s.Counted + s.Dropped; n > 0 {
		s.Share = float64(s.Dropped) / float64(n)
	}
	s.Blind = s.Share > b.threshold
	v := BlindVerdict{WindowShare: *s, Threshold: b.threshold, Recovered: wasBlind && !s.Blind}
	if !s.Blind {
		st.quiet = 0
		return v
	}
	if st.warned == 0 || end-st.warned >= BlindRepeat.Milliseconds() {
		v.Warn, v.Suppressed = true, st.quiet
		st.warned, st.quiet = end, 0
		return v
	}
	st.quiet++
	return v
}

// Shares returns every histogram's share (config order).
func (b *BlindWatch) Shares() []WindowShare {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]WindowShare, len(b.hists))
	for i, h := range b.hists {
		out[i] = h.share
	}
	return out
}

// Blind returns the names of the histograms whose last closed window was
// blind (config order); nil when none.
func (b *BlindWatch) Blind() []string {
	var out []string
	for _, s := range b.Shares() {
		if s.Blind {
			out = append(out, s.Histogram)
		}
	}
	return out
}

// Message is the warning's text: what went blind, which bound dropped
// its users, and how to choose the bound without the private share (see
// the top of this file).
func (v BlindVerdict) Message() string {
	bound := v.Bound
	if bound == "" {
		bound = "contribution.max_windows_per_user"
	}
	if v.K > 0 {
		bound = fmt.Sprintf("%s (K = %d)", bound, v.K)
	}
	msg := fmt.Sprintf("window bound: histogram %q counted few of its users in the window closed at %s: its bound %s dropped %.0f%% of its contributions (above contribution.blind_warning_share %.0f%%), so its release is mostly noise: its users come back in more of its windows per period than the bound allows. "+
		"This share is measured on the protected stream: do not tune the bound or the window from it (both are published with every release, so a value chosen from private counts is outside the privacy guarantee). "+
		"Plan them from public figures: set privacy.expected_windows_per_user (a public or differentially private estimate of how many windows a user is active in) and run stage plan, which predicts when each view goes blind and recommends its histograms[].window and max_windows_per_user; see docs/choosing.md",
		v.Histogram, time.UnixMilli(v.End).UTC().Format(time.RFC3339), bound, 100*v.Share, 100*v.Threshold)
	if v.Suppressed > 0 {
		msg += fmt.Sprintf(" (%d more blind windows since the last warning)", v.Suppressed)
	}
	return msg
}
