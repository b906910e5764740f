package cli

import (
	"fmt"
	"strings"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// countComposition says how many units the count histograms compose per
// period: "W windows × H count histograms = U" when they all have the base
// window, else each histogram's own number of windows (histograms[].window).
func countComposition(cfg *config.Config, p *plan.Plan, what string) string {
	cp := p.Count
	if cp.Units == p.WindowsPerPeriod*cp.UnitsPerWindow {
		return fmt.Sprintf("%d windows × %d %s = %d charges per period", p.WindowsPerPeriod, cp.UnitsPerWindow, what, cp.Units)
	}
	var parts []string
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			continue
		}
		w, _ := plan.HistWindows(cfg, i)
		parts = append(parts, fmt.Sprintf("%d windows (%s, %s)", w, h.Name, h.WindowSize(cfg.Window.Size)))
	}
	return strings.Join(parts, " + ") + fmt.Sprintf(" = %d charges per period", cp.Units)
}

// averageComposition is countComposition for the average histograms'
// releases.
func averageComposition(p *plan.Plan) string {
	n, uniform := 0, true
	for _, a := range p.Averages {
		n += a.Windows
		uniform = uniform && a.Windows == p.WindowsPerPeriod
	}
	if uniform {
		return fmt.Sprintf("%d windows × %d average histograms", p.WindowsPerPeriod, len(p.Averages))
	}
	return fmt.Sprintf("%d average releases", n)
}
