package decode

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unsafe"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/siphash"
)

// DefaultMaxMessageBytes is used when events.max_message_bytes is zero.
const DefaultMaxMessageBytes = config.DefaultMaxMessageBytes

// stackBuf is the size of the stack buffer escaped values are decoded into.
const stackBuf = 256

// Event is one decoded event. Create it with [Decoder.NewEvent] (one per
// worker) and reuse it for every message: Decode overwrites every field.
//
// Bins, Groups, Drops and Vectors have one entry per configured histogram,
// in config order. When Decode returns a reason other than ReasonNone the
// event as a whole is dropped: every Bins and Groups entry is then -1, every
// Drops entry ReasonNone (the event-level reason is the one to count), and
// the content of the Vectors is unspecified.
//
// A histogram of kind average never has a bin or group: its Bins and Groups
// entries are always -1 (whoever counts must skip it, by Vectors[h] != nil),
// and its part of the event, when Drops[h] is ReasonNone, is Vectors[h].
type Event struct {
	// TimeMs is the event time in Unix milliseconds.
	TimeMs int64
	// User is the keyed 64-bit hash of the user id (see the package doc).
	User uint64
	// Bins[h] is the bin index of histogram h, or -1 when its part is dropped.
	Bins []int32
	// Groups[h] is the group index of histogram h (0 when it has no group_by,
	// and for a histogram that selects its groups: see Keys), or -1 when its
	// part is dropped.
	Groups []int32
	// Keys[h] is the group key of histogram h when it selects its groups
	// (group_by and no listed groups, config.Histogram.Selects) and its part
	// is not dropped: the group_by value's bytes (a string's unescaped
	// content, a number's or boolean's text, as bins are matched), at most
	// MaxKeyBytes long, possibly empty but never nil. Nil for any other
	// histogram or a dropped part. Valid until the next Decode into the
	// Event (copy it to keep it).
	Keys [][]byte
	// Drops[h] says why histogram h's part was dropped, ReasonNone otherwise.
	Drops []Reason
	// Vectors[h] is nil for a count histogram. For an average histogram it
	// is a slice of len(bins) allocated once by NewEvent and overwritten in
	// place by Decode: when Decode returns ReasonNone and Drops[h] is
	// ReasonNone it holds the event's probability vector, divided by its sum
	// (non-negative, summing to 1 up to rounding); otherwise its content is
	// unspecified. Copy it to keep it past the next Decode.
	Vectors [][]float64

	// Err says why, when DecodeRecord returns a reason whose Hold method
	// reports true (the Schema Registry's error); nil otherwise.
	Err error

	slots   []span   // per distinct field: where its value is in the message
	ext     [][]byte // per distinct field: the bytes of an ext span
	scratch []byte   // for escaped values longer than the stack buffer
	keyBuf  []byte   // the bytes of Keys (MaxKeyBytes per selecting histogram)
}

type histogram struct {
	// average: a kind average histogram, whose binSlot field holds a vector
	// of dim numbers; bins, groups and the lists below are then unused.
	average   bool
	dim       int
	binSlot   int // slot of the bin field
	groupSlot int // slot of the group_by field, -1 without group_by
	bins      map[string]int32
	overflow  int32 // overflow bin index, -1 if none
	groups    map[string]int32
	// selects: group_by without listed groups; the part carries its key
	// (Event.Keys) when the key is sampled and at most MaxKeyBytes long.
	selects bool
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
	key       siphash.Key
	fields    []string // distinct field keys; index = slot
	root      *pathNode
	timeSlot  int
	userSlot  int
	hists     []histogram
	maxValue  int // longest declared bin or group value
	scratchSz int // size of Event.scratch (0 when the stack buffer suffices)
	// part, when not PartitionerNone, checks that the user id assigns to
	// partition of partitions (WithPartitionCheck, partition.go).
	part                  Partitioner
	partition, partitions int
	// keyRate is keyhash.Threshold(selection.key_sample_rate): a selecting
	// histogram's key is kept iff keyhash.Sampled(keyhash.Sum(key), keyRate).
	keyRate uint64
	// keyBytes is MaxKeyBytes × the number of selecting histograms.
	keyBytes int

	// The record fields ($key, $timestamp, $header.<name>): their slots,
	// -1 when not configured.
	keySlot, tsSlot int
	headers         []headerField
	// vectorSlot[s]: slot s holds an average histogram's vector.
	vectorSlot []bool
	// format is events.format; schemas resolves the schema ids of the
	// avro and protobuf formats (nil for json).
	format  string
	schemas *schemaSet
}

// headerField is a configured $header.<name> field.
type headerField struct {
	name string
	slot int
}

// linearFields is how many fields are matched by linear scan before a map is
// used instead.
const linearFields = 12

// New builds the decoder's lookup tables from the public bins and groups in
// cfg. key keys the user hash: share one secret key (siphash.NewKey, kept
// in the ledger by the stage) between every decoder whose users must be
// bounded together.
func New(cfg *config.Config, key siphash.Key) (*Decoder, error) {
	if cfg == nil {
		return nil, errors.New("decode: nil config")
	}
	ev := cfg.Events
	switch ev.Format {
	case "", config.FormatJSON, config.FormatAvro, config.FormatProtobuf:
	default:
		return nil, fmt.Errorf("decode: events.format %q is not supported (json, avro or protobuf)", ev.Format)
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
	d := &Decoder{maxBytes: ev.MaxMessageBytes, key: key, root: &pathNode{}, keySlot: -1, tsSlot: -1, format: ev.Format}
	if d.format == "" {
		d.format = config.FormatJSON
	}
	if d.maxBytes == 0 {
		d.maxBytes = DefaultMaxMessageBytes
	}
	slotOf := map[string]int{}
	slot := func(name string) int {
		if s, ok := slotOf[name]; ok {
			return s
		}
		s := len(d.fields)
		slotOf[name] = s
		d.fields = append(d.fields, name)
		switch k, rest := parseField(name); k {
		case fieldKey:
			d.keySlot = s
		case fieldTimestamp:
			d.tsSlot = s
		case fieldHeader:
			d.headers = append(d.headers, headerField{name: rest, slot: s})
		default:
			d.root.add(config.PathSegments(rest), s)
		}
		return s
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
		switch h.Kind {
		case "", config.KindCount, config.KindAverage:
		default:
			return nil, fmt.Errorf("decode: histograms[%d].kind %q is not supported (count or average)", i, h.Kind)
		}
		hs := histogram{binSlot: slot(h.Field), groupSlot: -1, overflow: -1, bins: make(map[string]int32, len(h.Bins))}
		for j, b := range h.Bins {
			if _, dup := hs.bins[b]; dup {
				return nil, fmt.Errorf("decode: histograms[%d].bins: duplicate bin %q", i, b)
			}
			hs.bins[b] = int32(j)
		}
		if h.IsAverage() {
			if h.OverflowBin != "" || h.GroupBy != "" || len(h.Groups) > 0 {
				return nil, fmt.Errorf("decode: histograms[%d]: an average histogram takes no overflow_bin, group_by or groups", i)
			}
			d.hists = append(d.hists, histogram{average: true, dim: len(h.Bins), binSlot: hs.binSlot, groupSlot: -1, overflow: -1})
			continue
		}
		for _, b := range h.Bins {
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
		if h.GroupBy != "" && len(h.Groups) == 0 {
			// Unlisted groups (issue 30): the key is the value itself.
			var err error
			if d.keyRate, err = sampleThreshold(cfg.Selection.KeySampleRate); err != nil {
				return nil, err
			}
			hs.groupSlot, hs.selects = slot(h.GroupBy), true
			d.maxValue = max(d.maxValue, MaxKeyBytes)
			d.keyBytes += MaxKeyBytes
		} else if h.GroupBy != "" {
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
	d.root.finish()
	d.vectorSlot = make([]bool, len(d.fields))
	for _, hs := range d.hists {
		if hs.average {
			d.vectorSlot[hs.binSlot] = true
		}
	}
	if d.format != config.FormatJSON {
		var err error
		if d.schemas, err = newSchemaSet(d, cfg); err != nil {
			return nil, err
		}
	}
	if d.maxValue > stackBuf {
		d.scratchSz = d.maxValue
	}
	return d, nil
}

// NumHistograms is the number of configured histograms (the length of an
// Event's Bins, Groups, Drops and Vectors).
func (d *Decoder) NumHistograms() int { return len(d.hists) }

// MaxMessageBytes is the size above which messages are oversized.
func (d *Decoder) MaxMessageBytes() int { return d.maxBytes }

// NewEvent returns an Event sized for this decoder.
func (d *Decoder) NewEvent() *Event {
	n := len(d.hists)
	ev := &Event{
		Bins:    make([]int32, n),
		Groups:  make([]int32, n),
		Keys:    make([][]byte, n),
		Drops:   make([]Reason, n),
		Vectors: make([][]float64, n),
		slots:   make([]span, len(d.fields)),
		ext:     make([][]byte, len(d.fields)),
	}
	dims := 0
	for _, hs := range d.hists {
		dims += hs.dim
	}
	if dims > 0 {
		all := make([]float64, dims)
		for h, hs := range d.hists {
			if hs.average {
				ev.Vectors[h], all = all[:hs.dim:hs.dim], all[hs.dim:]
			}
		}
	}
	if d.scratchSz > 0 {
		ev.scratch = make([]byte, d.scratchSz)
	}
	if d.keyBytes > 0 {
		ev.keyBuf = make([]byte, 0, d.keyBytes)
	}
	return ev
}

// Decode decodes the message value msg into ev: [Decoder.DecodeRecord] of
// a record with that value, no key, no headers and no timestamp (a
// $timestamp time field is then bad_time). For the JSON callers that have
// only the value.
func (d *Decoder) Decode(msg []byte, ev *Event) Reason {
	return d.run(msg, nil, ev)
}

// DecodeRecord decodes rec into ev and returns ReasonNone when the event as
// a whole is usable (individual histograms may still be dropped: see
// ev.Drops), or the whole-event reason: oversized; for json bad_json or
// invalid_utf8; for avro and protobuf unknown_magic_byte,
// unknown_schema_id, undecodable or invalid_utf8; then missing_time,
// bad_time, missing_user, wrong_type or wrong_partition. Checks run in that
// order; within the JSON scan the first defect found decides between
// bad_json and invalid_utf8.
//
// One outcome is not a drop: [ReasonSchemaUnavailable] (its Hold method
// reports true) says the record's schema could not be fetched from the
// Schema Registry (unreachable, timing out, answering an error other than
// "not found"); ev.Err says why. The record is not bad input: the caller
// must not drop, count or commit it, and must retry the same record later
// (see the package doc, "Holding a partition").
//
// DecodeRecord never retains rec or its slices and never panics on any
// input.
func (d *Decoder) DecodeRecord(rec *Record, ev *Event) Reason {
	return d.run(rec.Value, rec, ev)
}

// run decodes the value msg of rec (nil: a record with only that value).
func (d *Decoder) run(msg []byte, rec *Record, ev *Event) Reason {
	if !d.fits(ev) {
		*ev = *d.NewEvent() // an Event from another decoder
	}
	ev.Err = nil
	r := d.decode(msg, rec, ev)
	if r != ReasonNone {
		for h := range ev.Bins {
			ev.Bins[h], ev.Groups[h], ev.Drops[h], ev.Keys[h] = -1, -1, ReasonNone, nil
		}
	}
	return r
}

// fits reports whether ev has the shape of this decoder's events.
func (d *Decoder) fits(ev *Event) bool {
	if len(ev.Bins) != len(d.hists) || len(ev.Groups) != len(d.hists) || len(ev.Keys) != len(d.hists) || cap(ev.keyBuf) < d.keyBytes ||
		len(ev.Drops) != len(d.hists) || len(ev.Vectors) != len(d.hists) ||
		len(ev.slots) != len(d.fields) || len(ev.ext) != len(d.fields) || len(ev.scratch) < d.scratchSz {
		return false
	}
	for h := range d.hists {
		if len(ev.Vectors[h]) != d.hists[h].dim {
			return false
		}
	}
	return true
}

func (d *Decoder) decode(msg []byte, rec *Record, ev *Event) Reason {
	ev.TimeMs, ev.User = 0, 0
	if len(msg) > d.maxBytes {
		return ReasonOversized
	}
	if d.schemas == nil {
		if r := d.scan(msg, ev.slots); r != ReasonNone {
			return r
		}
	} else {
		payload, r := d.schemas.decode(msg, ev)
		if r != ReasonNone {
			return r
		}
		msg = payload
	}
	if d.keySlot >= 0 || d.tsSlot >= 0 || len(d.headers) > 0 {
		if rec == nil {
			rec = &Record{TimestampMs: -1}
		}
		d.recordFields(rec, ev.slots, ev.ext)
	}
	return d.extract(msg, ev)
}

// recordFields fills the slots of the record fields ($key, $timestamp,
// $header.<name>).
func (d *Decoder) recordFields(rec *Record, slots []span, ext [][]byte) {
	if d.keySlot >= 0 {
		switch k := rec.Key; {
		case k == nil:
			slots[d.keySlot] = span{kind: kindNull}
		case len(k) > 0 && k[0] == 0:
			// A key in the wire format (magic byte 0): its bytes change
			// with the key schema's id, so hashing them could split a
			// user in two. Refused (wrong_type).
			slots[d.keySlot] = span{kind: kindObject}
		default:
			slots[d.keySlot], ext[d.keySlot] = extSpan(kindString, k), k
		}
	}
	if d.tsSlot >= 0 {
		slots[d.tsSlot] = numSpan(kindTimeMs, rec.TimestampMs)
	}
	for _, h := range d.headers {
		sp := span{}
		for i := range rec.Headers { // the last header of that name wins
			if rec.Headers[i].Key == h.name {
				if v := rec.Headers[i].Value; v == nil {
					sp = span{kind: kindNull}
				} else {
					sp, ext[h.slot] = extSpan(kindString, v), v
				}
			}
		}
		slots[h.slot] = sp
	}
}

// bytesOf returns the bytes of a string, number or literal value: in its
// own buffer x (an ext span: the record key, a header, a static string) or
// in msg.
func bytesOf(msg []byte, sp span, x []byte) []byte {
	if sp.ext {
		return x[sp.start:sp.end]
	}
	return msg[sp.start:sp.end]
}

// extract reads the time, the user and every histogram's value from the
// slots filled by the scan or the schema walk (msg is the JSON message or
// the schema-encoded payload).
func (d *Decoder) extract(msg []byte, ev *Event) Reason {
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
		v := bytesOf(msg, ts, ev.ext[d.timeSlot])
		if ts.esc {
			var tb [64]byte // longer than any valid time
			n, ok := unescape(tb[:], v)
			if !ok {
				return ReasonBadTime
			}
			v = tb[:n]
		}
		t, ok := parseTimeString(v)
		if !ok {
			return ReasonBadTime
		}
		ev.TimeMs = t
	case kindInt, kindTimeMs:
		if ts.num() < MinTimeMs || ts.num() > MaxTimeMs {
			return ReasonBadTime
		}
		ev.TimeMs = ts.num()
	case kindUint:
		if uint64(ts.num()) > uint64(MaxTimeMs) {
			return ReasonBadTime
		}
		ev.TimeMs = ts.num()
	case kindFloat:
		f := math.Float64frombits(uint64(ts.num()))
		if !(f >= float64(MinTimeMs) && f < float64(MaxTimeMs)+1) {
			return ReasonBadTime
		}
		ev.TimeMs = int64(math.Floor(f))
	default:
		return ReasonWrongType
	}

	// User.
	us := ev.slots[d.userSlot]
	switch us.kind {
	case kindNone, kindNull:
		return ReasonMissingUser
	case kindString:
		v := bytesOf(msg, us, ev.ext[d.userSlot])
		if len(v) == 0 {
			return ReasonMissingUser
		}
		if d.part != PartitionerNone && !d.checkPartition(v, us.esc) {
			return ReasonWrongPartition
		}
		if us.esc {
			ev.User = hashEscaped(d.key, v)
		} else {
			ev.User = d.key.Sum64(v)
		}
	case kindNumber:
		for _, c := range msg[us.start:us.end] {
			if c == '.' || c == 'e' || c == 'E' {
				return ReasonWrongType
			}
		}
		if d.part != PartitionerNone && !d.checkPartition(msg[us.start:us.end], false) {
			return ReasonWrongPartition
		}
		ev.User = d.key.Sum64(msg[us.start:us.end])
	case kindInt, kindUint:
		// The decimal text, as for a JSON integer: 123 and "123" are one
		// user in every format.
		var nb [24]byte
		v := appendInt(nb[:0], us)
		if d.part != PartitionerNone && !d.checkPartition(v, false) {
			return ReasonWrongPartition
		}
		ev.User = d.key.Sum64(v)
	default:
		return ReasonWrongType
	}

	// Histograms.
	ev.keyBuf = ev.keyBuf[:0]
	for h := range d.hists {
		hs := &d.hists[h]
		ev.Bins[h], ev.Groups[h], ev.Drops[h], ev.Keys[h] = -1, -1, ReasonNone, nil
		if hs.average {
			ev.Drops[h] = vector(msg, ev.slots[hs.binSlot], ev.Vectors[h])
			continue
		}
		var v []byte
		r := ReasonNone
		if sp := ev.slots[hs.binSlot]; sp.kind == kindString && !sp.esc && !sp.ext {
			v = msg[sp.start:sp.end]
		} else {
			v, r = value(msg, sp, ev.ext[hs.binSlot], tmp)
		}
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
			var v []byte
			r := ReasonNone
			if sp := ev.slots[hs.groupSlot]; sp.kind == kindString && !sp.esc && !sp.ext {
				v = msg[sp.start:sp.end]
			} else {
				v, r = value(msg, sp, ev.ext[hs.groupSlot], tmp)
			}
			if r != ReasonNone {
				ev.Drops[h] = r
				continue
			}
			if hs.selects {
				if r := d.keep(v); r != ReasonNone {
					ev.Drops[h] = r
					continue
				}
				// Its own copy: v may be in tmp, which the next field reuses.
				n := len(ev.keyBuf)
				ev.keyBuf = append(ev.keyBuf, v...)
				ev.Bins[h], ev.Groups[h], ev.Keys[h] = b, 0, ev.keyBuf[n:len(ev.keyBuf):len(ev.keyBuf)]
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

// appendInt appends the decimal text of a kindInt or kindUint value.
func appendInt(b []byte, sp span) []byte {
	if sp.kind == kindUint {
		return strconv.AppendUint(b, uint64(sp.num()), 10)
	}
	return strconv.AppendInt(b, sp.num(), 10)
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
//
// The values of the schema-encoded formats are matched by their text too:
// an integer by its decimal text, a float or double by Go's shortest
// representation (strconv 'g', -1: 2.0 is "2", 0.5 is "0.5"), a boolean as
// "true" or "false", an enum by its symbol's name (written into tmp or
// pointing to static text).
//
// extract handles a plain string in msg itself (the common case) before
// calling value.
func value(msg []byte, sp span, x, tmp []byte) ([]byte, Reason) {
	switch sp.kind {
	case kindNone, kindNull:
		return nil, ReasonMissingField
	case kindObject, kindArray, kindVector:
		return nil, ReasonWrongType
	case kindInt, kindUint, kindTimeMs:
		return appendInt(tmp[:0], sp), ReasonNone
	case kindFloat:
		return strconv.AppendFloat(tmp[:0], math.Float64frombits(uint64(sp.num())), 'g', -1, 64), ReasonNone
	}
	v := bytesOf(msg, sp, x)
	if sp.esc {
		if n, ok := unescape(tmp, v); ok {
			return tmp[:n], ReasonNone
		}
	}
	return v, ReasonNone
}

// vectorTolerance is how far from 1 the sum of a vector may be.
const vectorTolerance = 1e-6

// vector parses the value sp of an average histogram's field into out
// (len(out) is the number of bins) and normalizes it to sum 1. It returns
// ReasonNone, or why the histogram's part is dropped (the content of out is
// then unspecified).
func vector(msg []byte, sp span, out []float64) Reason {
	switch sp.kind {
	case kindNone, kindNull:
		return ReasonMissingField
	case kindArray:
		if !parseVector(msg[sp.start:sp.end], out) {
			return ReasonBadVector
		}
	case kindVector:
		if !parseBinaryVector(msg[sp.start:sp.end], sp.elem, out) {
			return ReasonBadVector
		}
	default:
		return ReasonWrongType
	}
	sum := 0.0
	for _, x := range out {
		sum += x
	}
	if !(sum >= 1-vectorTolerance && sum <= 1+vectorTolerance) {
		return ReasonBadVector
	}
	for i := range out {
		out[i] /= sum
	}
	return ReasonNone
}

// parseVector parses the array b (its raw text, brackets included, already
// validated by the scan) into out. It reports false unless b holds exactly
// len(out) numbers, each non-negative and finite as a float64.
func parseVector(b []byte, out []float64) bool {
	n := 0
	i := skipWS(b, 1) // past '['
	if i < len(b) && b[i] == ']' {
		return len(out) == 0
	}
	for i < len(b) {
		if c := b[i]; c != '-' && (c < '0' || c > '9') {
			return false // string, literal, object or array
		}
		end, r := scanNumber(b, i)
		if r != ReasonNone || n >= len(out) {
			return false
		}
		x, ok := parseFloat(b[i:end])
		if !ok || x < 0 {
			return false
		}
		out[n] = x
		n++
		i = skipWS(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ']':
			return n == len(out)
		case ',':
			i = skipWS(b, i+1)
		default:
			return false
		}
	}
	return false
}

// parseFloat parses a JSON number (validated by scanNumber) as a float64,
// rounding to nearest; ok is false when it overflows to ±Inf.
//
// The string passed to strconv.ParseFloat aliases b instead of copying it:
// a plain string(b) is copied to the heap when longer than 32 bytes (the
// compiler's stack buffer), and a valid vector must decode without
// allocating whatever its spelling. This is safe because b is neither
// modified during the call nor referenced after it: ParseFloat keeps its
// argument only in the error it returns, which is dropped here.
func parseFloat(b []byte) (float64, bool) {
	x, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64)
	if err != nil || math.IsInf(x, 0) {
		return 0, false
	}
	return x, true
}

// hashEscaped hashes the unescaped form of an escaped string (the result
// equals key.Sum64 of the unescaped bytes). Escaped user ids are rare; one
// up to 256 bytes unescapes on the stack.
func hashEscaped(key siphash.Key, v []byte) uint64 {
	var stack [256]byte
	buf := stack[:]
	if len(v) > len(buf) {
		buf = make([]byte, len(v)) // unescaping never lengthens
	}
	n, _ := unescape(buf, v)
	return key.Sum64(buf[:n])
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
	end, r := scanObject(msg, i, d.root, slots, 1)
	if r != ReasonNone {
		return r
	}
	if skipWS(msg, end) != len(msg) {
		return ReasonBadJSON
	}
	return ReasonNone
}
