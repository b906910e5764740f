package aggregate

import (
	"strings"
	"testing"
	"time"
)

// TestBlindWatch (issue 23 item 3): a closed window whose bound-drop share
// passes the threshold warns, once per BlindRepeat of event time while the
// histogram stays blind (with the windows skipped); a window at or below
// it never does.
func TestBlindWatch(t *testing.T) {
	const minute = int64(time.Minute / time.Millisecond)
	type win struct {
		counted, dropped int64
		share            float64
		blind, warn      bool
		suppressed       int
		recovered        bool
	}
	cases := []struct {
		name      string
		threshold float64
		wins      []win
	}{
		{"healthy", 0.5, []win{{100, 0, 0, false, false, 0, false}, {60, 40, 0.4, false, false, 0, false}, {50, 50, 0.5, false, false, 0, false}, {0, 0, 0, false, false, 0, false}}},
		{"goes blind", 0.5, []win{{100, 0, 0, false, false, 0, false}, {10, 90, 0.9, true, true, 0, false}, {1, 99, 0.99, true, false, 0, false}, {0, 7, 1, true, false, 0, false}, {90, 10, 0.1, false, false, 0, true}}},
		{"off at 1", 1, []win{{0, 100, 1, false, false, 0, false}}},
		{"stays blind", 0.5, func() []win {
			var w []win
			for i := range 61 {
				w = append(w, win{0, 5, 1, true, i == 0 || i == 60, map[bool]int{true: 59}[i == 60], false})
			}
			return w
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBlindWatch([]BlindHist{{Name: "other"}, {Name: "pages"}}, tc.threshold)
			for i, w := range tc.wins {
				start := int64(i) * minute
				v := b.Closed(1, start, start+minute, w.counted, w.dropped)
				if v.Share != w.share || v.Blind != w.blind || v.Warn != w.warn || v.Suppressed != w.suppressed || v.Recovered != w.recovered {
					t.Errorf("window %d (%d counted, %d dropped): share %v blind %v warn %v suppressed %d recovered %v, want %v %v %v %d %v",
						i, w.counted, w.dropped, v.Share, v.Blind, v.Warn, v.Suppressed, v.Recovered, w.share, w.blind, w.warn, w.suppressed, w.recovered)
				}
				if v.Warn && !strings.Contains(v.Message(), `"pages"`) {
					t.Errorf("window %d: the warning does not name the histogram: %s", i, v.Message())
				}
				if got := b.Blind(); w.blind != (len(got) == 1 && got[0] == "pages") {
					t.Errorf("window %d: Blind() = %v", i, got)
				}
			}
			if s := b.Shares()[0]; s.Closed || s.Blind {
				t.Errorf("the other histogram: %+v, want untouched", s)
			}
		})
	}
}

// TestBlindWarningMessage: the warning says which histogram and window, the
// share, which config key bounds the histogram (a view's own
// histograms[i].max_windows_per_user, not the contribution-level K: issue
// 28 item 2), and how to choose the bound: from the public activity figure
// with stage plan, never from this private share (issue 28 item 5) — it
// does not say "raise K".
func TestBlindWarningMessage(t *testing.T) {
	for _, tc := range []struct {
		hist BlindHist
		want []string
		not  []string
	}{
		{BlindHist{Name: "pages", Bound: "contribution.max_windows_per_user", K: 5},
			[]string{"contribution.max_windows_per_user (K = 5)"}, []string{"histograms[0].max_windows_per_user"}},
		{BlindHist{Name: "pages3", Bound: "histograms[2].max_windows_per_user", K: 1},
			[]string{"histograms[2].max_windows_per_user (K = 1)"}, []string{"contribution.max_windows_per_user"}},
	} {
		t.Run(tc.hist.Name, func(t *testing.T) {
			b := NewBlindWatch([]BlindHist{tc.hist}, 0.5)
			v := b.Closed(0, 0, 60_000, 3, 97)
			msg := v.Message()
			for _, want := range append([]string{`"` + tc.hist.Name + `"`, "1970-01-01T00:01:00Z", "97%", "50%",
				"privacy.expected_windows_per_user", "stage plan", "outside the privacy guarantee", "histograms[].window", "docs/choosing.md"}, tc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q: %s", want, msg)
				}
			}
			for _, not := range append([]string{"raise"}, tc.not...) {
				if strings.Contains(msg, not) {
					t.Errorf("message says %q: %s", not, msg)
				}
			}
		})
	}
}

// TestWindowDrops: drops are kept per (histogram, window) and user, and
// Take caps each user's at the per-user bound, so the share is in the
// window's own units (a user with 20 events under max_events_per_user 1
// is one dropped contribution, not 20: the review's probe of a healthy
// window read as blind).
func TestWindowDrops(t *testing.T) {
	var d WindowDrops
	d.AddAll([]Drop{{H: 0, Start: 0, User: 1, N: 2}, {H: 0, Start: 60, User: 1, N: 3}, {H: 1, Start: 60, User: 1, N: 5}})
	d.AddAll([]Drop{{H: 0, Start: 120, User: 1, N: 7}, {H: 0, Start: 120, User: 2, N: 0}, {H: 0, Start: 120, User: 3, N: 1}})
	d.AddAll([]Drop{{H: 0, Start: 120, User: 1, N: 13}})
	if n := d.Take(0, 60, 0); n != 3 {
		t.Errorf("Take(0, 60) = %d, want 3", n)
	}
	if n := d.Take(0, 0, 0); n != 0 {
		t.Errorf("Take(0, 0) after the later window = %d, want 0 (forgotten)", n)
	}
	if n := d.Take(1, 60, 2); n != 2 {
		t.Errorf("Take(1, 60) capped at 2 per user = %d, want 2", n)
	}
	if n := d.Take(0, 120, 1); n != 2 {
		t.Errorf("Take(0, 120) capped at 1 per user = %d, want 2 (users 1 and 3)", n)
	}
	if len(d.n) != 0 {
		t.Errorf("left %v", d.n)
	}
}
