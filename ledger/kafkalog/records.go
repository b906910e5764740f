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
	// formatSplit is the format header of a split unit's records (its
	// head and its message parts, unitRecords): a version that reads only
	// formatVersion refuses them (ErrIncompatible) rather than restoring a
	// unit without its messages. Every other record keeps formatVersion,
	// so a log without split units stays readable by the older version.
	formatSplit = "2"

	// prefixUnitPart: unitpart/<window start ms>/<part>/<histogram>, value
	// a JSON array of ledger.Message, part of a unit too large for one
	// record (unitRecords).
	prefixUnitPart = "unitpart/"

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
	// prefixAdmitView: admitv/<window ms>/<period ms>/<window end ms>/<chunk>,
	// as prefixAdmit for the histograms whose own window is <window ms>
	// long (histograms[].window; ledger.Admitted.Views): one admission
	// state per window size.
	prefixAdmitView = "admitv/"
	// keyUserHash: the 16-byte user hash key (ledger.Ledger.UserHashKey),
	// written once. A secret: see the package doc.
	keyUserHash = "user_hash_key"
	// keyLastEnd: the largest window end recorded (decimal Unix ms),
	// rewritten in the window's transaction when it grows.
	keyLastEnd = "last_window_end"
	// keyHistogramSince: the JSON map of ledger.Ledger.HistogramSince,
	// rewritten at each session's start.
	keyHistogramSince = "histogram_since"
	// keyInputPartitions: the JSON of Partitions, the input topic's
	// partition count and its last recorded change (NotePartitions).
	keyInputPartitions = "input_partitions"
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

// unitPartBytes bounds the value of one unit record: a unit whose JSON is
// longer is split (unitRecords). Half of Kafka's default 1 MB record and
// batch limits (max.message.bytes, kgo's ProducerBatchMaxBytes), like
// admitChunk: one unit record carries every group's release message of a
// histogram's window, 3.6 MB at 3,181 groups of 10 bins, and a record over
// the limit failed every record of its window with MESSAGE_TOO_LARGE.
var unitPartBytes = 512 << 10

// splitHead is the head record of a split unit: the unit without its
// messages (Messages null) and how many part records hold them.
type splitHead struct {
	*ledger.Unit
	Parts int `json:"message_parts"`
}

func unitPartKey(histogram string, windowStart int64, part int) string {
	return prefixUnitPart + strconv.FormatInt(windowStart, 10) + "/" + strconv.Itoa(part) + "/" + histogram
}

// unitRecords are the records of u: one record (the unit's JSON) when it
// fits in unitPartBytes; otherwise its messages in part records of at most
// unitPartBytes each (a message longer than that alone in its part), then
// the head (splitHead), all under the formatSplit header. They are written
// in one transaction, so a reader sees all of them or none.
func unitRecords(u *ledger.Unit) ([]*kgo.Record, error) {
	k := unitRecordKey(u.Histogram, u.WindowStart)
	b, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", k, err)
	}
	if len(b) <= unitPartBytes {
		return []*kgo.Record{newRecord(k, b)}, nil
	}
	var recs []*kgo.Record
	part := []byte{'['}
	flush := func() {
		part = append(part, ']')
		recs = append(recs, splitRecord(unitPartKey(u.Histogram, u.WindowStart, len(recs)), part))
		part = []byte{'['}
	}
	for _, m := range u.Messages {
		mb, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("encode %s: %w", k, err)
		}
		if len(part) > 1 && len(part)+len(mb)+2 > unitPartBytes {
			flush()
		}
		if len(part) > 1 {
			part = append(part, ',')
		}
		part = append(part, mb...)
	}
	flush()
	head := *u
	head.Messages = nil
	hb, err := json.Marshal(splitHead{Unit: &head, Parts: len(recs)})
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", k, err)
	}
	return append(recs, splitRecord(k, hb)), nil
}

// splitRecord is newRecord under the formatSplit header.
func splitRecord(k string, v []byte) *kgo.Record {
	r := newRecord(k, v)
	r.Headers[0].Value = []byte(formatSplit)
	return r
}

// publishedRecords are the records that mark the unit under ledger key k
// published: its head alone for a split unit (its parts are unchanged),
// its whole record otherwise.
func (s *state) publishedRecords(k string) ([]*kgo.Record, error) {
	u, ok, err := s.unit(k)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("no unit recorded under %x", k)
	}
	u.Published = true
	n := s.split[k]
	if n == 0 {
		return unitRecords(u)
	}
	u.Messages = nil
	hb, err := json.Marshal(splitHead{Unit: u, Parts: n})
	if err != nil {
		return nil, fmt.Errorf("encode unit %x: %w", k, err)
	}
	return []*kgo.Record{splitRecord(unitRecordKey(u.Histogram, u.WindowStart), hb)}, nil
}

// unitTombstones are the tombstones of unit u: its record, or a split
// unit's head and parts.
func (s *state) unitTombstones(u *ledger.Unit) []*kgo.Record {
	n := s.split[string(u.Key())]
	recs := make([]*kgo.Record, 0, 1+n)
	for i := range n {
		recs = append(recs, newRecord(unitPartKey(u.Histogram, u.WindowStart, i), nil))
	}
	return append(recs, newRecord(unitRecordKey(u.Histogram, u.WindowStart), nil))
}

// state is the ledger as the fold of the committed records.
type state struct {
	// units maps ledger.UnitKey to the unit's JSON (decoded afresh for
	// every reader, as bbolt does, so callers cannot alter the state): a
	// split unit's head (splitHead), whose messages are in parts.
	units map[string][]byte
	// parts maps ledger.UnitKey to a split unit's message parts by index
	// (unitRecords).
	parts map[string]map[int][]byte
	// split maps ledger.UnitKey to the part count of a split unit's head.
	split  map[string]int
	spent  map[int64]ledger.Curve
	approx map[int64]ledger.Approx
	limits map[int64]ledger.Limit
	meta   *ledger.Meta
	// reservations maps a period to its reservation keys → the unit key
	// that made each.
	reservations map[int64]map[string]string
	// admits maps a window size (ms; 0: the base window) to its admission
	// state.
	admits  map[int64]*admitSet
	userKey []byte // nil: none recorded
	lastEnd *int64 // nil: none recorded
	// since is HistogramSince's map; nil: none recorded.
	since map[string]int64
	// partitions is NotePartitions' record; nil: none recorded.
	partitions *Partitions
}

func newState() *state {
	return &state{
		units:  map[string][]byte{},
		parts:  map[string]map[int][]byte{},
		split:  map[string]int{},
		spent:  map[int64]ledger.Curve{},
		approx: map[int64]ledger.Approx{},
		limits: map[int64]ledger.Limit{},

		reservations: map[int64]map[string]string{},
		admits:       map[int64]*admitSet{},
	}
}

// admitSet is one window size's admission state: admitted maps a period to
// each admitted user's window count; admitKeys to the record keys that
// hold them (for tombstones and to refuse a key applied twice).
type admitSet struct {
	admitted  map[int64]map[uint64]uint16
	admitKeys map[int64]map[string]bool
}

// admitsOf returns the admission state of window size view (0: the base
// window), made empty if absent.
func (s *state) admitsOf(view int64) *admitSet {
	a := s.admits[view]
	if a == nil {
		a = &admitSet{admitted: map[int64]map[uint64]uint16{}, admitKeys: map[int64]map[string]bool{}}
		s.admits[view] = a
	}
	return a
}

// admitViews is the window sizes holding admission state, in order (0, the
// base window, first).
func (s *state) admitViews() []int64 { return sortedKeys(s.admits) }

func reservationRecordKey(period int64, key string) string {
	return prefixReservation + strconv.FormatInt(period, 10) + "/" + key
}

func admitRecordKey(view, period, windowEnd int64, chunk int) string {
	k := prefixAdmit + strconv.FormatInt(period, 10) + "/" + strconv.FormatInt(windowEnd, 10) + "/" + strconv.Itoa(chunk)
	if view > 0 {
		k = prefixAdmitView + strconv.FormatInt(view, 10) + "/" + k[len(prefixAdmit):]
	}
	return k
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
	case k == keyInputPartitions:
		if v == nil {
			s.partitions = nil
			return true, nil
		}
		var p Partitions
		if err := json.Unmarshal(v, &p); err != nil || p.Count <= 0 {
			return true, fmt.Errorf("%w: malformed input partitions %q", ErrIncompatible, v)
		}
		s.partitions = &p
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
	case strings.HasPrefix(k, prefixAdmit), strings.HasPrefix(k, prefixAdmitView):
		var view int64
		rest := strings.TrimPrefix(k, prefixAdmit)
		if vs, ok := strings.CutPrefix(k, prefixAdmitView); ok {
			s, r, cut := strings.Cut(vs, "/")
			n, err := strconv.ParseInt(s, 10, 64)
			if !cut || err != nil || n <= 0 {
				return true, fmt.Errorf("%w: malformed admissions key %q", ErrIncompatible, k)
			}
			view, rest = n, r
		}
		parts := strings.Split(rest, "/")
		if len(parts) != 3 {
			return true, fmt.Errorf("%w: malformed admissions key %q", ErrIncompatible, k)
		}
		p, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil {
			return true, fmt.Errorf("%w: malformed admissions key %q", ErrIncompatible, k)
		}
		as := s.admitsOf(view)
		if v == nil {
			// A period's admissions are tombstoned together (Prune,
			// RecordWindowAdmitted): the first tombstone drops the period.
			delete(as.admitted, p)
			delete(as.admitKeys, p)
			return true, nil
		}
		if len(v)%8 != 0 {
			return true, fmt.Errorf("%w: admissions record %q of %d bytes", ErrIncompatible, k, len(v))
		}
		if as.admitKeys[p][k] {
			return true, fmt.Errorf("%w: admissions record %q applied twice", ErrIncompatible, k)
		}
		if as.admitKeys[p] == nil {
			as.admitKeys[p] = map[string]bool{}
			as.admitted[p] = map[uint64]uint16{}
		}
		as.admitKeys[p][k] = true
		counts := as.admitted[p]
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
	case strings.HasPrefix(k, prefixUnitPart):
		f := strings.SplitN(k[len(prefixUnitPart):], "/", 3)
		if len(f) != 3 {
			return fmt.Errorf("%w: malformed unit part key %q", ErrIncompatible, k)
		}
		w, err1 := strconv.ParseInt(f[0], 10, 64)
		i, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil || i < 0 {
			return fmt.Errorf("%w: malformed unit part key %q", ErrIncompatible, k)
		}
		uk := string(ledger.UnitKey(f[2], w))
		if v == nil {
			delete(s.parts[uk], i)
			if len(s.parts[uk]) == 0 {
				delete(s.parts, uk)
			}
			return nil
		}
		if s.parts[uk] == nil {
			s.parts[uk] = map[int][]byte{}
		}
		s.parts[uk][i] = bytes.Clone(v)
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
			delete(s.split, uk)
			return nil
		}
		u := splitHead{Unit: new(ledger.Unit)}
		if err := json.Unmarshal(v, &u); err != nil {
			return fmt.Errorf("decode %s: %w", k, err)
		}
		if u.Histogram != hist || u.WindowStart != w || u.Parts < 0 {
			return fmt.Errorf("%w: record %q holds unit %s@%d (%d parts)", ErrIncompatible, k, u.Histogram, u.WindowStart, u.Parts)
		}
		s.units[uk] = bytes.Clone(v)
		if u.Parts > 0 {
			s.split[uk] = u.Parts
		} else {
			delete(s.split, uk)
		}
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
			return string(h.Value) == formatVersion || string(h.Value) == formatSplit
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
	u, err := decodeUnit(v, s.parts[k])
	if err != nil {
		return nil, false, fmt.Errorf("decode unit %x: %w", k, err)
	}
	return u, true, nil
}

// checkParts: every split unit has all its parts, and every part its
// unit (a log written by unitRecords' transactions, pruned by Prune, always
// does).
func (s *state) checkParts() error {
	for k, n := range s.split {
		for i := range n {
			if _, ok := s.parts[k][i]; !ok {
				return fmt.Errorf("%w: message part %d of %d of unit %x missing", ErrIncompatible, i, n, k)
			}
		}
	}
	for k, ps := range s.parts {
		if n := s.split[k]; len(ps) != n {
			return fmt.Errorf("%w: %d message parts of unit %x, which has %d", ErrIncompatible, len(ps), k, n)
		}
	}
	return nil
}

// decodeUnit decodes a unit's record, with a split unit's parts.
func decodeUnit(v []byte, parts map[int][]byte) (*ledger.Unit, error) {
	h := splitHead{Unit: new(ledger.Unit)}
	if err := json.Unmarshal(v, &h); err != nil {
		return nil, err
	}
	if h.Parts != len(parts) {
		return nil, fmt.Errorf("%w: a unit of %d message parts with %d in the log", ErrIncompatible, h.Parts, len(parts))
	}
	for i := range h.Parts {
		p, ok := parts[i]
		if !ok {
			return nil, fmt.Errorf("%w: message part %d of a unit missing", ErrIncompatible, i)
		}
		var ms []ledger.Message
		if err := json.Unmarshal(p, &ms); err != nil {
			return nil, fmt.Errorf("message part %d: %w", i, err)
		}
		h.Messages = append(h.Messages, ms...)
	}
	return h.Unit, nil
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
