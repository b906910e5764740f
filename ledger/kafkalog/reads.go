package kafkalog

import (
	"fmt"
	"maps"
	"slices"

	"github.com/dpstage/stage/ledger"
)

// Lookup returns the recorded unit for (histogram, windowStart), if any.
func (l *Log) Lookup(histogram string, windowStart int64) (*ledger.Unit, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, false, l.dead
	}
	u, ok, err := l.st.unit(string(ledger.UnitKey(histogram, windowStart)))
	if err != nil {
		return nil, false, fmt.Errorf("kafkalog: lookup %s@%d: %w", histogram, windowStart, err)
	}
	return u, ok, nil
}

// Spent returns the recorded RDP spend of the period starting at period
// (Unix ms), and whether any was recorded.
func (l *Log) Spent(period int64) (ledger.Curve, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Curve{}, false, l.dead
	}
	c, ok := l.st.spent[period]
	if !ok {
		return ledger.Curve{}, false, nil
	}
	return ledger.Curve{Orders: append([]float64(nil), c.Orders...), Epsilons: append([]float64(nil), c.Epsilons...)}, true, nil
}

// ApproxSpent returns the basic composition of the (ε, δ) charges recorded
// in the period starting at period (Unix ms), and whether any was recorded.
func (l *Log) ApproxSpent(period int64) (ledger.Approx, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Approx{}, false, l.dead
	}
	a, ok := l.st.approx[period]
	return a, ok, nil
}

// PeriodLimit returns the budget recorded with the first released unit of
// the period starting at period (Unix ms), lowered by any later unit
// recorded under a lower one (ledger.LowerLimit), and whether one was
// recorded.
func (l *Log) PeriodLimit(period int64) (ledger.Limit, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Limit{}, false, l.dead
	}
	lim, ok := l.st.limits[period]
	return lim, ok, nil
}

// LastWindow returns the largest recorded window start, if any unit exists.
func (l *Log) LastWindow() (int64, bool, error) {
	return l.extremeWindow(func(a, b int64) bool { return a > b })
}

// FirstUnitWindow returns the smallest recorded window start, if any unit
// exists.
func (l *Log) FirstUnitWindow() (int64, bool, error) {
	return l.extremeWindow(func(a, b int64) bool { return a < b })
}

func (l *Log) extremeWindow(better func(a, b int64) bool) (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return 0, false, l.dead
	}
	var best int64
	ok := false
	for k := range l.st.units {
		if w := windowOf(k); !ok || better(w, best) {
			best, ok = w, true
		}
	}
	return best, ok, nil
}

// Units calls fn for every recorded unit in (window start, histogram) order
// until fn returns false. It iterates over a snapshot: fn may call the Log.
func (l *Log) Units(fn func(*ledger.Unit) bool) error {
	l.mu.Lock()
	if l.dead != nil {
		l.mu.Unlock()
		return l.dead
	}
	keys := l.st.sortedUnitKeys()
	vals := make([][]byte, len(keys))
	parts := make([]map[int][]byte, len(keys))
	for i, k := range keys {
		// The values are never changed in place (apply stores clones);
		// a split unit's part map is, so it is copied.
		vals[i], parts[i] = l.st.units[k], maps.Clone(l.st.parts[k])
	}
	l.mu.Unlock()
	for i, v := range vals {
		u, err := decodeUnit(v, parts[i])
		if err != nil {
			return fmt.Errorf("kafkalog: decode unit %x: %w", keys[i], err)
		}
		if !fn(u) {
			return nil
		}
	}
	return nil
}

// Meta returns the recorded metadata, if any.
func (l *Log) Meta() (ledger.Meta, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Meta{}, false, l.dead
	}
	if l.st.meta == nil {
		return ledger.Meta{}, false, nil
	}
	return *l.st.meta, true, nil
}

// Reservations returns the keys of the period reservations recorded in the
// period starting at period (Unix ms), in key order.
func (l *Log) Reservations(period int64) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	var keys []string
	for k := range l.st.reservations[period] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// ReservationUnit returns the unit that made the period reservation key in
// the period starting at period (Unix ms), and whether it is still
// recorded (ledger.Ledger.ReservationUnit).
func (l *Log) ReservationUnit(period int64, key string) (*ledger.Unit, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, false, l.dead
	}
	uk, ok := l.st.reservations[period][key]
	if !ok {
		return nil, false, nil
	}
	u, ok, err := l.st.unit(uk)
	if err != nil {
		return nil, false, fmt.Errorf("kafkalog: read reservation %q of period %d: %w", key, period, err)
	}
	return u, ok, nil
}

// Admissions returns, per user, the number of recorded windows of the
// period starting at period (Unix ms) the user was admitted to (see
// RecordWindowAdmitted).
func (l *Log) Admissions(period int64) (map[uint64]uint16, error) {
	return l.ViewAdmissions(period, 0)
}

// ViewAdmissions is Admissions for the histograms whose own window is
// windowMs long (histograms[].window; ledger.Admitted.Views); 0: the base
// window's (Admissions).
func (l *Log) ViewAdmissions(period, windowMs int64) (map[uint64]uint16, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	var counts map[uint64]uint16
	if as := l.st.admits[windowMs]; as != nil {
		counts = as.admitted[period]
	}
	out := make(map[uint64]uint16, len(counts))
	for u, n := range counts {
		out[u] = n
	}
	return out, nil
}

// LastWindowEnd returns the largest window end (Unix ms) recorded, if any.
func (l *Log) LastWindowEnd() (int64, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return 0, false, l.dead
	}
	if l.st.lastEnd == nil {
		return 0, false, nil
	}
	return *l.st.lastEnd, true, nil
}
