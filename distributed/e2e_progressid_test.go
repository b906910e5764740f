package distributed_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/partial/kafkapartial"
	"github.com/dpstage/stage/pipeline"
)

// TestDistProgressTopicRecreated (issue 21 item 5): with
// contribution.max_windows_per_user, a stage started over a progress topic
// deleted and created again in the middle of a budget period whose windows
// were released (its admissions and user-hash keys lost: every user could
// be admitted to K more windows) refuses at once with ErrConfigChanged
// naming the recreated topic. Before, it went on releasing. (The releaser
// that sees the new id while leading: TestProgressIDRecheck.)
func TestDistProgressTopicRecreated(t *testing.T) {
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, size, lateness)
	cfg.Contribution.MaxWindowsPerUser = 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Stay inside one budget period (1h).
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 30*time.Second {
		time.Sleep(left + time.Second)
	}
	a := h.Start(cfg)
	for deadline := time.Now().Add(15 * time.Second); a.Units.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no release within 15 s")
		}
	}
	// The releaser notes each released window's window-bound share for
	// the operator (issue 23 item 3): every histogram has one.
	if shares := a.Stage.WindowBound(); len(shares) != len(cfg.Histograms) || !shares[0].Closed || !shares[len(shares)-1].Closed {
		t.Errorf("the releaser's window-bound shares after a release: %+v, want one closed window per histogram", shares)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(h.Broker.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recreate := func() {
		t.Helper()
		if _, err := kadm.NewClient(cl).DeleteTopics(ctx, cfg.Kafka.ProgressTopic()); err != nil {
			t.Fatal(err)
		}
		if _, err := kafkapartial.EnsureTopics(ctx, cl, kafkapartial.Topics{Input: cfg.Kafka.InputTopic, Partials: cfg.Kafka.PartialsTopic(),
			Progress: cfg.Kafka.ProgressTopic(), Ledger: cfg.State.LedgerTopic, Period: cfg.Privacy.Budget.Period.D(), Create: true}); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(who string, err error) {
		t.Helper()
		if !errors.Is(err, pipeline.ErrConfigChanged) || !strings.Contains(err.Error(), "deleted and created again") {
			t.Fatalf("%s: %v, want ErrConfigChanged for the recreated progress topic", who, err)
		}
		t.Logf("%s: %v", who, err)
	}

	a.Stop(t)
	recreate()

	// At the start of the next lead.
	b := h.Start(cfg)
	select {
	case err := <-b.Done():
		b.Cancel()
		refused("a stage started over the recreated topic", err)
	case <-time.After(4 * size):
		b.Cancel()
		t.Fatal("a stage started over a recreated progress topic mid-period did not refuse")
	}
}
