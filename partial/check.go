package partial

import (
	"errors"
	"fmt"
	"math"
)

// Checks of a Partial's values (issue 28 item 3, rogue partials).
//
// A Partial that decodes and has the config's shape can still carry
// values no bounder makes: a negative count (which stopped every releaser
// in turn: the mechanisms refuse it, so the release failed and the next
// releaser read the same record), a window start off the window grid
// (which no window of the grid ever claimed: it stayed pending for good
// and froze the committed offset), a count larger than its users allow,
// an average vector that is not a probability vector (its sensitivity
// argument, aggregate/average.go, needs one). DecodePartial and
// Merger.Add refuse them with a *FormatError (errors.Is ErrFormat) that
// names the Reason; the releaser skips the record like any malformed
// one, logs it and counts it by reason, and the window waits for that
// partition's partial of it.

// Reason says why a partials-topic record was refused (the releaser's
// dpstage_partials_malformed_total{reason}).
type Reason int

const (
	// ReasonDecode: the record does not decode (another writer, another
	// version) or its header is inconsistent (partition out of range, Next
	// not the window's end, Prev or First not before the window).
	ReasonDecode Reason = iota
	// ReasonShape: its cells or average vectors do not fit the config's
	// histograms (an index out of range, a bin count that differs).
	ReasonShape
	// ReasonGrid: its window start (or First, or Prev) is off the grid of
	// its window size (a multiple of window.size since the Unix epoch,
	// window.Start).
	ReasonGrid
	// ReasonCount: a count is not finite, negative, not an integer, above
	// 2^53, or above what its users allow (Layout.MaxTotal).
	ReasonCount
	// ReasonAverage: an average cell's vector is not a probability vector
	// (a component not finite or outside [0, 1], a sum not within
	// 1 ± VectorTolerance), or it keeps more users than allowed.
	ReasonAverage
	// ReasonKeys: a selecting histogram's keyed cell breaks what a bounder's
	// keys satisfy (keyed.go): keys empty, too long or not strictly
	// ascending, a key's users below 1, its counts not whole or their sum
	// outside [users, users × max_events_per_user], or more users in all
	// than the window's users allow.
	ReasonKeys
	// NumReasons is the number of Reason values (metrics).
	NumReasons int = iota
)

func (r Reason) String() string {
	switch r {
	case ReasonDecode:
		return "decode"
	case ReasonShape:
		return "shape"
	case ReasonGrid:
		return "grid"
	case ReasonCount:
		return "count"
	case ReasonAverage:
		return "average"
	case ReasonKeys:
		return "keys"
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// FormatError is a refused record with its reason; errors.Is(err,
// ErrFormat) holds for it.
type FormatError struct {
	Reason Reason
	msg    string
}

func (e *FormatError) Error() string { return ErrFormat.Error() + ": " + e.msg }

// Is makes a FormatError match ErrFormat.
func (e *FormatError) Is(target error) bool { return target == ErrFormat }

// Refuse returns a FormatError of reason r (for checks made outside
// this package, such as the releaser's of average cells).
func Refuse(r Reason, format string, args ...any) error {
	return &FormatError{Reason: r, msg: fmt.Sprintf(format, args...)}
}

// ReasonOf is the Reason of an error of DecodePartial, DecodeIdle or
// Merger.Add: ReasonDecode for any error that carries no other.
func ReasonOf(err error) Reason {
	var fe *FormatError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return ReasonDecode
}

// maxExact is 2^53: the integers a float64 holds exactly. A count above it
// could not have been summed exactly (Merger: the sums are exact below it).
const maxExact = 1 << 53

// VectorTolerance is how far an average vector's sum may be from 1: the
// decoder's (decode: a probability vector's sum is within 1 ± 1e-6).
const VectorTolerance = 1e-6

// checkValues checks what a Partial's own fields make checkable, whatever
// the config: its window grid, its counts and its average vectors.
func checkValues(p *Partial) error {
	if p.WindowStart%p.WindowMs != 0 || p.First%p.WindowMs != 0 || p.Prev != nil && *p.Prev%p.WindowMs != 0 {
		return Refuse(ReasonGrid, "partial of window %d partition %d: off the grid of %d ms windows (first %d, previous %s)",
			p.WindowStart, p.Partition, p.WindowMs, p.First, fmtPrev(p.Prev))
	}
	cs := p.cells()
	// Held as columns, all the counts are checked in one loop first; when
	// one is not a count, the cells' loop below finds and names it.
	if vals, ok := cs.values(); ok && wholeCounts(vals) {
		for k, h := range cs.cols.h {
			if g := cs.cols.g[k]; h < 0 || g < 0 {
				return Refuse(ReasonShape, "partial of window %d partition %d: cell (%d, %d)", p.WindowStart, p.Partition, h, g)
			}
		}
		return checkDrops(p)
	}
	for k := range cs.len() {
		h, g, counts := cs.at(k)
		if h < 0 || g < 0 {
			return Refuse(ReasonShape, "partial of window %d partition %d: cell (%d, %d)", p.WindowStart, p.Partition, h, g)
		}
		for i, v := range counts {
			if !wholeCount(v) {
				return Refuse(ReasonCount, "partial of window %d partition %d: cell (%d, %d) bin %d count %v (a count is a whole number in [0, 2^53])",
					p.WindowStart, p.Partition, h, g, i, v)
			}
		}
	}
	return checkDrops(p)
}

// checkDrops checks p's drop cells and average cells (checkValues).
func checkDrops(p *Partial) error {
	for _, d := range p.Dropped {
		if d.H < 0 || d.N < 0 {
			return Refuse(ReasonCount, "partial of window %d partition %d: drop cell (%d, %d)", p.WindowStart, p.Partition, d.H, d.N)
		}
	}
	return checkAverages(p)
}

// wholeCount reports whether v is a count: a whole number in [0, 2^53].
func wholeCount(v float64) bool {
	return v >= 0 && v <= maxExact && float64(int64(v)) == v // in range first: the conversion is then exact or truncates
}

// wholeCounts reports whether every v of vals is a count (wholeCount).
// (Branch-free forms on the value's bits measured slower on amd64: 3.8–4.5
// ns a value, against 2.4 for this one, whose branches are predicted.)
func wholeCounts(vals []float64) bool {
	for _, v := range vals {
		if !wholeCount(v) {
			return false
		}
	}
	return true
}

// checkVector checks that v is a probability vector.
func checkVector(v []float64) bool {
	var s float64
	for _, x := range v {
		if !(x >= 0 && x <= 1) {
			return false
		}
		s += x
	}
	return math.Abs(s-1) <= VectorTolerance
}

// checkFit checks a Partial of the Merger's own counting config against
// its layout: every cell fits a histogram, and each histogram's total is
// within Layout.MaxTotal.
func (m *Merger) checkFit(p *Partial) error {
	l := &m.layout
	var totals []float64
	if l.MaxTotal != nil {
		totals = make([]float64, len(l.Bins))
	}
	cs := p.cells()
	for k := range cs.len() {
		h, g, counts := cs.at(k)
		if h < 0 || h >= len(l.Bins) || g < 0 || g >= l.Groups[h] || len(counts) != l.Bins[h] {
			return Refuse(ReasonShape, "partial of window %d partition %d: cell (%d, %d) with %d bins does not fit the config's histograms",
				p.WindowStart, p.Partition, h, g, len(counts))
		}
		if totals != nil {
			for _, v := range counts {
				totals[h] += v
			}
		}
	}
	for h, t := range totals {
		if b := l.MaxTotal[h]; b > 0 && t > b {
			return Refuse(ReasonCount, "partial of window %d partition %d: histogram %d counts %v contributions, more than its users allow (%v)",
				p.WindowStart, p.Partition, h, t, b)
		}
	}
	return nil
}
