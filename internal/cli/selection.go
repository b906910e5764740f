package cli

import (
	"fmt"
	"io"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/plan"
)

// printSelection says how the groups of histograms with group_by and no
// groups are selected (plan's "Selecting unlisted groups", package
// selection): the threshold, the distinct users at which a group is kept
// with probability ½ and 0.95 per window beside the batch optimum at the
// same per-window (ε, δ, l0), and the period's share of the budget.
func printSelection(tw io.Writer, indent string, cfg *config.Config, p *plan.Plan) {
	sp := p.Selection
	if sp == nil {
		return
	}
	th, g := sp.Selection.Threshold, sp.Selection.Guarantee
	names := ""
	for j, i := range sp.Hists {
		if j > 0 {
			names += ", "
		}
		names += cfg.Histograms[i].Name
	}
	per := sp.Selection.Period
	fmt.Fprintf(tw, indent+"selection\t%s: groups selected privately per window — a group's distinct users (≤ %d groups per user per window) + discrete Gaussian noise σ=%.4g, kept iff ≥ T=%d; nothing of a group not kept is released\n",
		names, th.L0, th.Sigma, th.T)
	fmt.Fprintf(tw, indent+"selection kept\tper window: with probability ½ at %d distinct users, 0.95 at %d; batch optimum at the same (ε=%.4g, δ=%.3g, l0=%d) of one window: ½ at %d, 0.95 at %d, always at %d\n",
		th.UsersAt(0.5), th.UsersAt(0.95), sp.Window.Epsilon, sp.Window.Delta(), th.L0, sp.Batch.UsersAt(0.5), sp.Batch.UsersAt(0.95), sp.Batch.UsersAt(1))
	bs := sp.BatchShare
	fmt.Fprintf(tw, indent+"selection vs batch\tthe batch optimum run in each window on an equal share of the selections' budget (ε=%.4g, δ=%.3g per window, basic composition): ½ at %s, 0.95 at %s distinct users\n",
		bs.Epsilon, bs.Delta, usersOrNone(bs.UsersAt(0.5)), usersOrNone(bs.UsersAt(0.95)))
	fmt.Fprintf(tw, indent+"selection share\t%d window selections composed (%d with a δ term) a period: ε=%.6g, δ=%.3g (conversion %.3g + threshold %.3g) of its (ε=%.6g, δ=%.3g); basic composition with the rest\n",
		per.Units, per.DeltaUnits, g.Epsilon, g.Delta(), g.ConversionDelta, g.ThresholdDelta, sp.Epsilon, sp.Delta)
	fmt.Fprintf(tw, indent+"selection keys\tgroup keys sampled by a public keyed hash of the key at rate %g; a window's selection is withheld when its distinct keys + discrete Gaussian noise (σ_k=%.4g, in the charge) reach %d\n",
		cfg.Selection.KeySampleRate, th.KeySigma, cfg.Selection.MaxKeysPerWindow)
}

// usersOrNone prints a batch figure, "over 10⁷" when it is out of reach.
func usersOrNone(n int) string {
	if n < 0 {
		return "over 10⁷"
	}
	return fmt.Sprint(n)
}
