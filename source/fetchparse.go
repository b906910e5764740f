package source

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Record batch attributes (v2).
const (
	attrCodec         = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// nextBatch takes the next record batch off the response: it skips it
// (read already, aborted, a marker) or makes it the batch being read.
func (f *Fetcher) nextBatch() error {
	r := &f.resp
	raw := r.raw
	// offset int64, length int32, partition leader epoch int32, magic int8
	if len(raw) < 17 {
		return f.truncated()
	}
	base := int64(binary.BigEndian.Uint64(raw))
	length := int64(int32(binary.BigEndian.Uint32(raw[8:])))
	if length < 5 {
		return fmt.Errorf("record batch at offset %d has length %d: corrupt response", base, length)
	}
	if 12+length > int64(len(raw)) {
		return f.truncated()
	}
	batch := raw[:12+length]
	r.raw = raw[12+length:]
	r.batches++
	if magic := int8(raw[16]); magic != 2 {
		if magic == 0 || magic == 1 {
			return f.legacyMessage(batch)
		}
		return fmt.Errorf("record batch at offset %d has unknown magic %d", base, magic)
	}
	var b kmsg.RecordBatch
	if err := b.ReadFrom(batch); err != nil {
		return fmt.Errorf("record batch at offset %d: %w", base, err)
	}
	last := base + int64(b.LastOffsetDelta)
	if last < f.next {
		return nil // read already (a batch that starts before the fetch offset)
	}
	if base >= r.lso {
		r.stop() // never past the last stable offset
		return nil
	}
	if b.Attributes&attrTransactional != 0 && r.aborted != nil {
		if firsts := r.aborted[b.ProducerID]; len(firsts) > 0 && base >= firsts[0] {
			// A batch of an aborted transaction, or its abort marker, which
			// ends it: the producer's later batches are not aborted (unless
			// a later entry says so).
			if b.Attributes&attrControl != 0 && isAbortMarker(b.Records) {
				if len(firsts) == 1 {
					delete(r.aborted, b.ProducerID)
				} else {
					r.aborted[b.ProducerID] = firsts[1:]
				}
			}
			f.skipTo(last + 1)
			return nil
		}
	}
	if b.Attributes&attrControl != 0 {
		f.skipTo(last + 1) // a commit marker (or an abort whose records were before the fetch offset)
		return nil
	}
	recs := b.Records
	if c := b.Attributes & attrCodec; c != 0 {
		codec := compress.Compression(c).Codec()
		if codec == nil {
			return fmt.Errorf("record batch at offset %d: unknown compression codec %d", base, c)
		}
		r.compressedInput.Reset(recs)
		zr := codec.NewReader(&r.compressedInput)
		r.decompressed.Reset()
		_, err := r.decompressed.ReadFrom(zr)
		zr.Close()
		if err != nil {
			return fmt.Errorf("record batch at offset %d: %s: %w", base, codec.Name(), err)
		}
		recs = r.decompressed.Bytes()
	}
	r.inBatch = true
	r.recs, r.left = recs, b.NumRecords
	r.base, r.last = base, last
	r.firstTs, r.maxTs, r.logAppend = b.FirstTimestamp, b.MaxTimestamp, b.Attributes&attrLogAppendTime != 0
	return nil
}

// truncated handles a response that ends in a partial batch (the broker cut
// it at the fetch's byte limit). Brokers answering fetch v3+ return at
// least one whole batch, so a first batch that is partial is an error (it
// would be fetched again and again), and it says which of two things it
// is: a batch whose own length field is above the limit (a broker that
// cut it anyway), or one that ends before its length says — under the
// limit, so the log holds a damaged batch (two brokers writing one data
// directory, a disk fault), which no fetch size fixes.
func (f *Fetcher) truncated() error {
	r := &f.resp
	if r.batches == 0 && len(r.raw) > 0 {
		return partialFirstBatch(r.raw, f.maxBytes)
	}
	r.stop()
	return nil
}

// partialFirstBatch is the error for a response whose first record batch,
// raw, is cut short (see truncated).
func partialFirstBatch(raw []byte, maxBytes int) error {
	if len(raw) < 12 { // not even the offset and the length
		return fmt.Errorf("the broker returned %d bytes, less than a record batch header, as the first record batch (fetch limit %d bytes): "+
			"the partition's log is damaged (two brokers writing one data directory? a disk fault?) or the broker is faulty", len(raw), maxBytes)
	}
	base := int64(binary.BigEndian.Uint64(raw))
	size := 12 + int64(int32(binary.BigEndian.Uint32(raw[8:])))
	if size > int64(maxBytes) {
		return fmt.Errorf("the record batch at offset %d is %d bytes, larger than the fetch limit of %d bytes, and the broker returned only %d of them "+
			"(brokers answering fetch v3+ return a first batch whole whatever the limit): the broker is not honouring the fetch protocol, or the log is damaged",
			base, size, maxBytes, len(raw))
	}
	return fmt.Errorf("the broker returned a partial record batch at offset %d (%d of the %d bytes its length field gives; the fetch limit of %d bytes is not the cause): "+
		"the partition's log is damaged — two brokers writing one data directory (two embedded brokers on one state.dir), a disk fault — "+
		"and fetching again returns the same bytes; repair or recreate the partition's log, or move the committed offset past it", base, len(raw), size, maxBytes)
}

// batchRecord returns the current batch's next record at or after f.next;
// ok is false when the batch is read to its end or stopped at the LSO
// (then r.inBatch is false).
func (f *Fetcher) batchRecord() (m kafka.Message, ok bool, err error) {
	r := &f.resp
	for r.left > 0 {
		length, n := binary.Varint(r.recs)
		if n <= 0 || length < 0 || length > int64(len(r.recs)-n) {
			return m, false, fmt.Errorf("record batch at offset %d: a record is cut short (%d of its records left): corrupt response", r.base, r.left)
		}
		rec := r.recs[n : n+int(length)]
		r.recs = r.recs[n+int(length):]
		r.left--
		if m, err = f.record(rec); err != nil {
			return m, false, err
		}
		if m.Offset < f.next {
			continue
		}
		if m.Offset >= r.lso {
			r.stop()
			return m, false, nil
		}
		return f.deliver(m), true, nil
	}
	return m, false, nil
}

// record decodes one v2 record of the current batch.
func (f *Fetcher) record(rec []byte) (kafka.Message, error) {
	r := &f.resp
	bad := func(what string) error {
		return fmt.Errorf("record batch at offset %d: bad record %s: corrupt response", r.base, what)
	}
	if len(rec) < 1 {
		return kafka.Message{}, bad("length")
	}
	rec = rec[1:] // attributes (unused)
	tsDelta, n := binary.Varint(rec)
	if n <= 0 {
		return kafka.Message{}, bad("timestamp")
	}
	rec = rec[n:]
	offDelta, n := binary.Varint(rec)
	if n <= 0 {
		return kafka.Message{}, bad("offset")
	}
	rec = rec[n:]
	key, rec, ok := varBytes(rec)
	if !ok {
		return kafka.Message{}, bad("key")
	}
	value, rec, ok := varBytes(rec)
	if !ok {
		return kafka.Message{}, bad("value")
	}
	nh, n := binary.Varint(rec)
	if n <= 0 || nh < 0 || nh > int64(len(rec)) {
		return kafka.Message{}, bad("header count")
	}
	rec = rec[n:]
	var headers []kafka.Header
	if nh > 0 {
		headers = make([]kafka.Header, nh)
		for i := range headers {
			var k []byte
			if k, rec, ok = varBytes(rec); !ok {
				return kafka.Message{}, bad("header key")
			}
			headers[i].Key = string(k)
			if headers[i].Value, rec, ok = varBytes(rec); !ok {
				return kafka.Message{}, bad("header value")
			}
		}
	}
	ts := r.firstTs + tsDelta
	f.brokerTime = r.logAppend
	if r.logAppend {
		ts = r.maxTs // LogAppendTime: the broker's time is the batch's max timestamp
	}
	return kafka.Message{Offset: r.base + offDelta, Key: key, Value: value, Headers: headers, Time: makeTime(ts)}, nil
}

// makeTime is kafka-go's conversion of a record timestamp (ms).
func makeTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// varBytes reads a varint-length byte string (length −1: nil).
func varBytes(b []byte) (v, rest []byte, ok bool) {
	l, n := binary.Varint(b)
	if n <= 0 || l < -1 || l > int64(len(b)-n) {
		return nil, b, false
	}
	if l < 0 {
		return nil, b[n:], true
	}
	return b[n : n+int(l)], b[n+int(l):], true
}

// isAbortMarker reports whether a control batch's first record is an abort
// marker (key: version int16, type int16; type 0 aborts, 1 commits).
func isAbortMarker(recs []byte) bool {
	length, n := binary.Varint(recs)
	if n <= 0 || length < 0 || length > int64(len(recs)-n) {
		return false
	}
	rec := recs[n : n+int(length)]
	if len(rec) < 1 {
		return false
	}
	rec = rec[1:]
	for range 2 { // timestamp and offset deltas
		if _, n = binary.Varint(rec); n <= 0 {
			return false
		}
		rec = rec[n:]
	}
	key, _, ok := varBytes(rec)
	return ok && len(key) >= 4 && key[2] == 0 && key[3] == 0
}

// legacyMessage reads a message of the message formats before Kafka 0.11
// (magic 0 and 1; a compressed one wraps a message set). They carry no
// transactions. Brokers up to Kafka 3 may still hold them.
func (f *Fetcher) legacyMessage(msg []byte) error {
	r := &f.resp
	r.legacy, r.li = r.legacy[:0], 0
	var err error
	r.legacy, err = appendLegacy(r.legacy, msg, 0)
	return err
}

// appendLegacy appends the messages of a v0/v1 message set to dst.
func appendLegacy(dst []kafka.Message, set []byte, depth int) ([]kafka.Message, error) {
	for len(set) >= 12 {
		off := int64(binary.BigEndian.Uint64(set))
		size := int64(int32(binary.BigEndian.Uint32(set[8:])))
		if size < 0 || 12+size > int64(len(set)) {
			break // a partial message ends the set
		}
		body := set[12 : 12+size]
		set = set[12+size:]
		// crc int32, magic int8, attributes int8, [timestamp int64], key, value
		if len(body) < 6 {
			return dst, fmt.Errorf("message at offset %d: too short", off)
		}
		magic, attrs := body[4], body[5]
		p := body[6:]
		ts := int64(-1)
		if magic == 1 {
			if len(p) < 8 {
				return dst, fmt.Errorf("message at offset %d: too short", off)
			}
			ts = int64(binary.BigEndian.Uint64(p))
			p = p[8:]
		}
		key, p, ok := bytes32(p)
		if !ok {
			return dst, fmt.Errorf("message at offset %d: bad key", off)
		}
		value, _, ok := bytes32(p)
		if !ok {
			return dst, fmt.Errorf("message at offset %d: bad value", off)
		}
		c := attrs & attrCodec
		if c == 0 {
			dst = append(dst, kafka.Message{Offset: off, Key: key, Value: value, Time: makeTime(ts)})
			continue
		}
		codec := compress.Compression(c).Codec()
		if codec == nil || depth > 0 {
			return dst, fmt.Errorf("message at offset %d: unknown or nested compression %d", off, c)
		}
		zr := codec.NewReader(bytes.NewReader(value))
		var inner bytes.Buffer
		_, err := inner.ReadFrom(zr)
		zr.Close()
		if err != nil {
			return dst, fmt.Errorf("message at offset %d: %s: %w", off, codec.Name(), err)
		}
		start := len(dst)
		if dst, err = appendLegacy(dst, inner.Bytes(), depth+1); err != nil {
			return dst, err
		}
		if magic == 1 && len(dst) > start {
			// Inner offsets are relative; the wrapper carries the last
			// one's absolute offset.
			shift := off - dst[len(dst)-1].Offset
			for i := start; i < len(dst); i++ {
				dst[i].Offset += shift
				if attrs&attrLogAppendTime != 0 {
					dst[i].Time = makeTime(ts)
				}
			}
		}
	}
	return dst, nil
}

// bytes32 reads an int32-length byte string (−1: nil).
func bytes32(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	l := int64(int32(binary.BigEndian.Uint32(b)))
	if l < -1 || l > int64(len(b)-4) {
		return nil, b, false
	}
	if l < 0 {
		return nil, b[4:], true
	}
	return b[4 : 4+l], b[4+l:], true
}
