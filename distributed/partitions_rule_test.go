package distributed

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/release"
)

// TestPartitionsRuleEndsAtAWindowEnd (issue 28's review, item 6): the span
// a partition change marks incomplete ends at a window end — until is the
// end of the minute window holding seen + grace + max_future — and every
// window starting before it is marked whole, none from it on. Seen at
// 10:00:20, grace 5m, max_future 30s: the bound is 10:05:50, in the
// window [10:05, 10:06), which is marked; until is 10:06 (before: the
// bound itself, mid-window — the same windows marked, but the span stated
// ended in the middle of one).
func TestPartitionsRuleEndsAtAWindowEnd(t *testing.T) {
	const minute = int64(60_000)
	cfg := &config.Config{}
	cfg.Kafka.Distributed.PartitionChangeGrace = config.Duration(5 * time.Minute)
	cfg.Events.MaxFuture = config.Duration(30 * time.Second)
	s := &stage{Node: &node.Node{Cfg: cfg, SizeMs: minute}}
	ten := int64(29_000_000) * minute // a minute boundary, "10:00" above
	seen := ten + 20_000
	rule, until := s.partitionsRule(kafkalog.Partitions{Count: 6, Changed: &kafkalog.PartitionsChange{From: 4, To: 6, AtMs: seen, Window: ten}}, 6)
	if rule == nil {
		t.Fatal("no rule for a recorded change to the lead's count")
	}
	if want := ten + 6*minute; until != want {
		t.Errorf("until %s, want the window end %s", release.RFC3339(until), release.RFC3339(want))
	}
	for _, tc := range []struct {
		w      int64
		marked bool
	}{
		{ten, true},
		{ten + 5*minute, true},  // holds the bound 10:05:50
		{ten + 6*minute, false}, // starts after every stale write's time
		{ten + 3*minute, true},  // a 3-minute view's window [10:03, 10:06)
	} {
		if got := rule(tc.w) == release.IncompletePartitionsChanged; got != tc.marked {
			t.Errorf("window %s marked %v, want %v", release.RFC3339(tc.w), got, tc.marked)
		}
	}
	if rule, _ := s.partitionsRule(kafkalog.Partitions{Count: 6, Changed: &kafkalog.PartitionsChange{From: 4, To: 6, AtMs: seen}}, 8); rule != nil {
		t.Error("a rule for a change to another count than the lead's")
	}
}
