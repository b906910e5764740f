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
			b := NewBlindWatch([]string{"other", "pages"}, tc.threshold)
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
// share, and what to change.
func TestBlindWarningMessage(t *testing.T) {
	b := NewBlindWatch([]string{"pages"}, 0.5)
	v := b.Closed(0, 0, 60_000, 3, 97)
	for _, want := range []string{`"pages"`, "1970-01-01T00:01:00Z", "97%", "50%", "max_windows_per_user", "histograms[].window", "docs/choosing.md"} {
		if !strings.Contains(v.Message(), want) {
			t.Errorf("message lacks %q: %s", want, v.Message())
		}
	}
}

func TestWindowDrops(t *testing.T) {
	var d WindowDrops
	d.Add(0, 0, 2)
	d.Add(0, 60, 3)
	d.Add(1, 60, 5)
	d.Add(0, 120, 7)
	d.Add(0, 120, 0)
	if n := d.Take(0, 60); n != 3 {
		t.Errorf("Take(0, 60) = %d, want 3", n)
	}
	if n := d.Take(0, 0); n != 0 {
		t.Errorf("Take(0, 0) after the later window = %d, want 0 (forgotten)", n)
	}
	if n := d.Take(1, 60); n != 5 {
		t.Errorf("Take(1, 60) = %d, want 5", n)
	}
	if n := d.Take(0, 120); n != 7 {
		t.Errorf("Take(0, 120) = %d, want 7", n)
	}
	if len(d.n) != 0 {
		t.Errorf("left %v", d.n)
	}
}
