package kafkapartial

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/partial"
)

// ReaderConfig configures the releaser's member of the release group.
type ReaderConfig struct {
	Brokers []string
	// Group is the release group (config.Kafka.ReleaseGroupID), Topic the
	// partials topic (config.Kafka.PartialsTopic).
	Group, Topic string
	// SessionTimeout is kafka.session_timeout: how long a dead releaser
	// keeps partition 0 before the group hands it to a standby.
	SessionTimeout time.Duration
	// OnAssigned is called when this member is assigned partition 0 of
	// the partials topic; OnRevoked when it loses it (lost: the group
	// dropped this member, it did not give the partition up). Both are
	// called from kgo's group goroutine, one at a time; OnRevoked must
	// return only once nothing is released any more (kgo hands the
	// partition on when it returns), and neither may call Close.
	OnAssigned func()
	OnRevoked  func(lost bool)
	// Warn, when set, is told of what Poll skips: a lost group session
	// (kgo rejoins) or data loss (kgo resets the offset).
	Warn func(error)
	// Opts are more kgo options (tests).
	Opts []kgo.Opt
}

// Reader is the releaser's kgo group client on the partials topic:
// cooperative-sticky, read_committed (an aborted bounder transaction's
// partial is never returned: kafka-go would return it, issue #1332, and
// must never read this topic), offsets committed by the caller only
// (Commit, after a release), consuming from the group's committed offset
// or the topic's start.
type Reader struct {
	cl    *kgo.Client
	kill  context.CancelFunc // cancels cl's context (CloseWithin)
	topic string
	warn  func(error)
}

// NewReader joins the release group.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if has0(m[cfg.Topic]) && cfg.OnAssigned != nil {
				cfg.OnAssigned()
			}
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if has0(m[cfg.Topic]) && cfg.OnRevoked != nil {
				cfg.OnRevoked(false)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if has0(m[cfg.Topic]) && cfg.OnRevoked != nil {
				cfg.OnRevoked(true)
			}
		}),
	}
	if cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(cfg.SessionTimeout), kgo.HeartbeatInterval(HeartbeatInterval(cfg.SessionTimeout)))
	}
	kctx, kill := context.WithCancel(context.Background())
	cl, err := kgo.NewClient(append(append(opts, kgo.WithContext(kctx)), cfg.Opts...)...)
	if err != nil {
		kill()
		return nil, fmt.Errorf("kafkapartial: release group client: %w", err)
	}
	return &Reader{cl: cl, kill: kill, topic: cfg.Topic, warn: cfg.Warn}, nil
}

// HeartbeatInterval is the release group member's heartbeat interval
// for a session timeout: a fifth of it, at least 100 ms. A member paused
// past its session learns that the group dropped it from the first
// heartbeat answered after it resumes (its timer is due by then).
func HeartbeatInterval(sessionTimeout time.Duration) time.Duration {
	return max(sessionTimeout/5, 100*time.Millisecond)
}

func has0(ps []int32) bool {
	for _, p := range ps {
		if p == 0 {
			return true
		}
	}
	return false
}

// Record is one decoded partials-topic record with its offset: a Partial,
// or (Partial nil) an Idle record, or (both nil) a record that does not
// decode, with Err (partial.ErrFormat). The Partial is
// partial.DecodeForMerge's: read-only, its count cells through Cells (its
// Counts is nil when it came Arrow-encoded).
type Record struct {
	Offset  int64
	Partial *partial.Partial
	Idle    *partial.Idle
	Err     error
}

// Poll waits for committed partials (or ctx) and decodes them, in log
// order. A record that does not decode (written by something else, or by
// another version) is returned with Err (partial.ErrFormat), for the
// caller to skip, log and count: stopping on it would stop every releaser
// that reads it, for the topic's retention (issue 22 item 2), and
// completeness is presence-based, so a skipped record holds its window
// rather than leave its counts out. Poll returns ctx's error when ctx
// ends before any record comes.
func (r *Reader) Poll(ctx context.Context) ([]Record, error) {
	fs := r.cl.PollFetches(ctx)
	if fs.IsClientClosed() {
		return nil, kgo.ErrClientClosed
	}
	// Records polled are returned even when ctx ended meanwhile: kgo does
	// not hand them out again (a caller polling with a deadline would lose
	// them).
	if err := ctx.Err(); err != nil && fs.NumRecords() == 0 {
		return nil, err
	}
	for _, fe := range fs.Errors() {
		var gs *kgo.ErrGroupSession
		var dl *kgo.ErrDataLoss
		switch {
		case errors.Is(fe.Err, context.Canceled) || errors.Is(fe.Err, context.DeadlineExceeded):
			continue // ctx ended: handled above
		case errors.As(fe.Err, &gs), errors.As(fe.Err, &dl):
			// Informational: kgo rejoins the group (OnRevoked ran if
			// partition 0 was lost) or resets the offset itself.
			if r.warn != nil {
				r.warn(fe.Err)
			}
		default:
			// Fetch errors kgo retries itself are not returned here; what
			// comes is worth stopping for (authorization, a deleted topic).
			return nil, fmt.Errorf("kafkapartial: fetch %s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
		}
	}
	var out []Record
	fs.EachRecord(func(rec *kgo.Record) {
		if rec.Topic != r.topic || rec.Partition != 0 {
			return
		}
		if partial.IsIdleKey(rec.Key) {
			d, err := partial.DecodeIdle(rec.Value)
			if err != nil {
				out = append(out, Record{Offset: rec.Offset, Err: fmt.Errorf("kafkapartial: %s offset %d (key %q): %w", r.topic, rec.Offset, rec.Key, err)})
				return
			}
			out = append(out, Record{Offset: rec.Offset, Idle: d})
			return
		}
		p, err := partial.DecodeForMerge(rec.Value)
		if err != nil {
			out = append(out, Record{Offset: rec.Offset, Err: fmt.Errorf("kafkapartial: %s offset %d (key %q): %w", r.topic, rec.Offset, rec.Key, err)})
			return
		}
		out = append(out, Record{Offset: rec.Offset, Partial: p})
	})
	return out, nil
}

// ReadFrom makes the next Polls read partition 0 from offset again (the
// merger's Reread). Call it from the goroutine that polls and commits,
// while partition 0 is assigned (kgo's SetOffsets under group consuming).
func (r *Reader) ReadFrom(offset int64) {
	r.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{r.topic: {0: {Epoch: -1, Offset: offset}}})
}

// Commit commits offset (the next record to read) of partition 0 for the
// group, synchronously. ctx bounds it: a revocation cancels it (the next
// owner then re-reads from the last commit and skips what is recorded).
func (r *Reader) Commit(ctx context.Context, offset int64) error {
	var cerr error
	r.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{r.topic: {0: {Epoch: -1, Offset: offset}}},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				cerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if e := kerr.ErrorForCode(p.ErrorCode); e != nil {
						cerr = e
					}
				}
			}
		})
	if cerr != nil {
		return fmt.Errorf("kafkapartial: commit %s offset %d: %w", r.topic, offset, cerr)
	}
	return nil
}

// Client is the underlying kgo client (admin requests on the same
// connection).
func (r *Reader) Client() *kgo.Client { return r.cl }

// Close leaves the group (OnRevoked runs first if partition 0 is held)
// and closes the client. Not from within a callback. It may wait as long
// as a JoinGroup in flight (up to the group's rebalance timeout):
// CloseWithin bounds it.
func (r *Reader) Close() {
	r.cl.Close()
	r.kill()
}

// CloseWithin is Close bounded by limit (CloseGroupClient).
func (r *Reader) CloseWithin(limit time.Duration) { CloseGroupClient(r.cl, r.kill, limit) }

// CloseGroupClient leaves cl's consumer group and closes cl within about
// limit, whatever state its group is in. kgo's Close first waits for the
// group's management goroutine, which may be in a JoinGroup the
// coordinator holds until every member rejoined or its session expired
// (after a kill storm, tens of seconds; issue 22: a standby ignored
// SIGTERM that long). So the leave is tried for limit, and then kill —
// which must cancel the context cl was built with (kgo.WithContext) —
// aborts the requests in flight, and cl closes at once without waiting
// for the broker. A member that could not leave is dropped by the group
// when its session expires, as a crashed one is.
func CloseGroupClient(cl *kgo.Client, kill context.CancelFunc, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), max(limit, 0))
	defer cancel()
	if err := cl.LeaveGroupContext(ctx); err != nil && ctx.Err() != nil {
		kill()
	}
	cl.Close()
	kill()
}
