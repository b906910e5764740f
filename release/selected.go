package release

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/selection"
	"go.uber.org/zap"
)

// The runtime of the selection (keyed.go): the period's selection
// reservation, the window's draw, and what the unit carries.
//
// Order within a unit of a selecting histogram, all before anything is
// drawn: (1) the period's selection reservation (plan.SelectionPlan.Charge,
// (ε_sel, δ_sel) in the book's (ε, δ) part) is checked — held already by
// the period (covered: nothing charged), or to be made by this unit; (2)
// the histogram's own count charge is checked after it (countUnit). Either
// refused: the unit is budget_exhausted and neither is charged. Then the
// selection is drawn from the window's keys, and one release is drawn per
// selected key. Both charges are recorded with the unit in one ledger
// transaction (ledger.Unit.Selection; RecordAdmitted).

// selector is a Releaser's selection runtime: nil without a selecting
// histogram.
type selector struct {
	sp       *plan.SelectionPlan
	key      string // the period reservation's key (SelectionReservationKey)
	noise    mechanism.CountNoiser
	keyNoise mechanism.CountNoiser // nil without a key limit
	public   Selection             // the public block of every message
	charge   budget.Charge
}

// newSelector builds the selection runtime of plan p (nil when no
// histogram selects).
func newSelector(p *plan.Plan, neighbour string, keySampleRate float64) (*selector, error) {
	sp := p.Selection
	if sp == nil {
		return nil, nil
	}
	th := sp.Selection.Threshold
	s := &selector{sp: sp}
	var err error
	if s.noise, s.keyNoise, err = sp.Selection.Noisers(); err != nil {
		return nil, fmt.Errorf("release: selection: %w", err)
	}
	s.charge = sp.Charge()
	s.key = SelectionReservationKey(neighbour, sp)
	s.charge.Reservation = s.key
	s.public = Selection{
		Threshold:        th.T,
		Sigma:            th.Sigma,
		UsersAtHalf:      th.UsersAt(0.5),
		UsersAt95:        th.UsersAt(0.95),
		WindowDelta:      th.WindowDelta(),
		MaxKeysPerWindow: int(th.KeyLimit),
		KeySampleRate:    keySampleRate,
		ChargeID:         s.key,
		Epsilon:          s.charge.Epsilon,
		Delta:            s.charge.Delta,
	}
	return s, nil
}

// SelectionReservationKey names the period's selection reservation under
// the calibration that fixes its cost: the neighbour relation, the
// threshold (σ, T, l0, the key-count test), the period it composes, the
// selecting histograms' window sizes with their W and K (in v2: each
// size's admissions are a separate state, so a selecting histogram moved
// to another window size mid-period composes afresh even where Units is
// unchanged; TestReviewSelectionKeyNamesWindowSizes) and its (ε, δ). Any change of them in the middle of a period makes a new key, and
// so a new reservation charged in full (never less than the selections
// cost; the same configuration after a restart gives the same key). The
// hex of the first 16 bytes of a SHA-256 over a length-prefixed encoding
// (floats by their IEEE bits), like ViewReservationKey.
func SelectionReservationKey(neighbour string, sp *plan.SelectionPlan) string {
	kh := newKeyHasher()
	put, str := kh.put, kh.str
	th, per := sp.Selection.Threshold, sp.Selection.Period
	str("stage selection reservation v2")
	str(neighbour)
	put(math.Float64bits(th.Sigma))
	put(uint64(th.T))
	put(uint64(th.L0))
	put(uint64(th.KeyLimit))
	put(math.Float64bits(th.KeySigma))
	put(uint64(per.Units))
	put(uint64(per.DeltaUnits))
	if per.Replace {
		put(1)
	} else {
		put(0)
	}
	sizes := slices.Clone(sp.Sizes) // the multiset: config order changes nothing
	slices.SortFunc(sizes, func(a, b plan.SelectionSize) int {
		return cmp.Or(cmp.Compare(a.WindowMs, b.WindowMs), cmp.Compare(a.Windows, b.Windows), cmp.Compare(a.K, b.K))
	})
	put(uint64(len(sizes)))
	for _, z := range sizes {
		put(uint64(z.WindowMs))
		put(uint64(z.Windows))
		put(uint64(z.K))
	}
	put(math.Float64bits(sp.Epsilon))
	put(math.Float64bits(sp.Delta))
	return "selection-" + kh.sum()
}

// selectionCharge checks the period's selection reservation for a unit of
// period p after the window's pending charges: covered (the period or a
// pending charge holds it: nothing to charge) or the charge to make; a
// refusal is errors.Is budget.ErrBudgetExceeded.
func (r *Releaser) selectionCharge(p int64, pending []budget.Charge) (c budget.Charge, covered bool, err error) {
	s := r.sel
	for _, pc := range pending {
		if pc.Reservation == s.key {
			// Made by an earlier unit of this window: checked against the
			// budget with it.
			_, err := r.totalWith(p, pending)
			return s.charge, true, err
		}
	}
	held, err := r.book.Reserved(p, s.key)
	if err != nil {
		return c, false, err
	}
	if held {
		// Covered; checked against the period's current budget all the
		// same, so that a budget cut stops the selections too.
		_, _, err := r.book.Covered(p, s.key, pending...)
		return s.charge, true, err
	}
	if _, err := r.book.Check(p, s.charge, pending...); err != nil {
		return c, false, err
	}
	return s.charge, false, nil
}

// selectUnit fills u with the window's selection of histogram h and a
// release per selected key (countUnit), after charging the selection's
// period reservation and the histogram's charge; it returns the charges to
// record, in order (the selection reservation when this unit makes it,
// then the count charge), none when refused or covered.
func (r *Releaser) selectUnit(u *ledger.Unit, h int, counts Counts, pending []budget.Charge) ([]budget.Charge, error) {
	hist := r.cfg.Histograms[h]
	if r.sel == nil {
		return nil, fmt.Errorf("release: histogram %s selects its groups but the plan has no selection", hist.Name)
	}
	keyed, ok := counts.(Keyed)
	if !ok {
		return nil, fmt.Errorf("release: histogram %s selects its groups but the window's counts carry no keys (%T)", hist.Name, counts)
	}
	sc, covered, err := r.selectionCharge(u.Period, pending)
	if err != nil {
		if !errors.Is(err, budget.ErrBudgetExceeded) {
			return nil, err
		}
		return nil, r.exhausted(u, err, pending)
	}
	var out []budget.Charge
	withSel := pending
	if !covered {
		out = append(out, sc)
		withSel = append(pending[:len(pending):len(pending)], sc)
	}
	c, err := r.countUnitOf(u, h, counts, withSel, pending, func() (picked, error) {
		return r.pick(u, h, keyed)
	})
	if err != nil || u.Status != ledger.StatusReleased {
		return nil, err // refused: exhausted filled u, nothing charged
	}
	if covered {
		u.Selection = &ledger.SelectionCharge{CoveredBy: r.sel.key}
	} else {
		u.Selection = &ledger.SelectionCharge{Reservation: r.sel.key, Approx: &ledger.Approx{Epsilon: sc.Epsilon, Delta: sc.Delta}}
	}
	if u.CoveredBy == "" {
		out = append(out, c)
	}
	return out, nil
}

// picked is what a unit releases: its groups, each one's count vector,
// and for a selecting histogram the public Selection and the status
// message naming the groups (published first).
type picked struct {
	groups []string
	counts func(i int, dst []float64) []float64
	sel    *Selection
	status *Status
}

// pick draws the selection of histogram h's keys in unit u's window.
func (r *Releaser) pick(u *ledger.Unit, h int, keyed Keyed) (picked, error) {
	hist := r.cfg.Histograms[h]
	n := keyed.Keys(h)
	keys := make([]string, n)
	users := make([]int64, n)
	var scratch []float64 // the counts are not needed to select
	for i := range n {
		keys[i], users[i], scratch = keyed.Key(h, i, scratch)
		if i > 0 && keys[i] <= keys[i-1] {
			return picked{}, fmt.Errorf("release: histogram %s: the window's keys are not in ascending order (%q after %q)", hist.Name, keys[i], keys[i-1])
		}
	}
	th := r.sel.sp.Selection.Threshold
	pub := r.sel.public
	st := unitStatus(u, StatusGroupsSelected)
	if r.onSel != nil {
		r.onSel(hist.Name, n)
	}
	idx, err := selection.Keys(th, r.sel.noise, r.sel.keyNoise, r.rng, keys, users)
	switch {
	case errors.Is(err, selection.ErrOverLimit):
		pub.Withheld = true
		st.Status = StatusSelectionWithheld
		st.Message = fmt.Sprintf("the window's distinct groups were over selection.max_keys_per_window (%d) by a noisy test: no group of this window is released", th.KeyLimit)
		st.Selection = &pub
		r.log.Warn("selection withheld: the window's distinct group keys are over selection.max_keys_per_window",
			zap.String("histogram", hist.Name), zap.String("window_start", RFC3339(u.WindowStart)),
			zap.Int("tracked_keys", n), zap.Int64("max_keys_per_window", th.KeyLimit))
		return picked{status: st}, nil
	case err != nil:
		return picked{}, fmt.Errorf("release: selection of %s@%s: %w", hist.Name, RFC3339(u.WindowStart), err)
	}
	groups := make([]string, len(idx))
	for j, i := range idx {
		groups[j] = keys[i]
	}
	st.Groups = groups
	st.Selection = &pub
	st.Message = fmt.Sprintf("%d groups passed the private selection; a group is shown with probability ½ at about %d distinct users and 0.95 at about %d, so smaller groups are hidden and a group near that size can appear and disappear between windows", len(groups), pub.UsersAtHalf, pub.UsersAt95)
	r.log.Info("groups selected", zap.String("histogram", hist.Name), zap.String("window_start", RFC3339(u.WindowStart)),
		zap.Int("tracked_keys", n), zap.Int("selected", len(groups))) // operator log: tracked_keys is private
	return picked{
		groups: groups,
		counts: func(j int, dst []float64) []float64 {
			_, _, c := keyed.Key(h, idx[j], dst)
			return c
		},
		sel:    &pub,
		status: st,
	}, nil
}

// unitStatus is a status message of unit u's (histogram, window).
func unitStatus(u *ledger.Unit, status string) *Status {
	return &Status{
		Status:      status,
		ReleaseID:   ReleaseID(u.Histogram, "", u.WindowStart),
		Histogram:   u.Histogram,
		WindowStart: RFC3339(u.WindowStart),
		WindowEnd:   RFC3339(u.WindowEnd),
	}
}

// statusMessage is the ledger message of status st of a unit of period,
// stating the period's spend after the window's charges (total).
func (r *Releaser) statusMessage(st *Status, total budget.Total, period int64) (ledger.Message, error) {
	st.Privacy.SpentEpsilon = total.Epsilon
	st.Privacy.BudgetEpsilon = total.LimitEpsilon
	st.Privacy.Delta = total.LimitDelta
	st.Privacy.TotalDelta = r.totalDelta(total.LimitDelta)
	st.Privacy.PeriodStart = RFC3339(period)
	st.Privacy.PeriodEnd = RFC3339(period + r.periodMs)
	v, err := json.Marshal(st)
	if err != nil {
		return ledger.Message{}, err
	}
	return ledger.Message{Key: []byte(st.Histogram), Value: v}, nil
}
