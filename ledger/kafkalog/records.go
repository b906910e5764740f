package kafkalog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/ledger"
)

// The record format: header formatHeader=formatVersion on every record,
// keys as in the package doc.
const (
	formatHeader  = "kafkalog-format"
	formatVersion = "1"

	prefixUnit   = "unit/"
	prefixSpend  = "spend/"
	prefixApprox = "approx/"
	prefixLimit  = "limit/"
	keyMeta      = "meta"
	keyOpen      = "open"

	// prefixReservation: reservation/<period ms>/<reservation key>, value
	// the ledger key of the unit that made it (ledger.Unit.Reservation).
	prefixReservation = "reservation/"
	// prefixAdmit: admit/<period ms>/<window end ms>/<chunk>, value the
	// hashes of the users admitted to that window by the cross-window
	// bound (8 bytes each, big-endian, ascending), at most admitChunk per
	// record. Written once, in the window's transaction; a period's
	// records are tombstoned together.
	prefixAdmit = "admit/"
	// keyUserHash: the 16-byte user hash key (ledger.Ledger.UserHashKey),
	// written once. A secret: see the package doc.
	keyUserHash = "user_hash_key"
	// keyLastEnd: the largest window end recorded (decimal Unix ms),
	// rewritten in the window's transaction when it grows.
	keyLastEnd = "last_window_end"
	// keyHistogramSince: the JSON map of ledger.Ledger.HistogramSince,
	// rewritten at each session's start.
	keyHistogramSince = "histogram_since"
)

// admitChunk is the most user hashes in one admissions record: 512 KiB,
// under Kafka's default max.message.bytes (1 MiB).
const admitChunk = 1 << 16

func unitRecordKey(histogram string, windowStart int64) string {
	return prefixUnit + strconv.FormatInt(windowStart, 10) + "/" + histogram
}

func periodRecordKey(prefix string, period int64) string {
	return prefix + strconv.FormatInt(period, 10)
}

// newRecord is a record of the log with key k and value v (nil: tombstone).
func newRecord(k string, v []byte) *kgo.Record {
	return &kgo.Record{
		Key:     []byte(k),
		Value:   v,
		Headers: []kgo.RecordHeader{{Key: formatHeader, Value: []byte(formatVersion)}},
	}
}

// jsonRecord is newRecord with v encoded as JSON.
func jsonRecord(k string, v any) (*kgo.Record, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", k, err)
	}
	return newRecord(k, b), nil
}

// unitRecord is the record of u.
func unitRecord(u *ledger.Unit) (*kgo.Record, error) {
	return jsonRecord(unitRecordKey(u.Histogram, u.WindowStart), u)
}

// state is the ledger as the fold of the committed records.
type state struct {
	// units maps ledger.UnitKey to the unit's JSON (decoded afresh for
	// every reader, as bbolt does, so callers cannot alter the state).
	units  map[string][]byte
	spent  map[int64]ledger.Curve
	approx map[int64]ledger.Approx
	limits map[int64]ledger.Limit
	meta   *ledger.Meta
	// reservations maps a period to its reservation keys → the unit key
	// that made each.
	reservations map[int64]map[string]string
	// admitted maps a period to each admitted user's window count;
	// admitKeys to the record keys that hold them (for tombstones and to
	// refuse a key applied twice).
	admitted  map[int64]map[uint64]uint16
	admitKeys map[int64]map[string]bool
	userKey   []byte // nil: none recorded
	lastEnd   *int64 // nil: none recorded
	// since is HistogramSince's map; nil: none recorded.
	since map[string]int64
}

func newState() *state {
	return &state{
		units:  map[string][]byte{},
		spent:  map[int64]ledger.Curve{},
		approx: map[int64]ledger.Approx{},
		limits: map[int64]ledger.Limit{},

		reservations: map[int64]map[string]string{},
		admitted:     map[int64]map[uint64]uint16{},
		admitKeys:    map[int64]map[string]bool{},
	}
}

func reservationRecordKey(period int64, key string) string {
	return prefixReservation + strconv.FormatInt(period, 10) + "/" + key
}

func admitRecordKey(period, windowEnd int64, chunk int) string {
	return prefixAdmit + strconv.FormatInt(period, 10) + "/" + strconv.FormatInt(windowEnd, 10) + "/" + strconv.Itoa(chunk)
}

// applyMisc folds the records of the keys added with the cross-window
// bound (reservations, admissions, user hash key, last window end); ok is
// false for another key.
func (s *state) applyMisc(k string, v []byte) (ok bool, err error) {
	switch {
	case k == keyUserHash:
		if v == nil {
			s.userKey = nil
		} else if len(v) != 16 {
			return true, fmt.Errorf("%w: user hash key of %d bytes", ErrIncompatible, len(v))
		} else {
			s.userKey = bytes.Clone(v)
		}
		return true, nil
	case k == keyHistogramSince:
		if v == nil {
			s.since = nil
			return true, nil
		}
		m := map[string]int64{}
		if err := json.Unmarshal(v, &m); err != nil {
			return true, fmt.Errorf("%w: malformed histogram since: %v", ErrIncompatible, err)
		}
		s.since = m
		return true, nil
	case k == keyLastEnd:
		if v == nil {
			s.lastEnd = nil
			return true, nil
		}
		e, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return true, fmt.Errorf("%w: malformed last window end %q", ErrIncompatible, v)
		}
		s.lastEnd = &e
		return true, nil
	case strings.HasPrefix(k, prefixReservation):
		ps, rk, cut := strings.Cut(k[len(prefixReservation):], "/")
		p, err := strconv.ParseInt(ps, 10, 64)
		if !cut || err != nil || rk == "" {
			return true, fmt.Errorf("%w: malformed reservation key %q", ErrIncompatible, k)
		}
		if v == nil {
			delete(s.reservations[p], rk)
			if len(s.reservations[p]) == 0 {
				delete(s.reservations, p)
			}
			return true, nil
		}
		if s.reservations[p] == nil {
			s.reservations[p] = map[string]string{}
		}
		s.reservations[p][rk] = string(v)
		return true, nil
	case strings.HasPrefix(k, prefixAdmit):
		parts := strings.Split(k[len(prefixAdmit):], "/")
		if len(parts) != 3 {
			return true, fmt.Errorf("%w: malformed admissions key %q", ErrIncompatible, k)
		}
		p, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil {
			return true, fmt.Errorf("%w: malformed admissions key %q", ErrIncompatible, k)
		}
		if v == nil {
			// A period's admissions are tombstoned together (Prune,
			// RecordWindowAdmitted): the first tombstone drops the period.
			delete(s.admitted, p)
			delete(s.admitKeys, p)
			return true, nil
		}
		if len(v)%8 != 0 {
			return true, fmt.Errorf("%w: admissions record %q of %d bytes", ErrIncompatible, k, len(v))
		}
		if s.admitKeys[p][k] {
			return true, fmt.Errorf("%w: admissions record %q applied twice", ErrIncompatible, k)
		}
		if s.admitKeys[p] == nil {
			s.admitKeys[p] = map[string]bool{}
			s.admitted[p] = map[uint64]uint16{}
		}
		s.admitKeys[p][k] = true
		counts := s.admitted[p]
		for i := 0; i < len(v); i += 8 {
			u := binary.BigEndian.Uint64(v[i : i+8])
			if counts[u] == math.MaxUint16 {
				return true, fmt.Errorf("%w: user %x admitted to more than %d windows", ErrIncompatible, u, math.MaxUint16)
			}
			counts[u]++
		}
		return true, nil
	}
	return false, nil
}

// apply folds one record (key, value; nil value: tombstone) into s. It is
// used both to restore the log and, after a commit, to apply the committed
// records, so memory and topic follow one definition.
func (s *state) apply(r *kgo.Record) error {
	if !hasFormat(r) {
		return fmt.Errorf("%w: record at offset %d (key %q) has no %s=%s header", ErrIncompatible, r.Offset, r.Key, formatHeader, formatVersion)
	}
	k := string(r.Key)
	v := r.Value
	switch {
	case k == keyOpen:
		return nil
	case k == keyMeta:
		if v == nil {
			s.meta = nil
			return nil
		}
		var m ledger.Meta
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("decode %s: %w", k, err)
		}
		s.meta = &m
		return nil
	case strings.HasPrefix(k, prefixUnit):
		ws, hist, ok := strings.Cut(k[len(prefixUnit):], "/")
		w, err := strconv.ParseInt(ws, 10, 64)
		if !ok || err != nil {
			return fmt.Errorf("%w: malformed unit key %q", ErrIncompatible, k)
		}
		uk := string(ledger.UnitKey(hist, w))
		if v == nil {
			delete(s.units, uk)
			return nil
		}
		var u ledger.Unit
		if err := json.Unmarshal(v, &u); err != nil {
			return fmt.Errorf("decode %s: %w", k, err)
		}
		if u.Histogram != hist || u.WindowStart != w {
			return fmt.Errorf("%w: record %q holds unit %s@%d", ErrIncompatible, k, u.Histogram, u.WindowStart)
		}
		s.units[uk] = bytes.Clone(v)
		return nil
	}
	if ok, err := s.applyMisc(k, v); ok {
		return err
	}
	for _, pre := range []string{prefixSpend, prefixApprox, prefixLimit} {
		if !strings.HasPrefix(k, pre) {
			continue
		}
		p, err := strconv.ParseInt(k[len(pre):], 10, 64)
		if err != nil {
			return fmt.Errorf("%w: malformed period key %q", ErrIncompatible, k)
		}
		switch pre {
		case prefixSpend:
			if v == nil {
				delete(s.spent, p)
				return nil
			}
			var c ledger.Curve
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			s.spent[p] = c
		case prefixApprox:
			if v == nil {
				delete(s.approx, p)
				return nil
			}
			var a ledger.Approx
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			s.approx[p] = a
		case prefixLimit:
			if v == nil {
				delete(s.limits, p)
				return nil
			}
			var l ledger.Limit
			if err := json.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("decode %s: %w", k, err)
			}
			s.limits[p] = l
		}
		return nil
	}
	return fmt.Errorf("%w: unknown record key %q at offset %d", ErrIncompatible, k, r.Offset)
}

func hasFormat(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == formatHeader {
			return string(h.Value) == formatVersion
		}
	}
	return false
}

// unit decodes the unit recorded under ledger key k.
func (s *state) unit(k string) (*ledger.Unit, bool, error) {
	v, ok := s.units[k]
	if !ok {
		return nil, false, nil
	}
	u := new(ledger.Unit)
	if err := json.Unmarshal(v, u); err != nil {
		return nil, false, fmt.Errorf("decode unit %x: %w", k, err)
	}
	return u, true, nil
}

// sortedUnitKeys returns the ledger keys of the units in (window start,
// histogram) order, the order of ledger.UnitKey.
func (s *state) sortedUnitKeys() []string {
	keys := make([]string, 0, len(s.units))
	for k := range s.units {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// windowOf is the window start of ledger key k.
func windowOf(k string) int64 {
	return int64(binary.BigEndian.Uint64([]byte(k[:8])) ^ (1 << 63))
}
