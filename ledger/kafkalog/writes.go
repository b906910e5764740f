package kafkalog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/budget"
	"github.com/dpstage/stage/ledger"
)

// RecordWindow records the units of one window — every histogram's — in one
// Kafka transaction, with ledger.Ledger.RecordWindow's meaning: either all
// of them are recorded or none is; a unit already recorded refuses the whole
// window (ledger.ErrAlreadyRecorded); for released units the period's budget
// is kept if none is recorded yet, (ε, δ) charges are added to the period's
// approx spend, and the period's RDP spend becomes spentAfter (when not
// empty). All units must be of the same window and period.
func (l *Log) RecordWindow(ctx context.Context, units []*ledger.Unit, spentAfter ledger.Curve) error {
	return l.RecordWindowAdmitted(ctx, units, spentAfter, nil)
}

// RecordWindowAdmitted is RecordWindow that also records, in the same
// transaction, the users admitted to the window by the cross-window bound
// (adm; nil without one), as ledger.Ledger.RecordWindowAdmitted does: each
// one's count of admitted windows in adm.Period grows by one, and the
// admissions of earlier periods are deleted (tombstoned). The period
// reservations the units make (ledger.Unit.Reservation) and the largest
// window end recorded (LastWindowEnd) are written in the same transaction.
func (l *Log) RecordWindowAdmitted(ctx context.Context, units []*ledger.Unit, spentAfter ledger.Curve, adm *ledger.Admitted) error {
	if len(units) == 0 {
		return nil
	}
	w, p := units[0].WindowStart, units[0].Period
	if adm != nil && adm.Period != p {
		return fmt.Errorf("kafkalog: record window: admissions of period %d with units of period %d", adm.Period, p)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return l.dead
	}
	recs, err := l.windowRecords(units, spentAfter, adm)
	if err != nil {
		return fmt.Errorf("kafkalog: record %s@%d: %w", units[0].Histogram, w, err)
	}
	if err := l.commit(ctx, recs); err != nil {
		return fmt.Errorf("kafkalog: record window %d (period %d): %w", w, p, err)
	}
	return nil
}

// windowRecords are the records of RecordWindow(units, spentAfter) on the
// current state (l.mu held).
func (l *Log) windowRecords(units []*ledger.Unit, spentAfter ledger.Curve, adm *ledger.Admitted) ([]*kgo.Record, error) {
	end, p := units[0].WindowEnd, units[0].Period
	seen := map[string]bool{}
	var recs []*kgo.Record
	for _, u := range units {
		// One boundary: every unit ends there (a histogram's own, longer
		// window starts earlier), in one period.
		if u.WindowEnd != end || u.Period != p {
			return nil, fmt.Errorf("units of windows ending at %d and %d in one record", end, u.WindowEnd)
		}
		k := string(u.Key())
		if _, ok := l.st.units[k]; ok || seen[k] {
			return nil, fmt.Errorf("%s: %w", u.Histogram, ledger.ErrAlreadyRecorded)
		}
		seen[k] = true
		rs, err := unitRecords(u)
		if err != nil {
			return nil, err
		}
		recs = append(recs, rs...)
	}
	if l.st.lastEnd == nil || *l.st.lastEnd < end {
		recs = append(recs, newRecord(keyLastEnd, []byte(strconv.FormatInt(end, 10))))
	}
	ar, err := l.admitRecords(end, adm)
	if err != nil {
		return nil, err
	}
	recs = append(recs, ar...)
	released := false
	limit, limitOK := l.st.limits[p]
	limitChanged := false
	approx := l.st.approx[p]
	resv := map[string]bool{}
	addedApprox := false
	for _, u := range units {
		if next, changed := ledger.LowerLimit(limit, limitOK, u); changed {
			limit, limitOK, limitChanged = next, true, true
		}
		if u.Status != ledger.StatusReleased {
			continue
		}
		released = true
		if u.Reservation != "" {
			if _, ok := l.st.reservations[p][u.Reservation]; ok || resv[u.Reservation] {
				return nil, fmt.Errorf("%s: period reservation %q is already recorded", u.Histogram, u.Reservation)
			}
			resv[u.Reservation] = true
			recs = append(recs, newRecord(reservationRecordKey(p, u.Reservation), u.Key()))
		}
		if u.Approx != nil {
			approx.Epsilon = budget.AddUp(approx.Epsilon, u.Approx.Epsilon)
			approx.Delta = budget.AddUp(approx.Delta, u.Approx.Delta)
			approx.Releases += max(u.Approx.Releases, 1)
			addedApprox = true
		}
		if sc := u.Selection; sc != nil && sc.Reservation != "" {
			// The period's selection reservation (issue 30): in the
			// period's (ε, δ) part and its reservations, like the above.
			if sc.Approx == nil {
				return nil, fmt.Errorf("%s: selection reservation %q without its charge", u.Histogram, sc.Reservation)
			}
			if _, ok := l.st.reservations[p][sc.Reservation]; ok || resv[sc.Reservation] {
				return nil, fmt.Errorf("%s: period reservation %q is already recorded", u.Histogram, sc.Reservation)
			}
			resv[sc.Reservation] = true
			recs = append(recs, newRecord(reservationRecordKey(p, sc.Reservation), u.Key()))
			approx.Epsilon = budget.AddUp(approx.Epsilon, sc.Approx.Epsilon)
			approx.Delta = budget.AddUp(approx.Delta, sc.Approx.Delta)
			approx.Releases += max(sc.Approx.Releases, 1)
			addedApprox = true
		}
	}
	if limitChanged {
		r, err := jsonRecord(periodRecordKey(prefixLimit, p), &limit)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if addedApprox {
		r, err := jsonRecord(periodRecordKey(prefixApprox, p), approx)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	if released && len(spentAfter.Orders) > 0 {
		r, err := jsonRecord(periodRecordKey(prefixSpend, p), spentAfter)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// admitRecords are the admissions records of a window ending at end
// (RecordWindowAdmitted; l.mu held), for the base window's state and each
// view's (adm.Views): tombstones for the admissions of the periods before
// adm.Period, then the admitted users in chunks.
func (l *Log) admitRecords(end int64, adm *ledger.Admitted) ([]*kgo.Record, error) {
	if adm == nil {
		return nil, nil
	}
	recs, err := l.admitRecordsOf(0, end, adm.Period, adm.Users)
	if err != nil {
		return nil, err
	}
	seen := map[int64]bool{}
	for _, v := range adm.Views {
		if v.WindowMs <= 0 || seen[v.WindowMs] {
			return nil, fmt.Errorf("admissions of window size %d ms: not a positive size, or given twice", v.WindowMs)
		}
		seen[v.WindowMs] = true
		r, err := l.admitRecordsOf(v.WindowMs, end, adm.Period, v.Users)
		if err != nil {
			return nil, fmt.Errorf("admissions of the %d ms windows: %w", v.WindowMs, err)
		}
		recs = append(recs, r...)
	}
	return recs, nil
}

// admitRecordsOf is admitRecords for the admission state of window size
// view (0: the base window).
func (l *Log) admitRecordsOf(view, end, period int64, admitted []uint64) ([]*kgo.Record, error) {
	var recs []*kgo.Record
	as := l.st.admits[view]
	if as == nil {
		as = &admitSet{}
	}
	for _, p := range sortedKeys(as.admitKeys) {
		if p < period {
			recs = append(recs, tombstones(as.admitKeys[p])...)
		}
	}
	users := slices.Clone(admitted)
	slices.Sort(users)
	for i := 1; i < len(users); i++ {
		if users[i] == users[i-1] {
			return nil, fmt.Errorf("user %x admitted twice to one window", users[i])
		}
	}
	counts := as.admitted[period]
	for _, u := range users {
		if counts[u] == math.MaxUint16 {
			return nil, fmt.Errorf("user %x admitted to more than %d windows", u, math.MaxUint16)
		}
	}
	for c := 0; c*admitChunk < len(users); c++ {
		part := users[c*admitChunk : min((c+1)*admitChunk, len(users))]
		v := make([]byte, 8*len(part))
		for i, u := range part {
			binary.BigEndian.PutUint64(v[8*i:], u)
		}
		k := admitRecordKey(view, period, end, c)
		if as.admitKeys[period][k] {
			return nil, fmt.Errorf("admissions of the window ending at %d are already recorded", end)
		}
		recs = append(recs, newRecord(k, v))
	}
	return recs, nil
}

// tombstones are null-valued records for the keys of ks, in key order.
func tombstones(ks map[string]bool) []*kgo.Record {
	keys := make([]string, 0, len(ks))
	for k := range ks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		recs[i] = newRecord(k, nil)
	}
	return recs
}

func sortedKeys[V any](m map[int64]V) []int64 {
	ks := keysOf(m)
	slices.Sort(ks)
	return ks
}

// MarkPublished records, in one transaction, that every message of the
// unit was acknowledged.
func (l *Log) MarkPublished(ctx context.Context, histogram string, windowStart int64) error {
	return l.MarkPublishedKeys(ctx, [][]byte{ledger.UnitKey(histogram, windowStart)})
}

// MarkPublishedKeys marks the units with the given keys (ledger.Unit.Key)
// published, in one transaction. Units already published are left alone.
func (l *Log) MarkPublishedKeys(ctx context.Context, keys [][]byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return l.dead
	}
	var recs []*kgo.Record
	for _, k := range keys {
		u, ok, err := l.st.unit(string(k))
		if err != nil {
			return fmt.Errorf("kafkalog: mark published: %w", err)
		}
		if !ok {
			return fmt.Errorf("kafkalog: mark published: no unit recorded under %x", k)
		}
		if u.Published {
			continue
		}
		rs, err := l.st.publishedRecords(string(k))
		if err != nil {
			return fmt.Errorf("kafkalog: mark published: %w", err)
		}
		recs = append(recs, rs...)
	}
	if len(recs) == 0 {
		return nil
	}
	if err := l.commit(ctx, recs); err != nil {
		return fmt.Errorf("kafkalog: mark %d units published: %w", len(recs), err)
	}
	return nil
}

// SetMeta records m (in a transaction) unless metadata is already recorded;
// then it returns the recorded one and stored = false.
func (l *Log) SetMeta(ctx context.Context, m ledger.Meta) (ledger.Meta, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return ledger.Meta{}, false, l.dead
	}
	if l.st.meta != nil {
		return *l.st.meta, false, nil
	}
	r, err := jsonRecord(keyMeta, m)
	if err != nil {
		return ledger.Meta{}, false, err
	}
	if err := l.commit(ctx, []*kgo.Record{r}); err != nil {
		return ledger.Meta{}, false, fmt.Errorf("kafkalog: record metadata: %w", err)
	}
	return m, true, nil
}

func keysOf[V any](m map[int64]V) []int64 {
	ks := make([]int64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// UserHashKey returns the 16-byte user hash key recorded in the log, first
// recording (in a transaction of its own) the result of gen if none is.
// The key is a secret: whoever reads the topic can predict which events
// count (package doc, "Topic settings": ACLs).
func (l *Log) UserHashKey(ctx context.Context, gen func() ([]byte, error)) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	if l.st.userKey != nil {
		return bytes.Clone(l.st.userKey), nil
	}
	k, err := gen()
	if err != nil {
		return nil, fmt.Errorf("kafkalog: user hash key: %w", err)
	}
	if len(k) != 16 {
		return nil, fmt.Errorf("kafkalog: user hash key has %d bytes, want 16", len(k))
	}
	if err := l.commit(ctx, []*kgo.Record{newRecord(keyUserHash, bytes.Clone(k))}); err != nil {
		return nil, fmt.Errorf("kafkalog: record user hash key: %w", err)
	}
	return bytes.Clone(k), nil
}

// HistogramSince is ledger.Ledger.HistogramSince, the map written in one
// transaction.
func (l *Log) HistogramSince(ctx context.Context, keys []string, next int64) (map[string]int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead != nil {
		return nil, l.dead
	}
	out := ledger.NextSince(l.st.since, keys, next, len(l.st.units) == 0)
	r, err := jsonRecord(keyHistogramSince, out)
	if err != nil {
		return nil, fmt.Errorf("kafkalog: histogram since: %w", err)
	}
	if err := l.commit(ctx, []*kgo.Record{r}); err != nil {
		return nil, fmt.Errorf("kafkalog: record histogram since: %w", err)
	}
	return out, nil
}
