package e2e

// Helpers of the distributed mode's acceptance test (kafka.distributed,
// issue #14): a kfake cluster of several brokers in the test process,
// input keyed by user with Kafka's default partitioner, leader moves, the
// owner process of a consumer-group member, and read_committed reads of
// the internal (transactional) topics with kgo — never kafka-go, which
// returns aborted records and control markers as data (its issue #1332).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/lib/clientid"
)

// DistCluster is a kfake cluster of several brokers in the test process.
type DistCluster struct {
	*kfake.Cluster
	// Addrs are the brokers' host:port, node i at Addrs[i].
	Addrs []string
}

// StartDistCluster starts a kfake cluster of n brokers on loopback (random
// ports) that accepts consumer-group sessions down to 100ms, with the
// given topics (name → partitions, leaders as kfake places them), closed
// when the test ends.
func StartDistCluster(t testing.TB, n int, topics map[string]int) *DistCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(n), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("start a kfake cluster of %d brokers: %v", n, err)
	}
	t.Cleanup(c.Close)
	names := make([]string, 0, len(topics))
	for name := range topics {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := c.CreateTopic(name, int32(topics[name]), nil); err != nil {
			t.Fatalf("create topic %s: %v", name, err)
		}
	}
	return &DistCluster{Cluster: c, Addrs: c.ListenAddrs()}
}

// Murmur2Partition is the partition of key among n partitions under
// Kafka's default partitioner (the Java client's murmur2; kafka-go's
// Murmur2Balancer, which the test's producer uses).
func Murmur2Partition(key string, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(key)}, parts...)
}

// DistStream is window w's events of the distributed test (windows of
// size from base): usersPerWindow users with rotating ids, a quarter of
// them with a second event identical but for a millisecond later (bounded
// away; which copy is kept does not change the counts), US and DE only
// (FR is declared and never appears), and one event of a filler user for
// every input partition (of n, murmur2) that no other user of the window
// hashes to: every partition then has an event in every window, so that
// the event-time watermark of each partition moves on its own.
func DistStream(base time.Time, size time.Duration, w, usersPerWindow, n int) []Event {
	var evs []Event
	step := min(size/time.Duration(usersPerWindow)/2, 50*time.Millisecond)
	covered := make([]bool, n)
	at0 := base.Add(time.Duration(w) * size)
	for u := 0; u < usersPerWindow; u++ {
		user := fmt.Sprintf("u%d", (u*7+w*11)%(2*usersPerWindow))
		e := Event{User: user, At: at0.Add(time.Duration(u) * step), Page: Pages[(u*u+w)%len(Pages)], Country: Groups[(u+w)%2], Device: Devices[(u/3)%2]}
		evs = append(evs, e)
		if u%4 == 0 {
			e.At = e.At.Add(time.Millisecond)
			evs = append(evs, e)
		}
		covered[Murmur2Partition(user, n)] = true
	}
	for p, ok := range covered {
		if !ok {
			evs = append(evs, Event{User: FillerUser(p, n), At: at0.Add(time.Duration(p) * time.Millisecond), Page: Pages[(p+w)%len(Pages)], Country: Groups[p%2], Device: Devices[(p+w)%2]})
		}
	}
	return evs
}

// FillerUser is the first user id "f<p>-<i>" that hashes to partition p
// of n (murmur2).
func FillerUser(p, n int) string {
	for i := 0; ; i++ {
		if u := fmt.Sprintf("f%d-%d", p, i); Murmur2Partition(u, n) == p {
			return u
		}
	}
}

// ShuffleLeaders moves the leader of every partition of topics to a
// random other broker of c, one topic after the other, every `every`,
// until ctx ends; it returns the number of moves made. Topics that do not
// exist (yet) are skipped.
func ShuffleLeaders(ctx context.Context, c *DistCluster, topics []string, every time.Duration, seed uint64) (moves int, err error) {
	rng := rand.New(rand.NewPCG(seed, 7))
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return moves, nil
		case <-tick.C:
		}
		for _, topic := range topics {
			for _, pi := range c.PartitionInfos(topic) {
				to := (pi.Leader + 1 + int32(rng.IntN(len(c.Addrs)-1))) % int32(len(c.Addrs))
				if err := c.MoveTopicPartition(topic, pi.Partition, to); err != nil {
					return moves, fmt.Errorf("move %s/%d to node %d: %w", topic, pi.Partition, to, err)
				}
				moves++
			}
		}
	}
}

// MemberOf returns the client id of the member of group assigned
// partition of topic, or "" when no member is. The stage's kgo clients
// send "stage@<hostname>/<pid>" (internal/lib/clientid), so [MemberPID] tells
// which process the member is, from the broker's view of the group alone.
func MemberOf(c *kfake.Cluster, group, topic string, partition int32) string {
	gi := c.GroupInfo(group)
	if gi == nil {
		return ""
	}
	for _, m := range gi.Members {
		if slices.Contains(m.Assignment[topic], partition) {
			return m.ClientID
		}
	}
	return ""
}

// MembersWith returns the client ids of the members of group with at
// least one partition of topic assigned.
func MembersWith(c *kfake.Cluster, group, topic string) []string {
	gi := c.GroupInfo(group)
	if gi == nil {
		return nil
	}
	var out []string
	for _, m := range gi.Members {
		if len(m.Assignment[topic]) > 0 {
			out = append(out, m.ClientID)
		}
	}
	return out
}

// MemberPID returns which of pids sent the client id id (a group member's,
// from [MemberOf] or [MembersWith]). A member left behind by a killed
// process, until its session expires, names a pid not in pids: an error,
// so the caller waits for the group to settle.
func MemberPID(id string, pids []int) (int, error) {
	pid, ok := clientid.PID(id)
	if !ok {
		return 0, fmt.Errorf("member pid: client id %q is not a stage process's", id)
	}
	if !slices.Contains(pids, pid) {
		return 0, fmt.Errorf("member pid: client id %q names pid %d, none of the running processes %v", id, pid, pids)
	}
	return pid, nil
}

// ReadCommitted reads every partition of topic with kgo at isolation level
// read_committed, from the log start to the partition's last stable offset
// as the cluster has it now (records of aborted transactions and control
// markers are never returned; see SPIKE_KGO.md §3 for the stop rule). It fails the test after timeout.
func ReadCommitted(t testing.TB, c *DistCluster, topic string, timeout time.Duration) []*kgo.Record {
	t.Helper()
	ends := map[int32]int64{}
	starts := map[int32]kgo.Offset{}
	for _, pi := range c.PartitionInfos(topic) {
		if pi.LastStableOffset < pi.HighWatermark {
			t.Logf("%s/%d: a transaction is still open (last stable offset %d, high watermark %d): reading to the last stable offset", topic, pi.Partition, pi.LastStableOffset, pi.HighWatermark)
		}
		if pi.LastStableOffset > pi.LogStartOffset {
			ends[pi.Partition] = pi.LastStableOffset
			starts[pi.Partition] = kgo.NewOffset().AtStart()
		}
	}
	if len(ends) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}))
	if err != nil {
		t.Fatalf("read %s: %v", topic, err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s read_committed: timed out after %s (next offsets %v, last stable offsets %v)", topic, timeout, next, ends)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("read %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			// Control records (kept, so that a log ending in a commit or
			// abort marker is read to its last stable offset) are not data.
			if r.Offset < ends[r.Partition] && !r.Attrs.IsControl() {
				out = append(out, r)
			}
			next[r.Partition] = max(next[r.Partition], r.Offset+1)
		})
	}
	return out
}
