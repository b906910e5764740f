package source

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fetcher reads one partition in offset order with fetch requests to
// the partition's leader, with read-committed isolation. It replaces
// kafka-go's Reader on the hot path: the Reader runs a goroutine per
// partition and hands every message over a channel, which `stage bench`
// measured as the stage's largest cost (docs/bench.md).
//
// # Read committed
//
// The requests are Kafka protocol Fetch (v4 or later) encoded with kmsg,
// IsolationLevel 1 (read_committed), on a connection of our own
// (brokerConn), because kafka-go's Conn and Batch hide what read-committed
// reading needs: its Batch drops the response's aborted-transaction list,
// the batch's producer id and its control flag, so even with ReadCommitted
// it returns the records of aborted transactions and the commit/abort
// markers as messages (segmentio/kafka-go#1332). Here, as in the Java
// consumer:
//
//   - the broker returns only records below the last stable offset (LSO,
//     the first offset of the oldest open transaction); records at or past
//     the LSO in a response are not returned either;
//   - a transactional batch of a producer listed in the response's aborted
//     transactions, at or after that transaction's first offset, is skipped,
//     up to and including the producer's abort marker (which ends that
//     aborted transaction: the producer's later batches count again);
//   - control batches (commit and abort markers) are never returned.
//
// Skipped offsets still advance the next offset: a response whose last
// offsets were skipped says so through onSkipped, so that the caller can
// treat them as processed (commit past them).
//
// # Contract
//
// Errors are returned to the caller, which backs off and calls fetch again:
// the connection is re-dialled (finding the new leader after a leader
// change) and reading resumes at the next offset. A fetch that returns no
// records within maxWait is not an error: fetch polls again on the same
// connection. The connection is closed when the ctx of the fetch call that
// dialled it ends; pass the same ctx to every call. A returned message's
// Key, Value and Headers alias the fetcher's buffers: they are valid until
// the next call to fetch.
type Fetcher struct {
	dialer    *kafka.Dialer
	brokers   []string
	topic     string
	partition int
	maxWait   time.Duration
	maxBytes  int
	// next is the next offset to read; negative (kafka.FirstOffset) until
	// the first fetch resolves it to the partition's first offset.
	next int64
	// OnReset is told when the next offset was no longer retained and
	// reading restarted at the first retained offset.
	OnReset func(from, to int64)
	// OnCaughtUp, when set, is told the wall time at which a fetch was sent
	// whose response was read to the high watermark (every record committed
	// before then has been returned, or skipped as aborted or a marker).
	OnCaughtUp func(sent time.Time)
	// OnBehind, when set, is told after a response that was read to its end
	// without reaching the high watermark how many offsets are left
	// (high watermark − next): records not read yet, or held back by an
	// open transaction (next is at the LSO).
	OnBehind func(left int64)
	// OnSkipped, when set, is told the next offset at the end of a response
	// whose last offsets were skipped (markers, aborted transactions, a
	// compacted batch tail) rather than returned: every offset before it
	// needs nothing more.
	OnSkipped func(next int64)
	// Now is the wall clock; sent is when the current fetch was sent.
	Now  func() time.Time
	sent time.Time

	conn      *brokerConn
	stopClose func() bool // undoes the context.AfterFunc that closes conn
	// checkRange: look the partition's offset range up before the next
	// fetch (after a dial or OffsetOutOfRange); rangeOK: it was looked up
	// and no fetch was answered since.
	checkRange, rangeOK       bool
	fetchVersion, listVersion int16

	resp fetchResponse

	// brokerTime: the timestamp of the record fetch returned last was set by
	// the broker when it appended the record (a v2 batch with the
	// LogAppendTime attribute: the topic's message.timestamp.type), not by
	// the producer. Only such times are non-decreasing along a partition's
	// offsets, so only they may advance the arrival frontier (watermarks).
	brokerTime bool
}

// fetchResponse is the state of reading one fetch response.
type fetchResponse struct {
	active   bool
	raw      []byte // record batches not read yet
	hwm, lso int64
	// aborted maps a producer id to the first offsets of its aborted
	// transactions in this response, ascending; nil when there are none.
	aborted map[int64][]int64
	// returned is the offset after the last record returned.
	returned int64
	batches  int // complete batches read

	// The v2 batch being read.
	inBatch         bool
	recs            []byte // its records not read yet (decompressed)
	left            int32  // records left by its count
	base, last      int64  // first and last offset
	firstTs, maxTs  int64
	logAppend       bool
	decompressed    bytes.Buffer
	compressedInput bytes.Reader

	// Messages of a legacy (magic 0 or 1) message, and the next to return.
	legacy []kafka.Message
	li     int
}

func NewFetcher(dialer *kafka.Dialer, brokers []string, topic string, partition int, next int64) *Fetcher {
	if dialer == nil {
		dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	return &Fetcher{dialer: dialer, brokers: brokers, topic: topic, partition: partition,
		maxWait: FetchMaxWait, maxBytes: fetchMaxBytes, next: next, Now: time.Now}
}

const (
	// FetchMaxWait is how long the broker holds a fetch at the partition's
	// end before answering empty: a fetch loop at the end polls this often.
	FetchMaxWait = 500 * time.Millisecond
	// FetchRetryBackoff is how long consume waits after a failed fetch.
	FetchRetryBackoff = 500 * time.Millisecond
	// fetchMaxBytes bounds a fetch response (the Java consumer's
	// max.partition.fetch.bytes default): the response is read whole into
	// one buffer per partition. A larger first batch still comes whole
	// (brokers answer fetch v3+ so). Measured on the embedded broker, 1 MiB
	// reads faster than 16 MiB (less memory traffic per response).
	fetchMaxBytes = 1 << 20
)

// Fetch protocol versions used: v4 is the first with the isolation level,
// the LSO and the aborted transactions; up to v11 topics are named (v13
// addresses them by id). ListOffsets v1 (v0 is gone from Kafka 4) to v4;
// Metadata v1 to v8.
const (
	fetchMinVersion, fetchMaxVersion = 4, 11
	listMinVersion, listMaxVersion   = 1, 4
	metaMinVersion, metaMaxVersion   = 1, 8
)

// errRecheck: the fetch was out of range; look the range up and fetch again.
var errRecheck = errors.New("offset out of range: recheck")

// fetch returns the next record. It blocks until one is there, ctx ends, or
// the connection fails.
func (f *Fetcher) Fetch(ctx context.Context) (kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return kafka.Message{}, err
		}
		if f.resp.active {
			m, ok, err := f.nextRecord()
			if err != nil {
				f.drop()
				return kafka.Message{}, fmt.Errorf("fetch %s/%d at offset %d: %w", f.topic, f.partition, f.next, err)
			}
			if ok {
				return m, nil
			}
			f.endResponse()
			continue
		}
		err := f.request(ctx)
		if err == nil || errors.Is(err, errRecheck) {
			continue
		}
		if ctx.Err() != nil {
			f.drop()
			return kafka.Message{}, ctx.Err()
		}
		f.drop()
		return kafka.Message{}, fmt.Errorf("fetch %s/%d at offset %d: %w", f.topic, f.partition, f.next, err)
	}
}

// request dials the leader if needed and reads one fetch response at
// f.next into f.resp.
func (f *Fetcher) request(ctx context.Context) error {
	if f.conn == nil {
		if err := f.dial(ctx); err != nil {
			return err
		}
	}
	if f.checkRange {
		if err := f.checkOffsets(); err != nil {
			return err
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.Version = f.fetchVersion
	req.MaxWaitMillis = int32(f.maxWait.Milliseconds())
	req.MinBytes = 1
	req.MaxBytes = int32(f.maxBytes)
	req.IsolationLevel = 1 // read_committed
	req.SessionID, req.SessionEpoch = 0, -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = f.topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = int32(f.partition)
	rp.FetchOffset = f.next
	rp.PartitionMaxBytes = int32(f.maxBytes)
	rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	// Both directions: a half-open broker must not hang the partition.
	if err := f.conn.setDeadline(time.Now().Add(f.maxWait + 10*time.Second)); err != nil {
		return err
	}
	f.sent = f.Now()
	resp := kmsg.NewPtrFetchResponse()
	if err := f.conn.request(req, resp); err != nil {
		f.drop() // the stream is in an unknown state
		return err
	}
	if resp.ErrorCode != 0 {
		return kafka.Error(resp.ErrorCode)
	}
	var sp *kmsg.FetchResponseTopicPartition
	for i := range resp.Topics {
		if resp.Topics[i].Topic != f.topic {
			continue
		}
		for j := range resp.Topics[i].Partitions {
			if resp.Topics[i].Partitions[j].Partition == int32(f.partition) {
				sp = &resp.Topics[i].Partitions[j]
			}
		}
	}
	if sp == nil {
		return fmt.Errorf("fetch response without %s/%d", f.topic, f.partition)
	}
	if sp.ErrorCode != 0 {
		if sp.ErrorCode == int16(kafka.OffsetOutOfRange) && !f.rangeOK {
			// The next offset is no longer retained (retention ran past
			// the committed offset): look the range up again and restart
			// at the first retained offset. Right after a look-up that
			// found it in range, the error goes to the caller (no loop).
			f.checkRange = true
			return errRecheck
		}
		return kafka.Error(sp.ErrorCode)
	}
	f.rangeOK = false
	r := &f.resp
	r.active, r.inBatch = true, false
	r.raw = sp.RecordBatches
	r.hwm, r.lso = sp.HighWatermark, sp.LastStableOffset
	if r.lso < 0 || r.lso > r.hwm {
		r.lso = r.hwm
	}
	r.aborted = nil
	if len(sp.AbortedTransactions) > 0 {
		r.aborted = make(map[int64][]int64)
		for _, a := range sp.AbortedTransactions {
			r.aborted[a.ProducerID] = append(r.aborted[a.ProducerID], a.FirstOffset)
		}
		for pid := range r.aborted {
			slices.Sort(r.aborted[pid]) // brokers need not send them in order
		}
	}
	r.returned, r.batches = f.next, 0
	r.legacy, r.li = r.legacy[:0], 0
	return nil
}

// endResponse tells the callbacks where reading a response ended.
func (f *Fetcher) endResponse() {
	r := &f.resp
	r.active = false
	if f.next > r.returned && f.OnSkipped != nil {
		f.OnSkipped(f.next)
	}
	if f.next >= r.hwm {
		if f.OnCaughtUp != nil {
			f.OnCaughtUp(f.sent)
		}
	} else if f.OnBehind != nil {
		f.OnBehind(r.hwm - f.next)
	}
}

// stop ends the current response here (the LSO or a truncated batch).
func (r *fetchResponse) stop() {
	r.raw, r.inBatch, r.legacy, r.li = nil, false, r.legacy[:0], 0
}

// nextRecord returns the response's next record at or after f.next, if any.
func (f *Fetcher) nextRecord() (kafka.Message, bool, error) {
	r := &f.resp
	for {
		if r.li < len(r.legacy) {
			m := r.legacy[r.li]
			r.li++
			if m.Offset < f.next {
				continue
			}
			if m.Offset >= r.lso {
				r.stop()
				continue
			}
			// A pre-0.11 message: its timestamp (if any) is not taken as
			// the broker's, whatever its attribute (brokerTime).
			f.brokerTime = false
			return f.deliver(m), true, nil
		}
		if r.inBatch {
			m, ok, err := f.batchRecord()
			if err != nil || ok {
				return m, ok, err
			}
			if r.inBatch { // read to its end (not stopped at the LSO)
				r.inBatch = false
				f.skipTo(r.last + 1) // a compacted tail
			}
			continue
		}
		if len(r.raw) == 0 {
			return kafka.Message{}, false, nil
		}
		if err := f.nextBatch(); err != nil {
			return kafka.Message{}, false, err
		}
	}
}

func (f *Fetcher) deliver(m kafka.Message) kafka.Message {
	f.next = m.Offset + 1
	f.resp.returned = f.next
	m.Topic, m.Partition, m.HighWaterMark = f.topic, f.partition, f.resp.hwm
	return m
}

func (f *Fetcher) skipTo(o int64) {
	if o > f.next {
		f.next = o
	}
}

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
// would be fetched again and again).
func (f *Fetcher) truncated() error {
	r := &f.resp
	if r.batches == 0 && len(r.raw) > 0 {
		return fmt.Errorf("the first record batch (%d bytes returned) exceeds the fetch limit of %d bytes", len(r.raw), f.maxBytes)
	}
	r.stop()
	return nil
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

// dial connects to the partition's leader: metadata from the first
// bootstrap broker that answers, then the leader (the same connection when
// the leader is that broker).
func (f *Fetcher) dial(ctx context.Context) error {
	var lastErr error
	for _, addr := range f.brokers {
		c, err := dialBroker(ctx, f.dialer, addr)
		if err != nil {
			lastErr = err
			continue
		}
		leader, err := f.leader(c)
		if err != nil {
			c.Close()
		} else if !sameAddr(leader, addr) {
			c.Close()
			c, err = dialBroker(ctx, f.dialer, leader)
		}
		if err == nil {
			if f.fetchVersion, err = c.version(1, fetchMinVersion, fetchMaxVersion); err == nil {
				f.listVersion, err = c.version(2, listMinVersion, listMaxVersion)
			}
			if err != nil {
				c.Close()
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lastErr = err
			continue
		}
		f.conn = c
		f.checkRange = true
		f.stopClose = context.AfterFunc(ctx, func() { c.Close() })
		return nil
	}
	return fmt.Errorf("dial leader of %s/%d: %w", f.topic, f.partition, lastErr)
}

// leader asks c for the address of the partition's leader.
func (f *Fetcher) leader(c *brokerConn) (string, error) {
	t, brokers, err := topicMetadata(c, f.topic, f.dialTimeout())
	if err != nil {
		return "", err
	}
	leader := int32(-1)
	found := false
	for _, p := range t.Partitions {
		if p.Partition == int32(f.partition) {
			found, leader = true, p.Leader
			if leader < 0 && p.ErrorCode != 0 {
				return "", fmt.Errorf("metadata of %s/%d: %w", f.topic, f.partition, kafka.Error(p.ErrorCode))
			}
		}
	}
	if !found {
		return "", fmt.Errorf("metadata of %s/%d: %w", f.topic, f.partition, kafka.UnknownTopicOrPartition)
	}
	if leader < 0 {
		return "", fmt.Errorf("metadata of %s/%d: %w", f.topic, f.partition, kafka.LeaderNotAvailable)
	}
	for _, b := range brokers {
		if b.NodeID == leader {
			return net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))), nil
		}
	}
	return "", fmt.Errorf("metadata of %s/%d: leader %d is not among the brokers: %w", f.topic, f.partition, leader, kafka.LeaderNotAvailable)
}

// topicMetadata asks c for topic's metadata (fresh from the broker: no
// client cache in between).
func topicMetadata(c *brokerConn, topic string, timeout time.Duration) (*kmsg.MetadataResponseTopic, []kmsg.MetadataResponseBroker, error) {
	v, err := c.version(3, metaMinVersion, metaMaxVersion)
	if err != nil {
		return nil, nil, err
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Version = v
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	if err := c.setDeadline(time.Now().Add(timeout)); err != nil {
		return nil, nil, err
	}
	resp := kmsg.NewPtrMetadataResponse()
	if err := c.request(req, resp); err != nil {
		return nil, nil, fmt.Errorf("metadata: %w", err)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode != 0 {
			return nil, nil, fmt.Errorf("metadata of %s: %w", topic, kafka.Error(t.ErrorCode))
		}
		return t, resp.Brokers, nil
	}
	return nil, nil, fmt.Errorf("metadata of %s: %w", topic, kafka.UnknownTopicOrPartition)
}

// checkOffsets resolves a negative next offset to the first retained one,
// and moves a next offset that retention removed to the first retained
// one (onReset). A next offset past the high watermark (a truncated log)
// is an error the caller sees.
func (f *Fetcher) checkOffsets() error {
	first, err := f.listOffset(-2)
	if err != nil {
		return err
	}
	last, err := f.listOffset(-1)
	if err != nil {
		return err
	}
	switch {
	case f.next < 0:
		f.next = first
	case f.next < first:
		if f.OnReset != nil {
			f.OnReset(f.next, first)
		}
		f.next = first
	case f.next > last:
		return fmt.Errorf("offset %d of %s/%d is past the log end %d: %w", f.next, f.topic, f.partition, last, kafka.OffsetOutOfRange)
	}
	f.checkRange, f.rangeOK = false, true
	return nil
}

// listOffset returns the partition's first (ts −2) or end (−1: the high
// watermark) offset.
func (f *Fetcher) listOffset(ts int64) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.Version = f.listVersion
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = f.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = int32(f.partition)
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if err := f.conn.setDeadline(time.Now().Add(f.dialTimeout())); err != nil {
		return 0, err
	}
	resp := kmsg.NewPtrListOffsetsResponse()
	if err := f.conn.request(req, resp); err != nil {
		f.drop()
		return 0, fmt.Errorf("offsets of %s/%d: %w", f.topic, f.partition, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if t.Topic == f.topic && p.Partition == int32(f.partition) {
				if p.ErrorCode != 0 {
					return 0, fmt.Errorf("offsets of %s/%d: %w", f.topic, f.partition, kafka.Error(p.ErrorCode))
				}
				return p.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("offsets of %s/%d: not in the response", f.topic, f.partition)
}

// drop closes the connection (a later fetch re-dials) and forgets the
// response being read.
func (f *Fetcher) drop() {
	f.resp.active = false
	f.resp.stop()
	if f.conn != nil {
		if f.stopClose != nil {
			f.stopClose()
		}
		_ = f.conn.Close()
		f.conn = nil
	}
}

func (f *Fetcher) dialTimeout() time.Duration {
	if f.dialer.Timeout > 0 {
		return f.dialer.Timeout
	}
	return 10 * time.Second
}

// Close releases the connection.
func (f *Fetcher) Close() error {
	f.drop()
	return nil
}

// BrokerTime reports whether the timestamp of the record Fetch returned
// last was set by the broker (LogAppendTime), not by the producer.
func (f *Fetcher) BrokerTime() bool { return f.brokerTime }

// Sent is the wall time at which the current fetch was sent.
func (f *Fetcher) Sent() time.Time { return f.sent }
