package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/window"
)

// Options configure a Releaser.
type Options struct {
	Config *config.Config
	Plan   *plan.Plan
	// Ledger is the release log (a bbolt *ledger.Ledger or a Kafka
	// *kafkalog.Log: the Releaser depends on the ledger.Store interface only).
	Ledger ledger.Store
	// Book is the budget book every charge is checked against and added to
	// (restored from Ledger: NewBook).
	Book *budget.Book
	// Rand is the noise source (mechanism.NewRand in production).
	Rand *mechanism.Rand
	Log  *zap.Logger
	// Now is the wall clock (RecordedAt). Default time.Now.
	Now func() time.Time
	// OnExhausted, when set, is called for every budget_exhausted unit
	// recorded (metrics).
	OnExhausted func()
	// OnSelection, when set, is called with a selecting histogram's name
	// and the group keys its window tracked (private: operator metrics
	// only) each time a selection is drawn.
	OnSelection func(histogram string, trackedKeys int)
}

// Releaser draws, charges and records the units of closed windows. It is
// used by one goroutine at a time (the stage's releaser).
type Releaser struct {
	cfg      *config.Config
	plan     *plan.Plan
	ledger   ledger.Store
	book     *budget.Book
	rng      *mechanism.Rand
	log      *zap.Logger
	now      func() time.Time
	onExh    func()
	onSel    func(string, int)
	sizeMs   int64
	periodMs int64
	// since limits which windows a histogram releases (SetSince); nil:
	// none. Set by the stage at each session's start.
	since map[int]int64
	// incomplete, when set, is the deployment's reason a window starting
	// at a given time is incomplete ("" when none; SetIncomplete).
	incomplete func(windowStartMs int64) string

	// resvMu guards resv: the held period reservations as their units
	// recorded them, by period and key (recorded; read by the releasing
	// goroutine and by Refusals from status readers).
	resvMu sync.Mutex
	resv   map[string]recordedReservation

	// sel is the selection of unlisted groups (selected.go); nil when no
	// histogram selects.
	sel *selector
}

// New returns a Releaser.
func New(opts Options) (*Releaser, error) {
	if opts.Config == nil || opts.Plan == nil || opts.Ledger == nil || opts.Book == nil || opts.Rand == nil {
		return nil, errors.New("release: config, plan, ledger, book and rand are required")
	}
	r := &Releaser{
		cfg: opts.Config, plan: opts.Plan, ledger: opts.Ledger, book: opts.Book, rng: opts.Rand,
		log: opts.Log, now: opts.Now, onExh: opts.OnExhausted, onSel: opts.OnSelection,
		sizeMs:   opts.Config.Window.Size.D().Milliseconds(),
		periodMs: opts.Config.Privacy.Budget.Period.D().Milliseconds(),
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if r.now == nil {
		r.now = time.Now
	}
	var err error
	if r.sel, err = newSelector(opts.Plan, opts.Plan.Neighbour, opts.Config.Selection.KeySampleRate); err != nil {
		return nil, err
	}
	return r, nil
}

// NewBook returns the budget book of p, restored from the ledger l.
func NewBook(p *plan.Plan, l ledger.Store) (*budget.Book, error) {
	return budget.NewBook(p.Orders, p.Epsilon, p.Delta, LedgerStore{l})
}

// Book is the budget book the Releaser charges.
func (r *Releaser) Book() *budget.Book { return r.book }

// PeriodOf is the start of the budget period of window w.
func (r *Releaser) PeriodOf(w int64) int64 { return window.Start(w, r.periodMs) }

func toLedgerCurve(c budget.Curve) ledger.Curve {
	return ledger.Curve{Orders: c.Orders(), Epsilons: c.Epsilons()}
}

// LedgerStore restores a budget period's spend from the ledger for the
// book: the RDP curve recorded with the last RDP unit, and the sums of the
// (ε, δ) charges.
type LedgerStore struct{ L ledger.Store }

func (st LedgerStore) PeriodSpend(p int64) (budget.Spend, bool, error) {
	var sp budget.Spend
	c, okC, err := st.L.Spent(p)
	if err != nil {
		return sp, false, err
	}
	if okC && len(c.Orders) > 0 {
		if sp.RDP, err = budget.NewCurve(c.Orders, c.Epsilons); err != nil {
			return sp, false, fmt.Errorf("recorded rdp spend of period %s: %w", RFC3339(p), err)
		}
	}
	a, okA, err := st.L.ApproxSpent(p)
	if err != nil {
		return sp, false, err
	}
	sp.ApproxEpsilon, sp.ApproxDelta, sp.ApproxReleases = a.Epsilon, a.Delta, a.Releases
	lim, okL, err := st.L.PeriodLimit(p)
	if err != nil {
		return sp, false, err
	}
	sp.LimitEpsilon, sp.LimitDelta = lim.Epsilon, lim.Delta
	if sp.Reservations, err = st.L.Reservations(p); err != nil {
		return sp, false, err
	}
	return sp, okC || okA || okL || len(sp.Reservations) > 0, nil
}

// Counts are the count vectors of the count histograms closing at one base
// boundary, by config histogram index (*aggregate.WindowCounts when every
// histogram has the base window; the pipeline combines one per window size
// otherwise).
type Counts interface {
	Counts(h, g int, dst []float64) []float64
}

// Means are the padded averages of the average histograms closing at one
// base boundary, by config histogram index (*aggregate.AverageWindow, or the
// pipeline's combination).
type Means interface {
	Mean(h int, out []float64) []float64
	// Kept is the number of users in the padded average (its private
	// total, released as a charged count).
	Kept(h int) int
}

// Record records the unit of every histogram whose window ends with base
// window w — values drawn from the windows' counts (nil averages without
// average histograms) and charged to w's budget period in the book —
// durably, in one ledger transaction, or finds them already recorded. It
// returns the units still to publish: all of a boundary recorded now, the
// unpublished ones of a boundary recorded before (with their recorded
// values, never redrawn).
//
// A histogram with its own, longer window (histograms[].window, a multiple
// of window.size) closes at the base boundaries that end its windows
// (aligned to the Unix epoch, like the base windows); its unit is keyed by
// its own window start and carries its own window end. At other boundaries
// it records nothing.
//
// With contribution.max_windows_per_user a histogram's first unit of the
// period charges the histogram's period reservation instead of one
// window's curve, and the later units of the period are covered by it
// (charge, reservation.go).
func (r *Releaser) Record(w int64, counts Counts, avgs Means) ([]*ledger.Unit, error) {
	return r.RecordAdmitted(context.Background(), w, counts, avgs, nil)
}

// RecordAdmitted is Record under the cross-window bound: adm (the users
// admitted to base window w, nil without the bound) is recorded in the
// same ledger transaction as the units (ledger.RecordWindowAdmitted). ctx
// bounds the ledger write (ledger.Store: a Kafka transaction); nothing
// returned by a failed call may be published.
func (r *Releaser) RecordAdmitted(ctx context.Context, w int64, counts Counts, avgs Means, adm *ledger.Admitted) ([]*ledger.Unit, error) {
	// A boundary is recorded whole, in one ledger transaction (the units of
	// all the histograms whose windows end there, and their charges) or not
	// at all; if any of those units is recorded, the boundary is complete:
	// publish what is unpublished. A unit found under a closing histogram's
	// key but with another end was recorded under another window for that
	// histogram (histograms[].window changed): it does not say the boundary
	// was recorded, and the key is taken, so that histogram is skipped.
	end := w + r.sizeMs
	var pending []*ledger.Unit
	recorded := false
	var closing []int // config indices of the histograms to record
	for h, hist := range r.cfg.Histograms {
		start, ok := r.closes(h, end)
		if !ok {
			continue
		}
		u, ok, err := r.ledger.Lookup(hist.Name, start)
		if err != nil {
			return nil, err
		}
		switch {
		case !ok:
			closing = append(closing, h)
		case u.WindowEnd == end:
			recorded = true
			if !u.Published {
				pending = append(pending, u)
			}
		default:
			r.log.Warn("a unit of another window length is recorded under this histogram and window start; not released again",
				zap.String("histogram", hist.Name), zap.String("window_start", RFC3339(start)),
				zap.String("recorded_window_end", RFC3339(u.WindowEnd)), zap.String("window_end", RFC3339(end)))
		}
	}
	if recorded || len(closing) == 0 {
		return pending, nil
	}
	period := r.PeriodOf(w)
	r.book.Forget(period)
	var units []*ledger.Unit
	var charges []budget.Charge // of the released units, in order
	for _, h := range closing {
		hist := r.cfg.Histograms[h]
		start, _ := r.closes(h, end)
		u := r.newUnit(hist.Name, start, end)
		var c budget.Charge
		var err error
		switch {
		case hist.IsAverage():
			c, err = r.averageUnit(u, h, avgs, charges)
		case hist.Selects():
			var cs []budget.Charge
			cs, err = r.selectUnit(u, h, counts, charges) // selected.go
			if err == nil {
				charges = append(charges, cs...)
			}
		default:
			c, err = r.countUnit(u, h, counts, charges)
		}
		if err != nil {
			return nil, err
		}
		if !hist.Selects() && u.Status == ledger.StatusReleased && u.CoveredBy == "" {
			charges = append(charges, c)
		}
		units = append(units, u)
	}
	if err := r.recordWindow(ctx, units, charges, adm); err != nil {
		return nil, err
	}
	return units, nil
}

// closes reports whether histogram h's window ends at the base boundary
// end, and that window's start.
func (r *Releaser) closes(h int, end int64) (start int64, ok bool) {
	size := r.cfg.Histograms[h].WindowSize(r.cfg.Window.Size).D().Milliseconds()
	if size <= 0 || window.Start(end, size) != end {
		return 0, false
	}
	if since, ok := r.since[h]; ok && end-size < since {
		return 0, false // began before the histogram was counted without a break (SetSince)
	}
	return end - size, true
}

// SetSince sets, per config histogram index, the first window start the
// histogram may release (ledger.HistogramSince): a histogram with a longer
// window added (or given another window) while the stage ran does not
// release the window that was already open then, whose events a restart
// re-reads only partly. Histograms absent from since are not limited.
func (r *Releaser) SetSince(since map[int]int64) { r.since = since }

// SetIncomplete sets the rule by which a distributed release's coverage
// says its window is incomplete for a reason of the deployment
// (Coverage.Incomplete), from the window start of the release's own
// histogram window; nil: none. The rule must depend on the deployment and
// public config only, never on the data (the release is public). Set by
// the stage at each session's start.
func (r *Releaser) SetIncomplete(rule func(windowStartMs int64) string) { r.incomplete = rule }

// incompleteAt is the deployment's reason window w is incomplete, or "".
func (r *Releaser) incompleteAt(w int64) string {
	if r.incomplete == nil {
		return ""
	}
	return r.incomplete(w)
}

// newUnit is a new, empty unit of histogram for its window [w, end).
func (r *Releaser) newUnit(histogram string, w, end int64) *ledger.Unit {
	return &ledger.Unit{
		Histogram:   histogram,
		WindowStart: w,
		WindowEnd:   end,
		Period:      r.PeriodOf(w),
		Limit:       &ledger.Limit{Epsilon: r.plan.Epsilon, Delta: r.plan.Delta, Neighbour: r.plan.Neighbour},
		RecordedAt:  r.now().UTC(),
	}
}

// charge checks the charge c of unit u (of histogram h) against its whole
// period in the book, after the window's charges accepted before it
// (pending). It returns the period's total after the charge, or a refusal
// (errors.Is budget.ErrBudgetExceeded) that the caller turns into
// budget_exhausted, and the charge the unit is released under (cover).
//
// With the cross-window bound c is the histogram's period reservation:
// when the period already holds it — or holds one of the histogram's
// earlier reservations that dominates it (dominating; "Cover by dominance"
// in reservation.go) — u is covered: it charges nothing (covered = true,
// total the period's with the pending charges, cover the covering
// reservation) and records the reservation that covers it, provided that
// total is within the period's current budget (a budget cut applies to
// covered units at once: refused otherwise); when the period holds
// neither, u makes the reservation, charged here before any value of u is
// drawn.
//
// A reservation that tops up a held one of the same admission state
// ("Top-up" in reservation.go) is charged only the difference: *c becomes
// that difference (what the unit records and the book adds), cover what
// the two then cover, and u.TopUp says so.
func (r *Releaser) charge(u *ledger.Unit, h int, c *budget.Charge, pending []budget.Charge) (total budget.Total, cover budget.Charge, covered bool, err error) {
	if c.Reservation != "" {
		// Covered: checked against the period's current budget all the
		// same (budget.Book.Covered), so a cut in the middle of the period
		// stops covered units too; refused, it is budget_exhausted.
		d, err := r.decide(u.Period, h, *c)
		if err != nil {
			return total, *c, false, err
		}
		if d.covered {
			total, _, err := r.book.Covered(u.Period, d.cover.Reservation, pending...)
			if err == nil {
				u.CoveredBy = d.cover.Reservation
			}
			return total, d.cover, true, err
		}
		if d.of != "" {
			total, err = r.book.Check(u.Period, d.charge, pending...)
			if err == nil {
				*c = d.charge
				u.Reservation = c.Reservation
				u.TopUp = &ledger.TopUp{Of: d.of, Cover: toLedgerCurve(d.cover.RDP)}
				if d.cover.Epsilon != 0 || d.cover.Delta != 0 {
					u.TopUp.CoverApprox = &ledger.Approx{Epsilon: d.cover.Epsilon, Delta: d.cover.Delta}
				}
			}
			return total, d.cover, false, err
		}
	}
	total, err = r.book.Check(u.Period, *c, pending...)
	if err == nil {
		u.Reservation = c.Reservation
	}
	return total, *c, false, err
}

// totalWith is the total of period p with the window's accepted charges
// (pending) composed in.
func (r *Releaser) totalWith(p int64, pending []budget.Charge) (budget.Total, error) {
	if len(pending) == 0 {
		return r.book.Status(p)
	}
	total, err := r.book.Check(p, pending[len(pending)-1], pending[:len(pending)-1]...)
	if errors.Is(err, budget.ErrBudgetExceeded) {
		err = nil // accepted one by one; reported as they are
	}
	return total, err
}

// countCharge is what a unit of count histogram h is charged: the
// per-window curve, or with the cross-window bound the histogram's own
// period reservation (K_h of its windows: plan.CountPlan.Reservations).
func (r *Releaser) countCharge(h int) budget.Charge {
	cp := r.plan.Count.For(h) // the histogram's own calibration with budget shares
	if r.plan.Bound.K == 0 {
		return budget.Charge{RDP: cp.Charge}
	}
	c := budget.Charge{RDP: r.plan.Count.ReservationOf(h)} // K′_h copies of the view's own curve
	c.Reservation = r.reservationKey(h, c)
	return c
}

// averageCharge is countCharge for the average histogram ap.
func (r *Releaser) averageCharge(ap *plan.AveragePlan) budget.Charge {
	if r.plan.Bound.K == 0 {
		return r.plan.AverageCharge(ap) // its (ε, δ) and its total's curve
	}
	c := r.plan.AverageReserveCharge(ap)
	c.Reservation = r.reservationKey(ap.Index, c)
	return c
}

// reservationKey is the key of histogram h's period reservation c: under
// its own bound K_h, and for a histogram with its own window, that window
// (ViewReservationKey; a histogram at window.size keeps ReservationKey's).
func (r *Releaser) reservationKey(h int, c budget.Charge) string {
	hist := r.cfg.Histograms[h]
	var windowMs int64
	if size := hist.WindowSize(r.cfg.Window.Size); size != r.cfg.Window.Size {
		windowMs = size.D().Milliseconds()
	}
	return ViewReservationKey(hist.Name, windowMs, r.plan.HistBounds[h].K, r.plan.Neighbour, c)
}

// recordWindow records the units of one window durably in one ledger
// transaction with their period's new spend (the first step of the
// write-ahead order: record and charge → publish → mark published), then
// adds the charges to the book. The ledger is the source of truth after a
// crash.
func (r *Releaser) recordWindow(ctx context.Context, units []*ledger.Unit, charges []budget.Charge, adm *ledger.Admitted) error {
	book := r.book
	p := units[0].Period
	var spentAfter ledger.Curve
	if len(charges) > 0 {
		after, err := book.After(p, charges...)
		if err != nil {
			return err
		}
		for _, c := range charges {
			if c.RDP.Len() > 0 {
				spentAfter = toLedgerCurve(after.RDP)
				break
			}
		}
	}
	if err := r.ledger.RecordWindowAdmitted(ctx, units, spentAfter, adm); err != nil {
		return err
	}
	for _, c := range charges {
		if _, err := book.Commit(p, c); err != nil {
			return fmt.Errorf("budget book disagrees with ledger (recorded window %s): %w", RFC3339(units[0].WindowStart), err)
		}
	}
	for _, u := range units {
		if u.Status == ledger.StatusBudgetExhausted && r.onExh != nil {
			r.onExh()
		}
	}
	return nil
}

// countUnit fills u with the releases of count histogram h for its window
// — one draw per declared group — when the book accepts its charge after
// the window's pending ones, or with a budget_exhausted status otherwise,
// and returns the charge (zero when refused). Nothing is recorded yet
// (Record records the whole window).
func (r *Releaser) countUnit(u *ledger.Unit, h int, counts Counts, pending []budget.Charge) (budget.Charge, error) {
	return r.countUnitOf(u, h, counts, pending, pending, nil)
}

// countUnitOf is countUnit with the groups to release chosen by pick,
// called once the charge is accepted and before anything is drawn (nil:
// every declared group; selected.go). A refusal's status states the
// period's spend with refusedPending (the window's charges without those
// the refusal cancels).
func (r *Releaser) countUnitOf(u *ledger.Unit, h int, counts Counts, pending, refusedPending []budget.Charge, pick func() (picked, error)) (budget.Charge, error) {
	hist := r.cfg.Histograms[h]
	w := u.WindowStart
	cp := r.plan.Count.For(h)
	period := u.Period
	c := r.countCharge(h)
	total, cover, covered, err := r.charge(u, h, &c, pending)
	if err != nil {
		if !errors.Is(err, budget.ErrBudgetExceeded) {
			return budget.Charge{}, err
		}
		return budget.Charge{}, r.exhausted(u, err, refusedPending)
	}
	order := cp.Mechanism.Spec().Order
	params := cp.Mechanism.Params()
	groups := hist.GroupNames()
	countsOf := func(g int, dst []float64) []float64 { return counts.Counts(h, g, dst) }
	var sel *Selection
	if pick != nil {
		p, err := pick()
		if err != nil {
			return budget.Charge{}, err
		}
		m, err := r.statusMessage(p.status, total, period)
		if err != nil {
			return budget.Charge{}, err
		}
		u.Messages = append(u.Messages, m) // printed once recorded and published (Printer.PrintUnit)
		groups, countsOf, sel = p.groups, p.counts, p.sel
	}
	u.Status = ledger.StatusReleased
	if !covered {
		u.Charge = toLedgerCurve(c.RDP)
	}
	chargeID, chargeRDP := ReleaseID(hist.Name, "", w), releaseRDP(cp, order)
	if c.Reservation != "" {
		chargeID = cover.Reservation
		chargeRDP, _ = cover.RDP.At(order)
	}
	buf := make([]float64, len(hist.Bins))
	out := make([]float64, len(hist.Bins))
	// A floating-point draw is released rounded by the mechanism itself
	// (mechanism.Unrounded); say on which grid.
	var grid int64
	if _, ok := cp.Mechanism.(mechanism.Unrounded); ok {
		grid = mechanism.ReleaseGrid(len(hist.Bins))
	}
	// laplace-posterior: the posterior parameters α̃ and their mean, from one
	// draw (post-processing of the noisy counts; see Plan).
	var alpha []float64
	if _, post := cp.Mechanism.(mechanism.PosteriorReleaser); post {
		alpha = make([]float64, len(hist.Bins))
	}
	// Each group's draw with its intervals and total (intervals.go).
	draw, err := newCountDraw(cp, r.plan.Totals, r.cfg.Output.IntervalLevel, len(hist.Bins))
	if err != nil {
		return budget.Charge{}, err
	}
	totalRDP := r.plan.Totals.CountRDP(order) // 0 without charged totals
	for g, group := range groups {
		buf = countsOf(g, buf)
		iv, tot, err := draw.draw(r.rng, buf, out, alpha, grid)
		if err != nil {
			return budget.Charge{}, fmt.Errorf("release %s/%s@%s: %w", hist.Name, group, RFC3339(w), err)
		}
		rel := Release{
			ReleaseID:      ReleaseID(hist.Name, group, w),
			Histogram:      hist.Name,
			Group:          group,
			WindowStart:    RFC3339(w),
			WindowEnd:      RFC3339(u.WindowEnd),
			Bins:           hist.Bins,
			Probabilities:  out,
			PosteriorAlpha: alpha,
			Mechanism:      r.cfg.Privacy.Mechanism,
			Params:         Params{Alpha: params.Alpha, R: params.R, Sigma: params.Sigma, Scale: params.Scale, PriorAlpha: params.Prior, Grid: grid, TotalSigma: r.plan.Totals.CountSigma()},
			Coverage:       coverage(counts, r.incompleteAt(w)),
			Intervals:      iv,
			Total:          tot,
			Selection:      sel,
			Privacy: Privacy{
				Order:            order,
				RDPEpsilon:       releaseRDP(cp, order),
				TotalRDPEpsilon:  totalRDP,
				ChargeID:         chargeID,
				ChargeRDPEpsilon: chargeRDP,
				ChargeWindows:    r.plan.HistBounds[h].CountWindows,
				SpentEpsilon:     total.Epsilon,
				BudgetEpsilon:    total.LimitEpsilon,
				Delta:            total.LimitDelta,
				TotalDelta:       r.totalDelta(total.LimitDelta),
				PeriodStart:      RFC3339(period),
				PeriodEnd:        RFC3339(period + r.periodMs),
			},
		}
		if r.cfg.Privacy.Mechanism == string(mechanism.Dirichlet) {
			rel.Calibration = r.cfg.Privacy.Calibration
		}
		v, err := json.Marshal(&rel)
		if err != nil {
			return budget.Charge{}, err
		}
		u.Messages = append(u.Messages, ledger.Message{Key: []byte(hist.Name + "/" + group), Value: v})
	}
	return c, nil
}

// totalDelta is the privacy.total_delta a message of a period whose
// budget δ is delta states: delta plus the user-hash collision term
// (config.Config.TotalDeltaOf), or 0 (omitted) without
// privacy.expected_users.
func (r *Releaser) totalDelta(delta float64) float64 {
	if !r.cfg.StatesTotalDelta() {
		return 0
	}
	return r.cfg.TotalDeltaOf(delta)
}

// exhausted fills u with the budget_exhausted status instead of a release
// (why: the book's refusal after the window's pending charges).
func (r *Releaser) exhausted(u *ledger.Unit, why error, pending []budget.Charge) error {
	u.Status = ledger.StatusBudgetExhausted
	u.Approx = nil
	st := unitStatus(u, string(ledger.StatusBudgetExhausted))
	st.Message = "privacy budget of the period exhausted: no release for this window; releases resume next period"
	u.Charge, u.Reservation, u.CoveredBy, u.TopUp = ledger.Curve{}, "", "", nil
	total, err := r.totalWith(u.Period, pending) // with the window's accepted charges
	if err != nil {
		return err
	}
	m, err := r.statusMessage(st, total, u.Period)
	if err != nil {
		return err
	}
	u.Messages = []ledger.Message{m}
	r.log.Warn("budget exhausted: release not made", zap.String("histogram", u.Histogram),
		zap.String("window_start", RFC3339(u.WindowStart)), zap.Float64("spent_epsilon", st.Privacy.SpentEpsilon),
		zap.Float64("budget_epsilon", total.LimitEpsilon), zap.Error(why))
	return nil
}

// averageUnit is countUnit for the average histogram of config index h: one
// draw of the simplex Dirichlet mechanism
// from the window's padded average, charged (ε_r, δ_r) to the period's
// (ε, δ) part (Plan).
func (r *Releaser) averageUnit(u *ledger.Unit, h int, aw Means, pending []budget.Charge) (budget.Charge, error) {
	ap := r.plan.Average(h)
	if ap == nil {
		return budget.Charge{}, fmt.Errorf("histogram %d has no average plan", h)
	}
	hist := r.cfg.Histograms[h]
	w := u.WindowStart
	period := u.Period
	c := r.averageCharge(ap)
	total, cover, covered, err := r.charge(u, h, &c, pending)
	if err != nil {
		if !errors.Is(err, budget.ErrBudgetExceeded) {
			return budget.Charge{}, err
		}
		return budget.Charge{}, r.exhausted(u, err, pending)
	}
	mean := aw.Mean(h, make([]float64, len(hist.Bins)))
	out := make([]float64, len(hist.Bins))
	if err := ap.Mechanism.Release(r.rng, mean, out); err != nil {
		return budget.Charge{}, fmt.Errorf("release %s@%s: %w", hist.Name, RFC3339(w), err)
	}
	iv, tot, err := averageExtras(r.rng, ap, r.plan.Totals, r.cfg.Output.IntervalLevel, aw.Kept(h), out)
	if err != nil {
		return budget.Charge{}, fmt.Errorf("release %s@%s: %w", hist.Name, RFC3339(w), err)
	}
	g := ap.Mechanism.Guarantee()
	spec := ap.Mechanism.Spec()
	chargeID := ReleaseID(hist.Name, "", w)
	charged := c
	if c.Reservation != "" {
		chargeID = cover.Reservation
		charged = cover
	}
	order := r.cfg.Privacy.Order
	totalRDP := r.plan.Totals.AverageRDP(order)
	chargeRDP, _ := charged.RDP.At(order)
	rel := Release{
		ReleaseID:     ReleaseID(hist.Name, config.ImplicitGroup, w),
		Histogram:     hist.Name,
		Group:         config.ImplicitGroup,
		WindowStart:   RFC3339(w),
		WindowEnd:     RFC3339(u.WindowEnd),
		Bins:          hist.Bins,
		Probabilities: out,
		Mechanism:     MechanismSimplexAverage,
		Params:        Params{K: spec.K, Eta: spec.Eta, Users: spec.Users, Gamma: g.Gamma, Grid: mechanism.ReleaseGrid(len(hist.Bins)), TotalSigma: r.plan.Totals.AverageSigma()},
		Coverage:      coverage(aw, r.incompleteAt(w)),
		Intervals:     iv,
		Total:         tot,
		Privacy: Privacy{
			Order:            order,
			RDPEpsilon:       totalRDP,
			TotalRDPEpsilon:  totalRDP,
			ChargeRDPEpsilon: chargeRDP,
			ChargeID:         chargeID,
			ChargeWindows:    r.plan.HistBounds[h].AverageReleases,
			ReleaseEpsilon:   ap.Epsilon,
			ReleaseDelta:     ap.Delta,
			SpentEpsilon:     total.Epsilon,
			BudgetEpsilon:    total.LimitEpsilon,
			Delta:            total.LimitDelta,
			TotalDelta:       r.totalDelta(total.LimitDelta),
			PeriodStart:      RFC3339(period),
			PeriodEnd:        RFC3339(period + r.periodMs),
		},
	}
	v, err := json.Marshal(&rel)
	if err != nil {
		return budget.Charge{}, err
	}
	u.Status = ledger.StatusReleased
	if !covered {
		u.Approx = &ledger.Approx{Epsilon: c.Epsilon, Delta: c.Delta, Releases: 1}
		if c.RDP.Len() > 0 { // its total's curve (plan's "Totals")
			u.Charge = toLedgerCurve(c.RDP)
		}
	}
	u.Messages = []ledger.Message{{Key: []byte(hist.Name + "/" + config.ImplicitGroup), Value: v}}
	return c, nil
}

// MechanismSimplexAverage is the mechanism name in an average histogram's
// releases: the stage's mechanism.SimplexAverage (a Dirichlet draw on the
// simplex around the padded average, with the guarantee of
// mechanism/average.go) — not 003's simplex-dirichlet mechanism
// (mechanism.SimplexDirichlet), whose name releases before this one
// carried.
const MechanismSimplexAverage = "simplex-average"

// MechanismSimplexAverageLegacy is the name average releases carried
// before they said MechanismSimplexAverage: readers of older releases
// treat it as an alias.
const MechanismSimplexAverageLegacy = "simplex-dirichlet"
