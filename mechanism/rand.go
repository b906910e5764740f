package mechanism

import (
	crand "crypto/rand"
	"fmt"
	"math"
	"math/rand/v2"
)

// Rand is a per-goroutine source of randomness for releases: a ChaCha8
// stream (math/rand/v2), which is a cryptographically secure generator, keyed
// from crypto/rand. A Rand is not safe for concurrent use; give each worker
// its own so that no global lock serializes releases.
//
// Besides the stream, a Rand holds a small buffer of random bits used by the
// exact (integer-only) samplers of the discrete Gaussian and discrete Laplace
// distributions; it needs no other scratch space, so releases do not allocate.
type Rand struct {
	src *rand.ChaCha8
	r   *rand.Rand

	bits  uint64 // buffered random bits for fair coins, consumed from the low end
	nbits uint   // number of valid bits left in bits
}

// NewRand returns a Rand keyed with 32 bytes from crypto/rand. It is the only
// constructor the stage uses.
func NewRand() (*Rand, error) {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("mechanism: read crypto/rand seed: %w", err)
	}
	return newRandFromSeed(seed), nil
}

// NewSeededRand returns a deterministic Rand for tests and offline
// simulations (`stage eval`) only. The stage never exposes a seed in its
// configuration: releases of real data always use NewRand.
func NewSeededRand(seed [32]byte) *Rand { return newRandFromSeed(seed) }

func newRandFromSeed(seed [32]byte) *Rand {
	src := rand.NewChaCha8(seed)
	return &Rand{src: src, r: rand.New(src)}
}

// bit returns one fair random bit.
func (g *Rand) bit() bool {
	if g.nbits == 0 {
		g.bits = g.src.Uint64()
		g.nbits = 64
	}
	b := g.bits&1 == 1
	g.bits >>= 1
	g.nbits--
	return b
}

// uint64n returns a uniform integer in [0, n), n > 0, exactly (Lemire's
// multiply-and-reject in math/rand/v2).
func (g *Rand) uint64n(n uint64) uint64 { return g.r.Uint64N(n) }

// float64Open returns a uniform float64 in the open interval (0, 1): one of
// the 2^53 midpoints (k + 1/2)·2^-53, so log(u) is always finite.
func (g *Rand) float64Open() float64 {
	return (float64(g.src.Uint64()>>11) + 0.5) * 0x1p-53
}

// norm returns a standard normal variate (ziggurat, math/rand/v2).
func (g *Rand) norm() float64 { return g.r.NormFloat64() }

// gammaGE1 returns a Gamma(a, 1) variate for a ≥ 1 by Marsaglia & Tsang
// (2000), "A simple method for generating gamma variables", ACM TOMS 26(3).
// The result is finite and > 0.
func (g *Rand) gammaGE1(a float64) float64 {
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := g.norm()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := g.float64Open()
		x2 := x * x
		if u < 1-0.0331*x2*x2 {
			return d * v
		}
		if math.Log(u) < 0.5*x2+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// logGamma returns log G for G ~ Gamma(a, 1), a > 0, without underflow for
// tiny a: for a < 1 it uses the shape-boost identity G(a) = G(a+1)·U^(1/a)
// (U uniform on (0, 1), independent), i.e. log G(a) = log G(a+1) + log(U)/a,
// which stays finite even when G(a) itself is far below the smallest float64.
func (g *Rand) logGamma(a float64) float64 {
	if a >= 1 {
		return math.Log(g.gammaGE1(a))
	}
	return math.Log(g.gammaGE1(a+1)) + math.Log(g.float64Open())/a
}
