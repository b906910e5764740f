package distributed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
	"github.com/dpstage/stage/release/releasetest"
)

// Issue 30's "the releases are the same as the single-process mode's for
// the same events and noise seed" at a realistic budget: ε = 1 per day
// (δ = 1e-6), hourly windows, the default mechanism (dirichlet) and
// selection shares, two selecting histograms and one with listed groups.
// Every window has, per selecting histogram, groups whose distinct users
// lie between the threshold's 10 % and 90 % pass points, so the
// selection's noise decides them, beside groups always and never kept.
//
// The single-process path is the real decoder, one aggregator and a
// release.Releaser over a bolt ledger. The distributed path splits the
// same events by the configured partitioner into seedParts input
// partitions, each decoded with the partition check and bounded by its own
// aggregator (as a bounder's session does); each closed window becomes a
// Partial through the bounder's own stage.addCells, is split into parts
// (partial.Partial.Split, as kafkapartial.Writer does), encoded in the
// Arrow format and decoded (partial.DecodeForMerge, as the releaser's
// reader does), merged by a partial.Merger built as the lead builds it
// (stage.layout, the counting fingerprint, pendingAverages) and recorded by
// a second Releaser with the same seed and its own ledger, as lead does.
//
// What differs legitimately: the distributed releases carry a coverage
// block (the input partitions included: release.Coverage), which the
// single-process releases omit. It is checked to say all seedParts
// partitions were included, then dropped; every other byte of every
// message (key and value: the JSON value compared after removing only its
// top-level "coverage" member) and each unit's status and charge must be
// equal.

const seedParts = 4

// seedConfig is the test's config (its ledger under dir).
func seedConfig(t *testing.T, dir string, distributed bool) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out, distributed: {enabled: %t}}
events: {time_field: ts, user_field: user_id}
window: {size: 1h, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: campaigns, field: page, bins: [home, cart, pay], group_by: campaign}
  - {name: products, field: page, bins: [home, cart, pay], group_by: product}
  - {name: devices, field: device, bins: [mobile, desktop], group_by: country, groups: [SE, JP, BR]}
privacy:
  budget: {epsilon: 1, delta: 1.0e-6, period: 24h}
state: {dir: %q, ledger: %s}
`, distributed, dir, map[bool]string{false: config.LedgerBolt, true: config.LedgerKafka}[distributed])
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// seedEvents are the test's events of windows windows (JSON, in input
// order) and the users' ids (the record keys the partitioner reads). In
// every window each selecting histogram has groups of sizes users (one
// group per size), a user having one or two events in one campaign and one
// product, and a device in a listed country (or BR, listed but rare).
func seedEvents(start int64, windows int, sizes []int) (evs [][]byte, users []string) {
	const hour = int64(3_600_000)
	pages := []string{"home", "cart", "pay"}
	countries := []string{"SE", "JP", "SE", "XX"} // XX: not listed, not counted
	for w := range windows {
		ws := start + int64(w)*hour
		u := 0
		for gi, n := range sizes {
			for i := range n {
				user := fmt.Sprintf("w%d-u%d", w, u)
				at := ws + int64(u)*997%hour
				camp := fmt.Sprintf("c%d-%d", w%2, gi)        // campaigns repeat every other window
				prod := fmt.Sprintf("p%d", (gi+w)%len(sizes)) // products every window, sizes rotating
				for e := range 1 + i%2 {
					evs = append(evs, fmt.Appendf(nil, `{"ts":%d,"user_id":%q,"page":%q,"campaign":%q,"product":%q,"device":%q,"country":%q}`,
						at+int64(e), user, pages[(i+e+gi)%3], camp, prod, []string{"mobile", "desktop"}[(i+e)%2], countries[(u+e)%4]))
					users = append(users, user)
				}
				u++
			}
		}
	}
	return evs, users
}

// seedRun is one mode's recorded units, window by window, and what the
// Releaser selected from (keys: each window's keyDump).
type seedRun struct {
	units [][]*ledger.Unit
	keys  [][]string
}

// keyDump is every selecting histogram's keys in src with their distinct
// users and counts, in src's order: the selection's input, compared
// exactly between the modes (the releases show the users only through
// the noisy selection, where a difference of a few users rarely shows).
func keyDump(cfg *config.Config, src partial.KeySource) []string {
	var out []string
	var dst []float64
	for h, hc := range cfg.Histograms {
		if !hc.Selects() {
			continue
		}
		for i := range src.Keys(h) {
			var k string
			var u int64
			k, u, dst = src.Key(h, i, dst[:0])
			out = append(out, fmt.Sprintf("%s/%s users %d counts %v", hc.Name, k, u, dst))
		}
	}
	return out
}

// newSeedReleaser is a Releaser over a new bolt ledger in a temporary
// directory, drawing from seed.
func newSeedReleaser(t *testing.T, seed byte, distributed bool) (*config.Config, *plan.Plan, *release.Releaser) {
	t.Helper()
	cfg := seedConfig(t, t.TempDir(), distributed)
	rel, p, _ := releasetest.Releaser(t, cfg, nil, [32]byte{seed, 30})
	return cfg, p, rel
}

// runSingle records the events as the single-process mode does: one
// decoder, one aggregator, one Releaser.
func runSingle(t *testing.T, seed byte, key siphash.Key, start int64, windows int, evs [][]byte) seedRun {
	t.Helper()
	cfg, _, rel := newSeedReleaser(t, seed, false)
	agg, err := aggregate.New(consume.AggregateSpec(cfg))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decode.New(cfg, key)
	if err != nil {
		t.Fatal(err)
	}
	ev := dec.NewEvent()
	size := cfg.Window.Size.D().Milliseconds()
	var out seedRun
	i := 0
	for w := range windows {
		ws := start + int64(w)*size
		for ; i < len(evs); i++ {
			if r := dec.Decode(evs[i], ev); r != decode.ReasonNone {
				t.Fatalf("decode %s: %v", evs[i], r)
			}
			if ev.TimeMs >= ws+size {
				break
			}
			agg.Add(ws, ev)
		}
		counts, err := agg.Close(ws)
		if err != nil {
			t.Fatal(err)
		}
		out.keys = append(out.keys, keyDump(cfg, counts))
		units, err := rel.Record(ws, counts, nil)
		counts.Release()
		if err != nil {
			t.Fatalf("window %d: %v", w, err)
		}
		out.units = append(out.units, units)
	}
	return out
}

// aggCells is a closed aggregate window as a bounder's boundary
// (closedCells); the test's config has no average histogram.
type aggCells struct{ *aggregate.WindowCounts }

func (aggCells) KeptUsers(int) []aggregate.KeptUser { return nil }

// runDistributed records the events as the distributed mode does: split
// by user into seedParts input partitions, bounded per partition, each
// window's partials encoded, decoded and merged, the merged windows
// recorded by the releaser's Releaser.
func runDistributed(t *testing.T, seed byte, key siphash.Key, start int64, windows int, evs [][]byte, users []string) seedRun {
	t.Helper()
	cfg, p, rel := newSeedReleaser(t, seed, true)
	s := &stage{Node: &node.Node{Cfg: cfg, Plan: p, SizeMs: cfg.Window.Size.D().Milliseconds(),
		PeriodMs: cfg.Privacy.Budget.Period.D().Milliseconds(), CountingConfig: cfg.CountingFingerprint()}}
	part, err := decode.ParsePartitioner(cfg.Kafka.Distributed.Partitioner)
	if err != nil {
		t.Fatal(err)
	}
	base, err := decode.New(cfg, key)
	if err != nil {
		t.Fatal(err)
	}
	type bounder struct {
		dec *decode.Decoder
		ev  *decode.Event
		agg *aggregate.Aggregator
		evs [][]byte
	}
	bs := make([]*bounder, seedParts)
	for q := range bs {
		b := &bounder{}
		if b.dec, err = base.WithPartitionCheck(part, q, seedParts); err != nil {
			t.Fatal(err)
		}
		if b.agg, err = aggregate.New(consume.AggregateSpec(cfg)); err != nil {
			t.Fatal(err)
		}
		b.ev = b.dec.NewEvent()
		bs[q] = b
	}
	for i, e := range evs { // the producers' partitioning by record key
		q := part.Partition([]byte(users[i]), seedParts)
		bs[q].evs = append(bs[q].evs, e)
		if r := bs[(q+1)%seedParts].dec.Decode(e, bs[(q+1)%seedParts].ev); r != decode.ReasonWrongPartition {
			t.Fatalf("event of partition %d decoded by partition %d's decoder: %v", q, (q+1)%seedParts, r)
		}
	}
	for q, b := range bs {
		if len(b.evs) == 0 {
			t.Fatalf("input partition %d has no event", q)
		}
	}
	m, err := partial.NewMerger(seedParts, s.SizeMs, start, s.layout(), s.CountingConfig)
	if err != nil {
		t.Fatal(err)
	}
	avgs := s.newPendingAverages()
	next := make([]int, seedParts)
	offset := int64(0)
	var out seedRun
	for w := range windows {
		ws := start + int64(w)*s.SizeMs
		end := ws + s.SizeMs
		var recs [][]byte
		for q := seedParts - 1; q >= 0; q-- { // partitions' partials interleaved, not in partition order
			b := bs[q]
			for ; next[q] < len(b.evs); next[q]++ {
				if r := b.dec.Decode(b.evs[next[q]], b.ev); r != decode.ReasonNone {
					t.Fatalf("partition %d: decode %s: %v", q, b.evs[next[q]], r)
				}
				if b.ev.TimeMs >= end {
					break
				}
				b.agg.Add(ws, b.ev)
			}
			counts, err := b.agg.Close(ws)
			if err != nil {
				t.Fatal(err)
			}
			pt := &partial.Partial{WindowStart: ws, WindowMs: s.SizeMs, Partition: q, Partitions: seedParts, Next: end, Watermark: end, Config: s.stampConfig(), First: start}
			if w > 0 {
				prev := ws - s.SizeMs
				pt.Prev = &prev
			}
			s.addCells(pt, aggCells{counts}, end)
			for _, part := range pt.Split(1024) { // about one key a part
				recs = append(recs, part.Encode())
			}
			counts.Release()
		}
		for _, r := range recs {
			pt, err := partial.DecodeForMerge(r)
			if err != nil {
				t.Fatalf("window %d: decode a partial: %v", w, err)
			}
			if err := avgs.check(pt); err != nil {
				t.Fatal(err)
			}
			res, err := m.Add(pt, offset)
			if err != nil || res != partial.Added {
				t.Fatalf("window %d: merge partition %d's partial: %v %v", w, pt.Partition, res, err)
			}
			avgs.note(m, pt, res)
			offset++
		}
		mw, ok := m.Next()
		if !ok || mw.Start != ws {
			t.Fatalf("window %d: merger gives no window, or another (%v)", w, ok)
		}
		out.keys = append(out.keys, keyDump(cfg, mw))
		units, err := rel.RecordAdmitted(context.Background(), mw.Start, mw, avgs.means(mw), nil)
		if err != nil {
			t.Fatalf("window %d: %v", w, err)
		}
		m.Released(mw)
		avgs.released(mw.Start)
		out.units = append(out.units, units)
	}
	if _, ok := m.Next(); ok {
		t.Fatal("the merger has a window past the last")
	}
	return out
}

// withoutCoverage is message value v with its top-level "coverage"
// member cut out byte for byte (the member's exact bytes and the comma
// before it; v unchanged when it has none), and that member decoded (nil
// when absent). Nothing else of v is re-encoded.
func withoutCoverage(t *testing.T, v []byte) (rest []byte, cov *release.Coverage) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		t.Fatalf("message %s: %v", v, err)
	}
	c, ok := m["coverage"]
	if !ok {
		return v, nil
	}
	cov = new(release.Coverage)
	if err := json.Unmarshal(c, cov); err != nil {
		t.Fatal(err)
	}
	member := append([]byte(`,"coverage":`), c...)
	if n := bytes.Count(v, member); n != 1 {
		t.Fatalf("message %s: the coverage member %s found %d times, not once after another member", v, member, n)
	}
	return bytes.Replace(v, member, nil, 1), cov
}

// groupsOf is the groups a unit's groups_selected status names (nil
// without one).
func groupsOf(t *testing.T, u *ledger.Unit) []string {
	t.Helper()
	var st release.Status
	if len(u.Messages) == 0 {
		return nil
	}
	if err := json.Unmarshal(u.Messages[0].Value, &st); err != nil {
		t.Fatal(err)
	}
	return st.Groups
}

// selected is the run's selected groups by window and histogram (its
// groups_selected statuses).
func selected(t *testing.T, run seedRun) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, units := range run.units {
		for _, u := range units {
			var st release.Status
			if err := json.Unmarshal(u.Messages[0].Value, &st); err != nil {
				t.Fatal(err)
			}
			if st.Status == release.StatusGroupsSelected {
				out[fmt.Sprintf("%s@%d", u.Histogram, u.WindowStart)] = st.Groups
			}
		}
	}
	return out
}

// TestSelectedSameSeedBothModes: see the comment at the top of the file.
func TestSelectedSameSeedBothModes(t *testing.T) {
	const windows = 6
	cfg := seedConfig(t, t.TempDir(), false)
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	th := p.Selection.Selection.Threshold
	lo, hi := th.UsersAt(0.1), th.UsersAt(0.9)
	if lo < 2 || hi <= lo {
		t.Fatalf("threshold's 10 %% and 90 %% points %d and %d: no room for undecided groups", lo, hi)
	}
	// Groups of 1 and 3 users (never kept at this plan), 5 between the 10 %
	// and 90 % points, and one at three times the 90 % point.
	sizes := []int{1, 3}
	for i := range 5 {
		sizes = append(sizes, int(lo+(hi-lo)*int64(i)/4))
	}
	sizes = append(sizes, int(3*hi))
	t.Logf("threshold %d: pass probability 0.1 at %d users, 0.9 at %d; group sizes %v", th.T, lo, hi, sizes)
	st, err := time.Parse(time.RFC3339, cfg.Window.Start)
	if err != nil {
		t.Fatal(err)
	}
	start := st.UnixMilli()
	evs, users := seedEvents(start, windows, sizes)
	key := siphash.MustNewKey()

	var runs [2]seedRun
	for i, seed := range []byte{1, 2} {
		single := runSingle(t, seed, key, start, windows, evs)
		dist := runDistributed(t, seed, key, start, windows, evs, users)
		runs[i] = single
		compareRuns(t, seed, single, dist)
	}
	a, b := selected(t, runs[0]), selected(t, runs[1])
	if len(a) != 2*windows {
		t.Fatalf("%d groups_selected statuses, want %d", len(a), 2*windows)
	}
	differ := 0
	for k, g := range a {
		if !slices.Equal(g, b[k]) {
			differ++
		}
	}
	t.Logf("the two seeds' selections differ in %d of %d (histogram, window) units", differ, len(a))
	if differ == 0 {
		t.Fatal("two seeds selected the same groups everywhere: the noise decides nothing, and the comparison could not fail")
	}
}

// compareRuns fails unless the single-process and distributed runs of seed
// recorded the same units with the same messages, the distributed ones'
// coverage aside (checked complete).
func compareRuns(t *testing.T, seed byte, single, dist seedRun) {
	t.Helper()
	if len(single.units) != len(dist.units) || len(single.keys) != len(dist.keys) {
		t.Fatalf("seed %d: %d windows single-process, %d distributed", seed, len(single.units), len(dist.units))
	}
	for w := range single.keys {
		if !slices.Equal(single.keys[w], dist.keys[w]) {
			t.Fatalf("seed %d window %d: the selection's input differs:\nsingle-process %v\ndistributed    %v", seed, w, single.keys[w], dist.keys[w])
		}
		if len(single.keys[w]) == 0 {
			t.Fatalf("seed %d window %d: no key to select from", seed, w)
		}
	}
	msgs, covs := 0, 0
	for w := range single.units {
		s, d := single.units[w], dist.units[w]
		if len(s) != len(d) {
			t.Fatalf("seed %d window %d: %d units single-process, %d distributed", seed, w, len(s), len(d))
		}
		for i := range s {
			us, ud := s[i], d[i]
			if us.Histogram != ud.Histogram || us.Status != ud.Status || len(us.Messages) != len(ud.Messages) {
				t.Fatalf("seed %d window %d: unit %s %s with %d messages single-process, %s %s with %d distributed; groups selected %v and %v",
					seed, w, us.Histogram, us.Status, len(us.Messages), ud.Histogram, ud.Status, len(ud.Messages), groupsOf(t, us), groupsOf(t, ud))
			}
			if !reflect.DeepEqual(us.Charge, ud.Charge) || !reflect.DeepEqual(us.Selection, ud.Selection) {
				t.Errorf("seed %d window %d: unit %s charged differently in the two modes", seed, w, us.Histogram)
			}
			for j := range us.Messages {
				ms, md := us.Messages[j], ud.Messages[j]
				vs, cs := withoutCoverage(t, ms.Value)
				vd, cd := withoutCoverage(t, md.Value)
				if cs != nil {
					t.Fatalf("a single-process message has a coverage block: %s", ms.Value)
				}
				if cd != nil {
					covs++
					if cd.Partitions != seedParts || cd.Included != seedParts || !cd.Complete || len(cd.Incomplete) > 0 {
						t.Errorf("seed %d window %d %s: coverage %+v, want all %d partitions included", seed, w, us.Histogram, *cd, seedParts)
					}
				}
				if !bytes.Equal(ms.Key, md.Key) || !bytes.Equal(vs, vd) {
					t.Errorf("seed %d window %d %s message %d:\nsingle-process %s %s\ndistributed    %s %s", seed, w, us.Histogram, j, ms.Key, vs, md.Key, vd)
				}
				msgs++
			}
		}
	}
	if covs == 0 {
		t.Fatalf("seed %d: no distributed message has a coverage block (what the comparison excludes is not where it is said to be)", seed)
	}
	t.Logf("seed %d: %d messages equal in both modes (%d distributed ones with coverage, dropped)", seed, msgs, covs)
}
