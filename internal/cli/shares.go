package cli

import (
	"fmt"
	"io"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
)

// printViewCalibrations prints, with histograms[].budget_share, each count
// histogram's own calibration: its share of the count histograms' budget,
// what one of its windows is charged and the mechanism's parameters.
func printViewCalibrations(tw io.Writer, indent string, cfg *config.Config, p *plan.Plan) {
	cp := p.Count
	for i, h := range cfg.Histograms {
		v := cp.For(i)
		if h.IsAverage() || v == cp {
			continue
		}
		own := "the rest"
		if h.BudgetShare > 0 {
			own = "budget_share"
		}
		fmt.Fprintf(tw, "%sview %s\t%.3g%% of the count budget (%s) over %d per-window curves: %s; %s\n",
			indent, h.Name, 100*v.Share, own, v.Units, perReleaseLine(p, v), paramsText(v.Mechanism.Params()))
	}
}

// paramsText is a calibrated mechanism's parameters in words.
func paramsText(params mechanism.Params) string {
	switch {
	case params.Alpha > 0:
		return fmt.Sprintf("α=%.6g  r=%.6g", params.Alpha, params.R)
	case params.Sigma > 0:
		return fmt.Sprintf("σ=%.6g", params.Sigma)
	case params.Scale > 0:
		return fmt.Sprintf("b=%.6g", params.Scale)
	}
	return "no parameters"
}

// countPlan names plan.CountPlan where a parameter called plan hides the
// package.
type countPlan = plan.CountPlan
