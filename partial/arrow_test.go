package partial

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
)

// TestPartialArrowAndJSON (issue 28 item 4): Encode writes the Arrow
// encoding, EncodeJSON the JSON one of older versions; DecodePartial reads
// both to the same Partial (a releaser of this version reads the partials
// an older replica wrote during a rolling upgrade).
func TestPartialArrowAndJSON(t *testing.T) {
	prev := int64(60000)
	p := &Partial{WindowStart: 120000, WindowMs: 60000, Partition: 3, Partitions: 12, Next: 180000, Watermark: 185000, Config: "abc", First: 60000, Prev: &prev,
		Counts:   []Cell{{H: 0, G: 2, Counts: []float64{1, 0, 4}}, {H: 2, G: 0, Counts: []float64{7, 1 << 52}}},
		Averages: []AverageCell{{H: 1, Users: []uint64{3, math.MaxUint64 - 1}, Vectors: [][]float64{{0.25, 0.75}, {1.0 / 3, 2.0 / 3}}}, {H: 4, Users: []uint64{9}, Vectors: [][]float64{{1, 0}}}},
		Dropped:  []DropCell{{H: 1, N: 17}}}
	arrow, js := p.Encode(), p.EncodeJSON()
	if arrow[0] == '{' || js[0] != '{' {
		t.Fatalf("encodings start with %q (arrow) and %q (json)", arrow[0], js[0])
	}
	want := *p
	want.V = Version
	for name, b := range map[string][]byte{"arrow": arrow, "json": js} {
		got, err := DecodePartial(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(*got, want) {
			t.Errorf("%s round trip: got %+v, want %+v", name, *got, want)
		}
	}
	empty := &Partial{WindowStart: 0, WindowMs: 10, Partition: 0, Partitions: 1, Next: 10}
	if got, err := DecodePartial(empty.Encode()); err != nil || got.Counts != nil || got.Averages != nil {
		t.Errorf("empty partial: %+v, %v", got, err)
	}
}

// TestDecodeArrowRefuses: truncated or foreign Arrow streams, and Arrow
// partials with values JSON cannot even carry (NaN, ±Inf), are refused.
func TestDecodeArrowRefuses(t *testing.T) {
	good := (&Partial{WindowStart: 0, WindowMs: 10, Partition: 0, Partitions: 1, Next: 10, Counts: []Cell{{Counts: []float64{1, 2}}}}).Encode()
	for i := 0; i < len(good)-8; i += 7 { // the last 8 bytes are the end-of-stream marker, which adds nothing

		if _, err := DecodePartial(good[:i]); !errors.Is(err, ErrFormat) {
			t.Fatalf("truncated to %d of %d bytes: %v, want ErrFormat", i, len(good), err)
		}
	}
	for name, v := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		b := (&Partial{WindowStart: 0, WindowMs: 10, Partition: 0, Partitions: 1, Next: 10, Counts: []Cell{{Counts: []float64{1, v}}}}).Encode()
		if _, err := DecodePartial(b); ReasonOf(err) != ReasonCount {
			t.Errorf("%s count: %v, want ReasonCount", name, err)
		}
		b = (&Partial{WindowStart: 0, WindowMs: 10, Partition: 0, Partitions: 1, Next: 10, Averages: []AverageCell{{H: 0, Users: []uint64{1}, Vectors: [][]float64{{v, 0}}}}}).Encode()
		if _, err := DecodePartial(b); ReasonOf(err) != ReasonAverage {
			t.Errorf("%s average component: %v, want ReasonAverage", name, err)
		}
	}
}

// TestDecodeArrowCorrupt: a valid Arrow partial with bytes flipped at
// random is refused or decoded, never a panic (a record that panicked
// the releaser would stop every releaser that reads it) — by
// DecodePartial, and by DecodeForMerge, whose columns a Merger then reads
// (Add, Total, Cells). Deterministic seed; each trial flips 1 to 4 bytes.
func TestDecodeArrowCorrupt(t *testing.T) {
	good := (&Partial{WindowStart: 60, WindowMs: 60, Partition: 1, Partitions: 2, Next: 120, Config: "c",
		Counts:   []Cell{{H: 0, G: 1, Counts: []float64{1, 2, 3}}, {H: 1, G: 0, Counts: []float64{4, 5}}},
		Averages: []AverageCell{{H: 2, Users: []uint64{7, 9}, Vectors: [][]float64{{0.5, 0.5}, {1, 0}}}},
		Keyed: []KeyedCell{keyedOf(3, 2, map[string]keyRow{"ab": {1, []float64{1, 0}}, "b": {2, []float64{1, 2}}, "bc": {1, []float64{0, 1}}}),
			keyedOf(4, 1, map[string]keyRow{"x": {3, []float64{3}}})}}).Encode()
	layout := Layout{Bins: []int{3, 2, 2, 2, 1}, Groups: []int{2, 1, 0, 0, 0}, Selects: []bool{false, false, false, true, true}, MaxKeyBytes: 8, MaxEventsPerUser: 3}
	rng := rand.New(rand.NewPCG(28, 4))
	for trial := range 20000 {
		b := slices.Clone(good)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
		}
		func() {
			defer func() {
				if e := recover(); e != nil {
					t.Fatalf("trial %d: DecodePartial panicked: %v", trial, e)
				}
			}()
			if p, err := DecodePartial(b); err == nil && p.Partitions <= p.Partition {
				t.Fatalf("trial %d: decoded an inconsistent partial %+v", trial, p)
			}
			p, err := DecodeForMerge(b)
			if err != nil || p.Partitions > 100 { // a digit flipped in the header: no merger that large
				return
			}
			m, err := NewMerger(p.Partitions, p.WindowMs, 0, layout, p.Config)
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if r, err := m.Add(p, 0); err == nil && r == Added {
				w := m.pending[p.WindowStart]
				for h := range layout.Bins {
					for i := range w.Keys(h) {
						_, _, _ = w.Key(h, i, nil)
					}
				}
			}
			_, _ = p.Total(), p.Cells()
		}()
	}
}

// TestDecodeArrowExtraColumn: a partial of a later writer with a column
// this version does not know (say, a count cell's distinct users) and a
// row of an unknown kind decodes as the partial without them.
func TestDecodeArrowExtraColumn(t *testing.T) {
	hdr := `{"v":1,"window_start":60,"window_ms":60,"partition":0,"partitions":1,"next":120}`
	md := arrow.NewMetadata([]string{arrowVersionKey, arrowHeaderKey}, []string{"2", hdr})
	fields := append(slices.Clone(arrowFields), arrow.Field{Name: "users", Type: arrow.PrimitiveTypes.Int64},
		arrow.Field{Name: "note", Type: arrow.BinaryTypes.String})
	schema := arrow.NewSchema(fields, &md)
	b := array.NewRecordBuilder(arrowMem, schema)
	defer b.Release()
	for _, row := range []struct {
		kind uint8
		g    int32
		vals []float64
	}{{kindCount, 0, []float64{1, 2}}, {7, 0, []float64{9}}, {kindCount, 1, []float64{3, 4}}} {
		b.Field(0).(*array.Uint8Builder).Append(row.kind)
		b.Field(1).(*array.Int32Builder).Append(0)
		b.Field(2).(*array.Int32Builder).Append(row.g)
		b.Field(3).(*array.Uint64Builder).Append(0)
		l := b.Field(4).(*array.ListBuilder)
		l.Append(true)
		l.ValueBuilder().(*array.Float64Builder).AppendValues(row.vals, nil)
		b.Field(5).(*array.Int64Builder).Append(5)
		b.Field(6).(*array.StringBuilder).Append("later")
	}
	rec := b.NewRecord()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema))
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := DecodePartial(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []Cell{{H: 0, G: 0, Counts: []float64{1, 2}}, {H: 0, G: 1, Counts: []float64{3, 4}}}
	if !reflect.DeepEqual(p.Counts, want) || p.Averages != nil {
		t.Errorf("decoded %+v, want the counts %+v only", p, want)
	}
}

// TestDecodeArrowMisaligned: a record value at any address (a Kafka
// fetch slices values out of a batch) decodes the same.
func TestDecodeArrowMisaligned(t *testing.T) {
	p := &Partial{WindowStart: 60, WindowMs: 60, Partition: 0, Partitions: 1, Next: 120, Counts: []Cell{{H: 0, G: 3, Counts: []float64{1, 2, 3}}}}
	v := p.Encode()
	for shift := range 8 {
		b := make([]byte, shift+len(v))
		copy(b[shift:], v)
		got, err := DecodePartial(b[shift:])
		if err != nil || !reflect.DeepEqual(got.Counts, p.Counts) {
			t.Errorf("value at offset %d: %+v, %v", shift, got, err)
		}
	}
}
