// Package decode turns one raw event message (a flat JSON object) into the
// few values the stage needs: event time, a keyed hash of the user id, and
// for every configured histogram a bin index and a group index. It is the
// first thing hostile input meets, so it validates the whole message, never
// panics, and never allocates on the hot path.
//
// # What is accepted
//
//   - The message is exactly one JSON object (RFC 8259) with optional
//     surrounding whitespace. Values of keys that are not configured may be
//     anything, nested up to [MaxDepth]; they are validated and skipped. Only
//     top-level keys are looked at. Keys are matched exactly
//     (case-sensitively) after unescaping, so "p\u0061ge" is "page".
//   - Every string in the message must be valid UTF-8, and \u escapes must
//     not encode unpaired surrogates; otherwise the event is invalid_utf8
//     (encoding/json would silently substitute U+FFFD instead).
//   - Duplicate keys: the last occurrence wins, as in encoding/json. One
//     message is one event whatever its keys say, so a duplicate cannot make
//     a user count twice.
//   - Time field: a JSON number of Unix epoch milliseconds (any number form,
//     "1.7e12" included; fractions of a millisecond are floored); a JSON
//     string of ASCII digits only, read as epoch milliseconds
//     ("1700000000000" — unambiguous, since no RFC 3339 time is all digits);
//     or an RFC 3339 date-time string, "2023-11-14T22:13:20Z",
//     "2023-11-14T23:13:20.123456+01:00": 'T', 't' or ' ' between date and
//     time, 'Z', 'z' or ±hh:mm as offset, any number of fraction digits
//     (floored to milliseconds); no leap second 60 (time.Parse rejects it
//     too). Times outside [MinTimeMs, MaxTimeMs] (before 1970 or after 9999)
//     are bad_time. null counts as missing; true/false/objects/arrays are
//     wrong_type.
//   - User field: a non-empty string, or an integer JSON number (no
//     fraction, no exponent: those are wrong_type). The id is the string's
//     unescaped content or the number's literal text, so "123" and 123 are
//     the same user. null and "" are missing_user.
//   - Bin and group fields: a string's unescaped content, or the literal text
//     of a number, true or false ("1", "true"), matched exactly against the
//     declared values. A number matches only in the spelling it was declared
//     in ("1.0" does not match a bin "1"). null or absent is missing_field;
//     an object or array is wrong_type (for that histogram only).
//
// # The user hash
//
// [Event.User] is maphash of the user id bytes under the seed given to [New].
// The seed is random per process, so the hash cannot be precomputed by
// whoever produces events to force collisions. A collision between two users
// merges them under one contribution bound: together they count at most as
// much as one user may, and hashing never splits a user (which would let one
// user contribute twice). A merge is not free of cost, though: under the
// add_remove relation, removing one of two merged users can let the other's
// event count instead, a change of one user out and one in (the replace
// sensitivity). The seed makes that an accident, not an attack: with 64-bit
// hashes the expected number of colliding pairs among n users is n²/2⁶⁵,
// about 3·10⁻⁸ at one million users; and with the tracked-user cap on (the
// default) add_remove is charged the replace sensitivity anyway.
package decode

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/dpstage/stage/config"
)

// DefaultMaxMessageBytes is used when events.max_message_bytes is zero.
const DefaultMaxMessageBytes = config.DefaultMaxMessageBytes

// stackBuf is the size of the stack buffer escaped values are decoded into.
const stackBuf = 256

// Event is one decoded event. Create it with [Decoder.NewEvent] (one per
// worker) and reuse it for every message: Decode overwrites every field.
//
// Bins, Groups and Drops have one entry per configured histogram, in config
// order. When Decode returns a reason other than ReasonNone the event as a
// whole is dropped: every Bins and Groups entry is then -1 and every Drops
// entry ReasonNone (the event-level reason is the one to count).
type Event struct {
	// TimeMs is the event time in Unix milliseconds.
	TimeMs int64
	// User is the keyed 64-bit hash of the user id (see the package doc).
	User uint64
	// Bins[h] is the bin index of histogram h, or -1 when its part is dropped.
	Bins []int32
	// Groups[h] is the group index of histogram h (0 when it has no group_by),
	// or -1 when its part is dropped.
	Groups []int32
	// Drops[h] says why histogram h's part was dropped, ReasonNone otherwise.
	Drops []Reason

	slots   []span // per distinct field: where its value is in the message
	scratch []byte // for escaped values longer than the stack buffer
}

type histogram struct {
	binSlot   int // slot of the bin field
	groupSlot int // slot of the group_by field, -1 without group_by
	bins      map[string]int32
	overflow  int32 // overflow bin index, -1 if none
	groups    map[string]int32
	// binList and groupList are the declared bins and groups when there
	// are at most smallDomain of them (nil otherwise): such a domain is
	// matched by comparing lengths and bytes, cheaper than hashing the value
	// for a map lookup (measured by `stage bench`, see docs/bench.md).
	binList, groupList []string
}

// smallDomain is the largest domain matched by a linear scan.
const smallDomain = 8

// smallList returns values when there are at most smallDomain of them.
func smallList(values []string) []string {
	if len(values) > smallDomain {
		return nil
	}
	return slices.Clone(values)
}

// lookup returns the index of v in a domain given as list (linear scan,
// when not nil) or as m.
func lookup(list []string, m map[string]int32, v []byte) (int32, bool) {
	if list == nil {
		i, ok := m[string(v)]
		return i, ok
	}
	for i, x := range list {
		if len(x) == len(v) && x == string(v) {
			return int32(i), true
		}
	}
	return 0, false
}

// Decoder extracts the configured fields. It is immutable after [New] and
// safe for concurrent use by any number of goroutines, each with its own
// [Event].
type Decoder struct {
	maxBytes  int
	seed      maphash.Seed
	fields    []string       // distinct field names; index = slot
	fieldMap  map[string]int // for many fields; nil when the linear scan is used
	maxField  int            // longest field name
	timeSlot  int
	userSlot  int
	hists     []histogram
	maxValue  int // longest declared bin or group value
	scratchSz int // size of Event.scratch (0 when the stack buffer suffices)
}

// linearFields is how many fields are matched by linear scan before a map is
// used instead.
const linearFields = 12

// New builds the decoder's lookup tables from the public bins and groups in
// cfg. key seeds the user hash: use one random seed per process
// (maphash.MakeSeed()) and share it between every decoder whose users must
// be bounded together.
func New(cfg *config.Config, key maphash.Seed) (*Decoder, error) {
	if cfg == nil {
		return nil, errors.New("decode: nil config")
	}
	ev := cfg.Events
	if ev.Format != "" && ev.Format != "json" {
		return nil, fmt.Errorf("decode: events.format %q is not supported (only json)", ev.Format)
	}
	if ev.TimeField == "" {
		return nil, errors.New("decode: events.time_field is empty")
	}
	if ev.UserField == "" {
		return nil, errors.New("decode: events.user_field is empty")
	}
	if ev.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("decode: events.max_message_bytes is negative (%d)", ev.MaxMessageBytes)
	}
	if len(cfg.Histograms) == 0 {
		return nil, errors.New("decode: no histograms configured")
	}
	d := &Decoder{maxBytes: ev.MaxMessageBytes, seed: key}
	if d.maxBytes == 0 {
		d.maxBytes = DefaultMaxMessageBytes
	}
	slotOf := map[string]int{}
	slot := func(name string) int {
		if s, ok := slotOf[name]; ok {
			return s
		}
		slotOf[name] = len(d.fields)
		d.fields = append(d.fields, name)
		d.maxField = max(d.maxField, len(name))
		return len(d.fields) - 1
	}
	d.timeSlot = slot(ev.TimeField)
	d.userSlot = slot(ev.UserField)
	for i, h := range cfg.Histograms {
		if h.Field == "" {
			return nil, fmt.Errorf("decode: histograms[%d].field is empty", i)
		}
		if len(h.Bins) == 0 {
			return nil, fmt.Errorf("decode: histograms[%d].bins is empty", i)
		}
		hs := histogram{binSlot: slot(h.Field), groupSlot: -1, overflow: -1, bins: make(map[string]int32, len(h.Bins))}
		for j, b := range h.Bins {
			if _, dup := hs.bins[b]; dup {
				return nil, fmt.Errorf("decode: histograms[%d].bins: duplicate bin %q", i, b)
			}
			hs.bins[b] = int32(j)
			d.maxValue = max(d.maxValue, len(b))
		}
		hs.binList = smallList(h.Bins)
		if h.OverflowBin != "" {
			o, ok := hs.bins[h.OverflowBin]
			if !ok {
				return nil, fmt.Errorf("decode: histograms[%d].overflow_bin %q is not among the bins", i, h.OverflowBin)
			}
			hs.overflow = o
		}
		if h.GroupBy != "" {
			if len(h.Groups) == 0 {
				return nil, fmt.Errorf("decode: histograms[%d].groups is empty but group_by is set", i)
			}
			hs.groupSlot = slot(h.GroupBy)
			hs.groups = make(map[string]int32, len(h.Groups))
			for j, g := range h.Groups {
				if _, dup := hs.groups[g]; dup {
					return nil, fmt.Errorf("decode: histograms[%d].groups: duplicate group %q", i, g)
				}
				hs.groups[g] = int32(j)
				d.maxValue = max(d.maxValue, len(g))
			}
			hs.groupList = smallList(h.Groups)
		}
		d.hists = append(d.hists, hs)
	}
	if len(d.fields) > linearFields {
		d.fieldMap = slotOf
	}
	if d.maxValue > stackBuf {
		d.scratchSz = d.maxValue
	}
	return d, nil
}

// NumHistograms is the number of configured histograms (the length of an
// Event's Bins, Groups and Drops).
func (d *Decoder) NumHistograms() int { return len(d.hists) }

// MaxMessageBytes is the size above which messages are oversized.
func (d *Decoder) MaxMessageBytes() int { return d.maxBytes }

// NewEvent returns an Event sized for this decoder.
func (d *Decoder) NewEvent() *Event {
	n := len(d.hists)
	ev := &Event{
		Bins:   make([]int32, n),
		Groups: make([]int32, n),
		Drops:  make([]Reason, n),
		slots:  make([]span, len(d.fields)),
	}
	if d.scratchSz > 0 {
		ev.scratch = make([]byte, d.scratchSz)
	}
	return ev
}

// lookupField returns the slot of the key (raw, still escaped when esc), or -1.
func (d *Decoder) lookupField(key []byte, esc bool) int {
	if esc {
		if len(key) > 6*d.maxField+6 { // cannot unescape to a configured name
			return -1
		}
		var buf [stackBuf]byte
		if d.maxField > len(buf) {
			return d.lookupLongKey(key)
		}
		n, ok := unescape(buf[:d.maxField], key)
		if !ok {
			return -1
		}
		return d.lookupPlain(buf[:n])
	}
	return d.lookupPlain(key)
}

func (d *Decoder) lookupPlain(key []byte) int {
	if d.fieldMap != nil {
		if s, ok := d.fieldMap[string(key)]; ok {
			return s
		}
		return -1
	}
	for i, f := range d.fields {
		if len(f) == len(key) && f == string(key) {
			return i
		}
	}
	return -1
}

// lookupLongKey handles escaped keys when a configured field name is longer
// than the stack buffer (an odd configuration); it allocates.
func (d *Decoder) lookupLongKey(key []byte) int {
	buf := make([]byte, d.maxField)
	n, ok := unescape(buf, key)
	if !ok {
		return -1
	}
	return d.lookupPlain(buf[:n])
}

// Decode decodes msg into ev and returns ReasonNone when the event as a whole
// is usable (individual histograms may still be dropped: see ev.Drops), or
// the whole-event reason: oversized, bad_json, invalid_utf8, missing_time,
// bad_time, missing_user or wrong_type. Checks run in that order; within the
// JSON scan the first defect found decides between bad_json and
// invalid_utf8. Decode never retains msg and never panics on any msg.
func (d *Decoder) Decode(msg []byte, ev *Event) Reason {
	if len(ev.Bins) != len(d.hists) || len(ev.Groups) != len(d.hists) ||
		len(ev.Drops) != len(d.hists) || len(ev.slots) != len(d.fields) ||
		len(ev.scratch) < d.scratchSz {
		*ev = *d.NewEvent() // an Event from another decoder
	}
	r := d.decode(msg, ev)
	if r != ReasonNone {
		for h := range ev.Bins {
			ev.Bins[h], ev.Groups[h], ev.Drops[h] = -1, -1, ReasonNone
		}
	}
	return r
}

func (d *Decoder) decode(msg []byte, ev *Event) Reason {
	ev.TimeMs, ev.User = 0, 0
	if len(msg) > d.maxBytes {
		return ReasonOversized
	}
	if r := d.scan(msg, ev.slots); r != ReasonNone {
		return r
	}
	var buf [stackBuf]byte
	tmp := buf[:]
	if d.scratchSz > 0 {
		tmp = ev.scratch
	}

	// Time.
	ts := ev.slots[d.timeSlot]
	switch ts.kind {
	case kindNone, kindNull:
		return ReasonMissingTime
	case kindNumber:
		t, ok := parseEpochNumber(msg[ts.start:ts.end])
		if !ok {
			return ReasonBadTime
		}
		ev.TimeMs = t
	case kindString:
		v := msg[ts.start:ts.end]
		if ts.esc {
			var tb [64]byte // longer than any valid time
			n, ok := unescape(tb[:], v)
			if !ok {
				return ReasonBadTime
			}
			v = tb[:n]
			if t, ok := parseTimeString(v); ok {
				ev.TimeMs = t
			} else {
				return ReasonBadTime
			}
		} else if t, ok := parseTimeString(v); ok {
			ev.TimeMs = t
		} else {
			return ReasonBadTime
		}
	default:
		return ReasonWrongType
	}

	// User.
	us := ev.slots[d.userSlot]
	switch us.kind {
	case kindNone, kindNull:
		return ReasonMissingUser
	case kindString:
		if us.start == us.end {
			return ReasonMissingUser
		}
		if us.esc {
			ev.User = hashEscaped(d.seed, msg[us.start:us.end])
		} else {
			ev.User = maphash.Bytes(d.seed, msg[us.start:us.end])
		}
	case kindNumber:
		for _, c := range msg[us.start:us.end] {
			if c == '.' || c == 'e' || c == 'E' {
				return ReasonWrongType
			}
		}
		ev.User = maphash.Bytes(d.seed, msg[us.start:us.end])
	default:
		return ReasonWrongType
	}

	// Histograms.
	for h := range d.hists {
		hs := &d.hists[h]
		ev.Bins[h], ev.Groups[h], ev.Drops[h] = -1, -1, ReasonNone
		v, r := value(msg, ev.slots[hs.binSlot], tmp)
		if r != ReasonNone {
			ev.Drops[h] = r
			continue
		}
		b, ok := lookup(hs.binList, hs.bins, v)
		if !ok {
			if hs.overflow < 0 {
				ev.Drops[h] = ReasonOutOfDomain
				continue
			}
			b = hs.overflow
		}
		g := int32(0)
		if hs.groupSlot >= 0 {
			v, r := value(msg, ev.slots[hs.groupSlot], tmp)
			if r != ReasonNone {
				ev.Drops[h] = r
				continue
			}
			if g, ok = lookup(hs.groupList, hs.groups, v); !ok {
				ev.Drops[h] = ReasonUnknownGroup
				continue
			}
		}
		ev.Bins[h], ev.Groups[h] = b, g
	}
	return ReasonNone
}

// parseTimeString parses the unescaped content of a string time field.
func parseTimeString(v []byte) (int64, bool) {
	if allDigits(v) {
		return parseEpochDigits(v)
	}
	return parseRFC3339(v)
}

// value returns the bytes a bin or group value is matched by: a string's
// unescaped content or a number's or boolean's literal text. An escaped
// string that does not fit tmp (which is at least as long as the longest
// declared value) cannot match, and is returned as its raw form, which is
// longer than tmp and so also matches nothing.
func value(msg []byte, sp span, tmp []byte) ([]byte, Reason) {
	switch sp.kind {
	case kindNone, kindNull:
		return nil, ReasonMissingField
	case kindObject, kindArray:
		return nil, ReasonWrongType
	}
	v := msg[sp.start:sp.end]
	if sp.esc {
		if n, ok := unescape(tmp, v); ok {
			return tmp[:n], ReasonNone
		}
	}
	return v, ReasonNone
}

// hashEscaped hashes the unescaped form of an escaped string, streaming it
// through maphash.Hash (the result equals maphash.Bytes of the unescaped
// bytes).
func hashEscaped(seed maphash.Seed, v []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var buf [64]byte
	for i := 0; i < len(v); {
		// Unescape a chunk that ends at an escape boundary.
		j := i
		n := 0
		for j < len(v) && n+4 <= len(buf) {
			k := j + 1
			if v[j] == '\\' {
				k = j + 2
				if v[j+1] == 'u' {
					k = j + 6
					if u := hex4(v, j+2); u >= 0xD800 && u < 0xDC00 {
						k = j + 12
					}
				}
			}
			m, _ := unescape(buf[n:], v[j:k]) // at most 4 bytes: fits
			n += m
			j = k
		}
		h.Write(buf[:n])
		i = j
	}
	return h.Sum64()
}

// scan validates msg as one JSON object and records in slots where the
// configured fields' values are (kindNone for absent ones). Duplicate keys:
// the last occurrence wins.
func (d *Decoder) scan(msg []byte, slots []span) Reason {
	clear(slots)
	i := skipWS(msg, 0)
	if i >= len(msg) || msg[i] != '{' {
		return ReasonBadJSON
	}
	i = skipWS(msg, i+1)
	if i < len(msg) && msg[i] == '}' {
		i++
	} else {
		for {
			if i >= len(msg) || msg[i] != '"' {
				return ReasonBadJSON
			}
			end, esc, r := scanString(msg, i)
			if r != ReasonNone {
				return r
			}
			slot := d.lookupField(msg[i+1:end-1], esc)
			i = skipWS(msg, end)
			if i >= len(msg) || msg[i] != ':' {
				return ReasonBadJSON
			}
			i = skipWS(msg, i+1)
			if i >= len(msg) {
				return ReasonBadJSON
			}
			var sp span
			if c := msg[i]; c == '{' || c == '[' {
				end, r = skipContainer(msg, i, 1)
				k := kindObject
				if c == '[' {
					k = kindArray
				}
				sp = span{start: i, end: end, kind: k}
			} else {
				sp, end, r = scanScalar(msg, i)
			}
			if r != ReasonNone {
				return r
			}
			if slot >= 0 {
				slots[slot] = sp
			}
			i = skipWS(msg, end)
			if i >= len(msg) {
				return ReasonBadJSON
			}
			if msg[i] == '}' {
				i++
				break
			}
			if msg[i] != ',' {
				return ReasonBadJSON
			}
			i = skipWS(msg, i+1)
		}
	}
	if skipWS(msg, i) != len(msg) {
		return ReasonBadJSON
	}
	return ReasonNone
}
