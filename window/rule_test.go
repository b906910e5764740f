package window

import (
	"math/rand/v2"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/siphash"
)

// TestRuleDecide: an event's fate under each watermark follows from its own
// event time, record time and (watermark event) the wall-clock future
// limit, at the boundaries of the rule.
func TestRuleDecide(t *testing.T) {
	const min = 60_000
	arrival := Rule{Arrival: true, SizeMs: min, LatenessMs: 5_000, MaxFutureMs: 10_000}
	event := Rule{SizeMs: min, LatenessMs: 5_000, MaxFutureMs: 10_000}
	for _, tc := range []struct {
		name               string
		rule               Rule
		event, record, fut int64
		wantW              int64
		want               decode.Reason
	}{
		{"arrival: on time", arrival, 61_000, 62_000, 0, min, decode.ReasonNone},
		{"arrival: ahead within max_future", arrival, 72_000, 62_000, 0, min, decode.ReasonNone},
		{"arrival: ahead past max_future", arrival, 72_001, 62_000, 0, min, decode.ReasonTimeTooFarAhead},
		{"arrival: record at the cutoff − 1", arrival, 61_000, 2*min + 4_999, 0, min, decode.ReasonNone},
		{"arrival: record at the cutoff", arrival, 61_000, 2*min + 5_000, 0, min, decode.ReasonLate},
		{"arrival: the wall clock plays no part", arrival, 61_000, 62_000, -1 << 62, min, decode.ReasonNone},
		{"event: within the future limit", event, 61_000, 1 << 62, 61_000, min, decode.ReasonNone},
		{"event: past the future limit", event, 61_001, 0, 61_000, min, decode.ReasonTimeTooFarAhead},
		{"event: record time plays no part", event, 61_000, 10 * min, 1 << 62, min, decode.ReasonNone},
		{"negative time", arrival, -1, 0, 0, -min, decode.ReasonNone},
	} {
		w, r := tc.rule.Decide(tc.event, tc.record, tc.fut)
		if w != tc.wantW || r != tc.want {
			t.Errorf("%s: Decide = %d, %v; want %d, %v", tc.name, w, r, tc.wantW, tc.want)
		}
	}
}

// TestRecordTimestampEventTime: with events.time_field $timestamp the
// decoded event time is the record time, and the arrival rule then counts
// every event in the window of its own record time, whatever that time,
// the window size, lateness or max_future (docs/formats.md): the decision
// still rests on the event alone.
func TestRecordTimestampEventTime(t *testing.T) {
	cfg := &config.Config{
		Events:     config.Events{Format: "json", TimeField: "$timestamp", UserField: "$key"},
		Histograms: []config.Histogram{{Name: "h", Field: "page", Bins: []string{"a", "b"}}},
	}
	d, err := decode.New(cfg, siphash.MustNewKey())
	if err != nil {
		t.Fatal(err)
	}
	ev := d.NewEvent()
	r := rand.New(rand.NewPCG(3, 4))
	for range 10_000 {
		rule := Rule{Arrival: true, SizeMs: 1 + r.Int64N(3_600_000), LatenessMs: r.Int64N(60_000), MaxFutureMs: r.Int64N(3_600_000)}
		recMs := r.Int64N(decode.MaxTimeMs)
		rec := decode.Record{Key: []byte("u"), Value: []byte(`{"page":"a"}`), TimestampMs: recMs}
		if got := d.DecodeRecord(&rec, ev); got != decode.ReasonNone || ev.TimeMs != recMs {
			t.Fatalf("record time %d: %v, event time %d", recMs, got, ev.TimeMs)
		}
		w, why := rule.Decide(ev.TimeMs, recMs, 0)
		if why != decode.ReasonNone || w != Start(recMs, rule.SizeMs) {
			t.Fatalf("%+v, record time %d: window %d, %v; want the record time's window, counted", rule, recMs, w, why)
		}
	}
}
