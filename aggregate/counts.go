package aggregate

import (
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
)

// Schema is the schema of every WindowCounts record: one row per declared
// (histogram, group, bin), in declared histogram, group, bin order; then,
// for the histograms that select their groups (in Spec order), one row
// per (tracked key, bin), keys in ascending byte order, the key in the
// group column (WindowCounts.Keys: those rows are private until the
// selection has chosen which of them to release).
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
	// keyed: per histogram (Spec order; nil when none selects) the tracked
	// keys of a selecting one, their users, and the offset of their counts
	// in counts.
	keyed []keyedWindow
}

// keyedWindow is a selecting histogram's keys in a closed window.
type keyedWindow struct {
	keys  []string
	users []int64
	off   int // counts of key i: counts[off+i·nBins : off+(i+1)·nBins]
}

// build makes the record of a window; counts nil means all zeros. displaced
// is the number of parts of users evicted from the window that were counted
// on arrival. keyed (nil, or one per histogram) are the selecting
// histograms' keys.
func (a *Aggregator) build(start, end int64, counts []int64, displaced int64, keyed []keyedCounts) (*WindowCounts, error) {
	b := array.NewRecordBuilder(a.spec.Mem, Schema)
	defer b.Release()
	hb := b.Field(0).(*array.StringBuilder)
	gb := b.Field(1).(*array.StringBuilder)
	sb := b.Field(2).(*array.TimestampBuilder)
	eb := b.Field(3).(*array.TimestampBuilder)
	bb := b.Field(4).(*array.StringBuilder)
	cb := b.Field(5).(*array.Int64Builder)
	rows := a.nCells
	for h, k := range keyed {
		rows += len(k.keys) * a.hists[h].nBins
	}
	b.Reserve(rows)
	row := func(hist, group, bin string, c int64) {
		hb.Append(hist)
		gb.Append(group)
		sb.Append(arrow.Timestamp(start))
		eb.Append(arrow.Timestamp(end))
		bb.Append(bin)
		cb.Append(c)
	}
	for h, hs := range a.spec.Histograms {
		l := a.hists[h]
		for g, group := range hs.Groups {
			for bin, name := range hs.Bins {
				c := int64(0)
				if counts != nil {
					c = counts[l.cellOff+g*l.nBins+bin]
				}
				row(hs.Name, group, name, c)
			}
		}
	}
	var kw []keyedWindow
	if keyed != nil {
		kw = make([]keyedWindow, len(keyed))
		off := a.nCells
		for h, k := range keyed {
			hs := a.spec.Histograms[h]
			kw[h] = keyedWindow{keys: k.keys, users: k.users, off: off}
			off += len(k.counts)
			for i, key := range k.keys {
				for bin, name := range hs.Bins {
					row(hs.Name, key, name, k.counts[i*len(hs.Bins)+bin])
				}
			}
		}
	}
	rec := b.NewRecord()
	if rec.NumRows() != int64(rows) {
		rec.Release()
		return nil, fmt.Errorf("aggregate: built %d rows, want %d", rec.NumRows(), rows)
	}
	return &WindowCounts{
		keyed:     kw,
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
	if h < len(w.keyed) {
		k := w.keyed[h]
		for _, c := range w.counts[k.off : k.off+len(k.keys)*l.nBins] {
			n += c
		}
	}
	return n
}

// Keys is the number of histogram h's tracked keys in the window (an index
// of the Spec's Histograms): 0 for a histogram that does not select its
// groups. With Key, WindowCounts is a release.Keyed by Spec index.
func (w *WindowCounts) Keys(h int) int {
	w.live()
	if h < len(w.keyed) {
		return len(w.keyed[h].keys)
	}
	return 0
}

// Key returns histogram h's i-th key in ascending byte order (0 ≤ i <
// Keys(h)), its distinct users — the tracked (and, under CloseAdmitted,
// admitted) users with at least one selected part in it, so at least 1 —
// and appends its count vector, in declared bin order, to dst[:0].
// Out-of-range indices panic. All of it is private.
func (w *WindowCounts) Key(h, i int, dst []float64) (key string, users int64, counts []float64) {
	w.live()
	if h >= len(w.keyed) || i < 0 || i >= len(w.keyed[h].keys) {
		panic(fmt.Sprintf("aggregate: key %d of histogram %d out of range [0, %d)", i, h, w.Keys(h)))
	}
	k, nb := w.keyed[h], w.hists[h].nBins
	dst = dst[:0]
	for _, c := range w.counts[k.off+i*nb : k.off+(i+1)*nb] {
		dst = append(dst, float64(c))
	}
	return k.keys[i], k.users[i], dst
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
