package kafkapartial

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrTopicConfig: a topic the distributed mode needs (an internal topic, the
// output topic) is missing with create_topics off, or exists with settings
// it cannot run on; the message says what to change.
var ErrTopicConfig = errors.New("kafkapartial: topic missing or misconfigured")

// InputPartitionsChangedError: the input topic has more partitions than
// the progress topic, which was created with the input's count: partitions
// were added to the input topic. It wraps ErrTopicConfig.
type InputPartitionsChangedError struct {
	Progress string // the progress topic
	Was, Now int    // its partition count, the input topic's
}

func (e *InputPartitionsChangedError) Error() string {
	return fmt.Sprintf("%v: the input topic has %d partitions, the progress topic %q %d: partitions were added to the input topic", ErrTopicConfig, e.Now, e.Progress, e.Was)
}

func (e *InputPartitionsChangedError) Unwrap() error { return ErrTopicConfig }

// ErrNoInput: the input topic does not exist (yet). The progress topic's
// partition count is the input topic's, so nothing is created before it
// exists; the caller waits and retries.
var ErrNoInput = errors.New("kafkapartial: the input topic does not exist")

// Topics names the distributed mode's topics and how to create them.
type Topics struct {
	// Input is the input topic (it must exist): the progress topic gets
	// its partition count.
	Input string
	// Partials, Progress and Ledger are the internal topics
	// (config.Kafka.PartialsTopic, ProgressTopic, state.ledger_topic).
	Partials, Progress, Ledger string
	// Period is privacy.budget.period: the partials topic keeps records
	// max(7 days, 2 × Period).
	Period time.Duration
	// ReplicationFactor of created topics; 0: min(3, brokers).
	ReplicationFactor int
	// Output is the output topic (kafka.output_topic), "" for none. It is
	// created, with one partition, when missing and Create; otherwise a
	// missing one is an ErrTopicConfig error. An existing one is not
	// checked further (any partition count and configs will do).
	Output string
	// Create creates missing topics (kafka.distributed.create_topics);
	// false: a missing topic is an error.
	Create bool
}

// PartialsRetention is the partials topic's retention.ms: max(7 days, 2 ×
// the budget period). A partial is needed until its window is released and
// the releaser committed past it; the bound only keeps a releaser that is
// down for days from finding its partials deleted.
func PartialsRetention(period time.Duration) time.Duration {
	return max(7*24*time.Hour, 2*period)
}

// ProgressSegmentMs is the progress topic's segment.ms when the stage
// creates it (one hour): compaction can then drop superseded progress,
// checkpoint parts and tombstoned admissions records an hour or so after
// they were written.
const ProgressSegmentMs = "3600000"

// EnsureTopics creates the internal topics that are missing (when
// t.Create) and checks every one that exists:
//
//	partials  1 partition (one budget book), cleanup.policy=delete,
//	          retention.ms = PartialsRetention(t.Period)
//	progress  as many partitions as the input topic, cleanup.policy=compact,
//	          segment.ms = ProgressSegmentMs
//	ledger    1 partition, cleanup.policy=compact, retention.ms=-1
//
// It returns the input topic's partition count N. Creating from several
// instances at once is safe: a topic another instance created first
// (TopicAlreadyExists) is checked like any existing one.
func EnsureTopics(ctx context.Context, cl *kgo.Client, t Topics) (int, error) {
	adm := kadm.NewClient(cl)
	n, err := InputPartitions(ctx, cl, t.Input)
	if err != nil {
		return 0, err
	}
	rf := int16(t.ReplicationFactor)
	if rf <= 0 {
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return 0, fmt.Errorf("kafkapartial: broker metadata: %w", err)
		}
		rf = int16(min(3, max(1, len(md.Brokers))))
	}
	specs := []topicSpec{
		{name: t.Partials, role: "partials", partitions: 1, policy: "delete", configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": strconv.FormatInt(PartialsRetention(t.Period).Milliseconds(), 10)}},
		// segment.ms: the cleaner never compacts the active segment, so
		// the admissions records a checkpoint tombstoned (snapshot.go) are
		// dropped within about an hour, not when a 1 GB segment fills.
		{name: t.Progress, role: "progress", partitions: n, policy: "compact", configs: map[string]string{"cleanup.policy": "compact", "segment.ms": ProgressSegmentMs}},
		{name: t.Ledger, role: "ledger", partitions: 1, policy: "compact", configs: map[string]string{"cleanup.policy": "compact", "retention.ms": "-1"}},
	}
	if t.Output != "" {
		specs = append(specs, topicSpec{name: t.Output, role: "output", partitions: 1, anyPartitions: true})
	}
	for _, s := range specs {
		if err := ensureTopic(ctx, cl, adm, s, rf, t.Create); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// InputPartitions returns the partition count of the input topic;
// ErrNoInput when it does not exist.
func InputPartitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	n, ok, err := partitionCount(ctx, cl, topic)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrNoInput, topic)
	}
	return n, nil
}

// partitionCount is topic's partition count from a metadata request of
// its own (not kgo's metadata cache, which keeps an unknown topic unknown
// for up to a second and a known one for MetadataMinAge); exists is false
// when the broker does not know the topic.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (n int, exists bool, err error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, false, fmt.Errorf("kafkapartial: metadata of topic %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return 0, false, nil
			}
			return 0, false, fmt.Errorf("kafkapartial: metadata of topic %q: %w", topic, err)
		}
		return len(t.Partitions), len(t.Partitions) > 0, nil
	}
	return 0, false, nil
}

// TopicID returns topic's Kafka topic id (KIP-516), in Kafka's own text
// form (unpadded URL-safe base64, as kafka-topics --describe prints it).
// A topic deleted and created again under the same name gets a new id. It
// returns "" when the broker gives no id (a broker older than Kafka 2.8)
// and ErrNoTopic when the topic does not exist.
func TopicID(ctx context.Context, cl *kgo.Client, topic string) (string, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return "", fmt.Errorf("kafkapartial: metadata of topic %q: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return "", fmt.Errorf("%w: %q", ErrNoTopic, topic)
			}
			return "", fmt.Errorf("kafkapartial: metadata of topic %q: %w", topic, err)
		}
		if t.TopicID == [16]byte{} {
			return "", nil
		}
		return base64.RawURLEncoding.EncodeToString(t.TopicID[:]), nil
	}
	return "", fmt.Errorf("%w: %q", ErrNoTopic, topic)
}

// ErrNoTopic: a topic TopicID was asked about does not exist.
var ErrNoTopic = errors.New("kafkapartial: topic does not exist")

type topicSpec struct {
	name, role string
	partitions int
	// policy is the cleanup.policy an existing topic must have (exactly,
	// for compact: "compact,delete" would delete progress or the ledger
	// by time).
	policy  string
	configs map[string]string
	// anyPartitions: an existing topic may have any partition count (the
	// output topic); partitions is what it is created with.
	anyPartitions bool
}

func ensureTopic(ctx context.Context, cl *kgo.Client, adm *kadm.Client, s topicSpec, rf int16, create bool) error {
	n, exists, err := partitionCount(ctx, cl, s.name)
	if err != nil {
		return err
	}
	if !exists {
		if !create {
			return fmt.Errorf("%w: the %s topic %q does not exist: create it (%s) or set kafka.distributed.create_topics: true",
				ErrTopicConfig, s.role, s.name, s.describe())
		}
		cfgs := make(map[string]*string, len(s.configs)+2)
		for k, v := range s.configs {
			cfgs[k] = kadm.StringPtr(v)
		}
		cfgs["unclean.leader.election.enable"] = kadm.StringPtr("false")
		if rf > 1 {
			cfgs["min.insync.replicas"] = kadm.StringPtr("2")
		}
		_, err := adm.CreateTopic(ctx, int32(s.partitions), rf, cfgs, s.name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("kafkapartial: create the %s topic %q (%s): %w", s.role, s.name, s.describe(), err)
		}
		// Created here or by another instance just now: check it as any
		// existing topic (the other instance may run another config).
		for i := 0; ; i++ {
			if n, exists, err = partitionCount(ctx, cl, s.name); err != nil {
				return err
			}
			if exists {
				break
			}
			if i == 50 {
				return fmt.Errorf("kafkapartial: the %s topic %q is not in the metadata after it was created", s.role, s.name)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	if s.anyPartitions {
		return nil
	}
	if n != s.partitions {
		why := "one partition: one releaser, one budget book"
		if s.role == "progress" {
			if n < s.partitions {
				return &InputPartitionsChangedError{Progress: s.name, Was: n, Now: s.partitions}
			}
			why = "one partition per input partition"
		}
		return fmt.Errorf("%w: the %s topic %q has %d partitions, it needs %d (%s): delete and recreate it, or choose another kafka.distributed.internal_topic_prefix",
			ErrTopicConfig, s.role, s.name, n, s.partitions, why)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, s.name)
	if err != nil {
		return fmt.Errorf("kafkapartial: describe the configs of topic %q: %w", s.name, err)
	}
	rc, err := rcs.On(s.name, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("kafkapartial: describe the configs of topic %q: %w", s.name, err)
	}
	policy := ""
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = strings.ToLower(strings.ReplaceAll(*c.Value, " ", ""))
		}
		// An unclean leader election makes an out-of-sync replica the
		// leader and drops what it lacked: committed partials (their
		// windows are then held as gaps, partial.Merger), progress (the
		// partition's windows emitted again), or release-log records.
		if c.Key == "unclean.leader.election.enable" && c.Value != nil && strings.EqualFold(strings.TrimSpace(*c.Value), "true") {
			return fmt.Errorf("%w: the %s topic %q has unclean.leader.election.enable=true, which can drop committed records: set it to false",
				ErrTopicConfig, s.role, s.name)
		}
	}
	if s.policy == "compact" && policy != "" && policy != "compact" {
		return fmt.Errorf("%w: the %s topic %q has cleanup.policy=%s; it must be compact only (its latest record per key must never be deleted by time or size): set cleanup.policy=compact",
			ErrTopicConfig, s.role, s.name, policy)
	}
	return nil
}

func (s topicSpec) describe() string {
	parts := []string{fmt.Sprintf("%d partitions", s.partitions)}
	for _, k := range []string{"cleanup.policy", "retention.ms", "segment.ms"} {
		if v, ok := s.configs[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}
