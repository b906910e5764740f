package config

import (
	"fmt"
	"strings"
)

// ShareTolerance is the float tolerance of the budget shares' sum: shares
// written as decimals (0.35 + 0.45 + 0.2) may sum to 1 + a few ulps. The
// planner normalizes shares summing to at most 1 + ShareTolerance so they
// never exceed the count histograms' budget.
const ShareTolerance = 1e-9

// budgetShares checks histograms[].budget_share: each in (0, 1] and
// finite, on count histograms only, summing to at most 1; when some count
// histograms have none, the rest (1 − the sum) must be left for them; and
// the shares need the planned calibration (no privacy.rdp_epsilon).
func (k *checker) budgetShares() {
	sum, set := 0.0, false
	var without []string
	for i, h := range k.c.Histograms {
		path := fmt.Sprintf("histograms[%d].budget_share", i)
		s := h.BudgetShare
		if s == 0 {
			if !h.IsAverage() {
				without = append(without, h.Name)
			}
			continue
		}
		set = true
		switch {
		case !finite(s) || s < 0 || s > 1:
			k.add(path, "must be a share of the count histograms' budget in (0, 1] (e.g. 0.35), got %v", s)
			continue
		case h.IsAverage():
			k.add(path, "applies to count histograms only: an average histogram's (ε, δ) is set by its average section; remove budget_share")
			continue
		}
		sum += s
	}
	if !set {
		return
	}
	switch {
	case sum > 1+ShareTolerance:
		k.add("histograms", "the budget_share values sum to %.6g, more than 1 (the whole count-histogram budget): lower them so they sum to at most 1", sum)
	case len(without) > 0 && !(1-sum > ShareTolerance):
		k.add("histograms", "the budget_share values sum to %.6g and leave nothing for the count histograms without one (%s): lower the shares, or give those histograms a budget_share of their own", sum, strings.Join(without, ", "))
	}
	if k.c.Privacy.RDPEpsilon > 0 {
		k.add("privacy.rdp_epsilon", "fixes one calibration for every release, so histograms[].budget_share cannot apply: remove privacy.rdp_epsilon (plan from the budget) or the budget shares")
	}
}

// BudgetShares returns the share of the count histograms' period budget
// of each histogram (config index), given units[i] = its per-window curves
// per period (0 for an average histogram): its own budget_share, and for
// the count histograms without one the rest split in proportion to their
// units (what each would get without shares: every unit the same). The
// count histograms' shares sum to at most 1 (rescaled when the configured
// ones sum to 1 within ShareTolerance). Nil when no histogram sets one.
func (c *Config) BudgetShares(units []int) []float64 {
	sum, rest, set := 0.0, 0, false
	for i, h := range c.Histograms {
		if h.IsAverage() {
			continue
		}
		if h.BudgetShare > 0 {
			sum += h.BudgetShare
			set = true
		} else {
			rest += units[i]
		}
	}
	if !set {
		return nil
	}
	out := make([]float64, len(c.Histograms))
	scale := 1.0
	if sum > 1 {
		scale = 1 / sum // within ShareTolerance (validated): never above 1
	}
	left := max(0, 1-sum*scale)
	for i, h := range c.Histograms {
		switch {
		case h.IsAverage():
		case h.BudgetShare > 0:
			out[i] = h.BudgetShare * scale
		case rest > 0:
			out[i] = left * float64(units[i]) / float64(rest)
		}
	}
	return out
}
