package budget

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
)

// Book is the privacy spend of one stage, per budget period: the one place
// where a release's charge is checked against, and added to, its period's
// total. A stage has one Book; every kind of charge goes through it.
//
// # What is checked, and why the whole period
//
// A period's releases are composed in two parts: the RDP charges (count
// histograms: Dirichlet, Gaussian, Laplace curves) add order by order (000
// Lemma 2) and the (ε, δ)-DP charges (average histograms) add by basic
// composition (Dwork & Roth 2014, Theorem 3.16, which holds for adaptive
// composition); the total is
//
//	ε_total = ε_rdp(δ − Σδ_i) + Σε_i,   δ_total = δ,
//
// where ε_rdp(δ′) is the composed curve converted at δ′ (000 Lemma 1 eq.
// (2), minimized over the grid). A charge is accepted only if the period's
// total after it is within the budget: ε_total ≤ ε and Σδ_i < δ (Σδ_i ≤ δ
// when nothing was charged in RDP). The check covers everything the period
// has spent — both kinds — whatever configuration was in force when the
// earlier charges were made: the Book restores a period from its [Store]
// (the durable ledger) the first time it is used, and the restored spend is
// the sum of every recorded charge. Hence no configuration change in the
// middle of a period (adding, removing or recalibrating a histogram,
// lowering the budget) can take the period's total past the budget the
// stage runs with now. Before, the stage checked count charges only against
// the RDP share of the current plan and average charges only against the
// current reservation, so each part ignored what the other had spent under
// an earlier configuration (issue #15, item 2).
//
// Why the two parts may be added even when the releases are interleaved and
// chosen adaptively: fix a pair of neighbouring inputs. Each (ε_i, δ_i)-DP
// mechanism is, for that pair, a randomized post-processing T_i of the
// (ε_i, δ_i) randomized response RR_i run on the bit "which of the two
// inputs" (Kairouz, Oh & Viswanath 2015, "The Composition Theorem for
// Differential Privacy", ICML — the dominance result in the proof of their
// Theorem 3.3). The RR_i do not depend on the history, so they can all be
// drawn first; the interleaved run is then a post-processing of (RR_1, …,
// RR_m) followed by the RDP mechanisms run adaptively with the RR outputs
// (and the data-independent T_i) as auxiliary input. The first block is
// (Σε_i, Σδ_i)-DP, the second is (ε_rdp, δ_rdp)-DP for every value of the
// first (adaptive RDP composition, 000 Lemma 2, then eq. (2)), and the
// sequential basic composition of the two blocks gives the total. The
// (ε_i, δ_i) and the RDP curves must be fixed in advance, as they are for a
// calibrated stage (the same condition as the RDP accountant's).
//
// The budget a period is checked against is the budget in force at its
// first charge, recorded with it (Spend.LimitEpsilon, LimitDelta; the
// ledger lowers the record when a later unit is recorded under a lower
// one), or the current one where that is lower: a budget lowered in the
// middle of a period takes effect at once — for the units a period
// reservation covers too ([Book.Covered]) — a raised one from the next
// period only (also when raised back after a cut), so no release of a
// period can report a budget above the one its earlier releases stated.
//
// The condition behind all of this: the charges of a period — the
// configuration that sets them, and a change of it — do not depend on what
// the stage released in that period. Composition theorems for adaptively
// chosen parameters (privacy filters; Feldman & Zrnic 2021, Whitehouse et
// al. 2023) do not cover minimizing the conversion over the orders after
// the fact, so an operator who changes the configuration because of the
// released values steps outside the argument below. The stage itself never
// changes a charge from the data.
//
// Converting the RDP part at δ − Σδ_i (the δ the (ε, δ) part leaves) rather
// than at a δ fixed by the plan is valid at every point of the period: the
// RDP curve of the composed count releases is a property of the mechanism,
// so its (ε, δ′) conversion holds for every δ′ at once, and the number and
// parameters of the (ε, δ) releases do not depend on the data (the plan
// fixes them). A planned schedule is always accepted: with the plan's
// reservation (ε_a, δ_a) for the average releases, Σδ_i ≤ δ_a at every
// point, so ε_rdp(δ − Σδ_i) ≤ ε_rdp(δ − δ_a), which the plan keeps within
// ε − ε_a.
//
// # Period reservations
//
// With the cross-window bound (contribution.max_windows_per_user) a
// histogram's whole period is charged once, with its first release of the
// period: a [Charge] with Reservation set (plan's package doc, "Charging:
// the period reservation"). The Book records the reservation keys a
// period holds (Spend.Reservations, restored from the store with the
// spend), refuses to charge a held key again, and answers [Book.Reserved]
// for the releases the reservation covers, which charge nothing. A
// reservation is an ordinary charge for everything above: checked against
// the whole period, composed, rounded up. A covered release is still
// checked against the period's current budget ([Book.Covered]): a cut below
// what the period has spent stops it like any other release.
//
// # Rounding: never above ε
//
// The check is exact (total ≤ ε, no tolerance above it); composition rounds
// up ([Curve.Add], [Curve.Scale], the (ε, δ) sums and ε_rdp + Σε_i round
// toward +∞, δ − Σδ_i toward 0), so the recorded spend is never below the
// exact sum of its charges; planners
// leave [PlanMargin] of the budget unplanned so that a schedule planned to
// use the budget exactly is not refused at its last release by rounding.
// What is not bounded: the few-ulp rounding of the conversion's own log and
// divisions.
//
// A Book is safe for concurrent use; the stage's releaser is its only
// writer, readers (status, metrics) may call it at any time.
type Book struct {
	orders         []float64 // the grid; immutable
	epsilon, delta float64   // the period budget; immutable
	store          Store

	// mu guards periods and every Spend in it: a check and the commit that
	// follows it are made by one writer, but status readers run
	// concurrently.
	mu      sync.Mutex
	periods map[int64]*period
}

// period is one period's spend and its effective budget: the Book's, or
// lower where the period's first charge was made under a lower one.
type period struct {
	spend          Spend
	epsilon, delta float64
}

// Store is where a Book restores the spend of a period from: the durable
// ledger. PeriodSpend returns the recorded spend of the period starting at
// period (Unix ms) — its RDP curve on any grid (the Book moves it onto its
// own, conservatively, [Curve.Regrid]) or empty, and its (ε, δ) sums — and
// whether anything was recorded.
type Store interface {
	PeriodSpend(period int64) (Spend, bool, error)
}

// Spend is what one period has spent: the composed RDP curve of its RDP
// charges (empty when none) and the basic composition of its (ε, δ)-DP
// charges.
type Spend struct {
	RDP            Curve
	ApproxEpsilon  float64
	ApproxDelta    float64
	ApproxReleases int
	// LimitEpsilon and LimitDelta are the budget recorded with the
	// period's first charge (0: none recorded). A Book enforces the lower
	// of it and its own, so a budget raised in the middle of a period
	// takes effect from the next period only; a lowered one at once.
	LimitEpsilon, LimitDelta float64
	// Reservations are the keys of the period reservations charged in the
	// period (Charge.Reservation), in the order they were made. Never
	// written in place: add copies.
	Reservations []string
}

// Charge is what one release (one histogram, one window) costs: an RDP
// curve on the Book's grid, or an (ε, δ)-DP pair (RDP empty when the
// release has no RDP curve), never both.
//
// With Reservation set it is a period reservation (plan's package doc,
// "Charging: the period reservation"): the cost of every release the
// reservation will cover in the period, charged once, with the first of
// them. A period holds each reservation key at most once: Check and Commit
// refuse a key the period (or a pending charge) already holds
// ([ErrInvalidArgument]); [Book.Reserved] says whether a unit is covered.
type Charge struct {
	RDP         Curve
	Epsilon     float64
	Delta       float64
	Reservation string
}

// Total is a period's spend composed into one (ε, δ) guarantee and its
// parts (see [Book]).
type Total struct {
	// Epsilon is ε_rdp + Σε_i; Delta the budget's δ (or Σδ_i when nothing
	// was charged in RDP).
	Epsilon, Delta float64
	// RDPEpsilon is the RDP part converted at RDPDelta = δ − Σδ_i, attained
	// at RDPOrder; all 0 when nothing was charged in RDP.
	RDPEpsilon, RDPDelta, RDPOrder float64
	// ApproxEpsilon and ApproxDelta are the (ε, δ) part's sums.
	ApproxEpsilon, ApproxDelta float64
	ApproxReleases             int
	// LimitEpsilon and LimitDelta are the period's effective budget (see
	// Spend).
	LimitEpsilon, LimitDelta float64
}

// NewBook returns a Book on the grid orders with the period budget
// (epsilon, delta) that restores periods from store. Errors
// ([ErrInvalidArgument]): an invalid grid, epsilon ≤ 0 or not finite, delta
// ∉ (0, 1), a nil store.
func NewBook(orders []float64, epsilon, delta float64, store Store) (*Book, error) {
	zero, err := newLimit(orders, epsilon, delta)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, &ArgumentError{Name: "store", Value: math.NaN(), Want: "non-nil"}
	}
	return &Book{orders: zero.orders, epsilon: epsilon, delta: delta, store: store, periods: map[int64]*period{}}, nil
}

// Limit returns the budget (ε, δ) the Book was made with; a period's
// effective budget can be lower (Total.LimitEpsilon, LimitDelta).
func (b *Book) Limit() (epsilon, delta float64) { return b.epsilon, b.delta }

// Orders returns a copy of the Book's grid.
func (b *Book) Orders() []float64 { return append([]float64(nil), b.orders...) }

// period returns the state of period p, restoring it from the store on
// first use. b.mu must be held.
func (b *Book) period(p int64) (*period, error) {
	if st, ok := b.periods[p]; ok {
		return st, nil
	}
	rec, ok, err := b.store.PeriodSpend(p)
	if err != nil {
		return nil, fmt.Errorf("budget: restore period %d: %w", p, err)
	}
	zero, _ := ZeroCurve(b.orders) // the grid was validated by NewBook
	st := &period{spend: Spend{RDP: zero}, epsilon: b.epsilon, delta: b.delta}
	if ok {
		if rec.RDP.Len() > 0 {
			// A config change may have changed the grid: move the recorded
			// spend onto this one conservatively (Curve.Regrid).
			c := rec.RDP.Regrid(b.orders)
			if err := c.Err(); err != nil {
				return nil, fmt.Errorf("budget: restore period %d: %w", p, err)
			}
			st.spend.RDP = c
		}
		if !(rec.ApproxEpsilon >= 0) || !(rec.ApproxDelta >= 0) || math.IsInf(rec.ApproxEpsilon, 0) {
			return nil, fmt.Errorf("budget: restore period %d: %w", p,
				&ArgumentError{Name: "recorded (ε, δ) spend", Value: rec.ApproxEpsilon, Want: "finite ε ≥ 0 and δ ≥ 0"})
		}
		st.spend.ApproxEpsilon, st.spend.ApproxDelta, st.spend.ApproxReleases = rec.ApproxEpsilon, rec.ApproxDelta, rec.ApproxReleases
		if rec.LimitEpsilon > 0 {
			st.epsilon = math.Min(st.epsilon, rec.LimitEpsilon)
		}
		if rec.LimitDelta > 0 {
			st.delta = math.Min(st.delta, rec.LimitDelta)
		}
		st.spend.Reservations = slices.Clone(rec.Reservations)
	}
	st.spend.LimitEpsilon, st.spend.LimitDelta = st.epsilon, st.delta
	b.periods[p] = st
	return st, nil
}

// compose is the Total of s under the period's budget δ.
func (st *period) compose(s *Spend) Total {
	t := Total{ApproxEpsilon: s.ApproxEpsilon, ApproxDelta: s.ApproxDelta, ApproxReleases: s.ApproxReleases,
		LimitEpsilon: st.epsilon, LimitDelta: st.delta}
	if s.RDP.isZero() {
		t.Epsilon, t.Delta = s.ApproxEpsilon, s.ApproxDelta
		return t
	}
	// δ − Σδ_i rounded down: the RDP part is converted at no more δ than
	// the (ε, δ) part leaves.
	t.RDPDelta = st.delta - s.ApproxDelta
	if s.ApproxDelta <= st.delta {
		// Fast2Sum (|δ| ≥ |Σδ_i|): the exact rounding error of the
		// difference; step down if it was rounded up.
		if e := -s.ApproxDelta - (t.RDPDelta - st.delta); e < 0 {
			t.RDPDelta = math.Nextafter(t.RDPDelta, math.Inf(-1))
		}
	}
	t.Delta = st.delta
	if !(t.RDPDelta > 0) {
		t.RDPEpsilon, t.Epsilon = math.Inf(1), math.Inf(1)
		return t
	}
	t.RDPEpsilon, t.RDPOrder = ToEpsilon(s.RDP, t.RDPDelta)
	t.Epsilon = AddUp(t.RDPEpsilon, s.ApproxEpsilon)
	return t
}

// within reports whether t meets the period's budget (exactly: no
// tolerance above it).
func (st *period) within(t Total) bool {
	return t.Epsilon <= st.epsilon && t.Delta <= st.delta // false for NaN
}

// add returns s with c composed in, rounding up. c is valid.
func (s Spend) add(c Charge) Spend {
	out := s
	if c.RDP.Len() > 0 {
		out.RDP = s.RDP.Add(c.RDP)
	}
	if c.Epsilon > 0 || c.Delta > 0 {
		out.ApproxEpsilon = AddUp(s.ApproxEpsilon, c.Epsilon)
		out.ApproxDelta = AddUp(s.ApproxDelta, c.Delta)
		out.ApproxReleases++
	}
	if c.Reservation != "" {
		out.Reservations = append(slices.Clip(s.Reservations), c.Reservation)
	}
	return out
}

// reserved reports whether s holds the reservation key.
func (s *Spend) reserved(key string) bool { return slices.Contains(s.Reservations, key) }

// checkReservations refuses a reservation key that the period's spend s or
// an earlier charge of cs already holds: a reservation is charged once.
func checkReservations(s *Spend, cs ...Charge) error {
	for i, c := range cs {
		if c.Reservation == "" {
			continue
		}
		dup := s.reserved(c.Reservation)
		for _, d := range cs[:i] {
			dup = dup || d.Reservation == c.Reservation
		}
		if dup {
			return fmt.Errorf("%w: reservation %q is already held by the period: a unit it covers is not charged again", ErrInvalidArgument, c.Reservation)
		}
	}
	return nil
}

// check validates c against the grid.
func (b *Book) checkCharge(c Charge) error {
	if c.RDP.Len() > 0 || c.RDP.err != nil {
		if err := c.RDP.Err(); err != nil {
			return err
		}
		if !sameGrid(c.RDP.orders, b.orders) {
			return gridMismatch(b.orders, c.RDP.orders)
		}
	}
	if !(c.Epsilon >= 0) || math.IsInf(c.Epsilon, 0) {
		return &ArgumentError{Name: "charge epsilon", Value: c.Epsilon, Want: "finite and ≥ 0"}
	}
	if !(c.Delta >= 0 && c.Delta < 1) {
		return &ArgumentError{Name: "charge delta", Value: c.Delta, Want: "in [0, 1)"}
	}
	if c.RDP.Len() == 0 && c.Epsilon == 0 && c.Delta == 0 {
		return &ArgumentError{Name: "charge", Value: 0, Want: "an RDP curve or an (ε, δ) pair"}
	}
	// A charge may carry both parts: an average release's (ε, δ) and its
	// total's RDP curve (plan's "Totals"). The two independent draws are one
	// (ε, δ) mechanism and one RDP mechanism, so each part joins its own
	// block of the composition above; the ledger records a unit's Charge
	// curve and its Approx pair independently.
	return nil
}

// Check returns the total of period p after charge c — and after the
// pending charges before it, accepted by earlier Checks but not yet
// committed (the other histograms of the same window, recorded together) —
// or an [*ExceededError] (errors.Is ErrBudgetExceeded) when that total would
// not be within the period's budget; it changes nothing. The caller records
// the accepted charges durably and then commits each with [Book.Commit];
// with one writer nothing can come in between.
func (b *Book) Check(p int64, c Charge, pending ...Charge) (after Total, err error) {
	for _, x := range append(pending, c) {
		if err := b.checkCharge(x); err != nil {
			return Total{}, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return Total{}, err
	}
	if err := checkReservations(&st.spend, append(pending, c)...); err != nil {
		return Total{}, err
	}
	prev := st.spend
	for _, x := range pending {
		prev = prev.add(x)
	}
	next := prev.add(c)
	after = st.compose(&next)
	if !st.within(after) {
		before := st.compose(&prev)
		return after, &ExceededError{Epsilon: after.Epsilon, Order: after.RDPOrder, Spent: before.Epsilon,
			Limit: st.epsilon, Delta: st.delta}
	}
	return after, nil
}

// Commit adds c to period p after the caller recorded it durably. It does
// not check the budget again (what was recorded was released, and
// forgetting it would under-report); it returns the new total.
func (b *Book) Commit(p int64, c Charge) (Total, error) {
	if err := b.checkCharge(c); err != nil {
		return Total{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return Total{}, err
	}
	if err := checkReservations(&st.spend, c); err != nil {
		return Total{}, err
	}
	st.spend = st.spend.add(c)
	return st.compose(&st.spend), nil
}

// Reserved reports whether period p holds the period reservation key
// (restoring the period from the store on first use): a unit it covers is
// released without a charge of its own.
func (b *Book) Reserved(p int64, key string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return false, err
	}
	return st.spend.reserved(key), nil
}

// Covered reports whether period p holds the period reservation key — a
// unit it covers charges nothing of its own — and checks that unit against
// the period's current budget: the total of the period, after the pending
// charges accepted before it in the same window, must be within the
// period's effective budget (the lower of the one recorded and the Book's),
// or Covered returns an [*ExceededError] (errors.Is ErrBudgetExceeded) with
// held = true. A covered unit adds no privacy loss beyond the reservation
// already charged, but a budget cut in the middle of the period must stop
// every later release at once, covered or not (issue #21, item 2): with
// privacy.rdp_epsilon fixed, a cut leaves the reservation's curve and key
// unchanged, and without this check every covered unit would be released
// although the period's total is above the new limit. Nothing changes.
func (b *Book) Covered(p int64, key string, pending ...Charge) (after Total, held bool, err error) {
	for _, x := range pending {
		if err := b.checkCharge(x); err != nil {
			return Total{}, false, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return Total{}, false, err
	}
	if !st.spend.reserved(key) {
		return Total{}, false, nil
	}
	next := st.spend
	for _, x := range pending {
		next = next.add(x)
	}
	after = st.compose(&next)
	if !st.within(after) {
		return after, true, &ExceededError{Epsilon: after.Epsilon, Order: after.RDPOrder, Spent: after.Epsilon,
			Limit: st.epsilon, Delta: st.delta}
	}
	return after, true, nil
}

// Spent returns the spend of period p (restored from the store on first
// use): what the ledger must hold for it after the next record.
func (b *Book) Spent(p int64) (Spend, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return Spend{}, err
	}
	return st.spend, nil
}

// After returns the spend of period p with the charges cs composed in (for
// the ledger record of the charges), without changing the Book.
func (b *Book) After(p int64, cs ...Charge) (Spend, error) {
	for _, c := range cs {
		if err := b.checkCharge(c); err != nil {
			return Spend{}, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return Spend{}, err
	}
	out := st.spend
	for _, c := range cs {
		out = out.add(c)
	}
	return out, nil
}

// Status returns the total of period p, restoring it from the store on
// first use (so a stage that just started reports what the ledger holds).
func (b *Book) Status(p int64) (Total, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, err := b.period(p)
	if err != nil {
		return Total{}, err
	}
	return st.compose(&st.spend), nil
}

// PeriodTotal is one period's total, for status reports.
type PeriodTotal struct {
	Period int64 // start, Unix ms
	Total
}

// Periods returns the total of every period the Book holds, oldest first.
func (b *Book) Periods() []PeriodTotal {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]PeriodTotal, 0, len(b.periods))
	for p, st := range b.periods {
		out = append(out, PeriodTotal{Period: p, Total: st.compose(&st.spend)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Period < out[j].Period })
	return out
}

// Forget drops the periods before p from memory (they stay in the store).
func (b *Book) Forget(before int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for q := range b.periods {
		if q < before {
			delete(b.periods, q)
		}
	}
}

// AddUp returns a + b rounded toward +∞ (for a, b ≥ 0 finite): a sum of
// privacy charges is never rounded below the exact sum.
func AddUp(a, b float64) float64 {
	s := a + b
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return s
	}
	// s is the rounded-to-nearest sum; the exact sum is within half an ulp.
	// The error term is exact (2Sum); step up only if the sum was rounded
	// down.
	var e float64
	if math.Abs(a) >= math.Abs(b) {
		e = b - (s - a)
	} else {
		e = a - (s - b)
	}
	if e > 0 {
		return math.Nextafter(s, math.Inf(1))
	}
	return s
}

// isZero reports whether every value of c is exactly 0 (nothing composed).
func (c Curve) isZero() bool {
	for _, e := range c.eps {
		if e != 0 {
			return false
		}
	}
	return true
}

// MulUp returns k·e rounded toward +∞ (for k, e ≥ 0).
func MulUp(k, e float64) float64 {
	p := k * e
	if math.IsInf(p, 0) || math.IsNaN(p) || p == 0 {
		return p
	}
	if math.FMA(k, e, -p) > 0 { // the exact product is above the rounded one
		return math.Nextafter(p, math.Inf(1))
	}
	return p
}
