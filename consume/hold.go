package consume

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/node"
)

// recordOf fills rec from the fetched message m for the decoder, reusing
// rec.Headers' storage.
func recordOf(rec *decode.Record, m *kafka.Message) {
	rec.Key, rec.Value = m.Key, m.Value
	rec.TimestampMs = -1
	if !m.Time.IsZero() {
		rec.TimestampMs = m.Time.UnixMilli()
	}
	rec.Headers = rec.Headers[:0]
	for _, h := range m.Headers {
		rec.Headers = append(rec.Headers, decode.Header{Key: h.Key, Value: h.Value})
	}
}

// Schema Registry holds: the back-off between two attempts at a record
// whose schema could not be fetched.
var holdBackoff = retry.Backoff{Initial: 200 * time.Millisecond, Max: 10 * time.Second, Jitter: true}

// decodeHeld decodes rec; while the decoder reports a hold (the Schema
// Registry unreachable: not bad input) it waits and decodes the same record
// again, so that the partition makes no progress — nothing counted, dropped
// or committed — until the schema is fetched. ok is false when ctx ended
// first.
//
// A held partition is marked unread in the session's watermarks: it holds
// the windows open (its arrival frontier stops advancing by the wall clock,
// and with watermark event it is never idle), so that the held record's
// window cannot close before the record is counted.
func decodeHeld(ctx context.Context, s *node.Node, sess *Session, p int, dec *decode.Decoder, rec *decode.Record, ev *decode.Event) (r decode.Reason, ok bool) {
	r = dec.DecodeRecord(rec, ev)
	if !r.Hold() {
		return r, true
	}
	b := holdBackoff
	sess.WM.SetUnread(p)
	s.Log.Warn("schema registry unavailable: holding the partition (nothing is dropped or committed) and retrying",
		zap.Int("partition", p), zap.Error(ev.Err))
	for r.Hold() {
		if b.Wait(ctx) != nil {
			return r, false
		}
		r = dec.DecodeRecord(rec, ev)
	}
	s.Log.Info("schema registry reachable again: the partition resumes", zap.Int("partition", p))
	return r, true
}
