package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/lib/clientid"
)

// The pieces of TestDistributedFailover that do not need the distributed
// mode, checked on their own: the partitioner the producer keys by, the
// stream's coverage of every partition, read_committed reads of
// transactional topics, leader moves, and telling which process a
// consumer-group member is.

// distMemberEnv makes this test binary a bare kgo consumer-group member
// (see TestDistHelpers/member pid): "brokers;group;topic". It prints
// "assigned P,P,..." on stdout at every assignment.
const distMemberEnv = "STAGE_TEST_DIST_MEMBER"

func init() {
	spec := os.Getenv(distMemberEnv)
	if spec == "" {
		return
	}
	f := strings.Split(spec, ";")
	owned := map[int32]bool{} // the member's partitions; the callbacks run one at a time
	show := func() {
		var ps []string
		for p := range owned {
			ps = append(ps, fmt.Sprint(p))
		}
		slices.Sort(ps)
		fmt.Printf("assigned %s\n", strings.Join(ps, ","))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(f[0], ",")...), kgo.ClientID(clientid.ClientID()), kgo.ConsumerGroup(f[1]), kgo.ConsumeTopics(f[2]),
		kgo.Balancers(kgo.CooperativeStickyBalancer()), kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(200*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			for _, p := range m[f[2]] {
				owned[p] = true
			}
			show()
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			for _, p := range m[f[2]] {
				delete(owned, p)
			}
			show()
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			for _, p := range m[f[2]] {
				delete(owned, p)
			}
			show()
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		cl.PollFetches(context.Background())
	}
}

func TestDistHelpers(t *testing.T) {
	t.Run("murmur2 as franz-go's default partitioner", func(t *testing.T) {
		tp := kgo.StickyKeyPartitioner(nil).ForTopic("x")
		for i := 0; i < 2000; i++ {
			k := fmt.Sprintf("user-%d", i*7919)
			if got, want := e2e.Murmur2Partition(k, distPartitions), tp.Partition(&kgo.Record{Key: []byte(k)}, distPartitions); got != want {
				t.Fatalf("key %s: kafka-go Murmur2Balancer %d, franz-go %d", k, got, want)
			}
		}
	})
	t.Run("every window has an event on every partition", func(t *testing.T) {
		for w := 0; w < distWindows; w++ {
			seen := make([]bool, distPartitions)
			for _, e := range e2e.DistStream(crashBase, time.Minute, w, 60, distPartitions) {
				seen[e2e.Murmur2Partition(e.User, distPartitions)] = true
				if e.At.Truncate(time.Minute) != crashBase.Add(time.Duration(w)*time.Minute) {
					t.Fatalf("window %d: event at %v outside the window", w, e.At)
				}
			}
			if slices.Contains(seen, false) {
				t.Fatalf("window %d: partitions without events: %v", w, seen)
			}
		}
	})
	t.Run("read committed", testReadCommitted)
	t.Run("leader moves", func(t *testing.T) {
		c := e2e.StartDistCluster(t, 3, map[string]int{"a": 4, "b": 1})
		before := c.PartitionInfos("a")
		ctx, cancel := context.WithTimeout(context.Background(), 350*time.Millisecond)
		defer cancel()
		moves, err := e2e.ShuffleLeaders(ctx, c, []string{"a", "b", "missing"}, 100*time.Millisecond, 1)
		if err != nil {
			t.Fatal(err)
		}
		if moves < 5 {
			t.Fatalf("%d moves in 350ms at one round (5 partitions) per 100ms", moves)
		}
		for i, pi := range c.PartitionInfos("a") {
			if pi.Epoch <= before[i].Epoch {
				t.Errorf("a/%d: leader epoch %d → %d: not moved", i, before[i].Epoch, pi.Epoch)
			}
		}
	})
	t.Run("member pid", testMemberPID)
}

// testReadCommitted: records of a committed transaction are read, those
// of a transaction aborted by a newer producer with the same transactional
// id (the fence) and of an explicitly aborted one are not, and the read
// ends although the partitions end in control markers.
func testReadCommitted(t *testing.T) {
	c := e2e.StartDistCluster(t, 3, map[string]int{"t": 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newTxn := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(cl *kgo.Client, v string, p int32) error {
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v), Partition: p}).FirstErr()
	}
	txn := func(cl *kgo.Client, commit kgo.TransactionEndTry, vs ...string) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i, v := range vs {
			if err := produce(cl, v, int32(i%2)); err != nil {
				t.Fatal(err)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	zombie := newTxn()
	defer zombie.Close()
	txn(zombie, kgo.TryCommit, "c1", "c2")
	if err := zombie.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := produce(zombie, "fenced", 0); err != nil {
		t.Fatal(err)
	}
	fresh := newTxn()
	defer fresh.Close()
	if _, _, err := fresh.ProducerID(ctx); err != nil { // fences the zombie, aborting its open transaction
		t.Fatal(err)
	}
	if err := produce(zombie, "fenced-late", 0); err == nil {
		t.Fatal("the fenced producer could still produce")
	}
	txn(fresh, kgo.TryCommit, "c3", "c4")
	txn(fresh, kgo.TryAbort, "aborted1", "aborted2")
	var got []string
	for _, r := range e2e.ReadCommitted(t, c, "t", 20*time.Second) {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	if want := []string{"c1", "c2", "c3", "c4"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed read %v, want %v", got, want)
	}
}

// testMemberPID starts 3 processes, each a bare kgo member of one group
// with the stage's client id (internal/lib/clientid), and checks that
// e2e.MemberOf + e2e.MemberPID map each member to the process that reports
// the member's assignment.
func testMemberPID(t *testing.T) {
	c := e2e.StartDistCluster(t, 3, map[string]int{"t": 6})
	type child struct {
		cmd  *exec.Cmd
		last chan string // the child's latest "assigned" line
	}
	var kids []*child
	for i := 0; i < 3; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), distMemberEnv+"="+strings.Join(c.Addrs, ",")+";g;t")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		k := &child{cmd: cmd, last: make(chan string, 1)}
		go func() { // owner: the child; ends when its stdout closes
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "assigned "); ok {
					select {
					case <-k.last:
					default:
					}
					k.last <- a
				}
			}
		}()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		kids = append(kids, k)
	}
	pids := []int{kids[0].cmd.Process.Pid, kids[1].cmd.Process.Pid, kids[2].cmd.Process.Pid}
	e2e.WaitFor(t, "3 members with 2 partitions each", 30*time.Second, func() bool {
		gi := c.GroupInfo("g")
		if gi == nil || len(gi.Members) != 3 || gi.State != "Stable" {
			return false
		}
		for _, m := range gi.Members {
			if len(m.Assignment["t"]) != 2 {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // the last assignment printed
	said := map[int]string{}
	for i, k := range kids {
		select {
		case a := <-k.last:
			said[pids[i]] = a
		case <-time.After(5 * time.Second):
			t.Fatalf("child %d printed no assignment", i)
		}
	}
	for p := int32(0); p < 6; p++ {
		id := e2e.MemberOf(c.Cluster, "g", "t", p)
		pid, err := e2e.MemberPID(id, pids)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(said[pid], ","), fmt.Sprint(p)) {
			t.Errorf("partition %d: member %s found in process %d, which says it has %q", p, id, pid, said[pid])
		}
	}
}
