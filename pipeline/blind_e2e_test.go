package pipeline_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
)

// TestEndToEndBlindWindowWarning (issue 23 item 3): the same 20 users come
// back in windows 0–3, one event each (windows 1–3 read after window 0
// closed). With max_windows_per_user 1 every window after the first counts
// none of them (dropped on arrival): the stage logs one warning
// per histogram (windows 2–3 fall within the hour after it), naming the
// histogram, the window and what to change, and the operator's shares say
// blind. With K = 10 every window counts everyone: no warning, share 0.
// Nothing about the drops reaches the output topic.
func TestEndToEndBlindWindowWarning(t *testing.T) {
	for _, tc := range []struct {
		k     int
		blind bool
	}{{1, true}, {10, false}} {
		t.Run(fmt.Sprintf("K%d", tc.k), func(t *testing.T) {
			h := e2e.New(t)
			cfg := h.Config("gaussian", 1e7)
			cfg.Contribution.MaxWindowsPerUser = tc.k
			cfg.Contribution.MaxTrackedUsers = 0
			skipUnlessAccounted(t, cfg)
			core, logs := observer.New(zapcore.InfoLevel)
			r := &e2e.Running{}
			e2e.StartStage(t, r, pipeline.Options{Config: cfg, HashKey: &e2e.TestKey, Log: zap.New(core),
				OnRelease: func(*ledger.Unit, time.Duration) { r.Units.Add(1) }})
			events := func(from, to int) []e2e.Event {
				var evs []e2e.Event
				for w := from; w < to; w++ {
					for u := range 20 {
						evs = append(evs, e2e.Event{User: fmt.Sprintf("r%d", u), At: e2e.Base.Add(time.Duration(w)*time.Minute + time.Duration(u+1)*time.Second),
							Page: e2e.Pages[u%5], Country: e2e.Groups[u%3], Device: e2e.Devices[u%2]})
					}
				}
				return evs
			}
			// Window 0 closes first, so that with K = 1 the users' later
			// events are dropped on arrival; in window 3 (no flush event)
			// the last window counts or drops exactly the 20 users.
			perWindow := len(e2e.Groups) + 1
			h.ProduceEvents(events(0, 1))
			h.Produce(e2e.Flush(e2e.Base.Add(time.Minute)))
			h.ReadOutput(perWindow, 60*time.Second, 0)
			h.ProduceEvents(events(1, 4))
			h.Produce(e2e.Flush(e2e.Base.Add(4*time.Minute + time.Second)))
			out := h.ReadOutput(4*perWindow, 60*time.Second, 0)
			e2e.WaitFor(t, "window 3 noted", 10*time.Second, func() bool {
				for _, s := range r.Stage.WindowBound() {
					if s.End != e2e.Base.Add(4*time.Minute).UnixMilli() {
						return false
					}
				}
				return true
			})

			warned := map[string]int{}
			for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("window bound").All() {
				hist, _ := e.ContextMap()["histogram"].(string)
				warned[hist]++
				for _, want := range []string{"contribution.max_windows_per_user (K = 1)", "stage plan", "privacy.expected_windows_per_user", "histograms[].window", "docs/choosing.md", "1970"} {
					if want == "1970" {
						want = e2e.Base.Add(2 * time.Minute).UTC().Format(time.RFC3339) // the first blind window's end
					}
					if !strings.Contains(e.Message, want) {
						t.Errorf("warning lacks %q: %s", want, e.Message)
					}
				}
			}
			for _, s := range r.Stage.WindowBound() {
				wantShare := 0.0
				if tc.blind {
					wantShare = 1
				}
				if s.Share != wantShare || s.Blind != tc.blind || s.Counted+s.Dropped != 20 {
					t.Errorf("%s: last window counted %d, dropped %d, share %v, blind %v; want 20 contributions, share %v", s.Histogram, s.Counted, s.Dropped, s.Share, s.Blind, wantShare)
				}
				if want := map[bool]int{true: 1}[tc.blind]; warned[s.Histogram] != want {
					t.Errorf("%s: %d warnings, want %d (%v)", s.Histogram, warned[s.Histogram], want, warned)
				}
			}
			if len(r.Stage.WindowBound()) != len(cfg.Histograms) {
				t.Errorf("shares of %d histograms, want %d", len(r.Stage.WindowBound()), len(cfg.Histograms))
			}
			// The output topic carries releases only: no share, no drop
			// count, no blind flag.
			leak := regexp.MustCompile(`(?i)blind|bound|drop|"counted"|share`)
			for id, raws := range out.Raw {
				for _, raw := range raws {
					if m := leak.FindString(raw); m != "" {
						t.Errorf("release %s carries %q: %s", id, m, raw)
					}
				}
			}
		})
	}
}

// TestEndToEndBlindShareUnits (the review's probe of issue 23 item 3):
// with K = 1, window 1 has 18 new users with one event each and 2
// returning users (over their K) with 20 events each. 90% of its users
// count, so it is not blind: the share counts each returning user's
// dropped contributions as the window would have counted them (at most
// max_events_per_user), not its 20 raw events (it read 40 dropped
// against 19 counted, "blind", before).
func TestEndToEndBlindShareUnits(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	cfg.Contribution.MaxWindowsPerUser = 1
	cfg.Contribution.MaxTrackedUsers = 0
	skipUnlessAccounted(t, cfg)
	core, logs := observer.New(zapcore.InfoLevel)
	r := &e2e.Running{}
	e2e.StartStage(t, r, pipeline.Options{Config: cfg, HashKey: &e2e.TestKey, Log: zap.New(core),
		OnRelease: func(*ledger.Unit, time.Duration) { r.Units.Add(1) }})
	var w0, w1 []e2e.Event
	for u := range 20 {
		w0 = append(w0, e2e.Event{User: fmt.Sprintf("r%d", u), At: e2e.Base.Add(time.Duration(u+1) * time.Second), Page: e2e.Pages[u%5], Country: e2e.Groups[u%3], Device: e2e.Devices[u%2]})
	}
	for u := range 18 {
		w1 = append(w1, e2e.Event{User: fmt.Sprintf("n%d", u), At: e2e.Base.Add(time.Minute + time.Duration(u+1)*time.Second), Page: e2e.Pages[u%5], Country: e2e.Groups[u%3], Device: e2e.Devices[u%2]})
	}
	for u := range 2 {
		for k := range 20 {
			w1 = append(w1, e2e.Event{User: fmt.Sprintf("r%d", u), At: e2e.Base.Add(time.Minute + time.Duration(k+1)*time.Second), Page: e2e.Pages[u%5], Country: e2e.Groups[u%3], Device: e2e.Devices[u%2]})
		}
	}
	perWindow := len(e2e.Groups) + 1
	h.ProduceEvents(w0)
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute)))
	h.ReadOutput(perWindow, 60*time.Second, 0)
	h.ProduceEvents(w1)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	h.ReadOutput(2*perWindow, 60*time.Second, 0)
	e2e.WaitFor(t, "window 1 noted", 10*time.Second, func() bool {
		for _, s := range r.Stage.WindowBound() {
			if s.End != e2e.Base.Add(2*time.Minute).UnixMilli() {
				return false
			}
		}
		return true
	})
	per := int64(min(20, cfg.Contribution.MaxEventsPerUser))
	for _, s := range r.Stage.WindowBound() {
		// 19 counted: the 18 new users and the flush event that closed
		// window 0 (e2e.Flush, in window 1).
		if s.Counted != 19 || s.Dropped != 2*per || s.Blind {
			t.Errorf("%s: window 1 counted %d, dropped %d (share %.3f, blind %v); want 19 counted, %d dropped (2 users × max_events_per_user), not blind",
				s.Histogram, s.Counted, s.Dropped, s.Share, s.Blind, 2*per)
		}
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("window bound").Len(); n != 0 {
		t.Errorf("%d blind-window warnings on a window where 90%% of the users count", n)
	}
}
