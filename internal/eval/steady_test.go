package eval

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
)

// steadyYAML is a small config: 1-minute base windows, a 10-minute
// period, a grouped minute view and (extra) more histograms.
const steadyYAML = `
kafka: {brokers: [], input_topic: events, output_topic: out}
events: {time_field: ts, user_field: user_id}
window: {size: 1m}
histograms:
  - {name: pages, field: page, bins: [a, b, c], group_by: country, groups: [US, DE]}
%EXTRA%
contribution: {max_events_per_user: 1%BOUND%}
privacy:
  mechanism: gaussian
  budget: {epsilon: 1, delta: 1.0e-6, period: 10m}
state: {dir: /nonexistent/steady-test}
`

func steadyConfig(t *testing.T, extra, bound string) *config.Config {
	t.Helper()
	y := strings.ReplaceAll(strings.ReplaceAll(steadyYAML, "%EXTRA%", extra), "%BOUND%", bound)
	cfg, err := config.Parse([]byte(y), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// replay regenerates the events of rep 0 of run (the same streams as the
// benchmark) and calls fn with each event's base window index, user and
// the event's bins and groups per histogram position.
func replay(t *testing.T, o SteadyOptions, c SteadyConfig, fn func(w, u int, ev *decode.Event)) {
	t.Helper()
	r, err := newSteadyRun(c, o)
	if err != nil {
		t.Fatal(err)
	}
	g := newSteadyGen(r, 0)
	ev := r.newEvent()
	values := make([]int, len(r.fields))
	for w := int64(0); w < r.periodMs/r.baseMs; w++ {
		g.window(steadyEpoch+w*r.baseMs, ev, values, func(u int) { fn(int(w), u, ev) })
	}
}

// TestSteadyMinuteViewUnderTheWindowBound: with K = 3 the minute view of
// window w counts exactly the users active in w that were active in fewer
// than 3 earlier windows of the period (one event each, so each counts its
// one event). The true and the bounded counts of every window and group are
// recomputed here from the replayed events, independently of the
// aggregator, and every ℓ2 from the kept releases.
func TestSteadyMinuteViewUnderTheWindowBound(t *testing.T) {
	t.Parallel()
	c := SteadyConfig{Name: "k3", Config: steadyConfig(t, "", ", max_windows_per_user: 3")}
	o := SteadyOptions{Users: 40, P: 0.5, Reps: 1, Seed: 9, Workers: 1, Configs: []SteadyConfig{c}, Keep: true}
	res, err := RunSteady(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Views) != 1 || len(res.Views[0].Windows) != 10 || res.Views[0].K != 3 {
		t.Fatalf("views %+v", res.Views)
	}
	var wantTrue, wantBounded [10][2][3]float64
	active := map[int]int{}
	var events int64
	replay(t, o, c, func(w, u int, ev *decode.Event) {
		events++
		g, b := ev.Groups[0], ev.Bins[0]
		wantTrue[w][g][b]++
		if active[u] < 3 {
			wantBounded[w][g][b]++
		}
		active[u]++
	})
	if res.Events != events {
		t.Errorf("events %d, replay %d", res.Events, events)
	}
	late := 0.0
	for w, win := range res.Views[0].Windows {
		if win.Start != time.Duration(w)*time.Minute || win.End != time.Duration(w+1)*time.Minute {
			t.Errorf("window %d: [%v, %v)", w, win.Start, win.End)
		}
		for g := 0; g < 2; g++ {
			for b := 0; b < 3; b++ {
				if win.True[g][b] != wantTrue[w][g][b] || win.Bounded[g][b] != wantBounded[w][g][b] {
					t.Errorf("window %d group %d bin %d: true %g bounded %g, want %g and %g", w, g, b,
						win.True[g][b], win.Bounded[g][b], wantTrue[w][g][b], wantBounded[w][g][b])
				}
			}
		}
		var sum float64
		for g := 0; g < 2; g++ {
			tn := make([]float64, 3)
			normalize(win.True[g], tn)
			sum += l2(win.Release[g], tn)
		}
		if math.Abs(sum-win.L2.Sum) > 1e-9 || win.L2.N != 2 {
			t.Errorf("window %d: ℓ2 sum %g over %d releases, recomputed %g over 2", w, win.L2.Sum, win.L2.N, sum)
		}
		if w >= 6 {
			late += win.Counted
		}
	}
	// With p = 1/2 most users have used their 3 windows by window 6.
	if first := res.Views[0].Windows[0]; first.Counted != first.TrueEvents || first.TrueEvents == 0 {
		t.Errorf("window 0: counted %g of %g (everyone's first window counts)", first.Counted, first.TrueEvents)
	}
	t.Logf("%d events; counted in windows 6–9: %g", events, late)
}

// TestSteadyCoarseViewsBoundPerWindow: without the window bound, a 5-minute
// and a 10-minute view of the same field count every event of their
// window in the true histogram (the sum of the minute view's), and after
// max_events_per_user = 1 exactly one event per user active in the window.
func TestSteadyCoarseViewsBoundPerWindow(t *testing.T) {
	t.Parallel()
	extra := "  - {name: p5, field: page, bins: [a, b, c], window: 5m}\n  - {name: p10, field: page, bins: [a, b, c], group_by: country, groups: [US, DE], window: 10m}"
	c := SteadyConfig{Name: "views", Config: steadyConfig(t, extra, "")}
	o := SteadyOptions{Users: 30, P: 0.4, Reps: 1, Seed: 4, Workers: 1, Configs: []SteadyConfig{c}, Keep: true}
	res, err := RunSteady(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Views) != 3 {
		t.Fatalf("%d views", len(res.Views))
	}
	byName := map[string]*SteadyView{}
	for _, v := range res.Views {
		byName[v.Histogram] = v
	}
	minute, p5, p10 := byName["pages"], byName["p5"], byName["p10"]
	if len(minute.Windows) != 10 || len(p5.Windows) != 2 || len(p10.Windows) != 1 || p5.Window != 5*time.Minute {
		t.Fatalf("windows %d %d %d", len(minute.Windows), len(p5.Windows), len(p10.Windows))
	}
	users5 := [2]map[int]bool{{}, {}}
	users10 := [2]map[int]bool{{}, {}} // per group
	var true10 [2][3]float64
	replay(t, o, c, func(w, u int, ev *decode.Event) {
		users5[w/5][u] = true
		users10[ev.Groups[2]][u] = true
		true10[ev.Groups[2]][ev.Bins[2]]++
	})
	for i, win := range p5.Windows {
		var sum [3]float64
		for _, m := range minute.Windows[5*i : 5*i+5] {
			for g := range m.True {
				for b := range sum {
					sum[b] += m.True[g][b]
				}
			}
		}
		if [3]float64(win.True[0]) != sum {
			t.Errorf("5m window %d: true %v, the minute windows sum to %v", i, win.True[0], sum)
		}
		if win.Counted != float64(len(users5[i])) {
			t.Errorf("5m window %d: counted %g, want one event per active user: %d", i, win.Counted, len(users5[i]))
		}
	}
	w := p10.Windows[0]
	for g := 0; g < 2; g++ {
		if [3]float64(w.True[g]) != true10[g] {
			t.Errorf("10m group %d: true %v, want %v", g, w.True[g], true10[g])
		}
		n := 0.0
		for _, v := range w.Bounded[g] {
			n += v
		}
		if n != float64(len(users10[g])) {
			t.Errorf("10m group %d: counted %g, want %d users", g, n, len(users10[g]))
		}
	}
}

// TestSteadyActivity: the share of active (user, window) pairs is p
// (within 5 standard errors).
func TestSteadyActivity(t *testing.T) {
	t.Parallel()
	c := SteadyConfig{Name: "a", Config: steadyConfig(t, "", "")}
	for _, p := range []float64{0.05, 0.3, 1} {
		o := SteadyOptions{Users: 3000, P: p, Reps: 1, Seed: 2, Workers: 1, Configs: []SteadyConfig{c}}
		res, err := RunSteady(o)
		if err != nil {
			t.Fatal(err)
		}
		n := 3000.0 * 10
		se := math.Sqrt(n * p * (1 - p))
		if got := float64(res.Events); math.Abs(got-n*p) > 5*se+1e-9 {
			t.Errorf("p=%g: %g events, want %g ± %g", p, got, n*p, 5*se)
		}
	}
}

// TestSteadyFiles: the table, CSVs and plot are written.
func TestSteadyFiles(t *testing.T) {
	t.Parallel()
	extra := "  - {name: mix, field: mix, kind: average, bins: [x, y], average: {users: 1000000, k: 1000, eta: 0.01}}\n  - {name: p5, field: page, bins: [a, b, c], window: 5m}"
	res, err := RunSteady(SteadyOptions{Users: 200, P: 0.3, Reps: 2, Seed: 1, Workers: 2,
		Configs: []SteadyConfig{{Name: "one", Config: steadyConfig(t, "", ", max_windows_per_user: 2")}, {Name: "two", Config: steadyConfig(t, extra, "")}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Views) != 3 { // one: pages; two: pages and p5 (the average histogram mix is not measured)
		t.Fatalf("%d views", len(res.Views))
	}
	sums := res.Summarize(SteadySegments(time.Minute, 10*time.Minute))
	var b strings.Builder
	if err := WriteSteadyTable(&b, res, sums); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"pages (1m, K=2)", "p5 (5m)", "whole period", "0–5m", "counted"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
	dir := t.TempDir()
	files, err := WriteSteadyFiles(dir, res, sums)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if res.Views[0].Windows[0].L2.N != 4 { // 2 groups × 2 reps
		t.Errorf("window 0: %d releases measured, want 4", res.Views[0].Windows[0].L2.N)
	}
}

// TestSteadyViewsOwnBounds: each view has its own cross-window bound over
// its own windows (histograms[].max_windows_per_user). Minute view K = 3,
// 5-minute view K = 1: a user counts in the minute view's windows as in
// TestSteadyMinuteViewUnderTheWindowBound, and in the 5-minute view only in
// the first 5-minute window it is active in — whatever the minute view's
// bound did to it.
func TestSteadyViewsOwnBounds(t *testing.T) {
	t.Parallel()
	extra := "  - {name: p5, field: page, bins: [a, b, c], window: 5m, max_windows_per_user: 1}"
	c := SteadyConfig{Name: "own", Config: steadyConfig(t, extra, ", max_windows_per_user: 3")}
	o := SteadyOptions{Users: 40, P: 0.3, Reps: 1, Seed: 5, Workers: 1, Configs: []SteadyConfig{c}, Keep: true}
	res, err := RunSteady(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Views) != 2 || res.Views[0].K != 3 || res.Views[1].K != 1 {
		t.Fatalf("views: %d, K %d %d", len(res.Views), res.Views[0].K, res.Views[1].K)
	}
	var minute [10]float64
	var five [2]float64
	active := map[int]int{}
	seen5 := map[int]int{} // user → first 5-minute window active in, +1
	replay(t, o, c, func(w, u int, ev *decode.Event) {
		if active[u] < 3 {
			minute[w]++
		}
		active[u]++
		if seen5[u] == 0 {
			seen5[u] = w/5 + 1
		}
	})
	// A user counts once in the 5-minute window of its first activity.
	for _, first := range seen5 {
		five[first-1]++
	}
	for w, win := range res.Views[0].Windows {
		if win.Counted != minute[w] {
			t.Errorf("minute window %d: counted %g, want %g", w, win.Counted, minute[w])
		}
	}
	for w, win := range res.Views[1].Windows {
		if win.Counted != five[w] {
			t.Errorf("5-minute window %d: counted %g, want %g (users first active in it)", w, win.Counted, five[w])
		}
	}
	if five[1] == 0 || five[1] == res.Views[1].Windows[1].TrueEvents {
		t.Errorf("5-minute window 1: %g users first active in it of %g events: a test that cannot tell", five[1], res.Views[1].Windows[1].TrueEvents)
	}
}
