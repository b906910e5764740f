package generator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/lib/embedded"
)

// A topic that cannot be written (here: it does not exist) makes Run return
// an error once writes have failed for GiveUpAfter; without GiveUpAfter Run
// keeps retrying until its context ends and returns nil (a broker outage is
// waited out). Against the embedded broker, through a real kafka-go Writer.
func TestRunGivesUpOnAnUnwritableTopic(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, tc := range []struct {
		name    string
		giveUp  time.Duration
		runFor  time.Duration // context deadline
		wantErr bool
	}{
		{"gives up", time.Second, 20 * time.Second, true},
		{"retries until stopped", 0, 3 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &kafka.Writer{Addr: kafka.TCP(b.Addrs()...), Topic: "missing", Balancer: &kafka.Hash{}, BatchTimeout: 5 * time.Millisecond}
			defer w.Close()
			failures := 0
			g := mustNew(t, Config{Start: t0, Users: 5, EventsPerSecond: 100, Seed: 1, GiveUpAfter: tc.giveUp,
				OnError: func(error) { failures++ }})
			ctx, cancel := context.WithTimeout(t.Context(), tc.runFor)
			defer cancel()
			start := time.Now()
			err := g.Run(ctx, w)
			took := time.Since(start)
			t.Logf("Run returned %v after %v, %d failed writes", err, took.Round(time.Millisecond), failures)
			if g.Written() != 0 {
				t.Errorf("written %d into a missing topic", g.Written())
			}
			if failures == 0 {
				t.Error("OnError was never called")
			}
			if !tc.wantErr {
				if err != nil {
					t.Errorf("Run: %v, want nil at the end of its context", err)
				}
				return
			}
			if !errors.Is(err, kafka.UnknownTopicOrPartition) {
				t.Errorf("Run: %v, want an error wrapping UnknownTopicOrPartition", err)
			}
			// The give-up time plus one write and one backoff (≤ 2s).
			if took < tc.giveUp || took > tc.giveUp+5*time.Second {
				t.Errorf("gave up after %v, want between %v and %v", took, tc.giveUp, tc.giveUp+5*time.Second)
			}
		})
	}
}
