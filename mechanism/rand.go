package mechanism

import (
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
)

// Rand is a per-goroutine source of randomness for releases: a ChaCha8
// stream (math/rand/v2), which is a cryptographically secure generator, keyed
// from crypto/rand. A Rand is not safe for concurrent use; give each worker
// its own so that no global lock serializes releases.
type Rand struct {
	src *rand.ChaCha8
	r   *rand.Rand
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
