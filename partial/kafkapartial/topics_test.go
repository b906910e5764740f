package kafkapartial

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/embedded"
)

func startBroker(t *testing.T, topics map[string]int) (*embedded.Broker, *kgo.Client) {
	t.Helper()
	b, err := embedded.Start(embedded.Config{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return b, cl
}

func testTopics(create bool) Topics {
	return Topics{Input: "in", Partials: "x.partials", Progress: "x.progress", Ledger: "x.ledger", Output: "out", Period: 240 * time.Hour, Create: create}
}

// topicState is a topic's partition count and the configs the test looks at.
func topicState(t *testing.T, cl *kgo.Client, topic string) (int, map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	ds, err := adm.ListTopics(ctx, topic)
	if err != nil || ds[topic].Err != nil {
		t.Fatalf("list %s: %v %v", topic, err, ds[topic].Err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]string{}
	for _, c := range rc.Configs {
		if c.Value != nil && (c.Key == "cleanup.policy" || c.Key == "retention.ms" || c.Key == "segment.ms" || c.Key == "unclean.leader.election.enable") {
			cfg[c.Key] = *c.Value
		}
	}
	return len(ds[topic].Partitions), cfg
}

// TestEnsureTopicsCreates: three instances creating the internal topics at
// once all succeed (TopicAlreadyExists is fine) and return the input's
// partition count; the topics have the partition counts and policies of
// the package doc (partials retention 2 × a 10-day period); a second call
// checks and keeps them.
func TestEnsureTopicsCreates(t *testing.T) {
	_, cl := startBroker(t, map[string]int{"in": 5})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	ns := make([]int, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...))
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			ns[i], errs[i] = EnsureTopics(ctx, c, testTopics(true))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil || ns[i] != 5 {
			t.Fatalf("instance %d: %d partitions, %v", i, ns[i], err)
		}
	}
	want := []struct {
		topic      string
		partitions int
		cfg        map[string]string
	}{
		{"x.partials", 1, map[string]string{"cleanup.policy": "delete", "retention.ms": strconv.FormatInt((480 * time.Hour).Milliseconds(), 10), "unclean.leader.election.enable": "false"}},
		{"x.progress", 5, map[string]string{"cleanup.policy": "compact", "segment.ms": "3600000"}},
		{"x.ledger", 1, map[string]string{"cleanup.policy": "compact", "retention.ms": "-1"}},
		{"out", 1, nil},
	}
	for _, w := range want {
		n, cfg := topicState(t, cl, w.topic)
		if n != w.partitions {
			t.Errorf("%s: %d partitions, want %d", w.topic, n, w.partitions)
		}
		for k, v := range w.cfg {
			if cfg[k] != v {
				t.Errorf("%s: %s=%q, want %q", w.topic, k, cfg[k], v)
			}
		}
	}
	if n, err := EnsureTopics(ctx, cl, testTopics(false)); err != nil || n != 5 {
		t.Fatalf("second call: %d, %v", n, err)
	}
	// An existing output topic is taken with any partition count.
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "out3"); err != nil {
		t.Fatal(err)
	}
	out3 := testTopics(false)
	out3.Output = "out3"
	if _, err := EnsureTopics(ctx, cl, out3); err != nil {
		t.Fatalf("output topic with 3 partitions: %v", err)
	}
}

// compacted creates a compacted topic (only its partition count is wrong).
func compacted(topic string, partitions int32) func(*testing.T, *kadm.Client) {
	return func(t *testing.T, adm *kadm.Client) {
		if _, err := adm.CreateTopic(context.Background(), partitions, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, topic); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEnsureTopicsRefuses: existing topics that do not fit, a missing one
// with create_topics off, and a missing input topic are refused with an
// error saying what to fix.
func TestEnsureTopicsRefuses(t *testing.T) {
	cases := []struct {
		name   string
		topics map[string]int
		// setup runs before EnsureTopics (configs the broker cannot take
		// at start).
		setup  func(t *testing.T, adm *kadm.Client)
		create bool
		want   error
		msg    string // in the error, if set
	}{
		{name: "partials with 2 partitions", topics: map[string]int{"in": 3, "x.partials": 2}, create: true, want: ErrTopicConfig},
		{name: "progress with fewer partitions than the input", topics: map[string]int{"in": 3}, create: true, want: ErrTopicConfig,
			setup: compacted("x.progress", 2)},
		{name: "ledger with 2 partitions", topics: map[string]int{"in": 3}, create: true, want: ErrTopicConfig,
			setup: compacted("x.ledger", 2)},
		{name: "ledger not compacted", topics: map[string]int{"in": 3}, create: true, want: ErrTopicConfig,
			setup: func(t *testing.T, adm *kadm.Client) {
				if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")}, "x.ledger"); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "partials with unclean leader election", topics: map[string]int{"in": 3}, create: true, want: ErrTopicConfig,
			setup: func(t *testing.T, adm *kadm.Client) {
				if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete"),
					"unclean.leader.election.enable": kadm.StringPtr("true")}, "x.partials"); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "missing with create_topics off", topics: map[string]int{"in": 3}, create: false, want: ErrTopicConfig},
		{name: "output missing with create_topics off", topics: map[string]int{"in": 3}, create: false, want: ErrTopicConfig,
			setup: func(t *testing.T, adm *kadm.Client) {
				for _, c := range []func(*testing.T, *kadm.Client){compacted("x.progress", 3), compacted("x.ledger", 1)} {
					c(t, adm)
				}
				if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "x.partials"); err != nil {
					t.Fatal(err)
				}
			}, msg: `the output topic "out" does not exist`},
		{name: "no input topic", topics: map[string]int{"other": 1}, create: true, want: ErrNoInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, cl := startBroker(t, c.topics)
			if c.setup != nil {
				c.setup(t, kadm.NewClient(cl))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := EnsureTopics(ctx, cl, testTopics(c.create))
			if !errors.Is(err, c.want) || !strings.Contains(fmt.Sprint(err), c.msg) {
				t.Fatalf("EnsureTopics: %v, want %v (%q)", err, c.want, c.msg)
			}
			t.Log(err)
		})
	}
}

// TestTopicID: a topic's id is stable while it lives, and a topic deleted
// and created again under its name has another (what the releaser checks
// for the progress topic, issue 21 item 5); a missing topic is ErrNoTopic.
func TestTopicID(t *testing.T) {
	_, cl := startBroker(t, map[string]int{"in": 2})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := TopicID(ctx, cl, "nope"); !errors.Is(err, ErrNoTopic) {
		t.Fatalf("missing topic: %v, want ErrNoTopic", err)
	}
	if _, err := EnsureTopics(ctx, cl, testTopics(true)); err != nil {
		t.Fatal(err)
	}
	id1, err := TopicID(ctx, cl, "x.progress")
	if err != nil || id1 == "" {
		t.Fatalf("TopicID: %q, %v", id1, err)
	}
	if again, err := TopicID(ctx, cl, "x.progress"); err != nil || again != id1 {
		t.Fatalf("TopicID again: %q, %v; want %q", again, err, id1)
	}
	adm := kadm.NewClient(cl)
	if _, err := adm.DeleteTopics(ctx, "x.progress"); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureTopics(ctx, cl, testTopics(true)); err != nil {
		t.Fatal(err)
	}
	id2, err := TopicID(ctx, cl, "x.progress")
	if err != nil || id2 == "" || id2 == id1 {
		t.Fatalf("TopicID after delete and create: %q, %v; want one other than %q", id2, err, id1)
	}
	t.Logf("progress topic id %s, after delete and create %s", id1, id2)
}
