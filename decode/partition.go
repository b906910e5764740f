package decode

import "fmt"

// The user → partition check (distributed mode, kafka.distributed).
//
// Every event of a user must be bounded in one place: the distributed
// stage bounds each input partition on its own, so a user whose events
// were spread over two partitions would contribute twice the bound. The
// stage therefore relies on the producers keying the input topic by user
// id with a known partitioner, and checks it: a decoder built with
// [Decoder.WithPartitionCheck] drops (whole event, [ReasonWrongPartition])
// every event whose user id does not hash to the partition it was read
// from. Which partition an event belongs to depends on the event alone.
//
// The key bytes are the user id as the producer keys the record with it:
// a JSON string's unescaped content, or an integer user id's decimal
// text as written in the message (the same bytes the user hash is taken
// of, see the package doc).

// Partitioner is a producer's key → partition function.
type Partitioner uint8

const (
	// PartitionerNone: no check.
	PartitionerNone Partitioner = iota
	// PartitionerMurmur2 is Kafka's default partitioner (the Java client's
	// BuiltInPartitioner for keyed records, librdkafka's "murmur2" and
	// "murmur2_random" for non-empty keys, kafka-go's Murmur2Balancer,
	// franz-go's StickyKeyPartitioner): toPositive(murmur2(key)) mod n.
	PartitionerMurmur2
	// PartitionerFNV1a is kafka-go's Hash balancer (and Sarama's default):
	// |int32(fnv1a32(key)) mod n|.
	PartitionerFNV1a
)

// ParsePartitioner maps kafka.distributed.partitioner ("murmur2",
// "fnv1a") to a Partitioner.
func ParsePartitioner(name string) (Partitioner, error) {
	switch name {
	case "murmur2":
		return PartitionerMurmur2, nil
	case "fnv1a":
		return PartitionerFNV1a, nil
	}
	return PartitionerNone, fmt.Errorf("decode: unknown partitioner %q (murmur2 or fnv1a)", name)
}

// String is the config name of the partitioner.
func (p Partitioner) String() string {
	switch p {
	case PartitionerMurmur2:
		return "murmur2"
	case PartitionerFNV1a:
		return "fnv1a"
	}
	return "none"
}

// Partition returns the partition, among n > 0, the partitioner assigns a
// record keyed key to.
func (p Partitioner) Partition(key []byte, n int) int {
	switch p {
	case PartitionerMurmur2:
		return int((Murmur2(key) & 0x7fffffff) % uint32(n))
	case PartitionerFNV1a:
		h := uint32(2166136261) // FNV-1a, 32 bits, inline: hash/fnv's New32a allocates on every event
		for _, c := range key {
			h ^= uint32(c)
			h *= 16777619
		}
		q := int32(h) % int32(n) // signed, as Sarama and kafka-go do
		if q < 0 {
			q = -q
		}
		return int(q)
	}
	panic("decode: partition of PartitionerNone")
}

// Murmur2 is the 32-bit murmur2 hash Kafka's Java client partitions keys
// with (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747b28c).
func Murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := n &^ 3
	switch n % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// WithPartitionCheck returns a copy of d that also drops, with
// [ReasonWrongPartition], every event whose user id part does not assign
// to partition p of n. The copy is immutable like d.
func (d *Decoder) WithPartitionCheck(part Partitioner, p, n int) (*Decoder, error) {
	if part != PartitionerMurmur2 && part != PartitionerFNV1a {
		return nil, fmt.Errorf("decode: partition check with partitioner %v", part)
	}
	if n <= 0 || p < 0 || p >= n {
		return nil, fmt.Errorf("decode: partition check of partition %d among %d", p, n)
	}
	c := *d
	c.part, c.partition, c.partitions = part, p, n
	return &c, nil
}

// checkPartition reports whether the user id bytes id (raw, as in the
// message; esc: a string with escapes) assign to d's partition.
func (d *Decoder) checkPartition(id []byte, esc bool) bool {
	if esc {
		var stack [256]byte
		buf := stack[:]
		if len(id) > len(buf) {
			buf = make([]byte, len(id)) // unescaping never lengthens
		}
		n, _ := unescape(buf, id)
		id = buf[:n]
	}
	return d.part.Partition(id, d.partitions) == d.partition
}
