package generator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func mustNew(t testing.TB, cfg Config) *Generator {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDeterministicAndSeedDependent(t *testing.T) {
	a := mustNew(t, Config{Start: t0, Seed: 7})
	b := mustNew(t, Config{Start: t0, Seed: 7})
	c := mustNew(t, Config{Start: t0, Seed: 8})
	same := 0
	for i := range int64(1000) {
		ea, eb, ec := a.Event(i), b.Event(i), c.Event(i)
		if ea != eb {
			t.Fatalf("event %d differs between equal configs: %+v vs %+v", i, ea, eb)
		}
		if ea.UserID == ec.UserID && ea.Page == ec.Page {
			same++
		}
	}
	if same > 400 {
		t.Errorf("seeds 7 and 8 agree on user and page in %d of 1000 events", same)
	}
}

func TestJSONShapeAndSize(t *testing.T) {
	for _, tf := range []TimeFormat{EpochMillis, RFC3339} {
		g := mustNew(t, Config{Start: t0, Seed: 1, TimeFormat: tf, Users: 1000})
		total := 0
		const n = 2000
		for i := range int64(n) {
			e := g.Event(i)
			raw := g.AppendJSON(nil, e)
			total += len(raw)
			var m map[string]any
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("event %d: invalid JSON %s: %v", i, raw, err)
			}
			if len(m) != 7 {
				t.Fatalf("event %d has %d fields, want 7: %s", i, len(m), raw)
			}
			var ts time.Time
			switch tf {
			case EpochMillis:
				ms, err := m["ts"].(json.Number).Int64()
				if err != nil {
					t.Fatalf("ts not an integer: %s", raw)
				}
				ts = time.UnixMilli(ms)
			case RFC3339:
				s, _ := m["ts"].(string)
				var err error
				if ts, err = time.Parse(time.RFC3339, s); err != nil {
					t.Fatalf("ts %q: %v", s, err)
				}
			}
			if !ts.Equal(e.Time) {
				t.Fatalf("ts %v, event time %v", ts, e.Time)
			}
			if m["user_id"] != e.UserID || m["page"] != e.Page || m["country"] != e.Country || m["device"] != e.Device {
				t.Fatalf("fields do not match event %+v: %s", e, raw)
			}
			if s, _ := m["session"].(string); len(s) != 16 {
				t.Fatalf("session %q, want 16 hex digits", s)
			}
			if seq, _ := m["seq"].(json.Number).Int64(); seq != i {
				t.Fatalf("seq %v, want %d", m["seq"], i)
			}
			msg := g.Message(i)
			if string(msg.Key) != e.UserID || !bytes.Equal(msg.Value, raw) {
				t.Fatalf("message %d: key %q value %s", i, msg.Key, msg.Value)
			}
		}
		avg := float64(total) / n
		t.Logf("format %d: average event %.1f bytes", tf, avg)
		if avg < 100 || avg > 140 {
			t.Errorf("format %d: average event %.1f bytes, want about 120", tf, avg)
		}
	}
}

func TestEventTimeSchedule(t *testing.T) {
	g := mustNew(t, Config{Start: t0.Add(123456789), EventsPerSecond: 400, TimeScale: 6})
	if g.Step() != 15*time.Millisecond {
		t.Fatalf("step %v, want 15ms (6/400 s)", g.Step())
	}
	start := t0.Add(123 * time.Millisecond)
	if !g.Start().Equal(start) {
		t.Fatalf("start %v, want %v (truncated to ms)", g.Start(), start)
	}
	for _, i := range []int64{0, 1, 2, 1000, 123457} {
		if got, want := g.Event(i).Time, start.Add(time.Duration(i)*15*time.Millisecond); !got.Equal(want) {
			t.Errorf("event %d at %v, want %v", i, got, want)
		}
	}

	d := mustNew(t, Config{Start: t0, EventsPerSecond: 100, Disorder: 2 * time.Second})
	late := 0
	for i := range int64(5000) {
		nominal := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		e := d.Event(i)
		if e.Time.After(nominal) || !e.Time.After(nominal.Add(-2*time.Second-time.Millisecond)) {
			t.Fatalf("event %d at %v, want in (%v, %v]", i, e.Time, nominal.Add(-2*time.Second), nominal)
		}
		if i > 0 && e.Time.Before(d.Event(i-1).Time) {
			late++
		}
	}
	if late < 1000 {
		t.Errorf("only %d of 5000 events out of order with 2s disorder", late)
	}
}

func TestSkew(t *testing.T) {
	g := mustNew(t, Config{Start: t0, Users: 300, Seed: 3})
	const n = 60000
	pages := map[string]int{}
	users := map[string]int{}
	country := map[string]string{}
	for e := range g.Events(0, n) {
		pages[e.Page]++
		users[e.UserID]++
		if c, ok := country[e.UserID]; ok && c != e.Country {
			t.Fatalf("user %s seen in %s and %s", e.UserID, c, e.Country)
		}
		country[e.UserID] = e.Country
	}
	var sum float64
	for _, w := range pageWeights {
		sum += w
	}
	for i, p := range Pages {
		want := pageWeights[i] / sum
		if got := float64(pages[p]) / n; math.Abs(got-want) > 0.01 {
			t.Errorf("page %s share %.3f, want %.3f", p, got, want)
		}
	}
	// Zipf(1.1) over 300 users: the top user sends far more than 1/300.
	if top := float64(users["u0"]) / n; top < 0.1 {
		t.Errorf("top user share %.3f, want a heavy hitter (> 0.1)", top)
	}
	if len(users) < 250 {
		t.Errorf("only %d of 300 users active in %d events", len(users), n)
	}
	perCountry := map[string]int{}
	for u := range g.userIDs {
		perCountry[Countries[g.userCtry[u]]]++
	}
	if !(perCountry["US"] > perCountry["DE"] && perCountry["DE"] > perCountry["FR"] && perCountry["FR"] > 0) {
		t.Errorf("users per country %v, want US > DE > FR > 0", perCountry)
	}
	u := mustNew(t, Config{Start: t0, Users: 10, Skew: -1})
	flat := map[string]int{}
	for e := range u.Events(0, 10000) {
		flat[e.UserID]++
	}
	for id, c := range flat {
		if c < 800 || c > 1200 {
			t.Errorf("uniform users: %s has %d of 10000 events", id, c)
		}
	}
}

func TestFillReusesBuffers(t *testing.T) {
	g := mustNew(t, Config{Start: t0, Seed: 9})
	buf := g.Fill(nil, 500)
	if len(buf) != 500 {
		t.Fatalf("len %d", len(buf))
	}
	for i, b := range buf {
		if want := g.AppendJSON(nil, g.Event(int64(i))); !bytes.Equal(b, want) {
			t.Fatalf("event %d: %s, want %s", i, b, want)
		}
	}
	allocs := testing.AllocsPerRun(5, func() { buf = g.Fill(buf, 500) })
	if allocs > 0 {
		t.Errorf("Fill into a warm buffer allocates %.0f times", allocs)
	}
	if got := g.Fill(buf, 10); len(got) != 10 || !bytes.Equal(got[3], buf[3]) {
		t.Errorf("shrinking Fill: len %d", len(got))
	}
}

func TestTruth(t *testing.T) {
	g := mustNew(t, Config{Start: t0.Add(-7 * time.Second), EventsPerSecond: 100, TimeScale: 10, Seed: 5})
	const n = 2000 // 2000 events · 0.1 s = 200 s of event time
	ws, err := g.Truth(n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 5 { // 11:59:53 .. 12:03:13
		t.Fatalf("%d windows, want 5", len(ws))
	}
	total := 0
	for i, w := range ws {
		if w.Start.UnixMilli()%60000 != 0 || w.End.Sub(w.Start) != time.Minute {
			t.Errorf("window %d [%v, %v) not epoch-aligned minute", i, w.Start, w.End)
		}
		if i > 0 && !ws[i-1].Start.Before(w.Start) {
			t.Errorf("windows out of order")
		}
		sum := func(m map[string]int) int {
			s := 0
			for _, v := range m {
				s += v
			}
			return s
		}
		if sum(w.Pages) != w.Events || sum(w.Countries) != w.Events || sum(w.Users) != w.Events {
			t.Errorf("window %d: inconsistent sums", i)
		}
		distinct := 0
		for c, pages := range w.PageByCountry {
			if sum(pages) != w.Countries[c] {
				t.Errorf("window %d country %s: pages sum %d, want %d", i, c, sum(pages), w.Countries[c])
			}
		}
		for _, d := range w.UsersByCountry {
			distinct += d
		}
		if distinct != len(w.Users) {
			t.Errorf("window %d: %d users by country, %d users", i, distinct, len(w.Users))
		}
		total += w.Events
	}
	if total != n {
		t.Errorf("windows hold %d events, want %d", total, n)
	}
	if ws[0].Events != 70 { // 11:59:53.000 .. 11:59:59.900: 70 events
		t.Errorf("first window %d events, want 70", ws[0].Events)
	}
	if _, err := g.Truth(n, 1500*time.Microsecond); err == nil {
		t.Error("window of 1.5ms accepted")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := New(Config{Users: -1, EventsPerSecond: -2, TimeScale: math.NaN(), Disorder: -1, Limit: -1})
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"users", "events per second", "time scale", "disorder", "limit"} {
		if !bytes.Contains([]byte(err.Error()), []byte(want)) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// recorder is a Writer that keeps what it accepts and fails on demand.
type recorder struct {
	// mu guards msgs, calls and failures.
	mu       sync.Mutex
	msgs     []kafka.Message
	calls    int
	failures int // fail this many more calls
}

func (r *recorder) WriteMessages(_ context.Context, msgs ...kafka.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.failures > 0 {
		r.failures--
		return errors.New("broker away")
	}
	r.msgs = append(r.msgs, msgs...)
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func TestRunPacesAndRetries(t *testing.T) {
	var (
		// errMu guards errs.
		errMu sync.Mutex
		errs  []error
	)
	g := mustNew(t, Config{Start: t0, EventsPerSecond: 2000, Seed: 11, OnError: func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}})
	rec := &recorder{failures: 2}
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := g.Run(ctx, rec); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	n := rec.count()
	if int64(n) != g.Written() {
		t.Fatalf("writer holds %d, Written() = %d", n, g.Written())
	}
	// 2000/s for ~0.7 s, minus ~150 ms of retry backoff: well below an
	// unpaced run, well above nothing.
	if max := int(2000*elapsed.Seconds()) + g.Config().BatchSize; n > max || n < 300 {
		t.Errorf("wrote %d events in %v at 2000/s", n, elapsed)
	}
	if len(errs) != 2 {
		t.Errorf("OnError called %d times, want 2", len(errs))
	}
	for i, m := range rec.msgs {
		want := g.Message(int64(i))
		if !bytes.Equal(m.Key, want.Key) || !bytes.Equal(m.Value, want.Value) {
			t.Fatalf("message %d is not event %d of the stream", i, i)
		}
	}
}

func TestRunLimitUnpacedAndResume(t *testing.T) {
	g := mustNew(t, Config{Start: t0, EventsPerSecond: 1, Limit: 5000, Unpaced: true, BatchSize: 100})
	rec := &recorder{}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := g.Run(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if rec.count() != 5000 || g.Written() != 5000 {
		t.Fatalf("wrote %d (Written %d), want the limit 5000", rec.count(), g.Written())
	}
	if rec.calls != 50 {
		t.Errorf("%d write calls, want 50 batches of 100", rec.calls)
	}
	more := &recorder{}
	g2 := mustNew(t, Config{Start: t0, EventsPerSecond: 1, Limit: 5100, Unpaced: true})
	if err := g2.RunFrom(ctx, more, 5000); err != nil {
		t.Fatal(err)
	}
	if more.count() != 100 || string(more.msgs[0].Value) != string(g.Message(5000).Value) {
		t.Errorf("resume wrote %d messages starting %s", more.count(), more.msgs[0].Value)
	}
}

func ExampleGenerator_Event() {
	g, _ := New(Config{Start: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Seed: 1, TimeFormat: RFC3339})
	fmt.Println(string(g.AppendJSON(nil, g.Event(0))))
	// Output: {"ts":"2025-01-01T00:00:00.000Z","user_id":"u0","page":"search","country":"US","device":"mobile","session":"fda26506fa970188","seq":0}
}

func BenchmarkFill(b *testing.B) {
	g := mustNew(b, Config{Start: t0})
	buf := g.Fill(nil, 10000)
	b.ReportAllocs()
	b.SetBytes(int64(10000 * len(buf[0])))
	for b.Loop() {
		buf = g.Fill(buf, 10000)
	}
}

// TestUserLifetime: with UserLifetime every user id is active for less than
// one lifetime of event time, and the population turns over (many more ids
// than slots); the slots keep their Zipf activity and their country.
func TestUserLifetime(t *testing.T) {
	const lifetime = 3 * time.Minute
	g := mustNew(t, Config{Users: 500, EventsPerSecond: 100, TimeScale: 1, Seed: 9, UserLifetime: lifetime,
		Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	first, last := map[string]time.Time{}, map[string]time.Time{}
	country := map[string]string{}
	const n = 200_000 // 2000 s of event time: 11 lifetimes
	for e := range g.Events(0, n) {
		if _, ok := first[e.UserID]; !ok {
			first[e.UserID] = e.Time
		}
		last[e.UserID] = e.Time
		slot := e.UserID[:strings.IndexByte(e.UserID, '.')]
		if c, ok := country[slot]; ok && c != e.Country {
			t.Fatalf("slot %s changed country: %s then %s", slot, c, e.Country)
		}
		country[slot] = e.Country
	}
	for id, f := range first {
		if span := last[id].Sub(f); span >= lifetime {
			t.Fatalf("user %s active for %s, want < %s", id, span, lifetime)
		}
	}
	// 500 slots over 2000 s with a 180 s lifetime: up to 500·(2000/180 + 1)
	// ids; the Zipf tail leaves some generations without an event.
	if len(first) < 2000 {
		t.Errorf("%d distinct users over 11 lifetimes of 500 slots, want the population to turn over", len(first))
	}
	g0 := mustNew(t, Config{Users: 500, EventsPerSecond: 100, TimeScale: 1, Seed: 9})
	if id := g0.Event(7).UserID; strings.Contains(id, ".") {
		t.Errorf("without a lifetime the user id is %q, want u<slot>", id)
	}
}

// TestIDPrefix: the prefix starts every user id and leaves the rest of the
// stream as it was, so two prefixes give streams without a common user;
// ids that JSON would need to escape are refused.
func TestIDPrefix(t *testing.T) {
	plain := mustNew(t, Config{Start: t0, Seed: 3, UserLifetime: time.Minute})
	a := mustNew(t, Config{Start: t0, Seed: 3, UserLifetime: time.Minute, IDPrefix: "r0a1b2c3d-"})
	b := mustNew(t, Config{Start: t0, Seed: 3, UserLifetime: time.Minute, IDPrefix: "r99999999-"})
	seen := map[string]bool{}
	for i := int64(0); i < 2000; i++ {
		e, ea := plain.Event(i), a.Event(i)
		if ea.UserID != "r0a1b2c3d-"+e.UserID || ea.Page != e.Page || !ea.Time.Equal(e.Time) {
			t.Fatalf("event %d: %+v with the prefix, %+v without", i, ea, e)
		}
		seen[ea.UserID] = true
	}
	for i := int64(0); i < 2000; i++ {
		if id := b.Event(i).UserID; seen[id] {
			t.Fatalf("user %s in both streams", id)
		}
	}
	for _, p := range []string{`r"`, "r\\", "a b", strings.Repeat("x", 33)} {
		if _, err := New(Config{IDPrefix: p}); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}
