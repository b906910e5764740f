package eval

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/dpstage/stage/mechanism"
)

// Seeds. Every Monte-Carlo task draws from its own deterministic streams,
// derived from the run's seed and the task's coordinates, so results do not
// depend on the number of workers or on scheduling. Releases use
// mechanism.NewSeededRand (the stage's secure NewRand is never seeded);
// the synthetic data use a separate ChaCha8 stream.

// taskSeed derives a 32-byte seed from the run seed and a task key.
func taskSeed(seed uint64, key string) [32]byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h := sha256.New()
	h.Write(b[:])
	h.Write([]byte(key))
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// streams returns the release and data generators of one task.
func streams(seed uint64, key string) (*mechanism.Rand, *rand.ChaCha8) {
	return mechanism.NewSeededRand(taskSeed(seed, "release/"+key)),
		rand.NewChaCha8(taskSeed(seed, "data/"+key))
}

// Zipf returns the skewed ground truth used by the evaluations: p_i ∝ 1/i
// (Zipf's law with exponent 1) on d bins.
func Zipf(d int) []float64 {
	p := make([]float64, d)
	s := 0.0
	for i := range p {
		p[i] = 1 / float64(i+1)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// Uniform returns the uniform distribution on d bins.
func Uniform(d int) []float64 {
	p := make([]float64, d)
	for i := range p {
		p[i] = 1 / float64(d)
	}
	return p
}

// multinomial writes one draw of Multinomial(n, p) into x by sequential
// conditional binomials: x_i ~ Bin(n − Σ_{j<i} x_j, p_i / Σ_{j≥i} p_j).
func multinomial(src rand.Source, n int, p, x []float64) {
	left := float64(n)
	rest := 1.0
	for i := range p {
		if i == len(p)-1 || left == 0 {
			x[i] = left
			for j := i + 1; j < len(p); j++ {
				x[j] = 0
			}
			return
		}
		q := math.Min(1, math.Max(0, p[i]/rest))
		v := 0.0
		if q > 0 {
			v = distuv.Binomial{N: left, P: q, Src: src}.Rand()
		}
		x[i] = v
		left -= v
		rest -= p[i]
	}
}

// Stat accumulates a sample mean with its 95% confidence interval (normal
// approximation: mean ± 1.96·s/√n; every estimate here uses n ≥ 100
// independent replications).
type Stat struct {
	N        int
	Sum, Sq  float64
	Inf      int // replications whose value was +Inf (excluded from the mean)
	min, max float64
	exact    bool // an exact value, not an estimate: zero-width interval
}

// Add records one replication.
func (s *Stat) Add(v float64) {
	if math.IsInf(v, 1) {
		s.Inf++
		return
	}
	if s.N == 0 || v < s.min {
		s.min = v
	}
	if s.N == 0 || v > s.max {
		s.max = v
	}
	s.N++
	s.Sum += v
	s.Sq += v * v
}

// Merge adds another accumulator's replications.
func (s *Stat) Merge(o Stat) {
	if o.N > 0 {
		if s.N == 0 || o.min < s.min {
			s.min = o.min
		}
		if s.N == 0 || o.max > s.max {
			s.max = o.max
		}
	}
	s.N += o.N
	s.Sum += o.Sum
	s.Sq += o.Sq
	s.Inf += o.Inf
}

// Mean is the sample mean of the finite replications.
func (s Stat) Mean() float64 {
	if s.N == 0 {
		return math.NaN()
	}
	return s.Sum / float64(s.N)
}

// HalfWidth is the half-width of the 95% confidence interval of the mean.
func (s Stat) HalfWidth() float64 {
	if s.exact {
		return 0
	}
	if s.N < 2 {
		return math.Inf(1)
	}
	n := float64(s.N)
	m := s.Sum / n
	v := math.Max(0, (s.Sq-n*m*m)/(n-1))
	return 1.96 * math.Sqrt(v/n)
}

// Lo and Hi are the ends of the 95% confidence interval of the mean.
func (s Stat) Lo() float64 { return s.Mean() - s.HalfWidth() }
func (s Stat) Hi() float64 { return s.Mean() + s.HalfWidth() }

// InfFraction is the fraction of replications whose value was +Inf.
func (s Stat) InfFraction() float64 {
	if s.N+s.Inf == 0 {
		return 0
	}
	return float64(s.Inf) / float64(s.N+s.Inf)
}

// parallel runs f(i) for i in [0, n) on workers goroutines (runtime.NumCPU()
// if workers ≤ 0) and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	if workers <= 0 {
		workers = runtime.NumCPU()
	}
	workers = min(workers, n)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// l2 is ‖a − b‖₂.
func l2(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		d := a[i] - b[i]
		s += d * d
	}
	return math.Sqrt(s)
}

// kl is D_KL(p ‖ q) = Σ_i p_i log(p_i/q_i) (terms with p_i = 0 are 0; +Inf
// if some q_i = 0 < p_i).
func kl(p, q []float64) float64 {
	s := 0.0
	for i, pi := range p {
		if pi == 0 {
			continue
		}
		if !(q[i] > 0) {
			return math.Inf(1)
		}
		s += pi * math.Log(pi/q[i])
	}
	return math.Max(s, 0)
}

// normalize returns x/Σx (uniform if the sum is 0).
func normalize(x []float64, out []float64) {
	s := 0.0
	for _, v := range x {
		s += v
	}
	for i, v := range x {
		if s == 0 {
			out[i] = 1 / float64(len(x))
		} else {
			out[i] = v / s
		}
	}
}

// logGrid returns n points from lo to hi, equally spaced in log scale.
func logGrid(lo, hi float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = lo * math.Pow(hi/lo, float64(i)/float64(n-1))
	}
	return out
}

// fmtG formats a float compactly for tables and CSV.
func fmtG(x float64) string { return fmt.Sprintf("%.6g", x) }
