package allone

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dpstage/stage/internal/lib/embedded"
	"github.com/segmentio/kafka-go"
)

func TestAssignGroupsOldestGetsEverything(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	old, _ := NewAt(t0).UserData()
	young, _ := NewAt(t0.Add(time.Second)).UserData()
	members := []kafka.GroupMember{
		{ID: "a-young", Topics: []string{"events", "other"}, UserData: young},
		{ID: "z-old", Topics: []string{"events"}, UserData: old},
		{ID: "foreign", Topics: []string{"events", "other"}}, // no user data
	}
	parts := []kafka.Partition{
		{Topic: "events", ID: 2}, {Topic: "events", ID: 0}, {Topic: "other", ID: 0},
		{Topic: "events", ID: 1}, {Topic: "other", ID: 1},
	}
	got := New().AssignGroups(members, parts)
	if len(got) != 3 {
		t.Fatalf("assignments for %d members, want 3 (standbys included): %v", len(got), got)
	}
	if !slices.Equal(got["z-old"]["events"], []int{0, 1, 2}) || len(got["z-old"]) != 1 {
		t.Errorf("oldest member got %v, want events [0 1 2] only", got["z-old"])
	}
	// z-old does not subscribe to "other": the next oldest that does gets it.
	if !slices.Equal(got["a-young"]["other"], []int{0, 1}) || len(got["a-young"]) != 1 {
		t.Errorf("younger member got %v, want other [0 1] only", got["a-young"])
	}
	if len(got["foreign"]) != 0 {
		t.Errorf("member without start time got %v, want nothing", got["foreign"])
	}

	// The zero value advertises the process start time.
	zero, _ := Balancer{}.UserData()
	if got := time.Unix(0, startedOf(kafka.GroupMember{UserData: zero})); !got.Equal(processStart) {
		t.Errorf("zero Balancer advertises %v, want process start %v", got, processStart)
	}

	// Equal start times: member ID decides, deterministically.
	same := []kafka.GroupMember{
		{ID: "b", Topics: []string{"events"}, UserData: old},
		{ID: "a", Topics: []string{"events"}, UserData: old},
	}
	got = New().AssignGroups(same, parts[:2])
	if !slices.Equal(got["a"]["events"], []int{0, 2}) || len(got["b"]["events"]) != 0 {
		t.Errorf("tie: got %v, want everything on a", got)
	}
}

// watcher follows one consumer-group member's generations.
type watcher struct {
	cg   *kafka.ConsumerGroup
	done chan struct{}

	// mu guards gen, parts and offsets.
	mu      sync.Mutex
	gen     *kafka.Generation
	parts   []int
	offsets map[int]int64
}

func watch(ctx context.Context, t *testing.T, cfg kafka.ConsumerGroupConfig) *watcher {
	t.Helper()
	cg, err := kafka.NewConsumerGroup(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &watcher{cg: cg, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			gen, err := cg.Next(ctx)
			if errors.Is(err, kafka.ErrGroupClosed) || ctx.Err() != nil {
				return
			}
			if err != nil {
				continue
			}
			var parts []int
			offsets := map[int]int64{}
			for _, a := range gen.Assignments["events"] {
				parts = append(parts, a.ID)
				offsets[a.ID] = a.Offset
			}
			slices.Sort(parts)
			w.mu.Lock()
			w.gen, w.parts, w.offsets = gen, parts, offsets
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watcher) state() (*kafka.Generation, []int, map[int]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen, w.parts, w.offsets
}

func (w *watcher) close() {
	w.cg.Close()
	<-w.done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Against the embedded broker: the first member gets all partitions, a
// second member joins as a standby with none, and when the first leaves the
// standby gets all of them, starting at the offsets the first committed.
func TestHotStandbyWithEmbeddedBroker(t *testing.T) {
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events": 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	cfg := func() kafka.ConsumerGroupConfig {
		return kafka.ConsumerGroupConfig{
			ID: "standby", Brokers: b.Addrs(), Topics: []string{"events"},
			// New, not the zero value: both members live in this process.
			GroupBalancers:    []kafka.GroupBalancer{New()},
			StartOffset:       kafka.FirstOffset,
			HeartbeatInterval: 100 * time.Millisecond,
			SessionTimeout:    2 * time.Second,
			RebalanceTimeout:  2 * time.Second,
			JoinGroupBackoff:  100 * time.Millisecond,
		}
	}
	all := []int{0, 1, 2, 3}

	active := watch(ctx, t, cfg())
	activeClosed := false
	defer func() {
		if !activeClosed {
			active.close()
		}
	}()
	waitFor(t, "first member to get all partitions", func() bool {
		_, parts, _ := active.state()
		return slices.Equal(parts, all)
	})

	standby := watch(ctx, t, cfg())
	defer standby.close()
	waitFor(t, "both members in one generation", func() bool {
		ga, _, _ := active.state()
		gs, _, _ := standby.state()
		return ga != nil && gs != nil && ga.ID == gs.ID
	})
	gen, parts, _ := active.state()
	if !slices.Equal(parts, all) {
		t.Fatalf("after the standby joined the first member has %v, want %v", parts, all)
	}
	if _, sp, _ := standby.state(); len(sp) != 0 {
		t.Fatalf("standby has partitions %v, want none", sp)
	}
	committed := map[int]int64{0: 3, 1: 5, 2: 7, 3: 11}
	if err := gen.CommitOffsets(map[string]map[int]int64{"events": committed}); err != nil {
		t.Fatalf("commit: %v", err)
	}

	active.close()
	activeClosed = true
	waitFor(t, "standby to take over all partitions", func() bool {
		_, sp, _ := standby.state()
		return slices.Equal(sp, all)
	})
	_, _, offsets := standby.state()
	for p, o := range committed {
		if offsets[p] != o {
			t.Errorf("standby starts partition %d at %d, want committed %d", p, offsets[p], o)
		}
	}
}
