package aggregate

import (
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
)

// Schema is the schema of every WindowCounts record: one row per declared
// (histogram, group, bin), in declared histogram, group, bin order.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "histogram", Type: arrow.BinaryTypes.String},
	{Name: "group", Type: arrow.BinaryTypes.String},
	{Name: "window_start", Type: timestampMs},
	{Name: "window_end", Type: timestampMs},
	{Name: "bin", Type: arrow.BinaryTypes.String},
	{Name: "count", Type: arrow.PrimitiveTypes.Int64},
}, nil)

var timestampMs = &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}

// WindowCounts holds the bounded counts of one closed window. It is read by
// the release step and then freed with Release (explicit lifecycle, as the
// Arrow memory is reference counted). It is not safe for concurrent use with
// Release.
type WindowCounts struct {
	start, end int64
	hists      []histLayout
	rec        arrow.Record
	counts     []int64 // the count column's values (valid until Release)
	displaced  int64
	// notAdmitted: selected parts of users the cross-window bound did not
	// admit to the window (CloseAdmitted).
	notAdmitted int64
	// notAdmittedBy: notAdmitted per histogram (Spec order); nil after
	// Close.
	notAdmittedBy []int64
}

// build makes the record of a window; counts nil means all zeros. displaced
// is the number of parts of users evicted from the window that were counted
// on arrival.
func (a *Aggregator) build(start, end int64, counts []int64, displaced int64) (*WindowCounts, error) {
	b := array.NewRecordBuilder(a.spec.Mem, Schema)
	defer b.Release()
	hb := b.Field(0).(*array.StringBuilder)
	gb := b.Field(1).(*array.StringBuilder)
	sb := b.Field(2).(*array.TimestampBuilder)
	eb := b.Field(3).(*array.TimestampBuilder)
	bb := b.Field(4).(*array.StringBuilder)
	cb := b.Field(5).(*array.Int64Builder)
	b.Reserve(a.nCells)
	for h, hs := range a.spec.Histograms {
		l := a.hists[h]
		for g, group := range hs.Groups {
			for bin, name := range hs.Bins {
				hb.Append(hs.Name)
				gb.Append(group)
				sb.Append(arrow.Timestamp(start))
				eb.Append(arrow.Timestamp(end))
				bb.Append(name)
				c := int64(0)
				if counts != nil {
					c = counts[l.cellOff+g*l.nBins+bin]
				}
				cb.Append(c)
			}
		}
	}
	rec := b.NewRecord()
	if rec.NumRows() != int64(a.nCells) {
		rec.Release()
		return nil, fmt.Errorf("aggregate: built %d rows, want %d", rec.NumRows(), a.nCells)
	}
	return &WindowCounts{
		start:     start,
		end:       end,
		hists:     a.hists,
		rec:       rec,
		counts:    rec.Column(5).(*array.Int64).Int64Values(),
		displaced: displaced,
	}, nil
}

// Displaced is the number of parts that were in their user's selection
// when they arrived (Outcome.Counted) but are not counted because the user
// was later evicted from the window's tracked users by users with smaller
// hashes (max_tracked_users). With the Outcomes of every Add to the window,
// Σ Counted − Σ Displaced − Displaced() is the window's total count.
func (w *WindowCounts) Displaced() int64 { return w.displaced }

// NotAdmitted is the number of parts selected for users of the window that
// the cross-window bound did not admit to it ([Aggregator.CloseAdmitted]):
// they are not counted (bound_windows).
func (w *WindowCounts) NotAdmitted() int64 { return w.notAdmitted }

// NotAdmittedBy is NotAdmitted for histogram h (an index of the Spec's
// Histograms) alone.
func (w *WindowCounts) NotAdmittedBy(h int) int64 {
	if h < len(w.notAdmittedBy) {
		return w.notAdmittedBy[h]
	}
	return 0
}

// Total is the window's count of histogram h (an index of the Spec's
// Histograms), over its groups and bins.
func (w *WindowCounts) Total(h int) int64 {
	w.live()
	l := w.hists[h]
	var n int64
	for _, c := range w.counts[l.cellOff : l.cellOff+l.nGroups*l.nBins] {
		n += c
	}
	return n
}

// Start is the window's start, Unix ms (inclusive).
func (w *WindowCounts) Start() int64 { return w.start }

// End is the window's end, Unix ms (exclusive).
func (w *WindowCounts) End() int64 { return w.end }

// Record returns the Arrow record (columns histogram, group, window_start,
// window_end, bin, count; see Schema). It stays owned by w: Retain it to
// keep it past w.Release.
func (w *WindowCounts) Record() arrow.Record {
	w.live()
	return w.rec
}

// Counts appends to dst[:0] the count vector of (histogram h, group g) in
// declared bin order and returns it. h and g index the Spec's Histograms and
// their Groups; out-of-range indices panic.
func (w *WindowCounts) Counts(h, g int, dst []float64) []float64 {
	w.live()
	l := w.hists[h]
	if g < 0 || g >= l.nGroups {
		panic(fmt.Sprintf("aggregate: group %d out of range [0, %d)", g, l.nGroups))
	}
	off := l.cellOff + g*l.nBins
	dst = dst[:0]
	for _, c := range w.counts[off : off+l.nBins] {
		dst = append(dst, float64(c))
	}
	return dst
}

// Release frees the Arrow memory. Calling it again does nothing; any other
// use after Release panics.
func (w *WindowCounts) Release() {
	if w.rec != nil {
		w.rec.Release()
		w.rec, w.counts = nil, nil
	}
}

func (w *WindowCounts) live() {
	if w.rec == nil {
		panic("aggregate: WindowCounts used after Release")
	}
}
