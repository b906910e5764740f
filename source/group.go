package source

// Joining, leaving and standing by in the consumer group, with bounded
// waits. kafka-go's ConsumerGroup does not take a context: Close waits for
// whatever group request is in flight, and a JoinGroup may block for the
// client timeout plus the rebalance timeout (longer when the broker never
// answers it: the embedded broker drops a member whose session runs out
// while it waits in a rebalance, without replying). So the stage
//
//   - dials the group's coordinator connections through a dialer that
//     remembers them, and on close cuts the ones in flight (interrupting a
//     JoinGroup or SyncGroup) instead of waiting them out;
//   - waits for Close at most as long as the caller allows, and leaves the
//     group itself (LeaveGroup for the last member ID it had), so the next
//     instance's rebalance does not wait for this member;
//   - treats a generation in which it is assigned nothing as a sign that the
//     owner is dead: every live instance sharing state.dir holds the
//     ledger's lock while it is in the group, so another member that owns
//     the partitions is a crashed instance whose membership has not expired
//     (or one with another state.dir, which is unsupported). It rejoins as a
//     new member: the rebalance that follows drops every member that does
//     not rejoin within the rebalance timeout.
//
// Takeover after a crash, for an instance waiting on state.dir's lock:
//
//	lock poll (≤ 1s) + start-up + rebalance (≤ R: the dead member does not
//	rejoin and is dropped) [+ one standby rejoin (≤ R) when a dead member
//	that was mid-join when it died is kept in the generation and wins it]
//
// so at most 1s + start-up + 2R, with R = kafka.rebalance_timeout (default
// half of kafka.session_timeout, making it one session timeout + 1s).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/source/allone"
)

// GroupConfig says how the stage is a member of its consumer group.
type GroupConfig struct {
	ID      string // kafka.group_id
	Topic   string // the input topic
	Brokers []string
	// Dialer and Transport carry TLS/SASL; nil for plain TCP.
	Dialer    *kafka.Dialer
	Transport *kafka.Transport
	// SessionTimeout is kafka.session_timeout; RebalanceTimeout
	// kafka.rebalance_timeout (config.Kafka.Rebalance).
	SessionTimeout, RebalanceTimeout time.Duration
	Log                              *zap.Logger
	// Started is when this member counts as started for the all-to-one
	// balancer (the oldest member is active). Zero: when the process
	// started; several stages in one process (tests) need their own.
	Started time.Time

	// noPartsWarned is when Standby last warned that the input topic has
	// no partitions (zero: never). Only the goroutine that runs the
	// group's generations (the caller of Standby) touches it.
	noPartsWarned time.Time
}

// noPartitionsPause is the least time Standby sits out a generation
// (except a rejoin to drop a crashed member): with the input topic
// deleted while running the broker ends such generations at once, and
// without a pause the group loop spun (thousands of generations and log
// lines in seconds). noPartitionsWarnEvery spaces the no-partitions
// warning.
const (
	noPartitionsPause     = 2 * time.Second
	noPartitionsWarnEvery = time.Minute
)

// RejoinCloseLimit bounds closing the group before a standby rejoins.
const RejoinCloseLimit = 5 * time.Second

// Join joins the group, retrying with backoff while the broker is
// unreachable; joined is called once it has. Its coordinator connections
// are tracked so that Close can cut a request in flight. The rebalance
// timeout is kafka.rebalance_timeout (default half the session timeout):
// how long a rebalance waits for a crashed member before dropping it,
// which bounds takeover (see the comment at the top of this file).
func (c *GroupConfig) Join(ctx context.Context, joined func()) (*Member, error) {
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		conns := &groupConns{}
		cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
			ID:                    c.ID,
			Brokers:               c.Brokers,
			Dialer:                conns.dialer(c.Dialer),
			Topics:                []string{c.Topic},
			GroupBalancers:        []kafka.GroupBalancer{allone.Balancer{Started: c.Started}},
			StartOffset:           kafka.FirstOffset,
			HeartbeatInterval:     max(c.SessionTimeout/5, 100*time.Millisecond),
			SessionTimeout:        c.SessionTimeout,
			RebalanceTimeout:      c.RebalanceTimeout,
			JoinGroupBackoff:      time.Second,
			WatchPartitionChanges: true,
			// Partitions added to the input topic start a new generation
			// (reading them) within this long; until then the releaser
			// holds every window (the stage's allAssigned).
			PartitionWatchInterval: time.Second,
			ErrorLogger:            kafka.LoggerFunc(func(f string, a ...any) { c.Log.Debug("kafka-go: " + fmt.Sprintf(f, a...)) }),
		})
		if err == nil {
			joined()
			return &Member{cfg: c, cg: cg, conns: conns, closedCh: make(chan struct{})}, nil
		}
		wait := backoff.Next()
		c.Log.Warn("cannot create consumer group; retrying", zap.Error(err), zap.Duration("wait", wait))
		if err := retry.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// groupConns tracks the open coordinator connections of one ConsumerGroup.
type groupConns struct {
	mu     sync.Mutex // guards conns and closed
	conns  map[*trackedConn]struct{}
	closed bool // no more dials: the group is being closed
}

// errGroupClosing refuses dials once the group is being closed.
var errGroupClosing = errors.New("source: consumer group closing")

type trackedConn struct {
	net.Conn
	set  *groupConns
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// dialer returns a copy of base (kafka.DefaultDialer when nil) whose
// connections are tracked. TLS and SASL still apply: they wrap the tracked
// TCP connection.
func (g *groupConns) dialer(base *kafka.Dialer) *kafka.Dialer {
	if base == nil {
		base = kafka.DefaultDialer
	}
	d := *base
	dial := base.DialFunc
	if dial == nil {
		// kafka-go's own default dial, less the DualStack flag (a no-op
		// since Go 1.12: fast fallback is on unless FallbackDelay < 0).
		dial = (&net.Dialer{
			LocalAddr:     base.LocalAddr,
			FallbackDelay: base.FallbackDelay,
			KeepAlive:     base.KeepAlive,
		}).DialContext
	}
	d.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: g}
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			_ = c.Close()
			return nil, errGroupClosing
		}
		if g.conns == nil {
			g.conns = make(map[*trackedConn]struct{})
		}
		g.conns[tc] = struct{}{}
		g.mu.Unlock()
		return tc, nil
	}
	return &d
}

// close closes every connection and refuses new dials: a request in flight
// fails at once, and kafka-go's run loop, which may start a new JoinGroup
// right after a generation ends, cannot block in one. (kafka-go's own
// LeaveGroup fails with it; closeGroup sends its own.)
func (g *groupConns) close() {
	g.mu.Lock()
	g.closed = true
	open := make([]*trackedConn, 0, len(g.conns))
	for c := range g.conns {
		open = append(open, c)
	}
	g.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

// Member is the stage's ConsumerGroup with its tracked connections and
// the member ID of its latest generation.
type Member struct {
	cfg    *GroupConfig
	cg     *kafka.ConsumerGroup
	conns  *groupConns
	member string

	// regroup: a session asked to close the group and rejoin
	// (RegroupFunc); closedCh (made with the group) is closed when that
	// close has finished.
	regroup  atomic.Bool
	closedCh chan struct{}
}

// Next waits for the group's next generation and remembers its member ID
// (Close leaves the group with it).
func (g *Member) Next(ctx context.Context) (*kafka.Generation, error) {
	gen, err := g.cg.Next(ctx)
	if err == nil {
		g.member = gen.MemberID
	}
	return gen, err
}

// RegroupFunc returns the function a session calls to close g so that Run
// rejoins the group: kafka-go's partition watch missed partitions the
// generation was not assigned. The close runs on its own goroutine (owner:
// g; it ends when kafka-go's Close returns, which waits for the
// generation the caller belongs to).
func (g *Member) RegroupFunc() func() {
	return func() {
		if g.regroup.Swap(true) {
			return
		}
		go func() {
			defer close(g.closedCh)
			g.Close(RejoinCloseLimit)
		}()
	}
}

// Regrouping reports whether a session closed g to rejoin.
func (g *Member) Regrouping() bool { return g.regroup.Load() }

// WaitClosed waits for the close a session started (RegroupFunc).
func (g *Member) WaitClosed() { <-g.closedCh }

// Close closes g within limit: it ends the current generation, cuts a
// JoinGroup or SyncGroup in flight, and leaves the group with the member ID
// of the last generation. Past limit it gives up and logs. A member that
// could not leave (or whose ID changed in a join cut short) is dropped by
// the next rebalance (≤ the rebalance timeout) or when its session expires.
func (g *Member) Close(limit time.Duration) {
	s := g.cfg
	start := time.Now()
	closed := make(chan struct{})
	go func() { // owner: Close, which waits for it up to limit
		_ = g.cg.Close()
		close(closed)
	}()
	g.conns.close()
	timer := time.NewTimer(max(limit, 0))
	defer timer.Stop()
	select {
	case <-closed:
	case <-timer.C:
		s.Log.Warn("consumer group: close did not finish in time; exiting without waiting for it", zap.Duration("limit", limit))
		return
	}
	if g.member == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(limit-time.Since(start), 0))
	defer cancel()
	if err := s.leaveGroup(ctx, g.member); err != nil {
		s.Log.Debug("consumer group: leave", zap.String("member", g.member), zap.Error(err))
	}
}

// leaveGroup asks the coordinator to drop member from the group. Leaving a
// member that already left is harmless (UNKNOWN_MEMBER_ID).
func (s *GroupConfig) leaveGroup(ctx context.Context, member string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	c := &kafka.Client{Addr: kafka.TCP(s.Brokers...), Timeout: 5 * time.Second}
	if s.Transport != nil {
		c.Transport = s.Transport
	}
	res, err := c.LeaveGroup(ctx, &kafka.LeaveGroupRequest{
		GroupID: s.ID,
		Members: []kafka.LeaveGroupRequestMember{{ID: member}},
	})
	if err != nil {
		return err
	}
	if res.Error != nil {
		return res.Error
	}
	for _, m := range res.Members {
		if m.Error != nil && !errors.Is(m.Error, kafka.UnknownMemberId) {
			return m.Error
		}
	}
	return nil
}

// StandbyWait is how long a standby generation (no partitions assigned)
// waits before rejoining as a new member, for the k-th standby generation in
// a row (k from 0): at once the first time — the owner is a dead member
// (see the file comment) — then, if the owner came back, which only a live
// instance with another state.dir does, one session timeout doubling up to
// a minute, so such a misconfiguration does not rebalance the group
// continually.
func StandbyWait(k int, session time.Duration) time.Duration {
	if k == 0 {
		return 0
	}
	w := session
	for i := 1; i < k && w < time.Minute; i++ {
		w *= 2
	}
	return min(w, time.Minute)
}

// inputPartitions returns the number of partitions of the input topic (0
// when it does not exist).
func (s *GroupConfig) inputPartitions(ctx context.Context) (int, error) {
	c := &kafka.Client{Addr: kafka.TCP(s.Brokers...), Timeout: 5 * time.Second}
	if s.Transport != nil {
		c.Transport = s.Transport
	}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{s.Topic}})
	if err != nil {
		return 0, err
	}
	for _, t := range md.Topics {
		if t.Name == s.Topic && t.Error == nil {
			return len(t.Partitions), nil
		}
	}
	return 0, nil
}

// pauseAtLeast sleeps until d has passed since start, or ctx ends.
func pauseAtLeast(ctx context.Context, start time.Time, d time.Duration) {
	t := time.NewTimer(time.Until(start.Add(d)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// GenerationEnd says how a generation ended, for the stage's Run.
type GenerationEnd int

const (
	GenerationDone    GenerationEnd = iota // this member owned the partitions
	GenerationStandby                      // no partitions; the broker ended the generation (or a stop)
	GenerationRejoin                       // no partitions for StandbyWait: rejoin as a new member
)

// Standby sits out a generation that assigned this member nothing: until
// the generation ends, ctx ends, or wait has passed (GenerationRejoin). A
// negative wait never rejoins. When the input topic has no partitions there
// is nothing to own: it waits for the generation to end (kafka-go's
// partition watcher ends it when partitions appear).
func (s *GroupConfig) Standby(ctx context.Context, gen *kafka.Generation, wait time.Duration) GenerationEnd {
	started := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	n, err := s.inputPartitions(pctx)
	cancel()
	switch {
	case err == nil && n == 0:
		// No partitions (deleted, or not created yet): nothing to own.
		// (A metadata error falls through to the cases below, so that a
		// standby holding state.dir still rejoins to drop a crashed owner.)
		if now := time.Now(); s.noPartsWarned.IsZero() || now.Sub(s.noPartsWarned) >= noPartitionsWarnEvery {
			s.noPartsWarned = now
			s.Log.Warn("the input topic has no partitions (deleted, or not created yet): waiting for them; check kafka.input_topic",
				zap.String("topic", s.Topic), zap.Int32("generation", gen.ID), zap.Duration("repeated_every", noPartitionsWarnEvery))
		}
		wait = -1
	case wait < 0:
		// state.ledger kafka: a hot standby on another machine is a live
		// member; the group reassigns the partitions when the owner
		// leaves or its session expires.
		s.Log.Info("standby: another member owns the input partitions; waiting for the group to reassign them",
			zap.Int32("generation", gen.ID))
	case wait == 0:
		// The usual case: a crashed instance is still a member.
		s.Log.Info("standby: another member owns the input partitions; this instance holds state.dir, so that member is a crashed instance: rejoining to drop it",
			zap.Int32("generation", gen.ID))
	default:
		s.Log.Warn("standby again: another member owns the input partitions while this instance holds state.dir; an instance with another state.dir? rejoining later",
			zap.Int32("generation", gen.ID), zap.Duration("wait", wait))
	}
	if wait == 0 {
		return GenerationRejoin
	}
	// A standby generation that the broker ends at once (the input topic
	// deleted while running: the group's view and the metadata disagree
	// for a while, then there are no partitions) must not spin the group
	// loop: sit out at least noPartitionsPause from its start. A standby
	// whose generation lasted longer (the usual case: until the owner
	// leaves) rejoins at once.
	defer pauseAtLeast(ctx, started, noPartitionsPause)
	var after <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		after = t.C
	}
	out := GenerationStandby
	done := make(chan struct{})
	gen.Start(func(gctx context.Context) {
		defer close(done)
		select {
		case <-gctx.Done():
		case <-ctx.Done():
		case <-after:
			out = GenerationRejoin
		}
	})
	<-done
	return out
}
