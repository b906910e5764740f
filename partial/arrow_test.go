package partial

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
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
// the releaser would stop every releaser that reads it). Deterministic
// seed; each trial flips 1 to 4 bytes.
func TestDecodeArrowCorrupt(t *testing.T) {
	good := (&Partial{WindowStart: 60, WindowMs: 60, Partition: 1, Partitions: 2, Next: 120, Config: "c",
		Counts:   []Cell{{H: 0, G: 1, Counts: []float64{1, 2, 3}}, {H: 1, G: 0, Counts: []float64{4, 5}}},
		Averages: []AverageCell{{H: 2, Users: []uint64{7, 9}, Vectors: [][]float64{{0.5, 0.5}, {1, 0}}}}}).Encode()
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
		}()
	}
}
