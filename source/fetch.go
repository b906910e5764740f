package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
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
