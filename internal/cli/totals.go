package cli

import (
	"fmt"
	"io"
	"math"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/interval"
	"github.com/dpstage/stage/plan"
)

// printTotals says how every release's total and intervals are made
// (package interval; plan's "Totals"): free from the additive mechanisms'
// noisy counts, or a charged discrete Gaussian count — its σ, its share of
// the budget, what it costs per release and its interval's half-width.
func printTotals(tw io.Writer, indent string, cfg *config.Config, p *plan.Plan) {
	level := cfg.Output.IntervalLevel
	fmt.Fprintf(tw, indent+"intervals\t%g%% confidence intervals for every bin's share and the window's total in every release (output.interval_level)\n", 100*level)
	if p.Count != nil && p.Totals.CountSigma() == 0 {
		fmt.Fprintf(tw, indent+"totals\tcount histograms: the sum of the noisy counts already drawn (%s; no charge)\n", cfg.Privacy.Mechanism)
	}
	t := p.Totals
	if t == nil {
		return
	}
	order := cfg.Privacy.Order
	share := fmt.Sprintf("privacy.total_share=%g of the RDP budget at λ=%g", t.Share, order)
	if p.Count == nil {
		share = "the RDP part of the budget the average releases leave"
	}
	if s := t.CountSigma(); s > 0 {
		h, _ := interval.Count(1e9, s, level, math.Inf(1))
		fmt.Fprintf(tw, indent+"totals\tcount histograms: each group's counted events + discrete Gaussian noise, σ=%.6g (Δ2²=%g over a histogram's groups), (λ=%g, ε=%.6g)-RDP per release inside its charge; ±%.0f at %g%%; %s\n",
			s, t.Sensitivity.L2Sq, order, t.CountRDP(order), h.High-1e9, 100*level, share)
	}
	if s := t.AverageSigma(); s > 0 {
		h, _ := interval.Count(1e9, s, level, math.Inf(1))
		fmt.Fprintf(tw, indent+"totals\taverage histograms: the kept users + discrete Gaussian noise, σ=%.6g (Δ2²=1), (λ=%g, ε=%.6g)-RDP per release with its (ε, δ), over %d releases a period; ±%.0f at %g%%; %s\n",
			s, order, t.AverageRDP(order), t.AverageUnits, h.High-1e9, 100*level, share)
	}
}
