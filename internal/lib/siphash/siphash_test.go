package siphash

import (
	"testing"
)

// The reference implementation's vectors (vectors.h, vectors_sip64): key
// 00 01 … 0f, message 00 01 … (n−1), for n = 0 … 28.
var vectors = []uint64{
	0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
	0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
	0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
	0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
	0x3f2acc7f57c29bdb, 0x699ae9f52cbe4794, 0x4bc1b3f0968dd39c, 0xbb6dc91da77961bd,
	0xbed65cf21aa2ee98, 0xd0f2cbb02e3b67c7, 0x93536795e3a33e88, 0xa80c038ccd5ccec8,
	0xb8ad50c6f649af94, 0xbce192de8a85b8ea, 0x17d835b85bbb15f3, 0x2f2e6163076bcfad,
	0xde4daaaca71dc9a5,
}

func TestReferenceVectors(t *testing.T) {
	kb := make([]byte, 16)
	for i := range kb {
		kb[i] = byte(i)
	}
	k := KeyFromBytes(kb)
	if string(k.Bytes()) != string(kb) {
		t.Fatalf("Bytes does not invert KeyFromBytes")
	}
	msg := make([]byte, len(vectors))
	for i := range msg {
		msg[i] = byte(i)
	}
	for n, want := range vectors {
		if got := k.Sum64(msg[:n]); got != want {
			t.Errorf("n=%d: %#016x, want %#016x", n, got, want)
		}
		if got := k.String(string(msg[:n])); got != want {
			t.Errorf("String n=%d: %#016x, want %#016x", n, got, want)
		}
	}
}

func TestKeyMatters(t *testing.T) {
	a, b := Key{1, 2}, Key{1, 3}
	if a.String("user-42") == b.String("user-42") {
		t.Errorf("two keys gave the same hash")
	}
}

func TestNoAllocs(t *testing.T) {
	k := Key{3, 4}
	b := []byte("a user id of some length")
	s := "another user id"
	if n := testing.AllocsPerRun(100, func() { _ = k.Sum64(b); _ = k.String(s) }); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}

func BenchmarkSum64UserID(b *testing.B) {
	k := Key{3, 4}
	p := []byte("user-1234567")
	for i := 0; i < b.N; i++ {
		_ = k.Sum64(p)
	}
}
