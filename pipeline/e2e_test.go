package pipeline_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/embedded"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
)

// These tests run the whole stage against the embedded Kafka-protocol broker
// over loopback (no mock of the Kafka client): they produce a known event
// stream, read the output topic, and compare with the true bounded
// histograms computed here independently of the stage's code.

var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const pagesBins = "home, search, cart, checkout, other"

var (
	pages   = []string{"home", "search", "cart", "checkout", "other"}
	devices = []string{"mobile", "desktop"}
	groups  = []string{"US", "DE", "FR"}
)

type harness struct {
	t      *testing.T
	broker *embedded.Broker
	name   string
	dir    string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events-" + name: 4, "out-" + name: 1, "dlq-" + name: 1}})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return &harness{t: t, broker: b, name: name, dir: t.TempDir()}
}

// config returns a validated config for this harness. mech is
// "gaussian" (with a huge ε: exact counts) or a dirichlet calibration.
func (h *harness) config(mech string, epsilon float64) *config.Config {
	h.t.Helper()
	privacy := "mechanism: gaussian"
	if mech != "gaussian" {
		privacy = "mechanism: dirichlet\n  calibration: " + mech
	}
	return h.configWith(privacy, epsilon)
}

// configWith returns the harness config with the given privacy lines (the
// first unindented, later ones indented by two spaces).
func (h *harness) configWith(privacy string, epsilon float64) *config.Config {
	h.t.Helper()
	return h.configExtra(privacy, epsilon, "")
}

// configExtra is configWith with more histograms: extra is YAML list items
// indented by two spaces.
func (h *harness) configExtra(privacy string, epsilon float64, extra string) *config.Config {
	h.t.Helper()
	y := fmt.Sprintf(`
kafka:
  brokers: [%q]
  group_id: g-%s
  input_topic: events-%s
  output_topic: out-%s
events:
  time_field: ts
  user_field: user_id
window:
  size: 1m
  watermark: event
  allowed_lateness: 0s
  idle_partition_timeout: 500ms
  start: 2026-01-01T00:00:00Z
histograms:
  - name: pages
    field: page
    bins: [%s]
    overflow_bin: other
    group_by: country
    groups: [US, DE, FR]
  - name: devices
    field: device
    bins: [mobile, desktop]
%s
contribution:
  max_events_per_user: 1
  max_groups_per_user: 1
privacy:
  %s
  neighbour: replace
  order: 2
  budget:
    epsilon: %g
    delta: 1.0e-6
    period: 1h
state:
  dir: %q
log:
  level: warn
`, h.broker.Addr(), h.name, h.name, h.name, pagesBins, extra, privacy, epsilon, h.dir)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		h.t.Fatalf("config: %v", err)
	}
	return cfg
}

type event struct {
	User    string
	At      time.Time
	Page    string
	Country string
	Device  string
}

func (e event) json() []byte {
	b, _ := json.Marshal(map[string]any{"ts": e.At.UnixMilli(), "user_id": e.User, "page": e.Page, "country": e.Country, "device": e.Device})
	return b
}

func (h *harness) produce(msgs ...kafka.Message) {
	h.t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(h.broker.Addr()), Topic: "events-" + h.name, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 10000}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		h.t.Fatalf("produce: %v", err)
	}
}

func (h *harness) produceEvents(evs []event) {
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = kafka.Message{Key: []byte(e.User), Value: e.json()}
	}
	h.produce(msgs...)
}

// running is a stage running in the background.
type running struct {
	stage  *pipeline.Stage
	cancel context.CancelFunc
	done   chan error
	units  atomic.Int64 // units published (OnRelease calls)
}

func (h *harness) start(cfg *config.Config) *running {
	h.t.Helper()
	log := zap.NewNop()
	if os.Getenv("STAGE_TEST_LOG") != "" {
		log, _ = zap.NewDevelopment()
	}
	r := &running{done: make(chan error, 1)}
	st, err := pipeline.New(pipeline.Options{Config: cfg, Log: log, DrainTimeout: 5 * time.Second, HashSeed: &testSeed,
		OnRelease: func(*ledger.Unit, time.Duration) { r.units.Add(1) }})
	if err != nil {
		h.t.Fatalf("new stage: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stage, r.cancel = st, cancel
	go func() { r.done <- st.Run(ctx) }()
	h.t.Cleanup(func() { r.stop(h.t) })
	return r
}

func (r *running) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("stage returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("stage did not stop within 30s of a soft stop")
	}
}

// output is the decoded output topic.
type output struct {
	Releases []pipeline.Release
	Statuses []pipeline.Status
	Raw      map[string][]string // release_id → raw values (copies)
}

// readOutput reads the output topic from the beginning until want release
// messages arrived (or the timeout), then for settle longer to catch extras.
func (h *harness) readOutput(want int, timeout, settle time.Duration) output {
	h.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{h.broker.Addr()}, Topic: "out-" + h.name, Partition: 0,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	out := output{Raw: map[string][]string{}}
	deadline := time.Now().Add(timeout)
	var settleUntil time.Time
	for {
		if len(out.Releases) >= want && settleUntil.IsZero() {
			if settle <= 0 {
				return out
			}
			settleUntil = time.Now().Add(settle)
		}
		end := deadline
		if !settleUntil.IsZero() {
			end = settleUntil
		}
		ctx, cancel := context.WithDeadline(context.Background(), end)
		m, err := r.ReadMessage(ctx)
		cancel()
		if err != nil {
			if len(out.Releases) < want {
				h.t.Fatalf("read output: got %d release messages, want %d: %v", len(out.Releases), want, err)
			}
			return out
		}
		var probe struct {
			Status    string `json:"status"`
			ReleaseID string `json:"release_id"`
		}
		if err := json.Unmarshal(m.Value, &probe); err != nil {
			h.t.Fatalf("output message is not JSON: %v: %s", err, m.Value)
		}
		out.Raw[probe.ReleaseID] = append(out.Raw[probe.ReleaseID], string(m.Value))
		if probe.Status != "" {
			var s pipeline.Status
			_ = json.Unmarshal(m.Value, &s)
			out.Statuses = append(out.Statuses, s)
			continue
		}
		var rel pipeline.Release
		if err := json.Unmarshal(m.Value, &rel); err != nil {
			h.t.Fatalf("release: %v", err)
		}
		out.Releases = append(out.Releases, rel)
	}
}

// truth holds the bounded histograms.
type truth map[string][]float64 // key "hist/group/windowStartMs" → counts in bin order

func key(hist, group string, w time.Time) string {
	return fmt.Sprintf("%s/%s/%d", hist, group, w.UnixMilli())
}

// testSeed keys the user hash of every stage the harness starts, so that
// the tests can work out which users and events the bounder selects.
var testSeed = maphash.MakeSeed()

// computeTruth computes the bounded histograms of the harness config
// (max_events_per_user 1, max_groups_per_user 1, the cap never reached).
func computeTruth(evs []event) truth { return computeTruthWith(evs, 1, 1, 0) }

// computeTruthWith computes the bounded histograms from the event set alone,
// by the rule of package aggregate's doc, with m events and G groups per
// user, window and histogram, and at most K users per window (0: no cap):
// the tracked users are the K smallest user hashes (of the users with a
// part to count), each user's groups are ranked by aggregate.GroupHash and
// its parts by aggregate.EventHash. The order of evs does not matter.
func computeTruthWith(evs []event, m, G, K int) truth {
	type part struct {
		g, b int
		at   int64
	}
	type uw struct {
		user uint64
		w    time.Time
	}
	idx := func(list []string, v string) int {
		for i, x := range list {
			if x == v {
				return i
			}
		}
		return -1
	}
	parts := map[uw][2][]part{} // per histogram (pages, devices)
	for _, e := range evs {
		k := uw{maphash.String(testSeed, e.User), e.At.Truncate(time.Minute)}
		ps := parts[k]
		// pages: overflow bin "other"; group must be declared.
		if g := idx(groups, e.Country); g >= 0 && e.Page != "" {
			b := idx(pages, e.Page)
			if b < 0 {
				b = idx(pages, "other")
			}
			ps[0] = append(ps[0], part{g, b, e.At.UnixMilli()})
		}
		if b := idx(devices, e.Device); b >= 0 {
			ps[1] = append(ps[1], part{0, b, e.At.UnixMilli()})
		}
		if len(ps[0])+len(ps[1]) > 0 {
			parts[k] = ps
		}
	}
	byWindow := map[time.Time][]uint64{}
	for k := range parts {
		byWindow[k.w] = append(byWindow[k.w], k.user)
	}
	tr := truth{}
	for w, users := range byWindow {
		slices.Sort(users)
		if K > 0 && len(users) > K {
			users = users[:K]
		}
		for _, u := range users {
			for h, ps := range parts[uw{u, w}] {
				var gs []int
				for _, p := range ps {
					if !slices.Contains(gs, p.g) {
						gs = append(gs, p.g)
					}
				}
				slices.SortFunc(gs, func(x, y int) int {
					return cmp.Or(cmp.Compare(aggregate.GroupHash(u, h, x), aggregate.GroupHash(u, h, y)), cmp.Compare(x, y))
				})
				gs = gs[:min(G, len(gs))]
				var kept []part
				for _, p := range ps {
					if slices.Contains(gs, p.g) {
						kept = append(kept, p)
					}
				}
				rank := func(p part) uint32 { return aggregate.EventHash(u, p.at, p.g, p.b) }
				slices.SortFunc(kept, func(x, y part) int {
					return cmp.Or(cmp.Compare(rank(x), rank(y)), cmp.Compare(x.g, y.g), cmp.Compare(x.b, y.b))
				})
				for _, p := range kept[:min(m, len(kept))] {
					hist, group, n := "devices", "*", len(devices)
					if h == 0 {
						hist, group, n = "pages", groups[p.g], len(pages)
					}
					kk := key(hist, group, w)
					if tr[kk] == nil {
						tr[kk] = make([]float64, n)
					}
					tr[kk][p.b]++
				}
			}
		}
	}
	return tr
}

// stream builds a deterministic event stream over nWindows windows. FR never
// appears (its releases must still be made).
func stream(nWindows, usersPerWindow int) []event {
	var evs []event
	for w := 0; w < nWindows; w++ {
		for u := 0; u < usersPerWindow; u++ {
			user := fmt.Sprintf("u%d", (u*7+w*13)%(usersPerWindow*2))
			at := base.Add(time.Duration(w)*time.Minute + time.Duration(u)*time.Second/time.Duration(usersPerWindow/50+1))
			evs = append(evs, event{
				User:    user,
				At:      at,
				Page:    pages[(u*u+w)%len(pages)],
				Country: groups[(u+w)%2], // US or DE only
				Device:  devices[(u/3)%2],
			})
			if u%5 == 0 { // a second event of the same user: bounded away
				evs = append(evs, event{User: user, At: at.Add(time.Millisecond), Page: "cart", Country: "US", Device: "mobile"})
			}
		}
	}
	return evs
}

func flush(at time.Time) kafka.Message {
	return kafka.Message{Key: []byte("flush"), Value: event{User: "flush", At: at, Page: "home", Country: "US", Device: "mobile"}.json()}
}

func checkSimplex(t *testing.T, r pipeline.Release, bins []string) {
	t.Helper()
	if strings.Join(r.Bins, ",") != strings.Join(bins, ",") {
		t.Errorf("%s/%s: bins %v, want declared order %v", r.Histogram, r.Group, r.Bins, bins)
	}
	sum := 0.0
	for _, p := range r.Probabilities {
		if p < 0 || math.IsNaN(p) {
			t.Errorf("%s/%s: negative or NaN probability %v", r.Histogram, r.Group, r.Probabilities)
		}
		sum += p
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Errorf("%s/%s: probabilities sum to %v", r.Histogram, r.Group, sum)
	}
}

// TestEndToEndExactCounts: with a huge ε the Gaussian mechanism's noise is
// 0 with overwhelming probability (σ ≈ 0.01: P[|Z| ≥ 1] < 1e-1000), so every
// release must equal the true bounded histogram exactly. This checks
// decoding, bounding, windowing, grouping and commit through the whole path.
// A heavy user sending 10,000 events in one window is counted once.
func TestEndToEndExactCounts(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	evs := stream(3, 200)
	for i := 0; i < 10000; i++ {
		// In the last window: produced after the stream, these follow its
		// window-2 events on their partition, and window 2 stays open
		// until the flush, so none of them can be late whatever the timing.
		evs = append(evs, event{User: "heavy", At: base.Add(2*time.Minute + time.Duration(i)*time.Millisecond), Page: "checkout", Country: "DE", Device: "desktop"})
	}
	tr := computeTruth(evs)
	h.produceEvents(evs)
	// Hostile and odd input, dropped and counted, never a crash.
	h.produce(
		kafka.Message{Key: []byte("x"), Value: []byte("not json")},
		kafka.Message{Key: []byte("x"), Value: []byte(`{"ts":"yesterday","user_id":"x","page":"home","country":"US","device":"mobile"}`)},
		kafka.Message{Key: []byte("x"), Value: []byte(`{"ts":1767225600000,"page":"home","country":"US","device":"mobile"}`)},
		kafka.Message{Key: []byte("y"), Value: event{User: "y", At: base.Add(2*time.Minute + 30*time.Second), Page: "home", Country: "JP", Device: "tablet"}.json()},
		kafka.Message{Key: []byte("z"), Value: []byte("{\"ts\":1767225600000,\"user_id\":\"\xff\xfe\",\"page\":\"home\"}")},
	)
	run := h.start(cfg)
	h.produce(flush(base.Add(3*time.Minute + time.Second)))

	want := 3 * (len(groups) + 1)
	out := h.readOutput(want, 60*time.Second, 2*time.Second)
	if len(out.Releases) != want {
		t.Fatalf("got %d releases, want exactly %d (one per declared (histogram, group, window))", len(out.Releases), want)
	}
	seen := map[string]bool{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := key(r.Histogram, r.Group, ws)
		if seen[k] {
			t.Errorf("duplicate release %s", k)
		}
		seen[k] = true
		if r.ReleaseID != pipeline.ReleaseID(r.Histogram, r.Group, ws.UnixMilli()) {
			t.Errorf("%s: release_id %s is not the deterministic id", k, r.ReleaseID)
		}
		bins := pages
		if r.Histogram == "devices" {
			bins = devices
		}
		checkSimplex(t, r, bins)
		checkExact(t, k, r, tr[k])
	}
	for w := 0; w < 3; w++ {
		for _, g := range groups {
			if !seen[key("pages", g, base.Add(time.Duration(w)*time.Minute))] {
				t.Errorf("missing release pages/%s window %d", g, w)
			}
		}
	}

	// A late event for a released window is dropped and counted.
	h.produce(kafka.Message{Key: []byte("late"), Value: event{User: "late", At: base.Add(30 * time.Second), Page: "home", Country: "US", Device: "mobile"}.json()})
	waitFor(t, 20*time.Second, func() bool { return run.stage.Stats().Late.Load() >= 1 })
	d := run.stage.Stats().Dropped()
	for _, reason := range []string{"bad_json", "bad_time", "missing_user", "unknown_group", "out_of_domain", "invalid_utf8", "late", "bound_user_events"} {
		if d[reason] < 1 {
			t.Errorf("drop reason %q not counted (dropped: %v)", reason, d)
		}
	}
	// Each extra event is dropped on arrival or displaced later (counted
	// first, then pushed out by one ranked before it).
	if d["bound_user_events"]+d["bound_displaced"] < 9999 {
		t.Errorf("the heavy user's extra events were not bounded away: %v", d)
	}
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEndToEndDirichletUnbiasedAroundTruth: each Dirichlet release is one
// draw from Dir(r·x + α) with x the true bounded counts, so each coordinate
// lies within 6 standard deviations of its mean (r·x_i + α)/(r·N + dα)
// (Beta marginal) except with probability < 2e-9 per coordinate (Chebyshev
// would give 1/36; the Beta tails at these sizes are sub-Gaussian). With
// ~50 coordinates the false-failure rate is below 1e-7. The release is the
// draw rounded to the grid 1/Q (mechanism.RoundToGrid moves no coordinate
// by 1/Q or more), so the tolerance is 6 sd + 1/Q.
func TestEndToEndDirichletUnbiasedAroundTruth(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("diffuse", 1e4)
	evs := stream(2, 1000)
	tr := computeTruth(evs)
	h.produceEvents(evs)
	run := h.start(cfg)
	h.produce(flush(base.Add(2*time.Minute + time.Second)))
	out := h.readOutput(2*(len(groups)+1), 60*time.Second, time.Second)
	params := run.stage.Plan().Count.Mechanism.Params()
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		counts := tr[key(r.Histogram, r.Group, ws)]
		if counts == nil {
			counts = make([]float64, len(r.Bins))
		}
		a0 := 0.0
		for _, c := range counts {
			a0 += params.R*c + params.Alpha
		}
		for i, p := range r.Probabilities {
			ai := params.R*counts[i] + params.Alpha
			mean := ai / a0
			sd := math.Sqrt(ai * (a0 - ai) / (a0 * a0 * (a0 + 1)))
			if math.Abs(p-mean) > 6*sd+1/float64(r.Params.Grid) {
				t.Errorf("%s/%s %s: released %v, Dirichlet mean %v ± %v (6 sd + 1/%d exceeded)", r.Histogram, r.Group, r.Bins[i], p, mean, sd, r.Params.Grid)
			}
		}
	}
}

// TestEndToEndRestartContinuesFromCommittedOffsets: a soft stop after the
// first window was released, more input, a restart: every window is released
// exactly once, and the windows open at the stop are complete (re-read from
// the committed offsets).
func TestEndToEndRestartContinuesFromCommittedOffsets(t *testing.T) {
	h := newHarness(t)
	cfg := h.config("gaussian", 1e7)
	evs := stream(3, 200)
	tr := computeTruth(evs)
	var first, second []event
	for _, e := range evs {
		if e.At.Before(base.Add(90 * time.Second)) {
			first = append(first, e)
		} else {
			second = append(second, e)
		}
	}
	h.produceEvents(first)
	run := h.start(cfg)
	// Close window 0 only: an event at 1m30s from a fresh user.
	h.produce(kafka.Message{Key: []byte("w"), Value: event{User: "w0", At: base.Add(90 * time.Second), Page: "home", Country: "FR", Device: "mobile"}.json()})
	tr[key("pages", "FR", base.Add(time.Minute))] = []float64{1, 0, 0, 0, 0}
	tr[key("devices", "*", base.Add(time.Minute))][0]++
	h.readOutput(len(groups)+1, 60*time.Second, 0)
	run.stop(t)

	h.produceEvents(second)
	h.start(cfg)
	h.produce(flush(base.Add(3*time.Minute + time.Second)))
	out := h.readOutput(3*(len(groups)+1), 60*time.Second, 2*time.Second)
	if len(out.Releases) != 3*(len(groups)+1) {
		t.Fatalf("got %d releases, want %d", len(out.Releases), 3*(len(groups)+1))
	}
	for id, copies := range out.Raw {
		if len(copies) != 1 {
			t.Errorf("release %s published %d times", id, len(copies))
		}
	}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		k := key(r.Histogram, r.Group, ws)
		checkExact(t, k, r, tr[k])
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// checkExact asserts that a near-noiseless release equals the true bounded
// shares (uniform for a group without events).
func checkExact(t *testing.T, k string, r pipeline.Release, counts []float64) {
	t.Helper()
	n := 0.0
	for _, c := range counts {
		n += c
	}
	for i, p := range r.Probabilities {
		want := 1 / float64(len(r.Bins))
		if n > 0 {
			want = counts[i] / n
		}
		if math.Abs(p-want) > 1e-12 {
			t.Errorf("%s bin %s: released %v, true bounded share %v (counts %v)", k, r.Bins[i], p, want, counts)
		}
	}
}
