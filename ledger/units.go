package ledger

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Status says what a unit recorded.
type Status string

const (
	// StatusReleased: the unit holds private releases.
	StatusReleased Status = "released"
	// StatusBudgetExhausted: the budget refused the release; the unit holds
	// the status message that says so, and charged nothing.
	StatusBudgetExhausted Status = "budget_exhausted"
)

// Curve is an RDP curve on a grid of orders: Epsilons[i] is the RDP ε at
// Orders[i]. +Inf is stored as JSON null.
type Curve struct {
	Orders   []float64 `json:"orders"`
	Epsilons []float64 `json:"-"`
}

type curveJSON struct {
	Orders   []float64  `json:"orders"`
	Epsilons []*float64 `json:"epsilons"`
}

// MarshalJSON stores +Inf as null, which JSON cannot otherwise carry.
func (c Curve) MarshalJSON() ([]byte, error) {
	out := curveJSON{Orders: c.Orders, Epsilons: make([]*float64, len(c.Epsilons))}
	for i, e := range c.Epsilons {
		if !math.IsInf(e, 1) {
			v := e
			out.Epsilons[i] = &v
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads null as +Inf.
func (c *Curve) UnmarshalJSON(b []byte) error {
	var in curveJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if len(in.Orders) != len(in.Epsilons) {
		return fmt.Errorf("ledger: curve has %d orders but %d epsilons", len(in.Orders), len(in.Epsilons))
	}
	c.Orders = in.Orders
	c.Epsilons = make([]float64, len(in.Epsilons))
	for i, e := range in.Epsilons {
		if e == nil {
			c.Epsilons[i] = math.Inf(1)
		} else {
			c.Epsilons[i] = *e
		}
	}
	return nil
}

// Unit is what one histogram releases for one window.
type Unit struct {
	Histogram   string `json:"histogram"`
	WindowStart int64  `json:"window_start_ms"`
	WindowEnd   int64  `json:"window_end_ms"`
	// Period is the start (Unix ms) of the budget period charged.
	Period int64  `json:"period_ms"`
	Status Status `json:"status"`
	// Charge is the RDP curve added to the period's spend by this unit
	// (empty for StatusBudgetExhausted).
	Charge Curve `json:"charge"`
	// Approx is the (ε, δ)-DP charge of a unit released by a mechanism
	// without an RDP curve (an average histogram's simplex Dirichlet
	// release); nil otherwise. Record adds it to the period's ApproxSpend.
	Approx *Approx `json:"approx,omitempty"`
	// Reservation is the key of the period reservation this unit charged
	// (contribution.max_windows_per_user: its Charge or Approx is the
	// reservation's — or, with TopUp, the difference to the one topped up
	// — covering the histogram's later units of the period);
	// RecordWindow records it in the period's reservations. Empty otherwise.
	Reservation string `json:"reservation,omitempty"`
	// CoveredBy is the key of the period reservation that covers this
	// released unit, which charged nothing itself (empty Charge, nil
	// Approx); empty otherwise.
	CoveredBy string `json:"covered_by,omitempty"`
	// TopUp is set when this unit's reservation (Reservation) tops up a
	// reservation the period holds for the same histogram, window size,
	// bound and neighbour relation instead of being charged in full: its
	// Charge and Approx are then only the difference charged (release's
	// "Top-up"), and TopUp says which reservation it tops up and what the
	// two together cover. nil otherwise (and in ledgers written before).
	TopUp *TopUp `json:"top_up,omitempty"`
	// Limit is the period budget (ε, δ) in force when the unit was
	// recorded. Record keeps the first released unit's for each period,
	// lowered by any later unit's that is lower (PeriodLimit, LowerLimit): a
	// budget raised in the middle of a period — also back after a cut —
	// takes effect from the next period only.
	Limit *Limit `json:"limit,omitempty"`
	// Selection is set on a released unit of a histogram that selects its
	// groups (group_by without groups, issue 30): the period's selection
	// reservation that pays for the window's private selection — made by
	// this unit, or held by the period already. nil otherwise.
	Selection *SelectionCharge `json:"selection,omitempty"`
	// Messages are the exact output messages, in publish order.
	Messages []Message `json:"messages"`
	// Published is set once every message was acknowledged by the output
	// topic.
	Published bool `json:"published"`
	// RecordedAt is wall-clock time of recording, for operators.
	RecordedAt time.Time `json:"recorded_at"`
}

// TopUp is a period reservation charged as the difference to a held one
// (Unit.TopUp).
type TopUp struct {
	// Of is the key of the held reservation topped up.
	Of string `json:"of"`
	// Cover is what the reservation covers: at every order the larger of
	// its own curve and Of's cover, and for an average histogram
	// CoverApprox the larger ε and δ (nil for a count histogram).
	Cover       Curve   `json:"cover"`
	CoverApprox *Approx `json:"cover_approx,omitempty"`
}

// SelectionCharge is the selection reservation of a unit (Unit.Selection):
// either Reservation and Approx (this unit made the period's reservation
// of key Reservation, charged Approx to the period's (ε, δ) part and
// recorded in its reservations in the same transaction), or CoveredBy
// (the period held the reservation of that key already; nothing charged).
type SelectionCharge struct {
	Reservation string  `json:"reservation,omitempty"`
	Approx      *Approx `json:"approx,omitempty"`
	CoveredBy   string  `json:"covered_by,omitempty"`
}

// Approx is an (ε, δ)-DP charge, or a period's basic composition of such
// charges (the ε's add and the δ's add).
type Approx struct {
	Epsilon  float64 `json:"epsilon"`
	Delta    float64 `json:"delta"`
	Releases int     `json:"releases"`
}

// LowerLimit is a period's recorded budget rec (ok: one is recorded) after
// recording u: a released unit records its budget (u.Limit) when none is
// recorded yet; any unit — released or budget_exhausted — whose budget is
// below the recorded one in ε or δ lowers it to the lower of each (the
// neighbour relation stays the first one recorded). It returns the new
// budget and whether it changed. So the budget a period is held to never
// rises within the period: a cut recorded once stays in force until the
// period ends, even when the budget is raised back (budget.Book takes the
// lower of the recorded budget and its own).
func LowerLimit(rec Limit, ok bool, u *Unit) (Limit, bool) {
	if u.Limit == nil {
		return rec, false
	}
	if !ok {
		if u.Status != StatusReleased {
			return rec, false // nothing spent under it: a raise before the first release applies
		}
		return *u.Limit, true
	}
	out := rec
	out.Epsilon = math.Min(rec.Epsilon, u.Limit.Epsilon)
	out.Delta = math.Min(rec.Delta, u.Limit.Delta)
	return out, out.Epsilon != rec.Epsilon || out.Delta != rec.Delta
}

// Limit is a period's (ε, δ) budget.
type Limit struct {
	Epsilon float64 `json:"epsilon"`
	Delta   float64 `json:"delta"`
	// Neighbour is the privacy.neighbour relation the period's first charge
	// was calibrated under ("" in ledgers written before it was recorded).
	// The stage refuses to charge the period under a weaker relation
	// (add_remove after replace: pipeline.ErrConfigChanged).
	Neighbour string `json:"neighbour,omitempty"`
}

// Message is one output record.
type Message struct {
	Key   []byte `json:"key"`
	Value []byte `json:"value"`
}

// Key identifies a unit: histogram name and window start.
func (u *Unit) Key() []byte { return UnitKey(u.Histogram, u.WindowStart) }

// UnitKey orders units by window start, then histogram.
func UnitKey(histogram string, windowStart int64) []byte {
	k := make([]byte, 8, 8+len(histogram))
	binary.BigEndian.PutUint64(k, uint64(windowStart)^(1<<63)) // sign flip keeps negative times ordered
	return append(k, histogram...)
}
