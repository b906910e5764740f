package selection

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/dpstage/stage/internal/lib/cputime"
	"github.com/dpstage/stage/mechanism"
)

// bounder is the test's model of package aggregate's group bound with
// l0 = 1: a user's events count toward the group of smallest keyed rank
// among the user's groups in the window, whatever their order.
type bounder struct {
	kept map[uint64]string
}

func rank(user uint64, key string) uint64 {
	x := keyHash(key) ^ user*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	return x ^ x>>29
}

func (b *bounder) event(user uint64, key string) {
	if old, ok := b.kept[user]; ok && (old == key || rank(user, old) < rank(user, key)) {
		return
	}
	b.kept[user] = key
}

// counts are the window's keys, sorted, with their distinct users after
// bounding: what the aggregator hands the releaser.
func (b *bounder) counts() (keys []string, users []int64) {
	n := map[string]int64{}
	for _, k := range b.kept {
		n[k]++
	}
	keys = slices.Sorted(maps.Keys(n))
	for _, k := range keys {
		users = append(users, n[k])
	}
	return keys, users
}

// TestSelectionStream: a stream whose windows have groups of 3, 30, 300
// and 3,000 distinct users (ten of each), every fifth user also visiting
// a second group (so that bounding moves users between keys), selected
// over 60 windows with thresholds calibrated for a day of 24 windows at
// δ = 10⁻⁶ under replace with K = 3: at ε = 0.5 (30 users: ~never) and at
// ε = 2 (30 users: about a third of the windows). It checks that
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
		b := &bounder{kept: map[uint64]string{}}
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
					b.event(user, key)
					if user%5 == 0 { // a second group of the same size class
						k2 := keys[(g+1)%perSize]
						b.event(user, k2)
						if rank(user, k2) < rank(user, best) {
							best = k2
						}
					}
					ref[best]++
				}
			}
		}
		keys, users := b.counts()
		idx, err := Keys(th, noise, nil, rng, keys, users)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.IsSorted(idx) {
			t.Errorf("selection not sorted")
		}
		for _, i := range idx {
			selected[size[keys[i]]]++
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
		keys, users := make([]string, tc.keys), make([]int64, tc.keys)
		for i := range keys {
			keys[i], users[i] = fmt.Sprint(i), 1
		}
		for r := 0; r < 20; r++ {
			_, err := Keys(th, noise, ks, rng, keys, users)
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

// BenchmarkKeys is the selection's draw over a window of 10⁶ keys of
// which 1% pass (the key-count test on, at limit 2·10⁶): what the
// releaser adds to a window's close (release's BenchmarkRecordSelecting1e6Keys
// has the releases and the ledger write too).
func BenchmarkKeys(b *testing.B) {
	const n = 1_000_000
	pl, err := Calibrate(1, 1e-6, 1, NewPeriod(24, 3, true), 2, 2*n)
	if err != nil {
		b.Fatal(err)
	}
	th := pl.Threshold
	noise, ks, err := pl.Noisers()
	if err != nil {
		b.Fatal(err)
	}
	pass := th.UsersAt(1 - 1e-12)
	keys, users := make([]string, n), make([]int64, n)
	for i := range keys {
		keys[i], users[i] = fmt.Sprintf("product-%07d", i), 1
		if i%100 == 0 {
			users[i] = pass
		}
	}
	rng := mechanism.NewSeededRand([32]byte{1})
	cpu0 := cputime.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sel, err := Keys(th, noise, ks, rng, keys, users)
		if err != nil {
			b.Fatal(err)
		}
		if len(sel) < n/100 || len(sel) > n/100+10 {
			b.Fatalf("%d selected, want about %d", len(sel), n/100)
		}
	}
	b.ReportMetric((cputime.Now()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
}
