package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/embedded"
	"github.com/dpstage/stage/ledger"
)

// TestContinuityMissingOutputTopic (issue 22 item 5): with an empty ledger
// the stage looks at the output topic before it starts. A topic that does
// not exist is waited for (outputTopicGrace): created meanwhile, the check
// passes; still missing, it is one ErrNoOutputTopic error naming the topic
// and how to create it, not a retry loop that never ends.
func TestContinuityMissingOutputTopic(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := ledger.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	defer func(g time.Duration) { outputTopicGrace = g }(outputTopicGrace)
	outputTopicGrace = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stage := func(topic string) *Node {
		cfg := &config.Config{}
		cfg.Kafka.OutputTopic = topic
		// A transport of its own, whose metadata (cached for 6s by
		// default) sees the topic created during the wait soon.
		return &Node{Cfg: cfg, Log: zap.NewNop(), Brokers: b.Addrs(), Ledger: l, Transport: &kafka.Transport{MetadataTTL: 100 * time.Millisecond}}
	}

	start := time.Now()
	err = stage("never").CheckContinuity(ctx)
	if !errors.Is(err, ErrNoOutputTopic) || !strings.Contains(err.Error(), `"never"`) || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("missing output topic: %v, want ErrNoOutputTopic naming it", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the error took %v with a grace of %v", took, outputTopicGrace)
	}

	outputTopicGrace = 10 * time.Second
	go func() { // owner: this test; creates the topic while the check waits
		time.Sleep(300 * time.Millisecond)
		if err := b.CreateTopic("later", 1); err != nil {
			t.Error(err)
		}
	}()
	if err := stage("later").CheckContinuity(ctx); err != nil {
		t.Fatalf("output topic created during the wait: %v", err)
	}
}
