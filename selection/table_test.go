package selection

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"

	"github.com/dpstage/stage/internal/lib/cputime"
	"github.com/dpstage/stage/mechanism"
)

// bounder is the test's model of package aggregate's group bound with
// l0 = 1: a user's events count toward the group of smallest keyed rank
// among the user's groups in the window, whatever their order, and the
// table follows the user's kept group with ±1.
type bounder struct {
	t    *Table
	kept map[uint64]string
}

func rank(user uint64, key string) uint64 {
	x := keyHash(key) ^ user*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>29
}

func (b *bounder) event(user uint64, key string) error {
	old, ok := b.kept[user]
	if ok && (old == key || rank(user, old) < rank(user, key)) {
		return nil
	}
	if ok {
		if err := b.t.Add(old, -1); err != nil {
			return err
		}
	}
	b.kept[user] = key
	return b.t.Add(key, +1)
}

// TestSelectionStream: a stream whose windows have groups of 3, 30, 300
// and 3,000 distinct users (ten of each), every fifth user also visiting
// a second group (so that bounding moves users between keys), selected
// over 60 windows with thresholds calibrated for a day of 24 windows at
// δ = 10⁻⁶ under replace with K = 3: at ε = 0.5 (30 users: ~never) and at
// ε = 2 (30 users: about a third of the windows). It checks that
//   - the table holds each key's distinct users after bounding, as the
//     reference (each user in its smallest-rank group) counts them;
//   - each size's selection count matches Σ PassProbability within 5
//     standard errors (false failure < 6·10⁻⁷ per size and scenario: 8
//     comparisons, < 5·10⁻⁶);
//   - the 3-user groups are never selected (derived probability ≤ 3·10⁻⁷
//     per group-window, 600 group-windows: a false failure below 2·10⁻⁴
//     for an unseeded run; the run is seeded) and the 3,000-user groups
//     in every window.
func TestSelectionStream(t *testing.T) {
	for _, eps := range []float64{0.5, 2} {
		pl, err := Calibrate(eps, 1e-6, 1, NewPeriod(24, 3, true), 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		streamSelections(t, pl.Threshold)
	}
}

func streamSelections(t *testing.T, th Threshold) {
	noise, err := Noiser(th.Sigma)
	if err != nil {
		t.Fatal(err)
	}
	rng := mechanism.NewSeededRand([32]byte{3, 0})
	sizes := []int{3, 30, 300, 3000}
	const perSize, windows = 10, 60
	selected := map[int]int{}
	expected, variance := map[int]float64{}, map[int]float64{} // Σ p and Σ p(1−p) over group-windows, by size
	user := uint64(0)
	for w := 0; w < windows; w++ {
		tab, err := NewTable(1)
		if err != nil {
			t.Fatal(err)
		}
		b := &bounder{t: tab, kept: map[uint64]string{}}
		ref := map[string]int32{}
		size := map[string]int{}
		for _, n := range sizes {
			keys := make([]string, perSize)
			for g := range keys {
				keys[g] = fmt.Sprintf("w%d-size%d-g%d", w, n, g)
				size[keys[g]] = n
			}
			for g, key := range keys {
				for i := 0; i < n; i++ {
					user++
					best := key
					if err := b.event(user, key); err != nil {
						t.Fatal(err)
					}
					if user%5 == 0 { // a second group of the same size class
						k2 := keys[(g+1)%perSize]
						if err := b.event(user, k2); err != nil {
							t.Fatal(err)
						}
						if rank(user, k2) < rank(user, best) {
							best = k2
						}
					}
					ref[best]++
				}
			}
		}
		for k, c := range ref {
			if got := tab.Count(k); got != c {
				t.Fatalf("window %d key %s: table %d users, reference %d", w, k, got, c)
			}
		}
		if tab.Len() != len(ref) {
			t.Fatalf("window %d: %d keys, reference %d", w, tab.Len(), len(ref))
		}
		sel, err := tab.Select(th, noise, nil, rng)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSorted(sel) {
			t.Errorf("selection not sorted")
		}
		for _, k := range sel {
			selected[size[k]]++
		}
		for k, c := range ref {
			p := th.PassProbability(int64(c))
			expected[size[k]] += p
			variance[size[k]] += p * (1 - p)
		}
	}
	t.Logf("threshold σ=%.3f T=%d (½ at %d users, 0.95 at %d)", th.Sigma, th.T, th.UsersAt(0.5), th.UsersAt(0.95))
	trials := float64(perSize * windows)
	for _, n := range sizes {
		t.Logf("groups of %d users: selected in %d of %.0f group-windows (%.4f); derived %.4f ± %.4f (5 s.e.)",
			n, selected[n], trials, float64(selected[n])/trials, expected[n]/trials, 5*math.Sqrt(variance[n])/trials)
		if d := math.Abs(float64(selected[n]) - expected[n]); d > 5*math.Sqrt(variance[n])+1e-9 {
			t.Errorf("groups of %d users: %d selections, derived %.2f ± %.2f", n, selected[n], expected[n], 5*math.Sqrt(variance[n]))
		}
	}
	if selected[3] != 0 || selected[3000] != perSize*windows {
		t.Errorf("3-user groups selected %d times (want never), 3,000-user groups %d of %d", selected[3], selected[3000], perSize*windows)
	}
}

// TestTableSampling: a key's sampling depends on the key alone (the same
// keys are sampled whatever else arrives and in whatever order), the rate
// is met within 5 standard errors (false failure < 6·10⁻⁷), and a key not
// sampled is never counted.
func TestTableSampling(t *testing.T) {
	a, _ := NewTable(0.25)
	b, _ := NewTable(0.25)
	const n = 100_000
	in := 0
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("product-%d", i)
		if a.Sampled(k) {
			in++
		}
		if err := a.Add(k, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := n - 1; i >= 0; i -= 3 { // another stream: fewer keys, reversed
		k := fmt.Sprintf("product-%d", i)
		if err := b.Add(k, 1); err != nil {
			t.Fatal(err)
		}
		if (b.Count(k) > 0) != (a.Count(k) > 0) || (a.Count(k) > 0) != a.Sampled(k) {
			t.Fatalf("key %s sampled differently", k)
		}
	}
	if se := math.Sqrt(n * 0.25 * 0.75); math.Abs(float64(in)-n*0.25) > 5*se {
		t.Errorf("%d of %d keys sampled at rate 0.25", in, n)
	}
	if a.Len() != in {
		t.Errorf("table holds %d keys, %d sampled", a.Len(), in)
	}
	if err := a.Add("never-added", -1); err == nil && a.Sampled("never-added") {
		t.Errorf("removing a user a key does not have was accepted")
	}
	for _, r := range []float64{0, -1, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := NewTable(r); err == nil {
			t.Errorf("rate %v accepted", r)
		}
	}
}

// TestKeyLimit: the key-count test withholds a window's selection with
// the probability of its noisy comparison — never below 10% under the
// limit (probability < 10⁻²³), always 10% above it — and its σ_k enters
// the charged curve.
func TestKeyLimit(t *testing.T) {
	const limit = 1000
	ks, err := Noiser(KeySigmaFor(limit, 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	noise, _ := Noiser(3)
	th := Threshold{Sigma: noise.Params().Sigma, T: 10, L0: 1, KeyLimit: limit, KeySigma: ks.Params().Sigma}
	rng := mechanism.NewSeededRand([32]byte{7})
	for _, tc := range []struct {
		keys     int
		withheld bool
	}{{900, false}, {1100, true}} {
		tab, _ := NewTable(1)
		for i := 0; i < tc.keys; i++ {
			_ = tab.Add(fmt.Sprint(i), 1)
		}
		for r := 0; r < 20; r++ {
			_, err := tab.Select(th, noise, ks, rng)
			if (err == ErrOverLimit) != tc.withheld {
				t.Fatalf("%d keys, limit %d: err %v", tc.keys, limit, err)
			}
		}
	}
	plain := th
	plain.KeyLimit, plain.KeySigma = 0, 0
	if d := th.UnitRDP(2, true) - plain.UnitRDP(2, true); math.Abs(d-2.0/(2*th.KeySigma*th.KeySigma)) > 1e-15 {
		t.Errorf("the key test adds %g to the curve at λ=2, want λ·l0²/(2σ_k²) = %g", d, 2.0/(2*th.KeySigma*th.KeySigma))
	}
}

// BenchmarkTable reports the bytes a key costs in the table (keys of 15
// bytes, "product-NNNNNNN") and the time to close a window of 10⁶ keys of
// which 1% pass (the key-count test on, at limit 2·10⁶).
func BenchmarkTable(b *testing.B) {
	const keys = 1_000_000
	pl, err := Calibrate(1, 1e-6, 1, NewPeriod(24, 3, true), 2, 2*keys)
	if err != nil {
		b.Fatal(err)
	}
	th := pl.Threshold
	noise, _ := Noiser(th.Sigma)
	ks, _ := Noiser(th.KeySigma)
	pass := int32(th.UsersAt(1 - 1e-12))
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("product-%07d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tab, _ := NewTable(1)
	for i, k := range names {
		c := int32(1)
		if i%100 == 0 {
			c = pass
		}
		if err := tab.Add(k, c); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / keys
	rng := mechanism.NewSeededRand([32]byte{1})
	cpu0 := cputime.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sel, err := tab.Select(th, noise, ks, rng)
		if err != nil {
			b.Fatal(err)
		}
		if len(sel) < keys/100 || len(sel) > keys/100+10 {
			b.Fatalf("%d selected, want about %d", len(sel), keys/100)
		}
	}
	b.ReportMetric((cputime.Now()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(perKey, "bytes/key")
	runtime.KeepAlive(names)
}
