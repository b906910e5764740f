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
// While held, Stats.SchemaRegistryHeld counts the partition (the metric
// dpstage_schema_registry_held_partitions, and the readiness condition
// schema_registry_unreachable: not ready) and SchemaRegistryRetries the
// attempts. A held partition is marked unread in the session's watermarks: it holds
// the windows open (its arrival frontier stops advancing by the wall clock,
// and with watermark event it is never idle), so that the held record's
// window cannot close before the record is counted.
//
// A hold that lasts is repeated in the log every holdLogEvery with the
// held offset and for how long, at error level once it passed
// holdErrorAfter; a registry that refuses the stage's credentials (401,
// 403: events.schema_registry.username/password, or its TLS identity) is
// said so at once, at error level. Either way the partition stays held:
// a refused or broken registry is not bad input, and dropping the records
// would lose them for good (issue 24 item 4), while the readiness
// condition and the metric tell the operator.
func decodeHeld(ctx context.Context, s *node.Node, sess *Session, p int, offset int64, dec *decode.Decoder, rec *decode.Record, ev *decode.Event) (r decode.Reason, ok bool) {
	r = dec.DecodeRecord(rec, ev)
	if !r.Hold() {
		return r, true
	}
	b := holdBackoff
	sess.WM.SetUnread(p)
	// The metric and the readiness condition schema_registry_unreachable
	// (node.Readiness) follow the partitions held.
	s.Stats.SchemaRegistryHeld.Add(1)
	defer s.Stats.SchemaRegistryHeld.Add(-1)
	start := time.Now()
	logHold(s, p, offset, 0, ev.Err)
	logged := start
	for r.Hold() {
		if b.Wait(ctx) != nil {
			return r, false
		}
		s.Stats.SchemaRegistryRetries.Add(1)
		r = dec.DecodeRecord(rec, ev)
		if now := time.Now(); r.Hold() && now.Sub(logged) >= holdLogEvery {
			logged = now
			logHold(s, p, offset, now.Sub(start), ev.Err)
		}
	}
	s.Log.Info("schema registry reachable again: the partition resumes", zap.Int("partition", p), zap.Int64("offset", offset),
		zap.Duration("held", time.Since(start).Round(time.Millisecond)))
	return r, true
}

// holdLogEvery is how often a lasting hold is logged again; holdErrorAfter
// when it turns from a warning into an error.
const (
	holdLogEvery   = time.Minute
	holdErrorAfter = 5 * time.Minute
)

// logHold logs a hold of partition p at offset, held for so far.
func logHold(s *node.Node, p int, offset int64, held time.Duration, err error) {
	fields := []zap.Field{zap.Int("partition", p), zap.Int64("offset", offset), zap.Duration("held", held.Round(time.Second)), zap.Error(err)}
	switch {
	case decode.RegistryAuthRefused(err):
		s.Log.Error("schema registry refuses the stage's credentials (401/403): holding the partition (nothing is dropped or committed); "+
			"fix events.schema_registry.username/password (or its TLS identity) — releases wait until then", fields...)
	case held >= holdErrorAfter:
		s.Log.Error("schema registry still unavailable: the partition is held (nothing is dropped or committed) and every release waits", fields...)
	default:
		s.Log.Warn("schema registry unavailable: holding the partition (nothing is dropped or committed) and retrying", fields...)
	}
}

// watchSchemas logs, once per schema id the registry resolves, the
// configured fields its schema lacks or reaches only through a list (a
// renamed user or time field would otherwise show only as drops), and why
// a schema is unusable.
func watchSchemas(s *node.Node, dec *decode.Decoder) {
	dec.OnSchema(func(n decode.SchemaNote) {
		switch {
		case n.Err != nil:
			s.Log.Error("schema registry: schema not usable; its records are dropped as unknown_schema_id",
				zap.Int("schema_id", n.ID), zap.Error(n.Err))
		case len(n.Unresolved) > 0 || len(n.ThroughList) > 0:
			s.Log.Warn("schema registry: a new schema lacks configured fields; its records will miss them (renamed? add the old name as an Avro alias, or change the config at a budget period's boundary)",
				zap.Int("schema_id", n.ID), zap.Strings("missing_fields", n.Unresolved), zap.Strings("fields_through_a_list", n.ThroughList))
		}
	})
}
