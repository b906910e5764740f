package distributed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial/kafkapartial"
)

// TestProgressIDRecheck (issue 21 item 5): the releaser alone, with
// contribution.max_windows_per_user 1. Window 0 is released; the progress
// topic is then deleted and created again (mid-period); the releaser
// stops at window 1 with node.ErrConfigChanged instead of releasing it, and the
// next releaser refuses when it starts leading. A control run without the
// recreation releases window 1.
func TestProgressIDRecheck(t *testing.T) {
	for _, recreate := range []bool{false, true} {
		t.Run(map[bool]string{false: "control", true: "recreated"}[recreate], func(t *testing.T) {
			e := newDistEnv(t, 2)
			e.cfg.Contribution.MaxWindowsPerUser = 1
			r := e.start(t)
			tr := truth{}
			for p := range e.n {
				e.emit(t, tr, 0, p)
			}
			e.readOut(t, unitsPerWindow, 20*time.Second, 0)
			if recreate {
				recreateProgress(t, e)
			}
			for p := range e.n {
				e.emit(t, tr, 1, p)
			}
			if !recreate {
				e.readOut(t, 2*unitsPerWindow, 20*time.Second, 0)
				return
			}
			refused := func(who string, err error) {
				t.Helper()
				if !errors.Is(err, node.ErrConfigChanged) || !strings.Contains(err.Error(), "deleted and created again") {
					t.Fatalf("%s: %v, want node.ErrConfigChanged for the recreated progress topic", who, err)
				}
				t.Logf("%s: %v", who, err)
			}
			select {
			case err := <-r.done:
				r.done <- err
				refused("the leading releaser", err)
			case <-time.After(15 * time.Second):
				t.Fatal("the releaser went on over a recreated progress topic")
			}
			if got := r.s.Stats.Releases.Load(); got != unitsPerWindow {
				t.Errorf("%d releases, want window 0's %d only", got, unitsPerWindow)
			}
			r2 := e.start(t)
			select {
			case err := <-r2.done:
				r2.done <- err
				refused("the next releaser", err)
			case <-time.After(15 * time.Second):
				t.Fatal("the next releaser did not refuse")
			}
		})
	}
}

func recreateProgress(t *testing.T, e *distEnv) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, e.cfg.Kafka.ProgressTopic()); err != nil {
		t.Fatal(err)
	}
	if _, err := kafkapartial.EnsureTopics(ctx, cl, kafkapartial.Topics{Input: e.cfg.Kafka.InputTopic, Partials: e.cfg.Kafka.PartialsTopic(),
		Progress: e.cfg.Kafka.ProgressTopic(), Ledger: e.cfg.State.LedgerTopic, Period: e.cfg.Privacy.Budget.Period.D(), Create: true}); err != nil {
		t.Fatal(err)
	}
}
