package release

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"math"
	"slices"
	"strconv"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/plan"
)

// With contribution.max_windows_per_user = K > 0 a histogram's period is
// charged one period reservation — its own, over its own windows and bound
// K_h (plan's package doc, "Views") (plan's package doc, "Charging: the
// period reservation"): the first unit of the histogram in the period
// charges it before any of its values leaves the process, the later units
// of the period are covered by it and charge nothing (ledger.Unit.
// Reservation, CoveredBy). The book says which reservations a period holds
// (budget.Book.Reserved), restored after a restart from the ledger.

// ReservationKey names the period reservation of histogram under the
// configuration that fixes its cost: the cross-window bound k, the
// neighbour relation and the reservation's charge — its RDP curve (count
// histograms) or (ε, δ) (average histograms). A change of any of them in
// the middle of a period makes a new key, and so a new reservation —
// unless a reservation the period holds dominates it ("Cover by
// dominance" below); the same configuration after a restart gives the
// same key. The key is the
// hex of the first 16 bytes of a SHA-256 over a length-prefixed encoding
// of those fields (floats by their IEEE bits).
func ReservationKey(histogram string, k int, neighbour string, c budget.Charge) string {
	return ViewReservationKey(histogram, 0, k, neighbour, c)
}

// ViewReservationKey is ReservationKey for a histogram with its own window
// of windowMs (histograms[].window; 0: window.size, the key of
// ReservationKey): the window is part of the key, because the admission
// state is per window size — a histogram given another window in the
// middle of a period starts a fresh admission state, so its releases under
// the new window must be covered by a reservation of their own, not by
// the one made under the old window.
func ViewReservationKey(histogram string, windowMs int64, k int, neighbour string, c budget.Charge) string {
	kh := newKeyHasher()
	put, str := kh.put, kh.str
	str("stage period reservation v1")
	str(histogram)
	put(uint64(k))
	str(neighbour)
	if windowMs > 0 {
		str("window")
		put(uint64(windowMs))
	}
	orders, eps := c.RDP.Orders(), c.RDP.Epsilons()
	put(uint64(len(orders)))
	for i := range orders {
		put(math.Float64bits(orders[i]))
		put(math.Float64bits(eps[i]))
	}
	put(math.Float64bits(c.Epsilon))
	put(math.Float64bits(c.Delta))
	return kh.sum()
}

// keyHasher is the length-prefixed SHA-256 encoding of the reservation
// keys: put a number, str a string (its length, then its bytes), sum the
// hex of the first 16 bytes.
type keyHasher struct {
	h hash.Hash
	n [8]byte
}

func newKeyHasher() *keyHasher { return &keyHasher{h: sha256.New()} }

func (k *keyHasher) put(v uint64) {
	binary.BigEndian.PutUint64(k.n[:], v)
	k.h.Write(k.n[:])
}

func (k *keyHasher) str(s string) {
	k.put(uint64(len(s)))
	k.h.Write([]byte(s))
}

func (k *keyHasher) sum() string { return hex.EncodeToString(k.h.Sum(nil)[:16]) }

// releaseRDP is one count release's (λ, ε)-RDP at order as charged: the
// mechanism's curve plus, for a Dirichlet release rounded to the grid, the
// grid residual (plan.CountPlan.Charge, budget.ChargeOf; issue #21). It is
// the mechanism's own value if the charge has no point at order.
func releaseRDP(cp *plan.CountPlan, order float64) float64 {
	if v, ok := cp.Charge.At(order); ok {
		return v
	}
	return cp.Mechanism.RDP(order)
}

// # Cover by dominance
//
// Under a plan that spreads the budget over the period's Units = Σ_h K′_h
// per-window curves (plan.DerivePlan), every histogram's per-window curve
// c — and so its reservation's curve and key — depends on every view:
// adding, removing or re-bounding one histogram in the middle of a period
// changes every histogram's key. The reservations already held fill the
// period's budget, so without more every new reservation would be refused
// for the rest of the period, also for the histograms whose own settings
// did not change. A reservation already held covers the new one instead
// when it dominates it (dominating):
//
// Let R_old = K′ ⊗ c_old be a reservation the period holds for the same
// histogram, the same window size, the same K_h and the same neighbour
// relation (its key, recomputed from the curve its unit recorded, is the
// one held — ViewReservationKey names exactly these), and R_new = K′ ⊗
// c_new the histogram's current reservation, with R_new ≤ R_old at every
// order of the book's grid (the same grid: the key hashes the orders). The
// same window size and K_h are the same admission state: the cross-window
// bound admits each user to at most K_h windows of the period of that size
// whatever the config (the admissions are recorded per window size and
// restored after a restart), and K′ = min(K_h, W) is the same because the
// window size and the period are (the ledger's metadata refuses another
// period or base window). A user admitted to a of the histogram's windows
// released under c_old and to at most K′ − a released under c_new loses, at
// every order λ (000 Lemma 2, composition),
//
//	a·c_old(λ) + (K′ − a)·c_new(λ) ≤ K′·max(c_old(λ), c_new(λ))
//	                              ≤ max(R_old(λ), R_new(λ)) = R_old(λ),
//
// since K′·c ≤ K′ ⊗ c (Curve.Scale rounds up). The per-window curve c
// includes the grid residual (plan.CountPlan.Charge: the residual is part
// of the charged curve and R = K′ ⊗ c is linear in it), so the bound holds
// for the released, rounded values. The same argument with basic
// composition holds for an average histogram's (ε, δ) reservation, with
// ε_new ≤ ε_old and δ_new ≤ δ_old. Several reservations covering one
// histogram's windows in one period each cover at most K′ of them, so the
// loss stays within the sum of the reservations charged. Hence a release
// of histogram h under the new configuration charges nothing when the
// period holds such an R_old: the unit records CoveredBy = R_old's key and
// its release names R_old as its charge; the period's spend is unchanged.
//
// The decision is recomputed from the ledger, never kept in memory: the
// held keys are the book's (restored from the ledger), the dominating
// curve is the one the reserving unit recorded (ledger.Store.
// ReservationUnit), and among several the smallest key is taken — so a
// restart makes the same decisions and restores the same spend. One
// exception: when the reserving unit was pruned (state.retain shorter than
// the period: ledger.Prune keeps a period's reservation keys, not the
// units that made them) its curve is gone, no dominance is found, and the
// new reservation is charged or refused as without the cover — never less
// safe, but a restart after such a prune can refuse what was covered
// before it. A reservation that raises the curve at some
// order (removing a view, raising a K_h, another window) is not dominated:
// it is charged, or refused when the period's budget is used up.

// # Top-up
//
// Charges are rounded up since issue 28 (mechanism.UpperRDP,
// budget.ChargeOf), so a version upgrade in the middle of a period raises
// every histogram's per-window curve by a rounding-sized amount at some
// orders: the held reservation no longer dominates the new one, and
// charging the new one in full — a second K′ ⊗ c on top of the first —
// does not fit a period whose budget the reservations fill. A held
// reservation of the same admission state (same histogram, window size,
// K_h and neighbour relation, as for the cover) is topped up instead: the
// new reservation charges only
//
//	T(λ) = (R_new(λ) − M(λ))⁺   (the subtraction rounded up)
//
// at every order, where M is what the held one covers (its own curve, or
// for a top-up the running maximum it recorded: ledger.TopUp.Cover), and
// covers M′ = max(M, R_new) from then on; an average histogram's (ε, δ)
// part likewise, ε and δ apart. By the argument of "Cover by dominance"
// a user admitted to a_i of the histogram's windows released under the
// curves c_i of one admission state, Σ a_i ≤ K′, loses at most
// K′·max_i c_i(λ) ≤ max_i R_i(λ) at every order, and the charges of a
// chain of top-ups telescope to exactly that running maximum: R_1 + T_2
// + … + T_m ≥ max(R_1, …, R_m). Several chains of one state (reservations
// made in full before this version) each add their maximum, which only
// over-counts. The top-up tops up, among the held reservations of the
// state, the one needing the least (the smallest Σ_λ T(λ), then ε, δ;
// then the smallest key), so a restart decides the same from the ledger;
// its key is the new reservation's own (ViewReservationKey of R_new), so
// the same configuration after a restart is covered by it. A top-up that
// does not fit is refused like a reservation.

// recordedReservation is a period reservation as its reserving unit
// recorded it: the histogram and what it covers (its charge, or for a
// top-up the cover it recorded; ok: the unit is recorded and its charge
// was read back), and the reservation a top-up tops up (of).
type recordedReservation struct {
	histogram string
	charge    budget.Charge
	of        string
	ok        bool
}

// recorded returns the reservation key held in period p as the ledger
// recorded it. Entries are cached: a recorded unit's histogram and charge
// never change.
func (r *Releaser) recorded(p int64, key string) (recordedReservation, error) {
	ck := strconv.FormatInt(p, 10) + "/" + key
	r.resvMu.Lock()
	v, ok := r.resv[ck]
	r.resvMu.Unlock()
	if ok {
		return v, nil
	}
	u, ok, err := r.ledger.ReservationUnit(p, key)
	if err != nil {
		return v, err
	}
	if ok && u.Reservation == key && u.Status == ledger.StatusReleased {
		v.histogram = u.Histogram
		// A count unit's charge is a curve, an average unit's an (ε, δ)
		// pair and, since issue 29, its totals' curve too. A top-up's
		// charge is the difference: what it covers is recorded apart.
		v.charge.Reservation = key
		curve, approx := u.Charge, u.Approx
		if u.TopUp != nil {
			v.of, curve, approx = u.TopUp.Of, u.TopUp.Cover, u.TopUp.CoverApprox
		}
		v.ok = len(curve.Orders) > 0 || approx != nil
		if len(curve.Orders) > 0 {
			c, err := budget.NewCurve(curve.Orders, curve.Epsilons)
			v.charge.RDP, v.ok = c, err == nil
		}
		if approx != nil {
			v.charge.Epsilon, v.charge.Delta = approx.Epsilon, approx.Delta
		}
	}
	r.resvMu.Lock()
	if r.resv == nil {
		r.resv = map[string]recordedReservation{}
	}
	r.resv[ck] = v
	r.resvMu.Unlock()
	return v, nil
}

// dominating returns the reservation held in period p that covers
// histogram h's releases under its current reservation c by dominance
// (see "Cover by dominance"), and whether there is one: of the same
// histogram, window size, K_h and neighbour, with a charge ≥ c's at every
// order (or in ε and δ). The smallest such key, so that the choice does
// not depend on the order the book learnt its keys in.
func (r *Releaser) dominating(p int64, h int, c budget.Charge) (budget.Charge, bool, error) {
	held, err := r.sameState(p, h, c)
	if err != nil {
		return budget.Charge{}, false, err
	}
	for _, rec := range held {
		if dominates(rec.charge, c) {
			return rec.charge, true, nil
		}
	}
	return budget.Charge{}, false, nil
}

// sameState returns the reservations held in period p, other than c's
// own key, of histogram h's current admission state — the same histogram,
// window size, K_h and neighbour relation — in key order, each with what
// it covers. A reservation made in full is of the state when its key,
// recomputed from the curve its unit recorded, is the one held; a top-up
// when the reservation it tops up is (it is only ever made on one of its
// own state).
func (r *Releaser) sameState(p int64, h int, c budget.Charge) ([]recordedReservation, error) {
	sp, err := r.book.Spent(p)
	if err != nil {
		return nil, err
	}
	name := r.cfg.Histograms[h].Name
	var out []recordedReservation
	for _, k := range slices.Sorted(slices.Values(sp.Reservations)) {
		if k == c.Reservation {
			continue
		}
		rec, err := r.recorded(p, k)
		if err != nil {
			return nil, err
		}
		if !rec.ok || rec.histogram != name {
			continue
		}
		// Follow a top-up to the reservation made in full under it (at most
		// as many steps as the period holds reservations: no cycle).
		root, k0 := rec, k
		for i := 0; root.ok && root.of != "" && i <= len(sp.Reservations); i++ {
			k0 = root.of
			if root, err = r.recorded(p, k0); err != nil {
				return nil, err
			}
		}
		if !root.ok || root.of != "" || root.histogram != name || r.reservationKey(h, root.charge) != k0 {
			continue // another histogram, window, K_h or neighbour (or pruned)
		}
		out = append(out, rec)
	}
	return out, nil
}

// topUp returns how histogram h's reservation c tops up a held
// reservation of its admission state ("Top-up"): the charge (the
// difference, with c's key), what the two then cover (with c's key), the
// key topped up, and ok = false when the period holds no reservation of
// the state to top up (or the parts cannot be compared: another grid of
// orders, NaN).
func (r *Releaser) topUp(p int64, h int, c budget.Charge) (charge, cover budget.Charge, of string, ok bool, err error) {
	held, err := r.sameState(p, h, c)
	if err != nil {
		return charge, cover, "", false, err
	}
	best := math.Inf(1)
	for _, rec := range held {
		t, m, good := difference(c, rec.charge)
		if !good {
			continue
		}
		size := t.Epsilon + t.Delta
		for _, e := range t.RDP.Epsilons() {
			size += e
		}
		if !ok || size < best {
			charge, cover, of, ok, best = t, m, rec.charge.Reservation, true, size
		}
	}
	charge.Reservation, cover.Reservation = c.Reservation, c.Reservation
	return charge, cover, of, ok, nil
}

// difference returns the top-up t of the reservation c onto the held
// cover old — at every order (c − old)⁺ rounded up, likewise ε and δ —
// and the cover m = max(old, c) after it, part by part (an absent part is
// 0); ok = false when the curves are on other orders or a value is NaN.
func difference(c, old budget.Charge) (t, m budget.Charge, ok bool) {
	up := func(a, b float64) (float64, float64, bool) { // (a − b)⁺ rounded up, max(a, b)
		switch {
		case math.IsNaN(a) || math.IsNaN(b):
			return 0, 0, false
		case a <= b:
			return 0, b, true
		case math.IsInf(a, 1):
			return a, a, true
		}
		return math.Nextafter(a-b, math.Inf(1)), a, true
	}
	var good bool
	if t.Epsilon, m.Epsilon, good = up(c.Epsilon, old.Epsilon); !good {
		return t, m, false
	}
	if t.Delta, m.Delta, good = up(c.Delta, old.Delta); !good {
		return t, m, false
	}
	switch {
	case c.RDP.Len() == 0:
		m.RDP = old.RDP
		return t, m, true
	case old.RDP.Len() == 0:
		t.RDP, m.RDP = c.RDP, c.RDP
		return t, m, true
	case !slices.Equal(c.RDP.Orders(), old.RDP.Orders()):
		return t, m, false
	}
	ce, oe := c.RDP.Epsilons(), old.RDP.Epsilons()
	te, me := make([]float64, len(ce)), make([]float64, len(ce))
	for i := range ce {
		if te[i], me[i], good = up(ce[i], oe[i]); !good {
			return t, m, false
		}
	}
	var err1, err2 error
	t.RDP, err1 = budget.NewCurve(c.RDP.Orders(), te)
	m.RDP, err2 = budget.NewCurve(c.RDP.Orders(), me)
	return t, m, err1 == nil && err2 == nil
}

// decision is how a unit of a histogram is charged its period reservation
// c in a period (decide): covered by a held reservation (cover: the held
// one, or one that dominates c), or charged charge — c itself, or a top-up
// of the held reservation of (cover: what the two then cover).
type decision struct {
	covered bool
	cover   budget.Charge
	charge  budget.Charge
	of      string
}

// decide is the decision for histogram h's reservation c in period p:
// held or dominated, a top-up, or c in full — in that order ("Cover by
// dominance", "Top-up"). It reads the book and the ledger, changes nothing.
func (r *Releaser) decide(p int64, h int, c budget.Charge) (decision, error) {
	held, err := r.book.Reserved(p, c.Reservation)
	if err != nil {
		return decision{}, err
	}
	if held {
		return decision{covered: true, cover: c}, nil
	}
	cover, held, err := r.dominating(p, h, c)
	if err != nil || held {
		return decision{covered: held, cover: cover}, err
	}
	t, m, of, ok, err := r.topUp(p, h, c)
	if err != nil || ok {
		return decision{cover: m, charge: t, of: of}, err
	}
	return decision{cover: c, charge: c}, nil
}

// dominates reports whether the charge old is at least c in each of its
// parts: an RDP curve on the same orders, ≥ at each (or none in both); an
// (ε, δ) pair ≥ in both (0 when absent); false for NaN. An average
// release's charge has both parts (its total's curve), and each composes
// in its own block (budget.Book), so the argument of "Cover by dominance"
// applies part by part.
func dominates(old, c budget.Charge) bool {
	if c.RDP.Len() > 0 {
		if old.RDP.Len() == 0 || !slices.Equal(old.RDP.Orders(), c.RDP.Orders()) {
			return false
		}
		oe, ne := old.RDP.Epsilons(), c.RDP.Epsilons()
		for i := range ne {
			if !(oe[i] >= ne[i]) {
				return false
			}
		}
	} else if old.RDP.Len() > 0 {
		return false // not of the same kind
	}
	return old.Epsilon >= c.Epsilon && old.Delta >= c.Delta
}

// Refusal is a histogram whose period reservation does not fit in its
// period (Refusals): its releases are refused (budget_exhausted) until
// the period ends.
type Refusal struct {
	Histogram string
	// Period and End are the period's start and end (Unix ms): releases
	// resume at End.
	Period, End int64
	// Covered: the histogram's releases are covered by a reservation the
	// period holds, but the period has spent more than its current budget
	// (a budget cut); otherwise its reservation does not fit (a config
	// change in the middle of the period).
	Covered bool
	// Err is the book's refusal.
	Err error
}

// Refusals composes the running plan's period reservations onto the
// recorded spend of period p, in config order, as the period's releases
// would charge them: a histogram whose reservation the period holds, or
// covers by dominance, charges nothing (but is checked against the
// period's current budget, as Record does); the others are checked one
// after the other — a top-up of a held reservation of their admission
// state for its difference, otherwise in full — each accepted one pending
// for the next. It returns the
// histograms whose reservation does not fit — their releases are refused
// for the rest of the period (a period's spend never goes down) — and nil
// without the cross-window bound. It changes nothing, and unlike the rest
// of the Releaser it may be called from any goroutine (status readers).
func (r *Releaser) Refusals(p int64) ([]Refusal, error) {
	if r.plan.Bound.K == 0 {
		return nil, nil
	}
	var out []Refusal
	var pending []budget.Charge
	for h, hist := range r.cfg.Histograms {
		var c budget.Charge
		if hist.IsAverage() {
			ap := r.plan.Average(h)
			if ap == nil {
				continue
			}
			c = r.averageCharge(ap)
		} else {
			c = r.countCharge(h)
		}
		d, err := r.decide(p, h, c)
		if err != nil {
			return nil, err
		}
		if d.covered {
			_, _, err = r.book.Covered(p, d.cover.Reservation, pending...)
		} else if _, err = r.book.Check(p, d.charge, pending...); err == nil {
			pending = append(pending, d.charge)
		}
		if errors.Is(err, budget.ErrBudgetExceeded) {
			out = append(out, Refusal{Histogram: hist.Name, Period: p, End: p + r.periodMs, Covered: d.covered, Err: err})
		} else if err != nil {
			return nil, err
		}
	}
	return out, nil
}
