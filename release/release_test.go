package release_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// These tests run the release step alone: a window's counts from the real
// decoder and aggregator, a temporary ledger, no broker.

const minute = int64(60_000)

// testConfig has two count histograms (pages by country; devices) and the
// near-noiseless Gaussian mechanism, so that released shares are the true
// bounded ones; privacy lines are appended to the privacy section.
func testConfig(t *testing.T, privacy string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`
kafka: {brokers: ["127.0.0.1:1"], group_id: g, input_topic: in, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m, watermark: event, start: "2026-01-01T00:00:00Z"}
histograms:
  - {name: pages, field: page, bins: [home, cart], group_by: country, groups: [US, DE]}
  - {name: devices, field: device, bins: [mobile, desktop]}
privacy:
  mechanism: gaussian
  neighbour: replace
%s  budget: {epsilon: 1.0e+7, delta: 1.0e-6, period: 5m}
state: {dir: %q}
`, privacy, t.TempDir())
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

type fixture struct {
	cfg *config.Config
	led *ledger.Ledger
	rel *release.Releaser
	agg *aggregate.Aggregator
	dec *decode.Decoder
	exh int
}

func newFixture(t *testing.T, cfg *config.Config) *fixture {
	t.Helper()
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(cfg.State.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	book, err := release.NewBook(p, led)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{cfg: cfg, led: led}
	f.rel, err = release.New(release.Options{Config: cfg, Plan: p, Ledger: led, Book: book,
		Rand: mechanism.NewSeededRand([32]byte{1}), OnExhausted: func() { f.exh++ }})
	if err != nil {
		t.Fatal(err)
	}
	if f.agg, err = aggregate.New(consume.AggregateSpec(cfg)); err != nil {
		t.Fatal(err)
	}
	if f.dec, err = decode.New(cfg, siphash.MustNewKey()); err != nil {
		t.Fatal(err)
	}
	return f
}

// window adds events (user, page, country, device) to window w, closes it
// and records it.
func (f *fixture) window(t *testing.T, w int64, events [][4]string) []*ledger.Unit {
	t.Helper()
	ev := f.dec.NewEvent()
	for i, e := range events {
		msg := fmt.Sprintf(`{"ts":%d,"user_id":%q,"page":%q,"country":%q,"device":%q}`, w+int64(i), e[0], e[1], e[2], e[3])
		if r := f.dec.Decode([]byte(msg), ev); r != decode.ReasonNone {
			t.Fatalf("decode %s: %v", msg, r)
		}
		f.agg.Add(w, ev)
	}
	counts, err := f.agg.Close(w)
	if err != nil {
		t.Fatal(err)
	}
	defer counts.Release()
	units, err := f.rel.Record(w, counts, nil)
	if err != nil {
		t.Fatalf("record window %d: %v", w, err)
	}
	return units
}

func releases(t *testing.T, u *ledger.Unit) map[string]release.Release {
	t.Helper()
	out := map[string]release.Release{}
	for _, m := range u.Messages {
		var r release.Release
		if err := json.Unmarshal(m.Value, &r); err != nil {
			t.Fatal(err)
		}
		if r.ReleaseID != release.ReleaseID(r.Histogram, r.Group, u.WindowStart) {
			t.Errorf("release id %s of %s/%s", r.ReleaseID, r.Histogram, r.Group)
		}
		out[r.Group] = r
	}
	return out
}

// TestRecordWindow: a closed window becomes one recorded unit per
// histogram — one release per declared group (a group without events
// too), the true shares under the near-noiseless mechanism — and the
// ledger's period spend is the units' charges.
func TestRecordWindow(t *testing.T) {
	f := newFixture(t, testConfig(t, ""))
	w := int64(29_000_000) * minute // 2025-02-20: a window of some period
	units := f.window(t, w, [][4]string{
		{"a", "home", "US", "mobile"}, {"b", "home", "US", "desktop"}, {"c", "cart", "US", "mobile"},
		{"a", "cart", "US", "mobile"}, // a's second event: bounded away (one per user)
	})
	if len(units) != 2 || units[0].Histogram != "pages" || units[1].Histogram != "devices" {
		t.Fatalf("units %+v", units)
	}
	for _, u := range units {
		if u.Status != ledger.StatusReleased || u.Published || u.WindowStart != w || u.WindowEnd != w+minute {
			t.Errorf("unit %s: status %s published %v window [%d, %d)", u.Histogram, u.Status, u.Published, u.WindowStart, u.WindowEnd)
		}
		got, ok, err := f.led.Lookup(u.Histogram, w)
		if err != nil || !ok || !bytes.Equal(got.Messages[0].Value, u.Messages[0].Value) {
			t.Errorf("ledger lookup of %s: %v %v", u.Histogram, ok, err)
		}
	}
	pages := releases(t, units[0])
	if len(pages) != 2 {
		t.Fatalf("pages releases for groups %v, want US and DE", pages)
	}
	// a counts once (its first-ranked event), b home, c cart: US is
	// {home: 1 + [a home], cart: 1 + [a cart]} — 2/3 one way or the other.
	us := pages["US"].Probabilities
	if math.Abs(us[0]+us[1]-1) > 1e-12 || (math.Abs(us[0]-2.0/3) > 1e-9 && math.Abs(us[0]-1.0/3) > 1e-9) {
		t.Errorf("US shares %v, want 2/3 and 1/3", us)
	}
	if de := pages["DE"].Probabilities; de[0] != 0.5 || de[1] != 0.5 {
		t.Errorf("DE (no events) shares %v, want uniform", de)
	}
	// The ledger's spend of the period is the sum of the units' charges.
	spent, ok, err := f.led.Spent(units[0].Period)
	if err != nil || !ok {
		t.Fatalf("spent: %v %v", ok, err)
	}
	for i := range spent.Epsilons {
		want := units[0].Charge.Epsilons[i] + units[1].Charge.Epsilons[i]
		if math.Abs(spent.Epsilons[i]-want) > 1e-9*want {
			t.Errorf("order %g: spent %v, charges sum %v", spent.Orders[i], spent.Epsilons[i], want)
		}
	}
}

// TestRecordAgainRepublishesSameBytes: recording a window already recorded
// (a restart after the record, before the publish) returns the recorded
// units with the same bytes and charges nothing again; once published,
// nothing is left to publish.
func TestRecordAgainRepublishesSameBytes(t *testing.T) {
	f := newFixture(t, testConfig(t, ""))
	w := int64(29_000_000) * minute
	evs := [][4]string{{"a", "home", "US", "mobile"}, {"b", "cart", "DE", "desktop"}}
	first := f.window(t, w, evs)
	before, _, _ := f.led.Spent(first[0].Period)
	again := f.window(t, w, [][4]string{{"x", "cart", "US", "desktop"}}) // other data: must not be drawn
	if len(again) != len(first) {
		t.Fatalf("again: %d units, want %d", len(again), len(first))
	}
	for i := range first {
		for j := range first[i].Messages {
			if !bytes.Equal(first[i].Messages[j].Value, again[i].Messages[j].Value) {
				t.Errorf("%s message %d: republished bytes differ:\n%s\n%s", first[i].Histogram, j, first[i].Messages[j].Value, again[i].Messages[j].Value)
			}
		}
	}
	after, _, _ := f.led.Spent(first[0].Period)
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("recording again charged: %v → %v", before, after)
	}
	keys := make([][]byte, 0, len(first))
	for _, u := range first {
		keys = append(keys, u.Key())
	}
	if err := f.led.MarkPublishedKeys(context.Background(), keys); err != nil {
		t.Fatal(err)
	}
	if left := f.window(t, w, nil); len(left) != 0 {
		t.Errorf("after publishing, %d units left to publish", len(left))
	}
}

// TestRefusedChargeIsBudgetExhausted: with privacy.rdp_epsilon fixing a
// per-release cost that fits fewer units than a period has, the units past
// the budget are recorded as budget_exhausted status messages (no release,
// no charge), the spend never exceeds the budget, and the next period
// releases again.
func TestRefusedChargeIsBudgetExhausted(t *testing.T) {
	cfg := testConfig(t, "")
	cfg.Privacy.Budget.Epsilon = 1
	// A per-release ε that fits exactly 3 units per period (of 10).
	fitRDPEpsilon(t, cfg, 3, nil)
	f := newFixture(t, cfg)
	period := int64(29_000_000) * minute // a period start (5m divides it)
	var statuses []string
	for k := int64(0); k < 6; k++ { // two periods of 5 windows, the first 3 of the second
		if k == 5 {
			statuses = append(statuses, "|")
		}
		for _, u := range f.window(t, period+k*minute, [][4]string{{"a", "home", "US", "mobile"}}) {
			statuses = append(statuses, string(u.Status))
			if u.Status == ledger.StatusBudgetExhausted {
				var st release.Status
				if err := json.Unmarshal(u.Messages[0].Value, &st); err != nil || len(u.Messages) != 1 {
					t.Fatalf("status message: %v (%d messages)", err, len(u.Messages))
				}
				if st.Status != "budget_exhausted" || st.Privacy.SpentEpsilon > st.Privacy.BudgetEpsilon*(1+1e-9) {
					t.Errorf("status %+v", st)
				}
				if len(u.Charge.Epsilons) != 0 {
					t.Errorf("refused unit charged %v", u.Charge)
				}
			}
		}
	}
	r, x := string(ledger.StatusReleased), string(ledger.StatusBudgetExhausted)
	want := fmt.Sprint([]string{r, r, r, x, x, x, x, x, x, x, "|", r, r})
	if got := fmt.Sprint(statuses); got != want {
		t.Errorf("statuses %s\nwant     %s", got, want)
	}
	if f.exh != 7 {
		t.Errorf("OnExhausted called %d times, want 7", f.exh)
	}
	book, err := release.NewBook(mustPlan(t, cfg), f.led) // restored from the ledger alone
	if err != nil {
		t.Fatal(err)
	}
	tot, err := book.Status(period)
	if err != nil {
		t.Fatal(err)
	}
	if tot.Epsilon > cfg.Privacy.Budget.Epsilon*(1+1e-9) || tot.Epsilon <= 0 {
		t.Errorf("restored spend ε %v of budget %v", tot.Epsilon, cfg.Privacy.Budget.Epsilon)
	}
	if _, err := book.Check(period, budget.Charge{RDP: mustPlan(t, cfg).Count.Charge}); err == nil {
		t.Error("the restored book accepts a fourth unit in the exhausted period")
	}
}

func mustPlan(t testing.TB, cfg *config.Config) *plan.Plan {
	t.Helper()
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fitRDPEpsilon sets cfg's privacy.rdp_epsilon, by bisection, to a value
// whose plan fits exactly want units per period (plan.CountPlan.FitUnits),
// failing the test when none does; check, when set, sees every plan tried.
func fitRDPEpsilon(t *testing.T, cfg *config.Config, want int, check func(*plan.Plan)) {
	t.Helper()
	fit := 0
	lo, hi := 1e-4, 1e3
	for i := 0; i < 200 && fit != want; i++ {
		mid := math.Sqrt(lo * hi)
		cfg.Privacy.RDPEpsilon = mid
		fit = 0
		if p, err := plan.DerivePlan(cfg); err == nil {
			fit = p.Count.FitUnits
			if check != nil {
				check(p)
			}
		}
		switch {
		case fit > want:
			lo = mid
		case fit < want:
			hi = mid
		}
	}
	if fit != want {
		t.Fatalf("no rdp_epsilon fits %d units per period (last %d)", want, fit)
	}
}
