package release_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/release"
)

// fixedCounts gives every group of config histogram h the counts c[h].
type fixedCounts map[int][]float64

func (c fixedCounts) Counts(h, g int, dst []float64) []float64 { return append(dst[:0], c[h]...) }

// histWindowConfig is testConfig with a 6-minute period and devices in
// 3-minute windows of its own (pages keeps the 1-minute base windows).
func histWindowConfig(t *testing.T, devicesWindow time.Duration, dir string) *config.Config {
	cfg := testConfig(t, "")
	cfg.Privacy.Budget.Period = config.Duration(6 * time.Minute)
	cfg.Histograms[1].Window = config.Duration(devicesWindow)
	if dir != "" {
		cfg.State.Dir = dir
	}
	return cfg
}

// TestRecordHistogramWindows: at each base boundary Record records the
// units of exactly the histograms whose windows end there — a 3-minute
// histogram only at every third boundary, keyed by its own window start,
// with its own window end in the unit and in its messages, in the same
// ledger record as the base unit ending with it — and a boundary recorded
// before is found recorded (nothing redrawn or recorded twice).
func TestRecordHistogramWindows(t *testing.T) {
	f := newFixture(t, histWindowConfig(t, 3*time.Minute, ""))
	w0 := 4_833_333 * 6 * minute // a period start, aligned to 3 minutes
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	var got [][]string
	for b := range int64(6) {
		units, err := f.rel.Record(w0+b*minute, counts, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, u := range units {
			names = append(names, u.Histogram)
			want := u.WindowStart + minute
			if u.Histogram == "devices" {
				want = u.WindowStart + 3*minute
			}
			if u.WindowEnd != want || u.WindowEnd != w0+(b+1)*minute || u.Period != w0 {
				t.Errorf("boundary %d: %s unit [%d, %d) period %d, want end %d at the boundary, period %d", b, u.Histogram, u.WindowStart-w0, u.WindowEnd-w0, u.Period-w0, want-w0, 0)
			}
			for g, r := range releases(t, u) {
				if r.WindowEnd != release.RFC3339(u.WindowEnd) || r.WindowStart != release.RFC3339(u.WindowStart) {
					t.Errorf("%s/%s: message window [%s, %s), unit [%d, %d)", u.Histogram, g, r.WindowStart, r.WindowEnd, u.WindowStart, u.WindowEnd)
				}
			}
		}
		got = append(got, names)
	}
	want := [][]string{{"pages"}, {"pages"}, {"pages", "devices"}, {"pages"}, {"pages"}, {"pages", "devices"}}
	if len(got) != len(want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) || (len(got[i]) == 2 && got[i][1] != "devices") {
			t.Fatalf("recorded %v, want %v", got, want)
		}
	}
	for _, s := range []int64{0, 3} {
		u, ok, err := f.led.Lookup("devices", w0+s*minute)
		if err != nil || !ok || u.WindowEnd != w0+(s+3)*minute {
			t.Fatalf("devices unit at %dm: %+v ok=%v err=%v", s, u, ok, err)
		}
	}
	// A boundary recorded before is found recorded: its unpublished units
	// come back as recorded, nothing new is drawn.
	again, err := f.rel.Record(w0+2*minute, counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 {
		t.Fatalf("boundary 3m again: %d units, want its 2 recorded ones", len(again))
	}
	n := 0
	if err := f.led.Units(func(*ledger.Unit) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Fatalf("ledger holds %d units, want 6 + 2", n)
	}
	if end, ok, err := f.led.LastWindowEnd(); err != nil || !ok || end != w0+6*minute {
		t.Fatalf("last window end %d ok=%v err=%v", end-w0, ok, err)
	}
}

// TestRecordHistogramWindowChanged: devices released in 1-minute windows
// under an earlier config holds the key (devices, 3m); with devices in
// 3-minute windows, the boundary ending [3m, 6m) must not take that unit
// for its own (the boundary is not recorded: pages is released) nor record
// devices under the taken key (at most once).
func TestRecordHistogramWindowChanged(t *testing.T) {
	dir := t.TempDir()
	w0 := 4_833_333 * 6 * minute
	counts := fixedCounts{0: {3, 1}, 1: {1, 2}}
	f1 := newFixture(t, histWindowConfig(t, time.Minute, dir))
	if units, err := f1.rel.Record(w0+3*minute, counts, nil); err != nil || len(units) != 2 {
		t.Fatalf("1-minute config: %d units, %v", len(units), err)
	}
	f1.led.Close()
	f3 := newFixture(t, histWindowConfig(t, 3*time.Minute, dir))
	for b := int64(4); b <= 5; b++ {
		units, err := f3.rel.Record(w0+b*minute, counts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(units) != 1 || units[0].Histogram != "pages" {
			t.Fatalf("boundary %d: %d units (%v), want pages only", b, len(units), units)
		}
	}
	u, _, _ := f3.led.Lookup("devices", w0+3*minute)
	if u.WindowEnd != w0+4*minute {
		t.Fatalf("the 1-minute devices unit was replaced: end %d", u.WindowEnd-w0)
	}
}
