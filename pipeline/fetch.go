package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
)

// connFetcher reads one partition in offset order with fetch requests on a
// kafka.Conn to the partition's leader. It replaces kafka-go's Reader on the
// hot path: the Reader runs a goroutine per partition and hands every message
// over a channel, which `stage bench` measured as the stage's largest cost
// (docs/bench.md). Errors are returned to the caller, which backs off and
// calls fetch again: the connection is re-dialled (finding the new leader
// after a leader change) and reading resumes at the next offset. An empty
// fetch (no data within maxWait: kafka-go reports RequestTimedOut, or the
// batch simply ends) is not an error: fetch polls again on the same
// connection. The connection is closed when the ctx of the fetch call that
// dialled it ends; pass the same ctx to every call.
type connFetcher struct {
	dialer    *kafka.Dialer
	brokers   []string
	topic     string
	partition int
	maxWait   time.Duration
	maxBytes  int
	// next is the next offset to read; negative (kafka.FirstOffset) until
	// the first fetch resolves it to the partition's first offset.
	next int64
	// onReset is told when the next offset was no longer retained and
	// reading restarted at the first retained offset.
	onReset func(from, to int64)
	// onCaughtUp, when set, is told the wall time at which a fetch that came
	// back at the high watermark without a further message was sent (every
	// record committed before then has been returned).
	onCaughtUp func(sent time.Time)
	// now is the wall clock; sent is when the current fetch was sent.
	now   func() time.Time
	sent  time.Time
	hwmOK bool // the current batch's response header (and high watermark) was read

	conn       *kafka.Conn
	stopClose  func() bool // undoes the context.AfterFunc that closes conn
	batch      *kafka.Batch
	checkRange bool
}

func newConnFetcher(dialer *kafka.Dialer, brokers []string, topic string, partition int, next int64) *connFetcher {
	if dialer == nil {
		dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	return &connFetcher{dialer: dialer, brokers: brokers, topic: topic, partition: partition,
		maxWait: 500 * time.Millisecond, maxBytes: 16 << 20, next: next, now: time.Now}
}

// fetch returns the next message. It blocks until one is there, ctx ends,
// or the connection fails.
func (f *connFetcher) fetch(ctx context.Context) (kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return kafka.Message{}, err
		}
		if f.batch == nil {
			if err := f.open(ctx); err != nil {
				f.drop()
				if ctx.Err() != nil {
					return kafka.Message{}, ctx.Err()
				}
				return kafka.Message{}, err
			}
		}
		m, err := f.batch.ReadMessage()
		if err == nil {
			f.next = m.Offset + 1
			m.Topic, m.Partition = f.topic, f.partition
			m.HighWaterMark = f.batch.HighWaterMark()
			return m, nil
		}
		if o := f.batch.Offset(); o > f.next {
			f.next = o // compacted tail / control records
		}
		hwm := f.batch.HighWaterMark()
		cerr := f.batch.Close()
		f.batch = nil
		if (errors.Is(err, io.EOF) && cerr == nil) || (errors.Is(err, kafka.RequestTimedOut) && (cerr == nil || errors.Is(cerr, kafka.RequestTimedOut))) {
			// The fetch is consumed (or came back empty after maxWait):
			// fetch again. At the high watermark, everything committed
			// before the fetch was sent has been read.
			// Only a response whose header was read says so (hwmOK): a
			// fetch that failed before it carries no high watermark.
			if f.onCaughtUp != nil && f.hwmOK && f.next >= hwm {
				f.onCaughtUp(f.sent)
			}
			continue
		}
		if cerr != nil {
			err = cerr
		}
		if errors.Is(err, kafka.OffsetOutOfRange) {
			// The next offset is no longer retained (retention ran past the
			// committed offset): restart at the first retained offset.
			f.drop() // the error left unread bytes on conn: re-dial, open() re-checks the range
			continue
		}
		f.drop()
		if ctx.Err() != nil {
			return kafka.Message{}, ctx.Err()
		}
		return kafka.Message{}, fmt.Errorf("fetch %s/%d at offset %d: %w", f.topic, f.partition, f.next, err)
	}
}

// open dials the leader if needed and starts a fetch at f.next.
func (f *connFetcher) open(ctx context.Context) error {
	if f.conn == nil {
		var err error
		for _, b := range f.brokers {
			var c *kafka.Conn
			if c, err = f.dialer.DialLeader(ctx, "tcp", b, f.topic, f.partition); err == nil {
				f.conn = c
				f.checkRange = true
				// Bound the offset look-ups below: a half-open broker must
				// not hang the partition.
				_ = c.SetDeadline(time.Now().Add(f.dialTimeout()))
				f.stopClose = context.AfterFunc(ctx, func() { c.Close() })
				break
			}
		}
		if f.conn == nil {
			return fmt.Errorf("dial leader of %s/%d: %w", f.topic, f.partition, err)
		}
	}
	if f.checkRange {
		first, last, err := f.conn.ReadOffsets()
		if err != nil {
			return fmt.Errorf("offsets of %s/%d: %w", f.topic, f.partition, err)
		}
		switch {
		case f.next < 0:
			f.next = first
		case f.next < first:
			if f.onReset != nil {
				f.onReset(f.next, first)
			}
			f.next = first
		case f.next > last:
			return fmt.Errorf("offset %d of %s/%d is past the log end %d: %w", f.next, f.topic, f.partition, last, kafka.OffsetOutOfRange)
		}
		f.checkRange = false
	}
	if _, err := f.conn.Seek(f.next, kafka.SeekAbsolute|kafka.SeekDontCheck); err != nil {
		return fmt.Errorf("seek %s/%d to %d: %w", f.topic, f.partition, f.next, err)
	}
	// Both directions: the dial-time deadline above also bounds writes.
	if err := f.conn.SetDeadline(time.Now().Add(f.maxWait + 10*time.Second)); err != nil {
		return fmt.Errorf("set deadline on %s/%d: %w", f.topic, f.partition, err)
	}
	f.sent = f.now()
	f.batch = f.conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: f.maxBytes, MaxWait: f.maxWait})
	// Err is set at creation only when the response header could not be
	// read; otherwise the batch's high watermark is the broker's.
	f.hwmOK = f.batch.Err() == nil
	return nil
}

// drop closes the connection (a later fetch re-dials).
func (f *connFetcher) drop() {
	if f.batch != nil {
		_ = f.batch.Close()
		f.batch = nil
	}
	if f.conn != nil {
		if f.stopClose != nil {
			f.stopClose()
		}
		_ = f.conn.Close()
		f.conn = nil
	}
}

func (f *connFetcher) dialTimeout() time.Duration {
	if f.dialer.Timeout > 0 {
		return f.dialer.Timeout
	}
	return 10 * time.Second
}

// Close releases the connection.
func (f *connFetcher) Close() error {
	f.drop()
	return nil
}
