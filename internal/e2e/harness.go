package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/embedded"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/release"
)

// Base is the first window of the harness configs (window.start).
var Base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// PagesBins is the pages histogram's bins as YAML.
const PagesBins = "home, search, cart, checkout, other"

// The bins and groups of the harness config.
var (
	Pages   = []string{"home", "search", "cart", "checkout", "other"}
	Devices = []string{"mobile", "desktop"}
	Groups  = []string{"US", "DE", "FR"}
)

// Harness is one test's broker (topics events-NAME with 4 partitions,
// out-NAME and dlq-NAME) and state directory. The input topic has
// producer-set record times (message.timestamp.type CreateTime, accepted
// by the configs' window.record_times: producer): with watermark arrival
// the harness stamps each record with its event time, so that a test
// decides every record time itself.
type Harness struct {
	T      *testing.T
	Broker *embedded.Broker
	Name   string
	Dir    string
	// Watermark is the config's window.watermark: "event" (the default of
	// New, so that the historical event times of Stream close windows) or
	// "arrival" (windows close when the partitions are read to their end;
	// ProduceEvents then stamps records with their event times).
	Watermark string
}

// New starts the harness's broker; the watermark is "event".
func New(t *testing.T) *Harness {
	t.Helper()
	name := Name(t)
	b := StartBrokerConfig(t, embedded.Config{
		Topics:       map[string]int{"events-" + name: 4, "out-" + name: 1, "dlq-" + name: 1},
		TopicConfigs: map[string]map[string]string{"events-" + name: {"message.timestamp.type": "CreateTime"}},
	})
	return &Harness{T: t, Broker: b, Name: name, Dir: t.TempDir(), Watermark: config.WatermarkEvent}
}

// Input and Output are the harness's topics.
func (h *Harness) Input() string  { return "events-" + h.Name }
func (h *Harness) Output() string { return "out-" + h.Name }

// Config returns a validated config for this harness. mech is
// "gaussian" (with a huge ε: exact counts) or a dirichlet calibration.
func (h *Harness) Config(mech string, epsilon float64) *config.Config {
	h.T.Helper()
	privacy := "mechanism: gaussian"
	if mech != "gaussian" {
		privacy = "mechanism: dirichlet\n  calibration: " + mech
	}
	return h.ConfigWith(privacy, epsilon)
}

// ConfigWith returns the harness config with the given privacy lines (the
// first unindented, later ones indented by two spaces).
func (h *Harness) ConfigWith(privacy string, epsilon float64) *config.Config {
	h.T.Helper()
	return h.ConfigExtra(privacy, epsilon, "")
}

// ConfigExtra is ConfigWith with more histograms: extra is YAML list items
// indented by two spaces.
func (h *Harness) ConfigExtra(privacy string, epsilon float64, extra string) *config.Config {
	h.T.Helper()
	cfg, err := config.Parse([]byte(ConfigYAML(ConfigParams{
		Brokers: h.Broker.Addr(), Name: h.Name, Watermark: h.Watermark, Lateness: "0s", Idle: "500ms",
		Start: "2026-01-01T00:00:00Z", Extra: extra, Privacy: privacy, Epsilon: epsilon, StateDir: h.Dir,
		Bounds: "  max_events_per_user: 1\n  max_groups_per_user: 1\n", LogLevel: "warn",
	})), func(string) (string, bool) { return "", false })
	if err != nil {
		h.T.Fatalf("config: %v", err)
	}
	cfg.Window.RecordTimes = config.RecordTimesProducer // the input topic is CreateTime (Harness)
	return cfg
}

// ConfigParams fill ConfigYAML's template.
type ConfigParams struct {
	Brokers   string // one address
	Name      string // group g-NAME, topics events-NAME and out-NAME
	Kafka     string // more kafka lines, indented by two spaces
	Watermark string // window.watermark
	Size      string // window.size; default 1m
	Lateness  string // window.allowed_lateness
	Idle      string // window.idle_partition_timeout
	Start     string // window.start; empty for none
	Extra     string // more histograms, YAML list items indented by two spaces
	Bounds    string // the contribution section's lines, indented by two spaces
	Privacy   string // the privacy lines (the first unindented)
	Epsilon   float64
	StateDir  string
	LogLevel  string
}

// ConfigYAML is the harness's config: histograms pages (grouped by country
// US, DE, FR, overflow bin other) and devices over the input events of
// Event.JSON.
func ConfigYAML(p ConfigParams) string {
	size := cmp.Or(p.Size, "1m")
	start := ""
	if p.Start != "" {
		start = "\n  start: " + p.Start
	}
	return fmt.Sprintf(`
kafka:
  brokers: [%q]
  group_id: g-%s
  input_topic: events-%s
  output_topic: out-%s
%sevents:
  time_field: ts
  user_field: user_id
window:
  size: %s
  watermark: %s
  allowed_lateness: %s
  idle_partition_timeout: %s%s
  clock_skew_margin: 0s # broker and stage on one host: one clock
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
%sprivacy:
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
  level: %s
`, p.Brokers, p.Name, p.Name, p.Name, p.Kafka, size, p.Watermark, p.Lateness, p.Idle, start, PagesBins, p.Extra, p.Bounds, p.Privacy, p.Epsilon, p.StateDir, p.LogLevel)
}

// ArrivalConfig is the harness config with watermark arrival (the
// default), short windows on the wall clock and exact counts
// (near-noiseless Gaussian).
func (h *Harness) ArrivalConfig(size, lateness time.Duration) *config.Config {
	cfg := h.Config("gaussian", 1e7)
	cfg.Window.Watermark = config.WatermarkArrival
	cfg.Window.Start = "" // the wall-clock window of the first start
	cfg.Window.Size = config.Duration(size)
	cfg.Window.AllowedLateness = config.Duration(lateness)
	return cfg
}

// Event is one input event of the harness config.
type Event struct {
	User    string
	At      time.Time
	Page    string
	Country string
	Device  string
}

// JSON is the event as the stage reads it.
func (e Event) JSON() []byte {
	b, _ := json.Marshal(map[string]any{"ts": e.At.UnixMilli(), "user_id": e.User, "page": e.Page, "country": e.Country, "device": e.Device})
	return b
}

// Message is the event as a record keyed by its user; with stamp the
// record time is the event time.
func (e Event) Message(stamp bool) kafka.Message {
	m := kafka.Message{Key: []byte(e.User), Value: e.JSON()}
	if stamp {
		m.Time = e.At
	}
	return m
}

// Produce writes msgs to the input topic.
func (h *Harness) Produce(msgs ...kafka.Message) {
	h.T.Helper()
	Produce(h.T, h.Broker.Addr(), h.Input(), msgs...)
}

// ProduceEvents writes evs to the input topic; with watermark arrival each
// record's time is its event time (so that an event counts by its own
// rule whenever it is written).
func (h *Harness) ProduceEvents(evs []Event) {
	h.T.Helper()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = e.Message(h.Watermark == config.WatermarkArrival)
	}
	h.Produce(msgs...)
}

// ProduceTo writes evs to one input partition, in order.
func (h *Harness) ProduceTo(partition int, evs []Event) {
	h.T.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(h.Broker.Addr()), Transport: NewTransport(h.T), Topic: h.Input(),
		Balancer:     kafka.BalancerFunc(func(kafka.Message, ...int) int { return partition }),
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 10000}
	defer w.Close()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = e.Message(h.Watermark == config.WatermarkArrival)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		h.T.Fatalf("produce to partition %d: %v", partition, err)
	}
}

// ProduceLive produces n events of distinct users with the wall-clock time
// as event time, spread over about d, and returns them.
func (h *Harness) ProduceLive(prefix string, n int, d time.Duration) []Event {
	var evs []Event
	step := d / time.Duration(n)
	for i := range n {
		e := Event{User: fmt.Sprintf("%s-%d", prefix, i), At: time.Now().Truncate(time.Millisecond), Page: "home", Country: "US", Device: Devices[i%3%2]}
		h.Produce(kafka.Message{Key: []byte(e.User), Value: e.JSON()})
		evs = append(evs, e)
		time.Sleep(step)
	}
	return evs
}

// ProduceBulk produces n events of distinct users in one write, all with
// the wall-clock time of the call as event time, and returns them.
func (h *Harness) ProduceBulk(prefix string, n int) []Event {
	at := time.Now().Truncate(time.Millisecond)
	evs := make([]Event, n)
	msgs := make([]kafka.Message, n)
	for i := range evs {
		evs[i] = Event{User: fmt.Sprintf("%s-%d", prefix, i), At: at, Page: "home", Country: "US", Device: Devices[i%3%2]}
		// The record time is the event time: kafka-go would otherwise stamp
		// each batch when it encodes it, up to ~0.6 s later on a loaded
		// machine — past the tests' 300 ms lateness, so the events would
		// be late by their own rule and the tests flaky.
		msgs[i] = evs[i].Message(true)
	}
	h.Produce(msgs...)
	return evs
}

// Running is a stage running in the background.
type Running struct {
	*Background
	Stage *pipeline.Stage
	Units atomic.Int64 // units published (OnRelease calls)
}

// TestKey keys the user hash of every stage the harness starts, so that
// the tests can work out which users and events the bounder selects.
var TestKey = siphash.MustNewKey()

// Start runs a stage with cfg in the background (user hash keyed by
// TestKey); it is soft-stopped when the test ends.
func (h *Harness) Start(cfg *config.Config) *Running {
	h.T.Helper()
	r := &Running{}
	return StartStage(h.T, r, pipeline.Options{Config: cfg, HashKey: &TestKey,
		OnRelease: func(*ledger.Unit, time.Duration) { r.Units.Add(1) }})
}

// StartStage runs a stage with opts in the background (Log and
// DrainTimeout filled in when unset) as r, soft-stopped when the test ends.
// before, when set, sees the stage before it runs.
func StartStage(t *testing.T, r *Running, opts pipeline.Options, before ...func(*pipeline.Stage)) *Running {
	t.Helper()
	if opts.Log == nil {
		opts.Log = Log()
	}
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	st, err := pipeline.New(opts)
	if err != nil {
		t.Fatalf("new stage: %v", err)
	}
	for _, f := range before {
		f(st)
	}
	r.Stage = st
	r.Background = Go(t, "stage", st.Run)
	return r
}

// Output is the decoded output topic.
type Output struct {
	Releases []release.Release
	Statuses []release.Status
	Raw      map[string][]string // release_id → raw values (copies)
}

// ReadOutput reads the output topic from the beginning until want release
// messages arrived (or the timeout), then for settle longer to catch extras.
func (h *Harness) ReadOutput(want int, timeout, settle time.Duration) Output {
	h.T.Helper()
	return ReadOutput(h.T, h.Broker.Addr(), h.Output(), want, timeout, settle)
}

// ReadOutput reads partition 0 of topic from the beginning until want
// release messages arrived (or the timeout), then for settle longer to
// catch extras (republished copies).
func ReadOutput(t testing.TB, addr, topic string, want int, timeout, settle time.Duration) Output {
	t.Helper()
	return readOutput(t, addr, topic, want, timeout, settle, false)
}

// ReadUnique is ReadOutput counting, and listing in Releases, each
// release_id once (the first copy read); Raw holds every copy.
func ReadUnique(t testing.TB, addr, topic string, want int, timeout, settle time.Duration) Output {
	t.Helper()
	return readOutput(t, addr, topic, want, timeout, settle, true)
}

func readOutput(t testing.TB, addr, topic string, want int, timeout, settle time.Duration, unique bool) Output {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	out := Output{Raw: map[string][]string{}}
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
				t.Fatalf("read output: got %d release messages, want %d: %v", len(out.Releases), want, err)
			}
			return out
		}
		var probe struct {
			Status    string `json:"status"`
			ReleaseID string `json:"release_id"`
		}
		if err := json.Unmarshal(m.Value, &probe); err != nil {
			t.Fatalf("output message is not JSON: %v: %s", err, m.Value)
		}
		seen := len(out.Raw[probe.ReleaseID]) > 0
		out.Raw[probe.ReleaseID] = append(out.Raw[probe.ReleaseID], string(m.Value))
		if unique && seen {
			continue
		}
		if probe.Status != "" {
			var s release.Status
			_ = json.Unmarshal(m.Value, &s)
			out.Statuses = append(out.Statuses, s)
			continue
		}
		var rel release.Release
		if err := json.Unmarshal(m.Value, &rel); err != nil {
			t.Fatalf("release: %v", err)
		}
		out.Releases = append(out.Releases, rel)
	}
}

// Truth holds the bounded histograms.
type Truth map[string][]float64 // key "hist/group/windowStartMs" → counts in bin order

// Key is the Truth key of (hist, group, window start w).
func Key(hist, group string, w time.Time) string {
	return fmt.Sprintf("%s/%s/%d", hist, group, w.UnixMilli())
}

// ReleaseKey is the Truth key of a release.
func ReleaseKey(r release.Release) string {
	ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
	return Key(r.Histogram, r.Group, ws)
}

// ComputeTruth computes the bounded histograms of the harness config
// (max_events_per_user 1, max_groups_per_user 1, the cap never reached).
func ComputeTruth(evs []Event) Truth { return ComputeTruthWith(evs, 1, 1, 0) }

// ComputeTruthWith computes the bounded histograms from the event set alone,
// by the rule of package aggregate's doc, with m events and G groups per
// user, window and histogram, and at most K users per window (0: no cap):
// the tracked users are the K smallest user hashes (of the users with a
// part to count), each user's groups are ranked by aggregate.GroupHash and
// its parts by aggregate.EventHash. The order of evs does not matter.
func ComputeTruthWith(evs []Event, m, G, K int) Truth {
	return ComputeTruthIn(evs, time.Minute, m, G, K)
}

// ComputeTruthIn is ComputeTruthWith for windows of the given size.
func ComputeTruthIn(evs []Event, size time.Duration, m, G, K int) Truth {
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
		k := uw{TestKey.String(e.User), e.At.Truncate(size)}
		ps := parts[k]
		// pages: overflow bin "other"; group must be declared.
		if g := idx(Groups, e.Country); g >= 0 && e.Page != "" {
			b := idx(Pages, e.Page)
			if b < 0 {
				b = idx(Pages, "other")
			}
			ps[0] = append(ps[0], part{g, b, e.At.UnixMilli()})
		}
		if b := idx(Devices, e.Device); b >= 0 {
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
	tr := Truth{}
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
					hist, group, n := "devices", "*", len(Devices)
					if h == 0 {
						hist, group, n = "pages", Groups[p.g], len(Pages)
					}
					kk := Key(hist, group, w)
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

// Stream builds a deterministic event stream over nWindows windows starting
// at Base. FR never appears (its releases must still be made).
func Stream(nWindows, usersPerWindow int) []Event {
	return StreamFrom(Base, time.Minute, nWindows, usersPerWindow)
}

// StreamFrom is Stream with windows of the given size from base.
func StreamFrom(base time.Time, size time.Duration, nWindows, usersPerWindow int) []Event {
	var evs []Event
	for w := 0; w < nWindows; w++ {
		for u := 0; u < usersPerWindow; u++ {
			user := fmt.Sprintf("u%d", (u*7+w*13)%(usersPerWindow*2))
			at := base.Add(time.Duration(w)*size + time.Duration(u)*size/60/time.Duration(usersPerWindow/50+1))
			evs = append(evs, Event{
				User:    user,
				At:      at,
				Page:    Pages[(u*u+w)%len(Pages)],
				Country: Groups[(u+w)%2], // US or DE only
				Device:  Devices[(u/3)%2],
			})
			if u%5 == 0 { // a second event of the same user: bounded away
				evs = append(evs, Event{User: user, At: at.Add(time.Millisecond), Page: "cart", Country: "US", Device: "mobile"})
			}
		}
	}
	return evs
}

// Flush is an event at at (a fresh user): it moves the event-time
// watermark past the windows before at.
func Flush(at time.Time) kafka.Message {
	return kafka.Message{Key: []byte("flush"), Value: Event{User: "flush", At: at, Page: "home", Country: "US", Device: "mobile"}.JSON()}
}

// CheckSimplex checks that r has the declared bins in order and lies on
// the simplex.
func CheckSimplex(t testing.TB, r release.Release, bins []string) {
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

// CheckWindowsExact checks that releases hold, for each window start in
// windows, the harness's releases of that window — pages for every group of
// Groups and devices — each exact against its bounded truth in tr
// (CheckExact); a missing release is an error.
func CheckWindowsExact(t testing.TB, releases []release.Release, tr Truth, windows ...time.Time) {
	t.Helper()
	got := map[string]release.Release{}
	for _, r := range releases {
		got[ReleaseKey(r)] = r
	}
	for _, w := range windows {
		for _, g := range append([]string{"*"}, Groups...) {
			hist := "pages"
			if g == "*" {
				hist = "devices"
			}
			k := Key(hist, g, w)
			r, ok := got[k]
			if !ok {
				t.Errorf("missing release %s", k)
				continue
			}
			CheckExact(t, k, r, tr[k])
		}
	}
}

// WindowsFrom returns the window starts first, first + size, … up to last.
func WindowsFrom(first, last time.Time, size time.Duration) []time.Time {
	var out []time.Time
	for w := first; !w.After(last); w = w.Add(size) {
		out = append(out, w)
	}
	return out
}

// CheckExact asserts that a near-noiseless release equals the true bounded
// shares (uniform for a group without events), and that its intervals and
// its total hold the true shares and total: counts are the true bounded
// counts, not only proportional to them.
func CheckExact(t testing.TB, k string, r release.Release, counts []float64) {
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
			t.Errorf("%s bin %s: released %v, true bounded share %v (counts %v): an event was lost or counted twice", k, r.Bins[i], p, want, counts)
		}
	}
	// Every release carries its intervals and its private total (issue
	// 29); near-noiseless, they hold the true shares and the true total.
	iv, tot := r.Intervals, r.Total
	if iv == nil || tot == nil || len(iv.Low) != len(r.Bins) || len(iv.High) != len(r.Bins) {
		t.Errorf("%s: intervals %+v, total %+v: want both, one interval per bin", k, iv, tot)
		return
	}
	if n < tot.Low || n > tot.High {
		t.Errorf("%s: total %+v does not hold the true total %v", k, *tot, n)
	}
	for i := range r.Bins {
		if n > 0 && (counts[i]/n < iv.Low[i] || counts[i]/n > iv.High[i]) {
			t.Errorf("%s bin %s: interval [%v, %v] does not hold the true share %v (near-noiseless)", k, r.Bins[i], iv.Low[i], iv.High[i], counts[i]/n)
		}
	}
}
