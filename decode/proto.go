package decode

import (
	"encoding/binary"
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf: the schema (a .proto source from the registry or a schema file)
// is compiled with github.com/bufbuild/protocompile into descriptors, and
// every message of it, against the configured paths, into a protoMsg: the
// fields on a configured path by number. The payload is walked with
// google.golang.org/protobuf/encoding/protowire: fields not on a path are
// skipped by wire type (their structure checked, their content not
// decoded), fields on a path are recorded. See the package doc,
// "Protobuf".

// protoMsg is one compiled message type.
type protoMsg struct {
	small []*protoField                    // by field number, when every number on a path is < len(small)
	m     map[protowire.Number]*protoField // otherwise
	// defaults are the slots of fields without presence (proto3 scalars
	// not marked optional), which an encoder leaves out when they hold
	// their default value: set before the message is walked.
	defaults []staticSlot
}

type staticSlot struct {
	slot int
	sp   span
	ext  []byte // the bytes of an ext span
}

type protoField struct {
	kind  protoreflect.Kind
	list  bool // repeated or map
	slot  int  // -1: none
	sub   *protoMsg
	wrong []int // paths below a field that is not a singular message
	// timestamp: a google.protobuf.Timestamp leaf (an event time).
	timestamp bool
	vector    bool
	enum      map[int32][]byte // enum value names by number
}

func (m *protoMsg) field(n protowire.Number) *protoField {
	if m.m != nil {
		return m.m[n]
	}
	if int(n) < len(m.small) {
		return m.small[n]
	}
	return nil
}

// protoNode mirrors a file's message tree, for the message indexes.
type protoNode struct {
	msg    *protoMsg
	nested []*protoNode
}

// compileProtoTree compiles every message of msgs (and the messages nested
// in them); check, when not nil, collects what the first one resolves.
func compileProtoTree(d *Decoder, msgs protoreflect.MessageDescriptors, check pathCheck) []*protoNode {
	out := make([]*protoNode, msgs.Len())
	for i := range msgs.Len() {
		md := msgs.Get(i)
		var c pathCheck
		if i == 0 {
			c = check
		}
		out[i] = &protoNode{msg: compileProto(d, md, d.root, c), nested: compileProtoTree(d, md.Messages(), nil)}
	}
	return out
}

// compileProto compiles message md for the paths of node; check, when not
// nil, collects which paths it resolves.
func compileProto(d *Decoder, md protoreflect.MessageDescriptor, node *pathNode, check pathCheck) *protoMsg {
	m := &protoMsg{}
	fields := map[protowire.Number]*protoField{}
	maxNum := protowire.Number(0)
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		j := node.index(string(fd.Name()))
		if j < 0 {
			continue
		}
		k := node.kids[j]
		f := &protoField{kind: fd.Kind(), list: fd.IsList() || fd.IsMap(), slot: k.leaf}
		msgKind := fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
		if k.leaf >= 0 && check != nil {
			check.reached(k.leaf)
		}
		if k.sub != nil {
			if msgKind && !f.list {
				f.sub = compileProto(d, fd.Message(), k.sub, check)
			} else {
				f.wrong = k.under
				if check != nil {
					check.through(k.under)
				}
			}
		}
		if f.slot >= 0 {
			switch {
			case msgKind && !f.list && fd.Message().FullName() == "google.protobuf.Timestamp":
				f.timestamp = true
			case f.list && !fd.IsMap() && d.vectorSlot[f.slot] && (fd.Kind() == protoreflect.DoubleKind || fd.Kind() == protoreflect.FloatKind):
				f.vector = true
			case fd.Kind() == protoreflect.EnumKind:
				f.enum = map[int32][]byte{}
				vals := fd.Enum().Values()
				for k := range vals.Len() {
					v := vals.Get(k)
					if _, dup := f.enum[int32(v.Number())]; !dup { // aliases: the first name
						f.enum[int32(v.Number())] = []byte(v.Name())
					}
				}
			}
			if !fd.HasPresence() && !f.list && !msgKind && f.slot != d.timeSlot && f.slot != d.userSlot {
				sp, x := protoDefault(f)
				m.defaults = append(m.defaults, staticSlot{slot: f.slot, sp: sp, ext: x})
			}
		}
		fields[fd.Number()] = f
		maxNum = max(maxNum, fd.Number())
	}
	if maxNum < 256 {
		m.small = make([]*protoField, maxNum+1)
		for n, f := range fields {
			m.small[n] = f
		}
	} else {
		m.m = fields
	}
	return m
}

var emptyText = []byte{}

// protoDefault is the value of an absent field without presence.
func protoDefault(f *protoField) (span, []byte) {
	switch f.kind {
	case protoreflect.BoolKind:
		return extSpan(kindFalse, falseText), falseText
	case protoreflect.StringKind, protoreflect.BytesKind:
		return extSpan(kindString, emptyText), emptyText
	case protoreflect.EnumKind:
		if name, ok := f.enum[0]; ok {
			return extSpan(kindString, name), name
		}
		return span{kind: kindInt}, nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return span{kind: kindFloat}, nil
	case protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Fixed32Kind, protoreflect.Fixed64Kind:
		return span{kind: kindUint}, nil
	}
	return span{kind: kindInt}, nil
}

// wireType is the wire type a field of kind k is encoded with (packed
// lists aside).
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return protowire.Fixed64Type
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return protowire.Fixed32Type
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return protowire.BytesType
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.VarintType
}

// walkProto walks the message b[i:end] (spans are offsets into b).
func walkProto(m *protoMsg, b []byte, i, end int, slots []span, ext [][]byte, depth int) Reason {
	if depth > MaxDepth {
		return ReasonUndecodable
	}
	for _, s := range m.defaults {
		// Only where the field is still absent: a message given twice
		// merges, and its first occurrence's values stay.
		if slots[s.slot].kind != kindNone {
			continue
		}
		slots[s.slot] = s.sp
		if s.sp.ext {
			ext[s.slot] = s.ext
		}
	}
	for i < end {
		num, typ, n := protowire.ConsumeTag(b[i:end])
		if n < 0 {
			return ReasonUndecodable
		}
		i += n
		f := m.field(num)
		if f == nil || (typ != wireType(f.kind) && !(f.list && typ == protowire.BytesType)) {
			n = protowire.ConsumeFieldValue(num, typ, b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			i += n
			continue
		}
		for _, s := range f.wrong {
			slots[s] = throughNonObject
		}
		if f.list {
			n = protowire.ConsumeFieldValue(num, typ, b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			if f.slot >= 0 {
				if f.vector && typ == protowire.BytesType {
					v, k := protowire.ConsumeBytes(b[i : i+n])
					if k < 0 {
						return ReasonUndecodable
					}
					start := i + k - len(v)
					elem := vecProtoDouble
					if f.kind == protoreflect.FloatKind {
						elem = vecProtoFloat
					}
					slots[f.slot] = span{kind: kindVector, start: start, end: start + len(v), elem: elem}
				} else {
					slots[f.slot] = span{kind: kindObject}
				}
			}
			i += n
			continue
		}
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			i += n
			if f.slot >= 0 {
				slots[f.slot], ext[f.slot] = protoVarint(f, v)
			}
		case protowire.Fixed32Type:
			v, n := protowire.ConsumeFixed32(b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			i += n
			if f.slot >= 0 {
				var sp span
				switch f.kind {
				case protoreflect.FloatKind:
					sp = numSpan(kindFloat, int64(math.Float64bits(float64(math.Float32frombits(v)))))
				case protoreflect.Sfixed32Kind:
					sp = numSpan(kindInt, int64(int32(v)))
				default:
					sp = numSpan(kindUint, int64(v))
				}
				slots[f.slot] = sp
			}
		case protowire.Fixed64Type:
			v, n := protowire.ConsumeFixed64(b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			i += n
			if f.slot >= 0 {
				var sp span
				switch f.kind {
				case protoreflect.DoubleKind:
					sp = numSpan(kindFloat, int64(v))
				case protoreflect.Sfixed64Kind:
					sp = numSpan(kindInt, int64(v))
				default:
					sp = numSpan(kindUint, int64(v))
				}
				slots[f.slot] = sp
			}
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			start := i + n - len(v)
			stop := start + len(v)
			i += n
			if f.kind == protoreflect.MessageKind {
				if f.sub != nil {
					// A message field given twice is merged, as protobuf
					// parsers do: the later one's fields win.
					if r := walkProto(f.sub, b, start, stop, slots, ext, depth+1); r != ReasonNone {
						return r
					}
				}
				if f.slot >= 0 {
					if f.timestamp {
						// Given twice, the occurrences merge (a field absent
						// from the later one keeps the earlier value).
						sp, ok := protoTimestamp(b[start:stop], slots[f.slot])
						if !ok {
							return ReasonUndecodable
						}
						slots[f.slot] = sp
					} else {
						slots[f.slot] = span{kind: kindObject}
					}
				}
				continue
			}
			if f.slot >= 0 {
				if f.kind == protoreflect.StringKind && !utf8.Valid(b[start:stop]) {
					return ReasonInvalidUTF8
				}
				slots[f.slot] = span{kind: kindString, start: start, end: stop}
			}
		default: // a group on a path: skipped, its slot a wrong type
			n = protowire.ConsumeFieldValue(num, typ, b[i:end])
			if n < 0 {
				return ReasonUndecodable
			}
			i += n
			if f.slot >= 0 {
				slots[f.slot] = span{kind: kindObject}
			}
		}
	}
	return ReasonNone
}

// protoVarint is the span of a varint-encoded field value v (and its
// bytes, for an ext span).
func protoVarint(f *protoField, v uint64) (span, []byte) {
	switch f.kind {
	case protoreflect.BoolKind:
		if v != 0 {
			return extSpan(kindTrue, trueText), trueText
		}
		return extSpan(kindFalse, falseText), falseText
	case protoreflect.EnumKind:
		if name, ok := f.enum[int32(v)]; ok {
			return extSpan(kindString, name), name
		}
		return numSpan(kindInt, int64(int32(v))), nil // an open enum's unknown value: its number
	case protoreflect.Int32Kind:
		return numSpan(kindInt, int64(int32(v))), nil
	case protoreflect.Sint32Kind:
		return numSpan(kindInt, int64(int32(protowire.DecodeZigZag(v&math.MaxUint32)))), nil
	case protoreflect.Sint64Kind:
		return numSpan(kindInt, protowire.DecodeZigZag(v)), nil
	case protoreflect.Uint32Kind:
		return numSpan(kindUint, int64(uint32(v))), nil
	case protoreflect.Uint64Kind:
		return numSpan(kindUint, int64(v)), nil
	}
	return numSpan(kindInt, int64(v)), nil // int64
}

// protoTimestamp reads a google.protobuf.Timestamp (seconds = 1, nanos =
// 2) as Unix milliseconds, floored. prev is the slot's span before it: a
// kindTimeMs there is an earlier occurrence of the field in this record
// (or its default, the empty message), which the later one merges into
// as protobuf parsers do — a field the later one lacks keeps the earlier
// value. From an earlier valid time its seconds and milliseconds are
// recovered exactly (only the floor of nanos/10⁶ matters); an earlier
// bad time stays bad unless the later one sets both fields.
func protoTimestamp(b []byte, prev span) (span, bool) {
	var sec, nanos int64
	var hasSec, hasNanos bool
	for i := 0; i < len(b); {
		num, typ, n := protowire.ConsumeTag(b[i:])
		if n < 0 {
			return span{}, false
		}
		i += n
		if typ == protowire.VarintType && (num == 1 || num == 2) {
			v, n := protowire.ConsumeVarint(b[i:])
			if n < 0 {
				return span{}, false
			}
			i += n
			if num == 1 {
				sec, hasSec = int64(v), true
			} else {
				nanos, hasNanos = int64(int32(v)), true
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b[i:])
		if n < 0 {
			return span{}, false
		}
		i += n
	}
	if prev.kind == kindTimeMs && !(hasSec && hasNanos) {
		ms := prev.num()
		if ms < 0 {
			return numSpan(kindTimeMs, -1), true // an earlier bad time, not wholly replaced
		}
		if !hasSec {
			sec = ms / 1000
		}
		if !hasNanos {
			nanos = (ms % 1000) * 1e6
		}
	}
	if sec < 0 || sec > MaxTimeMs/1000 || nanos < 0 || nanos >= 1e9 {
		return numSpan(kindTimeMs, -1), true // bad_time
	}
	return numSpan(kindTimeMs, sec*1000+nanos/1e6), true
}

// messageIndexes reads Confluent's protobuf message indexes at b[i:] (a
// zig-zag varint count, then that many zig-zag varint indexes; a count of
// 0 means the first message) and returns the message they name.
func messageIndexes(tree []*protoNode, b []byte, i int) (*protoMsg, int, bool) {
	cnt, n := binary.Varint(b[i:])
	if n <= 0 || cnt < 0 || cnt > int64(len(b)-i) {
		return nil, i, false
	}
	i += n
	if cnt == 0 {
		if len(tree) == 0 {
			return nil, i, false
		}
		return tree[0].msg, i, true
	}
	var node *protoNode
	level := tree
	for range cnt {
		x, n := binary.Varint(b[i:])
		if n <= 0 || x < 0 || x >= int64(len(level)) {
			return nil, i, false
		}
		i += n
		node = level[x]
		level = node.nested
	}
	return node.msg, i, true
}
