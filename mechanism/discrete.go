package mechanism

import (
	"math"
	"math/bits"
)

// Exact samplers of the discrete Laplace and discrete Gaussian distributions
// on the integers, after Canonne, Kamath & Steinke, "The Discrete Gaussian for
// Differential Privacy", NeurIPS 2020 (arXiv:2004.00010; "CKS20" below),
// Algorithms 1–3. They use only integer arithmetic on exact rationals and
// uniform integers, so the noise carries none of the floating-point artefacts
// (Mironov 2012, "On significance of the least significant bits for
// differential privacy") that leak the input through the low bits of
// textbook float samplers. The noise parameters are dyadic rationals
// (m/2^k); the calibrations round the scale up to one, which only adds noise,
// and report the RDP of the rounded value.
//
// Arithmetic is in 64 and 128 bits. The only departures from exactness are
// rejections taken when an intermediate value would overflow; each is
// documented where it happens and occurs with probability below exp(−2^16)
// per sample, far below anything observable.

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

func mul64(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) cmp(y u128) int {
	switch {
	case x.hi < y.hi:
		return -1
	case x.hi > y.hi:
		return 1
	case x.lo < y.lo:
		return -1
	case x.lo > y.lo:
		return 1
	}
	return 0
}

func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

// mulSmall returns x·k and whether it overflowed 128 bits.
func (x u128) mulSmall(k uint64) (u128, bool) {
	h1, l1 := bits.Mul64(x.lo, k)
	h2, l2 := bits.Mul64(x.hi, k)
	hi, c := bits.Add64(h1, l2, 0)
	return u128{hi, l1}, h2 != 0 || c != 0
}

// shl returns x << n (n < 128) and whether bits were lost.
func (x u128) shl(n uint) (u128, bool) {
	if n == 0 {
		return x, false
	}
	if n >= 64 {
		return u128{x.lo << (n - 64), 0}, x.hi != 0 || (n > 64 && x.lo>>(128-n) != 0)
	}
	return u128{x.hi<<n | x.lo>>(64-n), x.lo << n}, x.hi>>(64-n) != 0
}

// bitLen is the number of bits needed to represent x.
func (x u128) bitLen() int {
	if x.hi != 0 {
		return 64 + bits.Len64(x.hi)
	}
	return bits.Len64(x.lo)
}

// bernoulliRatio returns true with probability n/m exactly, for n ≤ m,
// m > 0, m < 2^127. With m < 2^64 it compares a uniform integer in [0, m)
// with n; otherwise it compares a uniform real U = 0.b₁b₂… with the binary
// expansion of n/m digit by digit (long division), reading 2 bits on average.
func (g *Rand) bernoulliRatio(n, m u128) bool {
	if m.hi == 0 {
		return g.uint64n(m.lo) < n.lo
	}
	rem := n
	for {
		// next binary digit of rem/m: 2·rem ≥ m ?
		rem, _ = rem.shl(1)
		digit := rem.cmp(m) >= 0
		if digit {
			rem = rem.sub(m)
		}
		b := g.bit()
		if b != digit {
			return digit // U's digit 0 < n/m's digit 1 ⇒ U < n/m
		}
		if rem.hi == 0 && rem.lo == 0 {
			return false // n/m's expansion ended; U ≥ n/m (U = n/m has probability 0)
		}
	}
}

// bernoulliExpNeg1 returns true with probability e^{−1}: CKS20 Algorithm 1
// with γ = 1 (K starts at 2 because Bernoulli(γ/1) = Bernoulli(1) always
// succeeds).
func (g *Rand) bernoulliExpNeg1() bool {
	k := uint64(2)
	for g.uint64n(k) == 0 {
		k++
	}
	return k%2 == 1
}

// bernoulliExpNeg returns true with probability exp(−n/d) exactly, for
// n ≥ 0, 0 < d ≤ 2^100: CKS20 Algorithm 1. While γ = n/d > 1 it needs one
// Bernoulli(e^{−1}) success per unit of γ (so it stops after 1.6 trials on
// average whatever γ is); then, for γ ∈ [0, 1], it draws A_K ~ Bernoulli(γ/K)
// for K = 1, 2, … until the first failure and returns whether that K is odd:
// P = Σ_{K odd} γ^{K−1}/(K−1)!·(1 − γ/K) = e^{−γ}.
func (g *Rand) bernoulliExpNeg(n, d u128) bool {
	for n.cmp(d) > 0 {
		if !g.bernoulliExpNeg1() {
			return false
		}
		n = n.sub(d)
	}
	for k := uint64(1); ; k++ {
		dk, over := d.mulSmall(k)
		// Overflow needs k > 2^27, i.e. 2^27 consecutive successes of
		// probability ≤ 1/k each: never. Treat as failure (stop).
		if over || dk.bitLen() > 127 || !g.bernoulliRatio(n, dk) {
			return k%2 == 1
		}
	}
}

// discreteLaplace returns a sample of the discrete Laplace distribution
// Lap_Z(b), P[Z = z] ∝ exp(−|z|/b), with scale b = t/2^k, t ≥ 1, k ≤ 63:
// CKS20 Algorithm 2 with (s, t) = (2^k, t).
//
//	repeat: U uniform on {0..t−1}; reject unless Bernoulli(exp(−U/t));
//	        V ← number of Bernoulli(e^{−1}) successes before the first failure;
//	        X ← U + t·V (geometric: P[X = x] ∝ e^{−x/t});
//	        Y ← ⌊X/2^k⌋ (geometric: P[Y = y] ∝ e^{−y·2^k/t});
//	        B ← fair bit; reject if B = 1 and Y = 0; return (1−2B)·Y.
//
// X is computed in 128 bits. A Y ≥ 2^62 (which keeps count + noise inside
// int64) is rejected; with t < 2^51 that needs V ≥ 2^11, probability e^{−2048}.
func (g *Rand) discreteLaplace(t uint64, k uint) int64 {
	for {
		u := g.uint64n(t)
		if !g.bernoulliExpNeg(u128{0, u}, u128{0, t}) {
			continue
		}
		var v uint64
		for g.bernoulliExpNeg1() {
			v++
		}
		hi, lo := bits.Mul64(t, v)
		lo, c := bits.Add64(lo, u, 0)
		hi += c
		var y uint64
		if k == 0 {
			if hi != 0 {
				continue
			}
			y = lo
		} else {
			if hi>>k != 0 {
				continue
			}
			y = lo>>k | hi<<(64-k)
		}
		if y >= 1<<62 {
			continue
		}
		if g.bit() {
			if y == 0 {
				continue
			}
			return -int64(y)
		}
		return int64(y)
	}
}

// dgauss holds the parameters of the exact discrete Gaussian sampler: the
// variance parameter σ² = p/2^k and the integer scale t = ⌊σ⌋ + 1 of the
// discrete Laplace proposal, and den = 2·p·2^k·t² (see discreteGaussian).
type dgauss struct {
	p   uint64
	k   uint
	t   uint64
	den u128
}

// sigma2 returns σ² = p/2^k (exact in float64 since p < 2^53).
func (d dgauss) sigma2() float64 { return math.Ldexp(float64(d.p), -int(d.k)) }

// newDGauss rounds σ² up to a dyadic rational p/2^k with p of about prec
// bits, lowering the precision if needed so that den ≤ 2^100.
func newDGauss(sigma2 float64) (dgauss, bool) {
	for prec := 40; prec >= 16; prec-- {
		p, k := dyadicCeil(sigma2, prec)
		if p == 0 || p >= 1<<53 {
			return dgauss{}, false
		}
		d := dgauss{p: p, k: k}
		d.t = uint64(math.Floor(math.Sqrt(d.sigma2()))) + 1
		pt := mul64(p, d.t)
		ptt, over := pt.mulSmall(d.t)
		if over {
			continue
		}
		den, over := ptt.shl(k + 1)
		if over || den.bitLen() > 100 {
			continue
		}
		d.den = den
		return d, true
	}
	return dgauss{}, false
}

// discreteGaussian returns a sample of the discrete Gaussian N_Z(0, σ²),
// P[Z = z] ∝ exp(−z²/(2σ²)) (CKS20 Definition 1), σ² = p/2^k: CKS20
// Algorithm 3. Propose Y ~ Lap_Z(t) with t = ⌊σ⌋+1 and accept with
// probability exp(−(|Y| − σ²/t)²/(2σ²)). In integers,
//
//	(|Y| − σ²/t)²/(2σ²) = (|Y|·t·2^k − p)² / (2·p·2^k·t²) = N/den.
//
// |Y|·t·2^k is computed in 64 bits; if it overflows, the proposal is rejected
// instead of accepted with probability exp(−N/den): then N ≥ 2^126 and
// den ≤ 2^100 (newDGauss), so that probability is below exp(−2^26).
func (g *Rand) discreteGaussian(d *dgauss) int64 {
	for {
		y := g.discreteLaplace(d.t, 0)
		ay := uint64(y)
		if y < 0 {
			ay = uint64(-y)
		}
		hi, a := bits.Mul64(ay, d.t)
		if hi != 0 || (d.k > 0 && a>>(64-d.k) != 0) {
			continue
		}
		a <<= d.k
		var e uint64
		if a >= d.p {
			e = a - d.p
		} else {
			e = d.p - a
		}
		if g.bernoulliExpNeg(mul64(e, e), d.den) {
			return y
		}
	}
}

// dyadicCeil returns (m, k) with m/2^k ≥ x > 0, the smallest such m for that
// k, where k ∈ [0, 62] is chosen so that m has about prec+1 bits when x is in
// range. Returns m = 0 if x is not finite and > 0.
func dyadicCeil(x float64, prec int) (uint64, uint) {
	if !(x > 0) || math.IsInf(x, 0) {
		return 0, 0
	}
	k := prec - math.Ilogb(x)
	if k < 0 {
		k = 0
	}
	if k > 62 {
		k = 62
	}
	m := math.Ceil(math.Ldexp(x, k))
	if m >= 1<<63 {
		return 0, 0
	}
	return uint64(m), uint(k)
}
