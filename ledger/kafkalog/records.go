package kafkalog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
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
)

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
}

func newState() *state {
	return &state{
		units:  map[string][]byte{},
		spent:  map[int64]ledger.Curve{},
		approx: map[int64]ledger.Approx{},
		limits: map[int64]ledger.Limit{},
	}
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
