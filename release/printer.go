package release

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/dpstage/stage/ledger"
)

// Printer writes a human-readable view of each release: bins with bars, the
// window and the privacy spent. It is what the demo shows on the terminal.
type Printer struct {
	mu sync.Mutex // guards w: one release is printed as one block
	w  io.Writer
}

// NewPrinter returns a Printer writing to w.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w} }

// Print renders one release.
func (p *Printer) Print(r *Release) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s / %s   window %s → %s   (%s", r.Histogram, r.Group, r.WindowStart, r.WindowEnd, r.Mechanism)
	if r.Calibration != "" {
		fmt.Fprintf(&b, ", %s", r.Calibration)
	}
	fmt.Fprintf(&b, ")\n")
	width := 0
	for _, bin := range r.Bins {
		if len(bin) > width {
			width = len(bin)
		}
	}
	for i, bin := range r.Bins {
		p := r.Probabilities[i]
		n := int(p*40 + 0.5)
		fmt.Fprintf(&b, "  %-*s %5.1f%% %s", width, bin, 100*p, strings.Repeat("█", n))
		if iv := r.Intervals; iv != nil && i < len(iv.Low) && i < len(iv.High) {
			fmt.Fprintf(&b, "%s  %.1f–%.1f%%", strings.Repeat(" ", 40-n), 100*iv.Low[i], 100*iv.High[i])
		}
		b.WriteByte('\n')
	}
	if t, iv := r.Total, r.Intervals; t != nil && iv != nil {
		fmt.Fprintf(&b, "  total ≈ %.0f (%.0f–%.0f); ranges: %g%% intervals of each share and of the total\n", t.Estimate, t.Low, t.High, 100*iv.Level)
	}
	if w := r.Privacy.ChargeWindows; w > 0 {
		// The cross-window bound: the period's reservation for this
		// histogram was charged with its first release of the period and
		// covers the later ones (not an exhausted budget).
		fmt.Fprintf(&b, "  privacy: this release (λ=%g, ε=%.4g)-RDP; period charged ε=%.4g of %.4g at δ=%g (reserved up front for %d windows per user; later releases are covered)%s\n",
			r.Privacy.Order, r.Privacy.RDPEpsilon, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon, r.Privacy.Delta, w, totalDeltaNote(r.Privacy.TotalDelta))
	} else {
		fmt.Fprintf(&b, "  privacy: this release (λ=%g, ε=%.4g)-RDP; period spent ε=%.4g of %.4g at δ=%g%s\n",
			r.Privacy.Order, r.Privacy.RDPEpsilon, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon, r.Privacy.Delta, totalDeltaNote(r.Privacy.TotalDelta))
	}
	p.mu.Lock()
	_, _ = io.WriteString(p.w, b.String())
	p.mu.Unlock()
}

// totalDeltaNote states the guarantee's total δ (Privacy.TotalDelta), ""
// when the release carries none.
func totalDeltaNote(total float64) string {
	if total <= 0 {
		return ""
	}
	return fmt.Sprintf("; guarantee total δ=%.3g with user-hash collisions", total)
}

// PrintUnit renders a recorded, published unit: its status message (a
// window not released, or a selecting histogram's groups_selected), then
// its releases. The caller prints a unit only after it was recorded with
// its charges (node: at publish), never while it is drawn: a record that
// fails is drawn again, and the printed draw would be an uncharged second
// one (TestReviewSelectionNotPrintedBeforeRecorded).
func (p *Printer) PrintUnit(u *ledger.Unit) {
	rels := ReleaseMessages(u)
	for _, m := range u.Messages[:len(u.Messages)-len(rels)] {
		var st Status
		if json.Unmarshal(m.Value, &st) == nil && st.Status != "" {
			p.PrintStatus(&st)
		}
	}
	for _, m := range rels {
		var r Release
		if json.Unmarshal(m.Value, &r) == nil {
			p.Print(&r)
		}
	}
}

// PrintStatus renders a status message (a release that was not made).
func (p *Printer) PrintStatus(s *Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.Status == StatusGroupsSelected {
		fmt.Fprintf(p.w, "\n%s   window %s → %s   groups selected: %d %v (%s)\n", s.Histogram, s.WindowStart, s.WindowEnd, len(s.Groups), s.Groups, s.Message)
		return
	}
	fmt.Fprintf(p.w, "\n%s   window %s → %s   NOT RELEASED: %s\n", s.Histogram, s.WindowStart, s.WindowEnd, s.Message)
}
