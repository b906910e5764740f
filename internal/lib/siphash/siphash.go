// Package siphash is SipHash-2-4 (Aumasson & Bernstein, "SipHash: a fast
// short-input PRF", 2012): a keyed 64-bit hash of attacker-chosen inputs
// whose key can be stored and restored, unlike hash/maphash's seeds. The
// stage keys its user hashes with it so that per-user state kept across
// restarts (cross-window contribution bounds) finds the same user again
// under the key recorded in its ledger.
package siphash

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// Key is a 128-bit SipHash key: k0 and k1 are its bytes 0–7 and 8–15,
// little-endian (the reference convention).
type Key struct{ K0, K1 uint64 }

// KeyFromBytes returns the key of 16 bytes b (little-endian halves). It
// panics if len(b) != 16.
func KeyFromBytes(b []byte) Key {
	if len(b) != 16 {
		panic("siphash: key must be 16 bytes")
	}
	return Key{K0: binary.LittleEndian.Uint64(b[:8]), K1: binary.LittleEndian.Uint64(b[8:])}
}

// Bytes returns the key's 16 bytes (the inverse of KeyFromBytes).
func (k Key) Bytes() []byte {
	b := make([]byte, 16)
	binary.LittleEndian.PutUint64(b[:8], k.K0)
	binary.LittleEndian.PutUint64(b[8:], k.K1)
	return b
}

// Sum64 returns SipHash-2-4 of p under k. It does not allocate.
func (k Key) Sum64(p []byte) uint64 {
	v0 := k.K0 ^ 0x736f6d6570736575
	v1 := k.K1 ^ 0x646f72616e646f6d
	v2 := k.K0 ^ 0x6c7967656e657261
	v3 := k.K1 ^ 0x7465646279746573
	n := len(p)
	for len(p) >= 8 {
		m := binary.LittleEndian.Uint64(p)
		v3 ^= m
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
		v0 ^= m
		p = p[8:]
	}
	last := uint64(n) << 56
	for i := len(p) - 1; i >= 0; i-- {
		last |= uint64(p[i]) << (8 * uint(i))
	}
	v3 ^= last
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0, v1, v2, v3 = round(v0, v1, v2, v3)
	v0 ^= last
	v2 ^= 0xff
	for i := 0; i < 4; i++ {
		v0, v1, v2, v3 = round(v0, v1, v2, v3)
	}
	return v0 ^ v1 ^ v2 ^ v3
}

// String is Sum64 of s's bytes, without a copy.
func (k Key) String(s string) uint64 {
	// The compiler elides the conversion's copy for a call that does not
	// retain the slice.
	return k.Sum64([]byte(s))
}

func round(v0, v1, v2, v3 uint64) (uint64, uint64, uint64, uint64) {
	v0 += v1
	v1 = bits.RotateLeft64(v1, 13)
	v1 ^= v0
	v0 = bits.RotateLeft64(v0, 32)
	v2 += v3
	v3 = bits.RotateLeft64(v3, 16)
	v3 ^= v2
	v0 += v3
	v3 = bits.RotateLeft64(v3, 21)
	v3 ^= v0
	v2 += v1
	v1 = bits.RotateLeft64(v1, 17)
	v1 ^= v2
	v2 = bits.RotateLeft64(v2, 32)
	return v0, v1, v2, v3
}

// NewKey returns a key of 16 bytes from crypto/rand.
func NewKey() (Key, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return Key{}, fmt.Errorf("siphash: random key: %w", err)
	}
	return KeyFromBytes(b), nil
}

// MustNewKey is NewKey for tests and tools; it panics if crypto/rand fails.
func MustNewKey() Key {
	k, err := NewKey()
	if err != nil {
		panic(err)
	}
	return k
}
