package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnsureTopic creates topic with partitions partitions (one per owner),
// replicationFactor replicas (-1: the broker's default) and
// cleanup.policy=compact (and min.insync.replicas=2 when replicationFactor
// is 2 or more), unless it exists. It does not change an existing
// topic; Open checks it. For tests and the embedded broker; in production
// create the topic with the settings of the package doc.
func EnsureTopic(ctx context.Context, brokers []string, topic string, partitions int32, replicationFactor int16, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return fmt.Errorf("kafkalog: admin client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = partitions
	t.ReplicationFactor = replicationFactor
	c := kmsg.NewCreateTopicsRequestTopicConfig()
	c.Name, c.Value = "cleanup.policy", kmsg.StringPtr("compact")
	t.Configs = append(t.Configs, c)
	if replicationFactor > 1 {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = "min.insync.replicas", kmsg.StringPtr("2")
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkalog: create topic %q: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("kafkalog: create topic %q: %d topics in the answer", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafkalog: create topic %q: %w", topic, err)
	}
	return nil
}

// checkTopic checks that partition of topic exists and that the topic's
// settings cannot lose a committed record (package doc, "Topic settings").
func checkTopic(ctx context.Context, cl *kgo.Client, topic string, partition int32) error {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkalog: metadata of topic %q: %w", topic, err)
	}
	if len(mresp.Topics) != 1 {
		return fmt.Errorf("kafkalog: metadata of topic %q: %d topics in the answer", topic, len(mresp.Topics))
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("%w: topic %q does not exist; create it with cleanup.policy=compact", ErrTopicConfig, topic)
		}
		return fmt.Errorf("kafkalog: metadata of topic %q: %w", topic, err)
	}
	replicas := -1
	for _, p := range mresp.Topics[0].Partitions {
		if p.Partition == partition {
			replicas = len(p.Replicas)
		}
	}
	if replicas < 0 {
		return fmt.Errorf("%w: topic %q has %d partitions, no partition %d", ErrTopicConfig, topic, len(mresp.Topics[0].Partitions), partition)
	}

	dreq := kmsg.NewPtrDescribeConfigsRequest()
	r := kmsg.NewDescribeConfigsRequestResource()
	r.ResourceType = kmsg.ConfigResourceTypeTopic
	r.ResourceName = topic
	dreq.Resources = append(dreq.Resources, r)
	dresp, err := dreq.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("kafkalog: describe configs of topic %q: %w (set SkipTopicCheck if the broker refuses it)", topic, err)
	}
	if len(dresp.Resources) != 1 {
		return fmt.Errorf("kafkalog: describe configs of topic %q: %d resources in the answer", topic, len(dresp.Resources))
	}
	res := dresp.Resources[0]
	if err := kerr.ErrorForCode(res.ErrorCode); err != nil {
		return fmt.Errorf("kafkalog: describe configs of topic %q: %w (set SkipTopicCheck if the broker refuses it)", topic, err)
	}
	cfg := map[string]string{}
	for _, c := range res.Configs {
		if c.Value != nil {
			cfg[c.Name] = *c.Value
		}
	}
	return checkSettings(topic, cfg, replicas)
}

// checkSettings checks the topic settings cfg (as DescribeConfigs reports
// them) of a partition with the given number of replicas.
func checkSettings(topic string, cfg map[string]string, replicas int) error {
	policy, ok := cfg["cleanup.policy"]
	if !ok {
		return fmt.Errorf("%w: topic %q: the broker does not report cleanup.policy; set cleanup.policy=compact (and SkipTopicCheck to open anyway)", ErrTopicConfig, topic)
	}
	if strings.ToLower(strings.TrimSpace(policy)) != "compact" {
		return fmt.Errorf("%w: topic %q has cleanup.policy=%s; a release log must never be deleted by time or size: set cleanup.policy=compact", ErrTopicConfig, topic, policy)
	}
	if v, ok := cfg["unclean.leader.election.enable"]; ok && strings.EqualFold(strings.TrimSpace(v), "true") {
		return fmt.Errorf("%w: topic %q has unclean.leader.election.enable=true, which can drop committed records: set it to false", ErrTopicConfig, topic)
	}
	if v, ok := cfg["min.insync.replicas"]; ok && replicas > 1 {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n < 2 {
			return fmt.Errorf("%w: topic %q has %d replicas but min.insync.replicas=%d: an acknowledged record may live on one broker only; set min.insync.replicas=2 or more", ErrTopicConfig, topic, replicas, n)
		}
	}
	return nil
}
