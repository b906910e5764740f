package keyhash

import (
	"math"
	"testing"

	"github.com/dpstage/stage/internal/lib/siphash"
)

// TestSum pins the hash to SipHash-2-4 under the fixed public key: a change
// would change which keys are sampled, between versions of the stage.
func TestSum(t *testing.T) {
	k := siphash.Key{K0: 0x7365_6c65_6374_696f, K1: 0x6e2d_6b65_7973_3330}
	for _, s := range []string{"", "a", "checkout", "a key of more than eight bytes"} {
		if got, want := Sum([]byte(s)), k.String(s); got != want || String(s) != want {
			t.Errorf("Sum(%q) = %x, String %x, want %x", s, got, String(s), want)
		}
	}
}

// TestThreshold: rate 1 samples every key, rate r about a share r (10,000
// keys at r = ½: the share is within ±0.05 with probability 1 − 6e-24,
// and the keys are fixed, so the test is deterministic).
func TestThreshold(t *testing.T) {
	if Threshold(1) != math.MaxUint64 || !Sampled(math.MaxUint64, Threshold(1)) {
		t.Fatal("rate 1 must sample every key")
	}
	if Threshold(0) != 0 || Threshold(math.NaN()) != 0 || Sampled(0, 0) {
		t.Fatal("rate 0 must sample no key")
	}
	th := Threshold(0.5)
	n := 0
	for i := range 10000 {
		if Sampled(String(string(rune('a'+i%26))+string(rune(i))), th) {
			n++
		}
	}
	if n < 4500 || n > 5500 {
		t.Errorf("rate ½ sampled %d of 10000 keys", n)
	}
}
