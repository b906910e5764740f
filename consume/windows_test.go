package consume

import (
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
)

// TestAddTracksTheWindowsABoundDropped (issue 28 item 2): an event is
// tracked under the last base window of the longest open window it belongs
// to, whether that size's cross-window bound admitted its user or dropped
// it, so its offset is held until that window is released and a restart
// that changes the bound re-reads it whatever other users' events hold.
// Minute windows and devices3, a 3-minute view; minutes 0–2 are closed and
// the event is of minute 3, in the view's open window [3m, 6m), whose last
// base window starts at 5m. Before the fix the event was tracked under its
// base window (3m) when the view's bound dropped it, and under nothing of
// the view's (the caller used the base window) when every bound did.
func TestAddTracksTheWindowsABoundDropped(t *testing.T) {
	const (
		minute = int64(60_000)
		user   = uint64(42)
	)
	for _, tc := range []struct {
		name               string
		baseK              int
		baseFull, viewFull bool // the user has used its K windows of that size
		ok                 bool
		bound              int
		dropped            uint64
		track              int64
	}{
		{name: "admitted everywhere", baseK: 6, ok: true, track: 5 * minute},
		{name: "dropped by the view's bound", baseK: 6, viewFull: true, ok: true, bound: 1, dropped: 0b10, track: 5 * minute},
		{name: "dropped by every bound", baseK: 1, baseFull: true, viewFull: true, bound: 2, dropped: 0b11, track: 5 * minute},
		{name: "dropped by the base bound", baseK: 1, baseFull: true, ok: true, bound: 1, dropped: 0b01, track: 5 * minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := viewConfig(tc.baseK)
			sets, err := NewWindowSets(cfg)
			if err != nil {
				t.Fatal(err)
			}
			base, err := aggregate.NewAdmissions(tc.baseK)
			if err != nil {
				t.Fatal(err)
			}
			view, err := aggregate.NewAdmissions(1)
			if err != nil {
				t.Fatal(err)
			}
			if tc.baseFull {
				for range tc.baseK {
					base.Admit(0, user)
				}
			}
			if tc.viewFull {
				view.Admit(0, user)
			}
			sess := &Session{Sets: sets, Next: 3 * minute, Adm: base, ViewAdm: map[int64]*aggregate.Admissions{3 * minute: view}}
			ev := &decode.Event{TimeMs: 3*minute + 10_000, User: user, Bins: []int32{1, 1}, Groups: []int32{0, 0},
				Drops: []decode.Reason{decode.ReasonNone, decode.ReasonNone}}
			_, _, track, ok, bound, dropped := sess.add(3*minute, minute, 0, ev)
			if ok != tc.ok || bound != tc.bound || dropped != tc.dropped || track != tc.track {
				t.Errorf("add: ok %v, bound %d, dropped %b, track %d; want ok %v, bound %d, dropped %b, track %d (the view's last base window)",
					ok, bound, dropped, track, tc.ok, tc.bound, tc.dropped, tc.track)
			}
		})
	}
}

// viewConfig is minute windows with devices and devices3, a 3-minute view
// with max_windows_per_user 1, and the base bound baseK.
func viewConfig(baseK int) *config.Config {
	return &config.Config{
		Window: config.Window{Size: config.Duration(time.Minute)},
		Histograms: []config.Histogram{
			{Name: "devices", Field: "device", Bins: []string{"mobile", "desktop"}},
			{Name: "devices3", Field: "device", Bins: []string{"mobile", "desktop"}, Window: config.Duration(3 * time.Minute), MaxWindowsPerUser: 1},
		},
		Contribution: config.Contribution{MaxEventsPerUser: 1, MaxGroupsPerUser: 1, MaxWindowsPerUser: baseK},
	}
}

// TestHandleHoldsAnEventEveryBoundDropped (issue 28 item 2, the review of
// its fix): an event that the cross-window bound of every open window size
// drops on arrival is not late — its windows are open — so its offset is
// held until the longest of them is released, whatever its parts: before
// the fix an event whose parts in the sizes that dropped it were all
// invalid (bound 0, dropped bits set) took the late path, which counted it
// late and marked its offset processed, so the commit point passed it at
// once. Minute windows, a 3-minute view; minutes 0–2 closed, the event of
// minute 3 (the view's window [3m, 6m), tracked under 5m).
func TestHandleHoldsAnEventEveryBoundDropped(t *testing.T) {
	const (
		minute = int64(60_000)
		user   = uint64(42)
		offset = int64(7)
	)
	for _, tc := range []struct {
		name  string
		drops []decode.Reason // the event's parts: devices, devices3
	}{
		{name: "valid parts", drops: []decode.Reason{decode.ReasonNone, decode.ReasonNone}},
		{name: "no valid part", drops: []decode.Reason{decode.ReasonOutOfDomain, decode.ReasonOutOfDomain}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := viewConfig(1)
			sets, err := NewWindowSets(cfg)
			if err != nil {
				t.Fatal(err)
			}
			base, _ := aggregate.NewAdmissions(1)
			view, _ := aggregate.NewAdmissions(1)
			base.Admit(0, user)
			view.Admit(0, user)
			sess := &Session{Sets: sets, Next: 3 * minute, Adm: base, ViewAdm: map[int64]*aggregate.Admissions{3 * minute: view}}
			s := &node.Node{Cfg: cfg, Stats: &node.Stats{}, SizeMs: minute, PeriodMs: 24 * 60 * minute, Arrival: true,
				Rule: window.Rule{Arrival: true, SizeMs: minute, LatenessMs: 0, MaxFutureMs: minute}}
			ev := &decode.Event{TimeMs: 3*minute + 10_000, User: user, Bins: []int32{1, 1}, Groups: []int32{0, 0}, Drops: tc.drops}
			tracker := source.NewOffsetTracker(0)
			loc := &partitionLocal{}
			handle(s, sess, 0, offset, 3*minute+10_000, ev, tracker, loc)
			if got := s.Stats.Late.Load(); got != 0 {
				t.Errorf("counted late %d times: its windows are open", got)
			}
			if c, _ := tracker.CommitPoint(); c != offset {
				t.Errorf("commit point %d right after the event; want %d (held)", c, offset)
			}
			tracker.Released(5 * minute) // the base window [3m, 4m) and [4m, 5m) released
			if c, _ := tracker.CommitPoint(); c != offset {
				t.Errorf("commit point %d before the view's window is released; want %d (held)", c, offset)
			}
			tracker.Released(6 * minute) // the view's window [3m, 6m) released
			if c, _ := tracker.CommitPoint(); c != offset+1 {
				t.Errorf("commit point %d once the view's window is released; want %d", c, offset+1)
			}
		})
	}
}
