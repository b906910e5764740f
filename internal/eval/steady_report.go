package eval

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// SteadySegment is a stretch of the period: the windows of a view that end
// in (From, To].
type SteadySegment struct {
	From, To time.Duration
}

// SteadySegments splits a period of base windows into the stretches the
// summary reports: the first 5 base windows, up to 20, up to an hour, up to
// 6 hours, the rest (those that fit in the period, each longer than the
// previous).
func SteadySegments(base, period time.Duration) []SteadySegment {
	var out []SteadySegment
	from := time.Duration(0)
	for _, to := range []time.Duration{5 * base, 20 * base, time.Hour, 6 * time.Hour, period} {
		if to <= from || to > period {
			continue
		}
		out = append(out, SteadySegment{from, to})
		from = to
	}
	return out
}

func (s SteadySegment) String() string {
	return fmtDur(s.From) + "–" + fmtDur(s.To)
}

// fmtDur prints 5m, 1h, 24h, 90s compactly.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// SteadySummary is one (view, segment) line of the summary.
type SteadySummary struct {
	View    *SteadyView
	Segment SteadySegment
	Windows int
	// Means over the segment's windows, groups and reps.
	L2, KL, UniformL2, BoundedL2 Stat
	// CountedShare is Σ counted / Σ true events over the segment.
	CountedShare float64
}

// Summarize reduces each view to its segments (a segment without a window
// of the view is left out) plus the whole period.
func (r *SteadyResult) Summarize(segs []SteadySegment) []SteadySummary {
	var out []SteadySummary
	for _, v := range r.Views {
		if len(v.Windows) == 0 {
			continue
		}
		all := append(append([]SteadySegment(nil), segs...), SteadySegment{0, v.Windows[len(v.Windows)-1].End})
		for si, sg := range all {
			s := SteadySummary{View: v, Segment: sg}
			var tr, co float64
			for _, w := range v.Windows {
				if w.End <= sg.From || w.End > sg.To {
					continue
				}
				s.Windows++
				s.L2.Merge(w.L2)
				s.KL.Merge(w.KL)
				s.UniformL2.Merge(w.UniformL2)
				s.BoundedL2.Merge(w.BoundedL2)
				tr += w.TrueEvents
				co += w.Counted
			}
			if s.Windows == 0 || (si == len(all)-1 && len(segs) == 1) {
				continue
			}
			s.CountedShare = co / tr
			out = append(out, s)
		}
	}
	return out
}

// viewName names a view: histogram, window and bound.
func (v *SteadyView) viewName() string {
	n := fmt.Sprintf("%s (%s", v.Histogram, fmtDur(v.Window))
	if v.K > 0 {
		n += fmt.Sprintf(", K=%d", v.K)
	}
	return n + ")"
}

// WriteSteadyTable prints the summary: per config its views' mechanism,
// then one line per (view, segment).
func WriteSteadyTable(w io.Writer, r *SteadyResult, sums []SteadySummary) error {
	fmt.Fprintf(w, "steady population: U = %d users, each active in a base window with probability p = %g, one event per active window; %d period(s) per config, %d events per period\n",
		r.Users, r.P, r.Reps, r.Events)
	fmt.Fprintf(w, "errors of each release against the window's TRUE histogram (every event, before bounding), mean over groups%s:\n", map[bool]string{true: " and periods", false: ""}[r.Reps > 1])
	fmt.Fprintf(w, "  ℓ2 = ‖y − t‖₂, KL = D_KL(t ‖ y); uniform ℓ2: a release that ignores the data (a blind view scores this);\n  bounded ℓ2: the exact bounded histogram (what the bounds alone cost); counted: counted events / true events\n")
	last := ""
	for _, v := range r.Views {
		if v.Config != last {
			fmt.Fprintf(w, "\n%s\n", v.Config)
			last = v.Config
		}
		fmt.Fprintf(w, "  %-28s %d bins × %d group(s), %d windows per period; %s\n", v.viewName(), v.Bins, v.Groups, len(v.Windows), v.Mechanism)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "config\tview\twindows ending in\twindows\tℓ2 (95%% CI)\tKL\tuniform ℓ2\tbounded ℓ2\tcounted\t\n")
	for _, s := range sums {
		klv := fmt.Sprintf("%.3g", s.KL.Mean())
		if f := s.KL.InfFraction(); f > 0 {
			klv = fmt.Sprintf("%s (+Inf %.0f%%)", klv, 100*f)
		}
		seg := s.Segment.String()
		if s.Segment.From == 0 && s.Windows == len(s.View.Windows) {
			seg = "whole period"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.3g ± %.2g\t%s\t%.3g\t%.3g\t%.3g\t\n", s.View.Config, s.View.viewName(), seg, s.Windows,
			s.L2.Mean(), s.L2.HalfWidth(), klv, s.UniformL2.Mean(), s.BoundedL2.Mean(), s.CountedShare)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, views := range r.byConfig() {
		fmt.Fprintf(w, "%s: simulated in %s of wall time (all periods, one worker; more on a loaded machine)\n", views[0].Config, r.Elapsed[i].Round(100*time.Millisecond))
	}
	return nil
}

// byConfig splits the views by config, in order.
func (r *SteadyResult) byConfig() [][]*SteadyView {
	var out [][]*SteadyView
	for i, v := range r.Views {
		if i == 0 || v.Config != r.Views[i-1].Config {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], v)
	}
	return out
}

// WriteSteadyCSV writes one row per (config, view, window) to path.
func WriteSteadyCSV(path string, r *SteadyResult) error {
	var rows [][]string
	for _, v := range r.Views {
		for _, w := range v.Windows {
			rows = append(rows, []string{v.Config, v.Histogram, fmtDur(v.Window), strconv.Itoa(v.K),
				strconv.FormatFloat(w.Start.Seconds(), 'f', -1, 64), strconv.FormatFloat(w.End.Seconds(), 'f', -1, 64),
				strconv.Itoa(w.L2.N), fmtG(w.TrueEvents), fmtG(w.Counted),
				fmtG(w.L2.Mean()), fmtG(w.KL.Mean()), fmtG(w.KL.InfFraction()), fmtG(w.UniformL2.Mean()), fmtG(w.BoundedL2.Mean())})
		}
	}
	return writeCSV(path, []string{"config", "histogram", "window", "k", "start_s", "end_s", "releases", "true_events", "counted_events",
		"mean_l2", "mean_kl", "kl_inf_fraction", "mean_uniform_l2", "mean_bounded_l2"}, rows)
}

// WriteSteadySummaryCSV writes the summary lines to path.
func WriteSteadySummaryCSV(path string, sums []SteadySummary) error {
	var rows [][]string
	for _, s := range sums {
		rows = append(rows, []string{s.View.Config, s.View.Histogram, fmtDur(s.View.Window), strconv.Itoa(s.View.K),
			strconv.FormatFloat(s.Segment.From.Seconds(), 'f', -1, 64), strconv.FormatFloat(s.Segment.To.Seconds(), 'f', -1, 64),
			strconv.Itoa(s.Windows), fmtG(s.L2.Mean()), fmtG(s.L2.Lo()), fmtG(s.L2.Hi()), fmtG(s.KL.Mean()), fmtG(s.KL.InfFraction()),
			fmtG(s.UniformL2.Mean()), fmtG(s.BoundedL2.Mean()), fmtG(s.CountedShare)})
	}
	return writeCSV(path, []string{"config", "histogram", "window", "k", "from_s", "to_s", "windows", "mean_l2", "ci95_lo", "ci95_hi",
		"mean_kl", "kl_inf_fraction", "mean_uniform_l2", "mean_bounded_l2", "counted_share"}, rows)
}

// plotBuckets is about the number of points of one line: a view with more
// windows is drawn as the means of runs of consecutive windows, of
// geometrically growing length (every window early in the period, where the
// x axis is logarithmic).
const plotBuckets = 160

// buckets splits n windows into runs [e[k], e[k+1]).
func buckets(n int) []int {
	e := []int{0}
	for k := 1; k <= plotBuckets; k++ {
		v := int(math.Round(math.Pow(float64(n), float64(k)/plotBuckets)))
		if v > e[len(e)-1] {
			e = append(e, v)
		}
	}
	if e[len(e)-1] != n {
		e = append(e, n)
	}
	return e
}

// viewColors are the views' colours, in order; the uniform line is grey.
var viewColors = []color.RGBA{{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, {R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, {R: 0x94, G: 0x67, B: 0xbd, A: 0xff}}

// PlotSteady draws, one panel per config, each view's mean ℓ2 per window
// across the period (at each window's end, on a logarithmic time axis), with
// the uniform release's ℓ2 dashed: where a view meets it, it is blind.
func PlotSteady(path string, r *SteadyResult) error {
	var row []*plot.Plot
	lo, hi := math.Inf(1), 0.0
	var xmin, xmax time.Duration
	grey := color.RGBA{R: 0x60, G: 0x60, B: 0x60, A: 0xff}
	for _, views := range r.byConfig() {
		var ss []series
		uni := series{name: "uniform release (blind)", dashed: true, col: &grey}
		for vi, v := range views {
			c := viewColors[vi%len(viewColors)]
			s := series{name: v.viewName(), points: len(v.Windows) <= 48, col: &c}
			e := buckets(len(v.Windows))
			if len(e)-1 < len(v.Windows) {
				s.name += ", later windows in runs"
			}
			for k := 0; k+1 < len(e); k++ {
				var l2s, us Stat
				for _, w := range v.Windows[e[k]:e[k+1]] {
					l2s.Merge(w.L2)
					us.Merge(w.UniformL2)
				}
				end := v.Windows[e[k+1]-1].End
				if xmin == 0 || end < xmin {
					xmin = end
				}
				xmax = max(xmax, end)
				x := end.Hours()
				s.xs, s.ys = append(s.xs, x), append(s.ys, l2s.Mean())
				if vi == 0 {
					uni.xs, uni.ys = append(uni.xs, x), append(uni.ys, us.Mean())
				}
				for _, y := range []float64{l2s.Mean(), us.Mean()} {
					if y > 0 && !math.IsNaN(y) {
						lo, hi = math.Min(lo, y), math.Max(hi, y)
					}
				}
			}
			ss = append(ss, s)
		}
		ss = append(ss, uni)
		pl, err := newPanel(views[0].Config, "time into the period (window end)", "mean ℓ2 per window", true, true, ss, true)
		if err != nil {
			return err
		}
		pl.X.Tick.Marker = durationTicks{}
		pl.Legend.Top, pl.Legend.Left = true, false // above the curves: see Y.Max below
		row = append(row, pl)
	}
	for _, p := range row {
		if lo < hi {
			p.Y.Min, p.Y.Max = lo/1.3, hi*4 // room for the legend above the curves
		}
		p.X.Min, p.X.Max = xmin.Hours()/1.2, xmax.Hours()*1.2
	}
	cols := min(len(row), 2)
	if len(row) > 4 {
		cols = 3
	}
	var grid [][]*plot.Plot
	for i := 0; i < len(row); i += cols {
		line := make([]*plot.Plot, cols)
		copy(line, row[i:min(i+cols, len(row))])
		grid = append(grid, line)
	}
	return saveGrid(path, grid, vg.Length(cols)*5.5*vg.Inch, vg.Length(len(grid))*4.2*vg.Inch)
}

// durationTicks labels a time axis in hours with round durations.
type durationTicks struct{}

func (durationTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for _, d := range []time.Duration{time.Second, 5 * time.Second, 15 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute,
		time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		if h := d.Hours(); h >= lo && h <= hi {
			ticks = append(ticks, plot.Tick{Value: h, Label: fmtDur(d)})
		}
	}
	return ticks
}

// WriteSteadyFiles writes steady.csv, steady_summary.csv and steady.png
// into dir and returns their names.
func WriteSteadyFiles(dir string, r *SteadyResult, sums []SteadySummary) ([]string, error) {
	files := []struct {
		name string
		fn   func(string) error
	}{
		{"steady.csv", func(p string) error { return WriteSteadyCSV(p, r) }},
		{"steady_summary.csv", func(p string) error { return WriteSteadySummaryCSV(p, sums) }},
		{"steady.png", func(p string) error { return PlotSteady(p, r) }},
	}
	var out []string
	for _, f := range files {
		if err := f.fn(filepath.Join(dir, f.name)); err != nil {
			return out, fmt.Errorf("eval: %s: %w", f.name, err)
		}
		out = append(out, f.name)
	}
	return out, nil
}
