package kafkalog

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Prune deletes (tombstones, in one transaction) the published units whose
// window starts before `before` (Unix ms), and the spend, approx spend and
// budget of periods that ended before it, as ledger.Ledger.Prune does: never
// an unpublished unit, never a unit of the last recorded window. It returns
// how many units and RDP period spends it deleted.
func (l *Log) Prune(ctx context.Context, before int64) (units, periods int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return 0, 0, l.dead
	}
	last, haveLast := int64(math.MinInt64), false
	for k := range l.st.units {
		if w := windowOf(k); !haveLast || w > last {
			last, haveLast = w, true
		}
	}
	if haveLast && before > last {
		before = last
	}
	var recs []*kgo.Record
	for _, k := range l.st.sortedUnitKeys() {
		if windowOf(k) >= before {
			break
		}
		u, _, err := l.st.unit(k)
		if err != nil {
			return 0, 0, fmt.Errorf("kafkalog: prune: %w", err)
		}
		if u.Published {
			recs = append(recs, l.st.unitTombstones(u)...)
			units++
		}
	}
	if m := l.st.meta; m != nil && m.PeriodMs > 0 {
		ended := func(p int64) bool { return p+m.PeriodMs <= before }
		for _, pp := range []struct {
			prefix string
			keys   []int64
		}{
			{prefixSpend, keysOf(l.st.spent)},
			{prefixApprox, keysOf(l.st.approx)},
			{prefixLimit, keysOf(l.st.limits)},
		} {
			slices.Sort(pp.keys)
			for _, p := range pp.keys {
				if ended(p) {
					recs = append(recs, newRecord(periodRecordKey(pp.prefix, p), nil))
					if pp.prefix == prefixSpend {
						periods++
					}
				}
			}
		}
	}
	if m := l.st.meta; m != nil && m.PeriodMs > 0 {
		for _, p := range sortedKeys(l.st.reservations) {
			if p+m.PeriodMs <= before {
				ks := make(map[string]bool, len(l.st.reservations[p]))
				for rk := range l.st.reservations[p] {
					ks[reservationRecordKey(p, rk)] = true
				}
				recs = append(recs, tombstones(ks)...)
			}
		}
		for _, view := range l.st.admitViews() {
			as := l.st.admits[view]
			for _, p := range sortedKeys(as.admitKeys) {
				if p+m.PeriodMs <= before {
					recs = append(recs, tombstones(as.admitKeys[p])...)
				}
			}
		}
	}
	if len(recs) == 0 {
		return 0, 0, nil
	}
	if err := l.commit(ctx, recs); err != nil {
		return 0, 0, fmt.Errorf("kafkalog: prune before %d: %w", before, err)
	}
	return units, periods, nil
}
