package kafkapartial

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCloseWithinJoinInFlight (issue 22 item 2, "SIGTERM ignored after a
// kill storm"): a member whose JoinGroup the coordinator holds (as it does
// while it waits out killed members' sessions) closes within its limit.
// kgo's Close alone waits for that JoinGroup: here it never returns until
// the test lets the coordinator answer.
func TestCloseWithinJoinInFlight(t *testing.T) {
	for _, bounded := range []bool{true, false} {
		t.Run(map[bool]string{true: "CloseWithin", false: "Close"}[bounded], func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "partials"))
			if err != nil {
				t.Fatal(err)
			}
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(func() { free(); c.Close() })
			held := make(chan struct{}, 1)
			c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				select {
				case held <- struct{}{}:
				default:
				}
				c.SleepControl(func() { <-release })
				return nil, nil, false
			})
			r, err := NewReader(ReaderConfig{Brokers: c.ListenAddrs(), Group: "g", Topic: "partials", SessionTimeout: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-held:
			case <-time.After(10 * time.Second):
				t.Fatal("no JoinGroup reached the broker")
			}
			const limit = 300 * time.Millisecond
			done := make(chan struct{})
			start := time.Now()
			go func() { // owner: the test; ends when the close returns
				defer close(done)
				if bounded {
					r.CloseWithin(limit)
				} else {
					r.Close()
				}
			}()
			select {
			case <-done:
				took := time.Since(start)
				t.Logf("closed in %v with a JoinGroup held", took.Round(time.Millisecond))
				if !bounded {
					t.Fatal("Close returned with the JoinGroup held: the test no longer shows kgo's wait")
				}
				if took > limit+2*time.Second {
					t.Fatalf("CloseWithin(%v) took %v", limit, took)
				}
			case <-time.After(limit + 1500*time.Millisecond):
				if bounded {
					t.Fatalf("CloseWithin(%v) still waiting after %v", limit, time.Since(start))
				}
				t.Logf("Close still waiting after %v with a JoinGroup held (as expected of kgo's Close)", time.Since(start).Round(time.Millisecond))
				free()
				<-done
			}
		})
	}
}
