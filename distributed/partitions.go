package distributed

import (
	"fmt"
	"strings"

	"github.com/dpstage/stage/node"
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
	b.WriteString(", and start the replicas. The partials the old topics hold of windows not yet released are not read again: " +
		"those windows are released without them (see docs/distributed.md, \"Partitions added\")")
	return fmt.Errorf("%w: %s", node.ErrConfigChanged, b.String())
}
