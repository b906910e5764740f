package source

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/internal/lib/embedded"
)

// TestStandbyPausesWhileTheInputTopicIsGone: an input topic deleted while
// the stage runs leaves the group nothing to own; the broker ends every such
// generation at once. Standby must neither spin (before: about 7,000
// generations and as many warnings in 10 s) nor warn every generation.
func TestStandbyPausesWhileTheInputTopicIsGone(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"gone": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	core, logs := observer.New(zap.InfoLevel)
	g := &GroupConfig{ID: "g", Topic: "gone", Brokers: b.Addrs(), SessionTimeout: 6 * time.Second, Log: zap.New(core)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := g.Join(ctx, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(RejoinCloseLimit)
	cl := &kafka.Client{Addr: kafka.TCP(b.Addr()), Timeout: 5 * time.Second}
	if _, err := cl.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{"gone"}}); err != nil {
		t.Fatal(err)
	}
	const watch = 6 * time.Second
	start := time.Now()
	gens, assigned := 0, 0
	for time.Since(start) < watch {
		gctx, gcancel := context.WithTimeout(ctx, watch-time.Since(start)+time.Second)
		gen, err := m.Next(gctx)
		if err != nil {
			gcancel()
			break
		}
		gens++
		if len(gen.Assignments["gone"]) == 0 {
			g.Standby(gctx, gen, -1)
		} else {
			assigned++
			gen.Start(func(c context.Context) { <-c.Done() })
		}
		gcancel()
	}
	warns := logs.FilterMessageSnippet("has no partitions").Len()
	t.Logf("%d generations (%d assigned the gone topic) and %d no-partitions warnings, %d log lines in %v", gens, assigned, warns, logs.Len(), time.Since(start).Round(time.Millisecond))
	if max := int(watch/noPartitionsPause) + 2; gens > max {
		t.Errorf("%d generations in %v: the group loop spins while the input topic is gone (want at most %d: a pause of %v each)", gens, watch, max, noPartitionsPause)
	}
	if warns > 1 {
		t.Errorf("%d no-partitions warnings in %v, want at most one a %v", warns, watch, noPartitionsWarnEvery)
	}
}
