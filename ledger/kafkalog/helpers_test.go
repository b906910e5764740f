package kafkalog

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/ledger"
)

const (
	testTopic = "stage-ledger"
	testTxnID = "stage-ledger-0"
	minute    = int64(60_000)
	hour      = int64(3_600_000)
	day       = int64(86_400_000)
)

// newCluster starts a one-broker kfake cluster with the compacted log topic
// (created through EnsureTopic) and closes it at the end of the test.
func newCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := EnsureTopic(ctx, c.ListenAddrs(), testTopic, 1, -1); err != nil {
		t.Fatal(err)
	}
	return c
}

func testConfig(c *kfake.Cluster) Config {
	return Config{Brokers: c.ListenAddrs(), Topic: testTopic, TransactionalID: testTxnID}
}

// openLog opens the test log on c and closes it at the end of the test.
func openLog(t *testing.T, c *kfake.Cluster) *Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Open(ctx, testConfig(c))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var recordedAt = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// released is a released count unit of histogram h for window w whose one
// message carries value.
func released(h string, w int64, eps float64, value string) *ledger.Unit {
	charge := ledger.Curve{Orders: []float64{2, 3}, Epsilons: []float64{eps, math.Inf(1)}}
	return &ledger.Unit{
		Histogram: h, WindowStart: w, WindowEnd: w + minute, Period: floorDiv(w, day) * day,
		Status: ledger.StatusReleased, Charge: charge,
		Limit:      &ledger.Limit{Epsilon: 1, Delta: 1e-6},
		Messages:   []ledger.Message{{Key: []byte(h + "/all"), Value: []byte(`{"v":"` + value + `"}`)}},
		RecordedAt: recordedAt,
	}
}

// averaged is a released average unit (an (ε, δ) charge).
func averaged(h string, w int64, eps, delta float64) *ledger.Unit {
	return &ledger.Unit{
		Histogram: h, WindowStart: w, WindowEnd: w + minute, Period: floorDiv(w, day) * day,
		Status: ledger.StatusReleased, Approx: &ledger.Approx{Epsilon: eps, Delta: delta, Releases: 1},
		Limit:      &ledger.Limit{Epsilon: 1, Delta: 1e-6},
		Messages:   []ledger.Message{{Key: []byte(h), Value: []byte(`{"avg":1}`)}},
		RecordedAt: recordedAt,
	}
}

// exhausted is a budget_exhausted unit.
func exhausted(h string, w int64) *ledger.Unit {
	return &ledger.Unit{
		Histogram: h, WindowStart: w, WindowEnd: w + minute, Period: floorDiv(w, day) * day,
		Status:     ledger.StatusBudgetExhausted,
		Messages:   []ledger.Message{{Key: []byte(h), Value: []byte(`{"status":"budget_exhausted"}`)}},
		RecordedAt: recordedAt,
	}
}

func curve(e2, e3 float64) ledger.Curve {
	return ledger.Curve{Orders: []float64{2, 3}, Epsilons: []float64{e2, e3}}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// reader is what ledger.Ledger and Log share for reading (ledger.Store).
type reader = ledger.Store

// dump renders everything r holds about the given periods, for comparing
// two ledgers.
func dump(t *testing.T, r reader, periods ...int64) string {
	t.Helper()
	var b strings.Builder
	must(t, r.Units(func(u *ledger.Unit) bool {
		v, err := json.Marshal(u)
		must(t, err)
		fmt.Fprintf(&b, "unit %s\n", v)
		return true
	}))
	for _, p := range periods {
		c, ok, err := r.Spent(p)
		must(t, err)
		cv, _ := json.Marshal(c)
		a, okA, err := r.ApproxSpent(p)
		must(t, err)
		lim, okL, err := r.PeriodLimit(p)
		must(t, err)
		fmt.Fprintf(&b, "period %d: spent %v %s; approx %v %+v; limit %v %+v\n", p, ok, cv, okA, a, okL, lim)
		res, err := r.Reservations(p)
		must(t, err)
		adm, err := r.Admissions(p)
		must(t, err)
		users := make([]uint64, 0, len(adm))
		for u := range adm {
			users = append(users, u)
		}
		slices.Sort(users)
		fmt.Fprintf(&b, "period %d: reservations %q; admissions", p, res)
		for _, k := range res {
			u, ok, err := r.ReservationUnit(p, k)
			must(t, err)
			if ok {
				fmt.Fprintf(&b, " [%s made by %s@%d]", k, u.Histogram, u.WindowStart)
			} else {
				fmt.Fprintf(&b, " [%s: unit gone]", k)
			}
		}
		for _, u := range users {
			fmt.Fprintf(&b, " %x:%d", u, adm[u])
		}
		b.WriteString("\n")
		for _, view := range []int64{hour, day} {
			adm, err := r.ViewAdmissions(p, view)
			must(t, err)
			users := make([]uint64, 0, len(adm))
			for u := range adm {
				users = append(users, u)
			}
			slices.Sort(users)
			fmt.Fprintf(&b, "period %d view %d:", p, view)
			for _, u := range users {
				fmt.Fprintf(&b, " %x:%d", u, adm[u])
			}
			b.WriteString("\n")
		}
	}
	end, okEnd, err := r.LastWindowEnd()
	must(t, err)
	fmt.Fprintf(&b, "last end %v %d\n", okEnd, end)
	last, okLast, err := r.LastWindow()
	must(t, err)
	first, okFirst, err := r.FirstUnitWindow()
	must(t, err)
	m, okM, err := r.Meta()
	must(t, err)
	fmt.Fprintf(&b, "last %v %d; first %v %d; meta %v %+v\n", okLast, last, okFirst, first, okM, m)
	return b.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// listOffset is the partition's end offset for the isolation level: the
// high watermark (0, read_uncommitted) or the last stable offset (1).
func listOffset(t *testing.T, cl *kgo.Client, isolation int8) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = testTopic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), cl)
	must(t, err)
	p := resp.Topics[0].Partitions[0]
	must(t, kerr.ErrorForCode(p.ErrorCode))
	return p.Offset
}

// readRaw returns the data records of the log partition, read from its
// start to the high watermark (read_uncommitted) or to the last stable
// offset (read_committed): what an outside reader sees.
func readRaw(t *testing.T, c *kfake.Cluster, committed bool) []*kgo.Record {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	must(t, err)
	defer admin.Close()
	iso, isoLevel := kgo.ReadUncommitted(), int8(0)
	if committed {
		iso, isoLevel = kgo.ReadCommitted(), 1
	}
	end := listOffset(t, admin, isoLevel)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{testTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	must(t, err)
	defer cl.Close()
	ctx := ctxT(t)
	var recs []*kgo.Record
	// With control records kept, the last offset delivered + 1 reaches the
	// end even when the log ends in a transaction marker.
	for last := int64(-1); last+1 < end; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read raw: at offset %d of %d: %v", last, end, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
		})
	}
	return recs
}

// values renders the records as key=value lines, and the message values
// of unit records (base64 in the JSON) as message=value lines.
func values(recs []*kgo.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s=%s\n", r.Key, r.Value)
		if strings.HasPrefix(string(r.Key), prefixUnit) && r.Value != nil {
			var u ledger.Unit
			if err := json.Unmarshal(r.Value, &u); err == nil {
				for _, m := range u.Messages {
					fmt.Fprintf(&b, "message=%s\n", m.Value)
				}
			}
		}
	}
	return b.String()
}

// kfakeCluster starts a one-broker kfake cluster without topics.
func kfakeCluster(t *testing.T) (*kfake.Cluster, error) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, err
	}
	t.Cleanup(c.Close)
	return c, nil
}
