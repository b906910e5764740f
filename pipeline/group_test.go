package pipeline_test

import (
	"context"
	"encoding/binary"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/source/allone"
)

// pollUntil polls cond every 10ms for up to d.
func pollUntil(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// dieAfterJoinDialer dials connections that close themselves right after
// writing a JoinGroup request (API key 11), and refuses every dial after
// that: a consumer that dies after its JoinGroup reached the broker and
// before the answer — a process killed mid-join.
type dieAfterJoinDialer struct {
	dead atomic.Bool
}

func (d *dieAfterJoinDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if d.dead.Load() {
		return nil, net.ErrClosed
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return &dieAfterJoinConn{Conn: c, d: d}, nil
}

type dieAfterJoinConn struct {
	net.Conn
	d *dieAfterJoinDialer
}

func (c *dieAfterJoinConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if len(p) >= 6 && binary.BigEndian.Uint16(p[4:6]) == 11 { // size, then the API key
		c.d.dead.Store(true)
		_ = c.Conn.Close()
	}
	return n, err
}

// groupOwners returns, per member, how many input partitions it holds.
func groupOwners(ctx context.Context, addr, group string) (state string, owners map[string]int) {
	c := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 2 * time.Second}
	r, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(r.Groups) == 0 {
		return "", nil
	}
	owners = map[string]int{}
	for _, m := range r.Groups[0].Members {
		owners[m.MemberID] += 0
		for _, tp := range m.MemberAssignments.Topics {
			owners[m.MemberID] += len(tp.Partitions)
		}
	}
	return r.Groups[0].GroupState, owners
}

// TestDeadOwnerInGenerationIsDropped (issue #16, item 2): a member that
// joined the group and died before the broker's answer stays in the next
// generation as if it had joined; it is older than the stage, so the
// all-to-one balancer gives it every partition, and the embedded broker
// never expires it (it never got a session) or only after its session
// timeout (if the answer was sent before the broker noticed the closed
// connection). The stage, a standby in that
// generation while it holds state.dir's lock, knows that owner is dead and
// rejoins as a new member: the rebalance drops the dead member and the stage
// owns the partitions again within 2 × the rebalance timeout.
func TestDeadOwnerInGenerationIsDropped(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Kafka.SessionTimeout = config.Duration(time.Second) // rebalance timeout: its default, 500ms
	rebalance := cfg.Kafka.Rebalance().D()
	core, logs := observer.New(zap.InfoLevel)
	st, err := pipeline.New(pipeline.Options{Config: cfg, Log: zap.New(core), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if !pollUntil(30*time.Second, func() bool { return st.Readiness().Assigned }) {
		t.Fatal("the stage was never assigned the partitions")
	}

	zd := &dieAfterJoinDialer{}
	zcg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID: cfg.Kafka.GroupID, Brokers: []string{h.Broker.Addr()}, Topics: []string{cfg.Kafka.InputTopic},
		Dialer:         &kafka.Dialer{DialFunc: zd.dial},
		GroupBalancers: []kafka.GroupBalancer{allone.NewAt(time.Unix(0, 0))}, // older than any stage
		// The broker waits the largest rebalance timeout of the members
		// for them to rejoin: a crashed stage's. The session is long: when
		// the broker answers the JoinGroup before it notices the closed
		// connection, the dead member gets a session, and the stage must
		// not wait for it to expire either.
		SessionTimeout: 30 * time.Second, RebalanceTimeout: rebalance, HeartbeatInterval: 200 * time.Millisecond,
		JoinGroupBackoff: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !pollUntil(10*time.Second, zd.dead.Load) {
		t.Fatal("the dead member never sent its JoinGroup")
	}
	died := time.Now()
	go zcg.Close() // its own leave needs a member ID it never got, and a dial it is refused

	// The stage stands by (the scenario happened), then owns the
	// partitions again.
	var standby, reowned time.Time
	pollUntil(30*time.Second, func() bool {
		for _, e := range logs.All() {
			switch {
			case strings.HasPrefix(e.Message, "standby") && standby.IsZero():
				standby = e.Time
			case e.Message == "assigned partitions" && !standby.IsZero() && e.Time.After(standby):
				reowned = e.Time
				return true
			}
		}
		return false
	})
	if standby.IsZero() {
		t.Fatal("the stage never stood by: the dead member did not win the generation, the scenario did not happen")
	}
	if reowned.IsZero() {
		t.Fatalf("the stage stands by since %v: the dead member keeps the partitions", time.Since(standby).Round(time.Millisecond))
	}
	took := reowned.Sub(died)
	bound := 2*rebalance + time.Second // + the heartbeat interval that notices the rebalance, and scheduling
	t.Logf("stood by %v after the dead member's join; owned the partitions again %v after it (bound %v)",
		standby.Sub(died).Round(time.Millisecond), took.Round(time.Millisecond), bound)
	if took > bound {
		t.Errorf("takeover from the dead member took %v, want at most %v", took, bound)
	}
}

// TestStopDuringHeldJoin (issue #16, item 2): a soft stop while the stage
// waits in a JoinGroup that the broker holds — a rebalance waiting, up to
// the rebalance timeout, for a live member that does not rejoin — returns
// promptly: the JoinGroup in flight is cut instead of waited out (kafka-go's
// Close alone waits for it).
func TestStopDuringHeldJoin(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Kafka.SessionTimeout = config.Duration(10 * time.Second)
	cfg.Kafka.RebalanceTimeout = config.Duration(10 * time.Second)
	run := h.Start(cfg)
	if !pollUntil(30*time.Second, func() bool { return run.Stage.Readiness().Assigned }) {
		t.Fatal("the stage was never assigned the partitions")
	}
	member := func(started time.Time) *kafka.ConsumerGroup {
		cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
			ID: cfg.Kafka.GroupID, Brokers: []string{h.Broker.Addr()}, Topics: []string{cfg.Kafka.InputTopic},
			GroupBalancers: []kafka.GroupBalancer{allone.NewAt(started)},
			SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second, HeartbeatInterval: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { go cg.Close() }) // a held JoinGroup ends when the broker closes
		return cg
	}
	// A live standby that never takes its next generation: after the next
	// rebalance starts it heartbeats no more and never rejoins, so the
	// rebalance waits the full rebalance timeout for it.
	member(time.Now().Add(time.Hour))
	if !pollUntil(20*time.Second, func() bool {
		st, owners := groupOwners(t.Context(), h.Broker.Addr(), cfg.Kafka.GroupID)
		return st == "Stable" && len(owners) == 2
	}) {
		t.Fatal("the group never settled with the stage and the standby")
	}
	if !pollUntil(20*time.Second, func() bool { return run.Stage.Readiness().Assigned }) {
		t.Fatal("the stage lost the partitions to the standby")
	}
	// A third member starts that rebalance; the stage notices at its next
	// heartbeat and waits in JoinGroup.
	member(time.Now().Add(2 * time.Hour))
	if !pollUntil(20*time.Second, func() bool { return !run.Stage.Readiness().Assigned }) {
		t.Fatal("the stage never left its generation for the rebalance")
	}
	time.Sleep(300 * time.Millisecond) // its JoinGroup is in flight, held by the broker
	if st, _ := groupOwners(t.Context(), h.Broker.Addr(), cfg.Kafka.GroupID); st != "PreparingRebalance" {
		t.Fatalf("group state %q, want PreparingRebalance", st)
	}
	start := time.Now()
	run.Cancel()
	select {
	case err := <-run.Done():
		took := time.Since(start)
		t.Logf("stop during a held JoinGroup: Run returned %v after %v", err, took.Round(time.Microsecond))
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		if took > 2*time.Second {
			t.Errorf("stop took %v, want at most 2s (the broker holds the JoinGroup for up to 10s)", took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of a stop")
	}
}
