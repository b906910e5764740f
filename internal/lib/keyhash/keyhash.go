// Package keyhash is the public hash of a group key of a histogram that
// selects its groups (issue 30; package selection): a function of the key's
// bytes alone, the same in every process and after every restart. It decides
// which keys are tracked (key sampling: a key is tracked iff its hash falls
// below rate·2⁶⁴, never which keys came first) and orders the selection's
// draws. It is public on purpose: anyone may compute which keys are sampled;
// its (fixed) SipHash key only spreads attacker-chosen keys evenly.
package keyhash

import (
	"math"

	"github.com/dpstage/stage/internal/lib/siphash"
)

// key is the public SipHash key of Sum.
var key = siphash.Key{K0: 0x7365_6c65_6374_696f, K1: 0x6e2d_6b65_7973_3330}

// Sum is the public hash of the key bytes k: SipHash-2-4 under a fixed key.
// It does not allocate.
func Sum(k []byte) uint64 { return key.Sum64(k) }

// String is Sum of s's bytes, without a copy.
func String(s string) uint64 { return key.String(s) }

// Threshold is the sampling threshold of rate ∈ (0, 1]: a key k is sampled
// iff Sampled(Sum(k), Threshold(rate)). Rate 1 (or above) samples every
// key; the caller checks the rate (NaN gives 0: no key).
func Threshold(rate float64) uint64 {
	if rate >= 1 {
		return math.MaxUint64
	}
	if !(rate > 0) {
		return 0
	}
	return uint64(rate * (1 << 64))
}

// Sampled reports whether a key of hash h is sampled under threshold t.
func Sampled(h, t uint64) bool { return t == math.MaxUint64 || h < t }
