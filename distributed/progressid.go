package distributed

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial/kafkapartial"
	"github.com/dpstage/stage/release"
)

// The progress topic's identity (issue 21 item 5). With contribution.
// max_windows_per_user the bounders keep the cross-window bound's
// admissions, and each partition's user-hash key, in the progress topic.
// A progress topic deleted and created again under the same name holds
// neither: its bounders start the period's admissions from nothing, under
// new keys, and admit every user to K more windows of a period whose
// reservation covers K. The name alone cannot tell (checkAdmissionsHome
// compares names), so the release log also records the topic's Kafka
// topic id (KIP-516), which a new topic of the same name does not share:
//
//   - the releaser reads the id when it starts leading (loadProgressID)
//     and records it in the log's HistogramSince map under
//     progressIDKey, with progressIDKnown, which says since when the log
//     has recorded ids at all (a log of an older version has none: its
//     first id is taken on trust);
//   - an id new to the log in the middle of a budget period whose windows
//     were released already is refused (checkProgressID), like a renamed
//     progress topic;
//   - while it leads it reads the id again before recording each batch of
//     windows (recheckProgressID): a partial of the new topic's bounders is
//     written in the transaction of their progress to it, so a partial the
//     releaser has read was written after the new topic existed, and the
//     id it reads afterwards is the new one (from a broker whose metadata
//     is current; a broker behind by a metadata propagation would show it
//     at the next batch).
//
// A broker that gives no topic ids (older than Kafka 2.8) leaves the check
// off; the stage logs that once per lead.

// progressIDKnown is the HistogramSince key that says since when the log
// has recorded progress topic ids.
const progressIDKnown = "admissions@progress-id"

// progressIDKey is the HistogramSince key of the progress topic with id.
func progressIDKey(topic, id string) string {
	return "admissions@progress-id:" + topic + "=" + id
}

// progressIDKeys are the HistogramSince keys of the progress topic's
// identity for the running session: none outside the distributed mode or
// without an id.
func (s *stage) progressIDKeys() []string {
	if !s.Cfg.Kafka.Distributed.Enabled || s.progressID == "" {
		return nil
	}
	return []string{progressIDKey(s.Cfg.Kafka.ProgressTopic(), s.progressID), progressIDKnown}
}

// loadProgressID reads the progress topic's id for the lead starting
// (stage.progressID).
func (s *stage) loadProgressID(ctx context.Context, cl *kgo.Client) error {
	id, err := kafkapartial.TopicID(ctx, cl, s.Cfg.Kafka.ProgressTopic())
	if err != nil {
		if s.Cfg.Contribution.MaxWindowsPerUser <= 0 && ctx.Err() == nil {
			// Without the cross-window bound nothing depends on it.
			s.Log.Warn("releaser: cannot read the progress topic's id", zap.Error(err))
			s.progressID = ""
			return nil
		}
		return fmt.Errorf("distributed: the progress topic's id: %w", err)
	}
	s.progressID = id
	if id == "" && s.Cfg.Contribution.MaxWindowsPerUser > 0 {
		s.Log.Warn("releaser: the brokers give no topic ids (Kafka older than 2.8): a progress topic deleted and created again mid-period cannot be detected")
	}
	return nil
}

// checkProgressID refuses, with contribution.max_windows_per_user, a
// progress topic id new to the release log after windows of the period of
// next were released, when the log recorded ids before (since: the log's
// HistogramSince map as recorded for this session).
func (s *stage) checkProgressID(next int64, since map[string]int64) error {
	keys := s.progressIDKeys()
	if s.Cfg.Contribution.MaxWindowsPerUser <= 0 || keys == nil || s.PeriodOf(next) == next {
		return nil
	}
	if since[keys[0]] != next || since[progressIDKnown] == next {
		return nil // the id is known, or this is the log's first id
	}
	return s.progressRecreatedErr(next, "")
}

// recheckProgressID reads the progress topic's id again while leading
// (with contribution.max_windows_per_user) and returns an error when it is
// no longer the one this lead started with.
func (s *stage) recheckProgressID(ctx context.Context, cl *kgo.Client, next int64) error {
	if s.Cfg.Contribution.MaxWindowsPerUser <= 0 || s.progressID == "" {
		return nil
	}
	id, err := kafkapartial.TopicID(ctx, cl, s.Cfg.Kafka.ProgressTopic())
	if err != nil {
		return fmt.Errorf("distributed: the progress topic's id: %w", err)
	}
	if id == s.progressID {
		return nil
	}
	return s.progressRecreatedErr(next, id)
}

func (s *stage) progressRecreatedErr(next int64, now string) error {
	if now == "" {
		now = s.progressID
	}
	p := s.PeriodOf(next)
	return fmt.Errorf("%w: the progress topic %s was deleted and created again (its topic id is now %s) in the budget period starting %s, after windows of that period were released: "+
		"the cross-window bound's admissions (contribution.max_windows_per_user) and the user-hash keys kept there are lost, and the bounders would admit every user to more windows of the period than its reservation covers; "+
		"nothing more is released under this config: set contribution.max_windows_per_user to 0 until that period ends (%s; its later windows are then charged as windows any user may be in), then set it again",
		node.ErrConfigChanged, s.Cfg.Kafka.ProgressTopic(), now, release.RFC3339(p), release.RFC3339(p+s.PeriodMs))
}
