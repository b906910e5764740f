package decode

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestPartitionersMatchKafkaGo checks both partitioners against kafka-go's
// balancers (Murmur2Balancer: Kafka's Java default; Hash: FNV-1a) for many
// random keys of every length up to 40 bytes (all murmur2 tail cases) and
// partition counts from 1 to 64.
func TestPartitionersMatchKafkaGo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	parts := make([]int, 64)
	for i := range parts {
		parts[i] = i
	}
	for _, tc := range []struct {
		part Partitioner
		bal  kafka.Balancer
	}{
		{PartitionerMurmur2, kafka.Murmur2Balancer{Consistent: true}},
		{PartitionerFNV1a, &kafka.Hash{}},
	} {
		t.Run(tc.part.String(), func(t *testing.T) {
			for i := range 20000 {
				key := make([]byte, r.IntN(41))
				for j := range key {
					key[j] = byte(r.Uint32())
				}
				if i%3 == 0 { // user ids as producers write them
					key = strconv.AppendInt(key[:0], r.Int64N(1e12)-1e6, 10)
				}
				n := 1 + r.IntN(64)
				want := tc.bal.Balance(kafka.Message{Key: key}, parts[:n]...)
				if got := tc.part.Partition(key, n); got != want {
					t.Fatalf("key %x among %d: partition %d, kafka-go %d", key, n, got, want)
				}
			}
		})
	}
}

// TestDecodePartitionCheck: an event is dropped with wrong_partition
// exactly when its user id's bytes (a string unescaped, an integer's
// literal) do not assign to the decoder's partition, and decodes as
// without the check otherwise.
func TestDecodePartitionCheck(t *testing.T) {
	const n = 6
	plain := mustNew(testConfig())
	for _, part := range []Partitioner{PartitionerMurmur2, PartitionerFNV1a} {
		decs := make([]*Decoder, n)
		for p := range decs {
			var err error
			if decs[p], err = plain.WithPartitionCheck(part, p, n); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct{ raw, id string }{
			{`"alice"`, "alice"},
			{`"caf\u00e9-` + "x" + `"`, "café-x"},
			{`"a\"b\\c\/d"`, `a"b\c/d`},
			{`12345`, "12345"},
			{`-7`, "-7"},
			{`"0"`, "0"},
		} {
			for u := range 40 {
				raw, id := tc.raw, tc.id
				if u > 0 { // more ids of the same shape
					raw, id = fmt.Sprintf(`%s-%d"`, tc.raw[:len(tc.raw)-1], u), fmt.Sprintf("%s-%d", tc.id, u)
					if tc.raw[0] != '"' {
						raw, id = fmt.Sprintf("%s%d", tc.raw, u), fmt.Sprintf("%s%d", tc.id, u)
					}
				}
				msg := []byte(`{"ts":1700000000000,"user_id":` + raw + `,"device":"mobile"}`)
				want := part.Partition([]byte(id), n)
				base := plain.NewEvent()
				if r := plain.Decode(msg, base); r != ReasonNone {
					t.Fatalf("%s: %v", msg, r)
				}
				for p, d := range decs {
					ev := d.NewEvent()
					r := d.Decode(msg, ev)
					switch {
					case p == want && (r != ReasonNone || ev.User != base.User):
						t.Errorf("%v %s on its partition %d: %v", part, msg, p, r)
					case p != want && r != ReasonWrongPartition:
						t.Errorf("%v %s on partition %d (its own %d): %v, want wrong_partition", part, msg, p, want, r)
					}
				}
			}
		}
	}
	if _, err := plain.WithPartitionCheck(PartitionerMurmur2, 3, 3); err == nil {
		t.Error("partition 3 of 3 accepted")
	}
	if _, err := plain.WithPartitionCheck(PartitionerNone, 0, 3); err == nil {
		t.Error("no partitioner accepted")
	}
}
