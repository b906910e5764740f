package distributed

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial/kafkapartial"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/window"
)

// partitionsChanged is the refusal of the distributed mode when the input
// topic's partition count is now, where the internal topics were made for
// was (the progress records, the progress topic). Its users hash to other
// partitions now: a user's events of one window would be read by two
// bounders and bounded twice, and the cross-window bound's admissions of a
// user stay with its old partition. So the stage does not go on with these
// internal topics (every replica refuses at start, and a running bounder
// stops the process), and says how to go on with the same release log:
// the budget book — this period's spend, the recorded releases — lives
// there, and a new internal_topic_prefix alone would move the default
// ledger topic (<prefix>ledger) too.
func (s *stage) partitionsChanged(p, was, now int) error {
	kc := s.Cfg.Kafka
	where := "the progress topic " + kc.ProgressTopic()
	if p >= 0 {
		where = fmt.Sprintf("input partition %d", p)
	}
	if now < was {
		return fmt.Errorf("%w: the input topic %q has %d partitions, %s was bounded among %d: was the topic deleted and created again? "+
			"Restore the topic, or start a new deployment (another kafka.group_id and state.ledger_topic)",
			node.ErrConfigChanged, kc.InputTopic, now, where, was)
	}
	prefix := kc.Distributed.Prefix(kc.GroupID)
	next := strings.TrimSuffix(prefix, ".") + fmt.Sprintf(".p%d.", now)
	var b strings.Builder
	fmt.Fprintf(&b, "the input topic %q has %d partitions, %s was bounded among %d: partitions were added, so users now hash to other partitions and would be bounded twice; "+
		"the distributed mode cannot go on with the internal topics of prefix %q. "+
		"To go on with the same release log (this budget period's spend and the recorded releases are kept): stop every replica, then set "+
		"state.ledger_topic: %s (pinned: its default follows the prefix) and kafka.distributed.internal_topic_prefix: %s (new partials and progress topics for %d partitions)",
		kc.InputTopic, now, where, was, prefix, s.Cfg.State.LedgerTopic, next, now)
	if s.Cfg.Contribution.MaxWindowsPerUser > 0 {
		b.WriteString(", and contribution.max_windows_per_user: 0 until the current budget period ends " +
			"(the admissions of this period stay in the old progress topic: the release log refuses the new one mid-period otherwise; set it again in the next period)")
	}
	b.WriteString(", and start the replicas. Their bounders count the windows not yet released again from the input; events that producers wrote with the old count " +
		"to a partition their user no longer hashes to are dropped as wrong_partition, so the windows up to the change plus kafka.distributed.partition_change_grace " +
		"are released with \"complete\": false in their coverage (see docs/distributed.md, \"Partitions added\")")
	return fmt.Errorf("%w: %s", node.ErrConfigChanged, b.String())
}

// The completeness marker of a partition change (issue 28 item 1; see
// docs/distributed.md, "Partitions added").
//
// After the input topic's partition count changes, producers whose
// metadata is not refreshed yet go on writing with the old count: a
// user's event lands on a partition the user no longer hashes to, and the
// bounders of the new count drop it as wrong_partition (counting it there
// would bound the user twice: ground rule 1). The windows the recovery
// counts from the release log's resume window on were, up to the change,
// written entirely with the old count. So every window that starts before
//
//	until = at + kafka.distributed.partition_change_grace + events.max_future + window.clock_skew_margin
//
// is released with "complete": false and the reason partitions_changed in
// its coverage (release.IncompletePartitionsChanged), where at is when a
// releaser of this release log first saw the new count (the log records
// it: kafkalog.PartitionsChange). at is never before the change; the
// grace covers the producers' metadata max age, so that the last record
// written with the old count was written before at + grace, and its event
// time is at most events.max_future (and the clock-skew margin) ahead of
// its record time (window.Rule), so no window from until on holds one.
// Every input of the marker is the deployment's — when the stage looked,
// and public config — never the events or any count (ground rule 8); it
// changes no count, so nothing here lets a user count twice.

// noteInputPartitions records the input partition count n the lead runs
// with in the release log (a change of it with this moment and next, the
// first window not recorded) and sets the releaser's completeness rule
// from the record, which it returns (nil: none). ctx is the lead's
// ledger writes' context (lead's writes, not the session's). since is the log's
// HistogramSince map of this lead (node.Node.LimitNewHistograms).
//
// A log with releases but no count recorded was last written by an older
// version, which did not record it. If this lead's progress topic is also
// new to the log (a new internal_topic_prefix or group: the recovery the
// refusal names, done with the upgrade), the count the windows from next
// on were written with is unknown, and a change is recorded (from 0, "not
// recorded") rather than taking those windows as complete. A first lead on
// the previous progress topic is the same deployment: its count is the one
// the refusal checks at every start (the progress topic's).
func (s *stage) noteInputPartitions(ctx context.Context, led *kafkalog.Log, n int, next int64, since map[string]int64) (func(int64) string, error) {
	_, home := s.SinceKeys(nil)
	_, released, err := led.LastWindow()
	if err != nil {
		return nil, fmt.Errorf("distributed: read the release log: %w", err)
	}
	unknown := released && since[home] == next
	p, err := led.NotePartitions(ctx, n, s.Now().UnixMilli(), next, unknown)
	if err != nil {
		return nil, fmt.Errorf("distributed: record the input partition count: %w", err)
	}
	rule, until := s.partitionsRule(p, n)
	s.Rel.SetIncomplete(rule)
	if rule != nil && next < until {
		c := p.Changed
		s.Log.Warn("releaser: the input topic's partition count changed; producers that had not refreshed their metadata wrote with the old count, and their events on a partition "+
			"their user no longer hashes to are dropped as wrong_partition: the windows starting before the change was seen plus kafka.distributed.partition_change_grace, "+
			"events.max_future and window.clock_skew_margin are released with \"complete\": false (coverage.incomplete: partitions_changed); see docs/distributed.md, \"Partitions added\"",
			zap.Int("from", c.From), zap.Int("to", c.To), zap.String("seen_at", time.UnixMilli(c.AtMs).UTC().Format(time.RFC3339Nano)),
			zap.String("first_window", release.RFC3339(c.Window)), zap.String("complete_from", release.RFC3339(until)))
	}
	return rule, nil
}

// partitionsRule is the completeness rule of the input partition record p
// for a lead with n input partitions (nil when no change to n is
// recorded), and until: the windows starting before it are incomplete.
// until is a window end — the end of the base window holding the bound
// of the package doc — so the marked span never ends in the middle of a
// window: a window is marked whole or not (the same windows as the bound
// itself would mark, base or view, since every window starts on a base
// window boundary).
func (s *stage) partitionsRule(p kafkalog.Partitions, n int) (func(int64) string, int64) {
	c := p.Changed
	if c == nil || c.To != n {
		return nil, 0
	}
	cfg := s.Cfg
	bound := c.AtMs + (cfg.Kafka.Distributed.PartitionChangeGrace.D() + cfg.Events.MaxFuture.D() + cfg.Window.ClockSkewMargin.D()).Milliseconds()
	until := window.Start(bound-1, s.SizeMs) + s.SizeMs
	return func(w int64) string {
		if w < until {
			return release.IncompletePartitionsChanged
		}
		return ""
	}, until
}

// checkInputPartitions asks the brokers for the input topic's partition
// count while leading with n. When it changed, the change is recorded in
// the release log (seen now; next, the first window not recorded) and the
// lead ends with the partitionsChanged refusal. Asked before each batch of
// windows is recorded, it keeps the windows this lead releases from
// holding an event written after the change: their partials were read
// before the count was seen unchanged, and a bounder writes a window's
// partial only after reading its events (from a broker whose metadata is
// current; one behind by a metadata propagation would show the change at
// the next batch). The brokers are asked under ctx (the lead's), the
// change is written under writes (the ledger writes': after a lost
// session the write in flight runs on to the broker's answer, so a
// fenced zombie learns it — lead, lostWriteGrace).
func (s *stage) checkInputPartitions(ctx, writes context.Context, cl *kgo.Client, led *kafkalog.Log, n int, next int64) error {
	m, err := kafkapartial.InputPartitions(ctx, cl, s.Cfg.Kafka.InputTopic)
	if err != nil {
		return fmt.Errorf("count the input topic's partitions: %w", err)
	}
	if m == n {
		return nil
	}
	if _, err := led.NotePartitions(writes, m, s.Now().UnixMilli(), next, false); err != nil {
		s.Log.Error("releaser: could not record the input partition change in the release log (the recovery's releaser records it when it starts)", zap.Error(err))
	}
	return s.partitionsChanged(-1, n, m)
}
