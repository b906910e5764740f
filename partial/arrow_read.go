package partial

// Reading the Arrow encoding (arrow.go) without package ipc: the Arrow
// reader trusts the lengths in a message's metadata — a partial with one
// flipped byte made it allocate 240 GB and the releaser die of it
// (TestDecodeArrowCorrupt), past any recover — and copies every buffer
// into a new, zeroed one. This reader checks every length and offset
// against the record value, allocates nothing in proportion to what the
// metadata claims, and points the decoded slices into the value (one copy
// into 8-byte aligned memory when the value is not aligned). A malformed
// value is refused (ReasonDecode); an index out of range in the metadata
// panics in the flatbuffers accessors, which decodeArrow recovers.
//
// What it reads of the stream: the schema message's custom metadata and
// its top-level fields (name, type, and the number of buffers each
// takes, children included), then one record batch message: its length,
// field nodes and buffers (uncompressed, no nulls), and its body. A column
// it does not know is skipped by its buffers; a type it cannot count the
// buffers of is refused (a later version needing one bumps ArrowVersion).

import (
	"encoding/binary"
	"unsafe"

	flatbuffers "github.com/google/flatbuffers/go"
)

// Arrow flatbuffers: Message fields (version, header_type, header,
// bodyLength), header types, Type union members.
const (
	fbMsgHeaderType = 1
	fbMsgHeader     = 2
	fbMsgBodyLength = 3
	fbHeaderSchema  = 1
	fbHeaderBatch   = 3
	fbTypeInt       = 2
	fbTypeFloat     = 3
	fbTypeBinary    = 4
	fbTypeUtf8      = 5
	fbTypeBool      = 6
	fbTypeList      = 12
	fbTypeStruct    = 13
	fbTypeFixedList = 16
)

// fbTable is a flatbuffers table with field access by index.
type fbTable struct{ flatbuffers.Table }

// field returns the absolute position of field i's slot, 0 when absent.
func (t fbTable) field(i int) flatbuffers.UOffsetT {
	o := t.Offset(flatbuffers.VOffsetT(4 + 2*i))
	if o == 0 {
		return 0
	}
	return t.Pos + flatbuffers.UOffsetT(o)
}

// table returns the table field i points at (ok false when absent).
func (t fbTable) table(i int) (fbTable, bool) {
	p := t.field(i)
	if p == 0 {
		return fbTable{}, false
	}
	return fbTable{flatbuffers.Table{Bytes: t.Bytes, Pos: t.Indirect(p)}}, true
}

// vector returns the start and length of vector field i (0, 0 when
// absent).
func (t fbTable) vector(i int) (flatbuffers.UOffsetT, int) {
	p := t.field(i)
	if p == 0 {
		return 0, 0
	}
	start := t.Indirect(p)
	n := int(flatbuffers.GetUint32(t.Bytes[start:]))
	if n < 0 || int(start)+4+n > len(t.Bytes) { // every element takes at least a byte
		panic("vector past the metadata")
	}
	return start + 4, n
}

// elem returns table element k of a vector of tables starting at start.
func (t fbTable) elem(start flatbuffers.UOffsetT, k int) fbTable {
	p := start + flatbuffers.UOffsetT(4*k)
	return fbTable{flatbuffers.Table{Bytes: t.Bytes, Pos: t.Indirect(p)}}
}

// str returns string field i ("" when absent).
func (t fbTable) str(i int) string {
	p := t.field(i)
	if p == 0 {
		return ""
	}
	return t.String(p)
}

// fbMessage splits the next message of an IPC stream off b: its metadata
// table and its body; done at the end-of-stream marker or the end of b.
func fbMessage(b []byte) (msg fbTable, body, rest []byte, done bool, err error) {
	if len(b) == 0 {
		return msg, nil, nil, true, nil
	}
	if len(b) < 8 || binary.LittleEndian.Uint32(b) != 0xFFFFFFFF {
		return msg, nil, nil, false, errTruncated
	}
	n := int(binary.LittleEndian.Uint32(b[4:]))
	if n == 0 {
		return msg, nil, nil, true, nil
	}
	if n < 4 || n > len(b)-8 {
		return msg, nil, nil, false, errTruncated
	}
	meta := b[8 : 8+n]
	msg = fbTable{flatbuffers.Table{Bytes: meta, Pos: flatbuffers.GetUOffsetT(meta)}}
	bodyLen := int64(0)
	if p := msg.field(fbMsgBodyLength); p != 0 {
		bodyLen = msg.GetInt64(p)
	}
	rest = b[8+n:]
	if bodyLen < 0 || bodyLen > int64(len(rest)) {
		return msg, nil, nil, false, errTruncated
	}
	return msg, rest[:bodyLen], rest[bodyLen:], false, nil
}

// arrowColumn is one top-level field of the schema: its name, type and
// where its buffers start among the batch's (first) and its node.
type arrowColumn struct {
	name           string
	typ            byte
	bits           int32 // Int's bit width, FloatingPoint's precision
	signed         bool
	child          byte // a List's child type
	childBits      int32
	node, buf      int // its first node and first buffer
	nodes, buffers int // how many, children included
}

// fbLayout counts the nodes and buffers of field f, children included.
func fbLayout(f fbTable) (nodes, buffers int, ok bool) {
	typ := f.GetUint8(f.field(2))
	own := 0
	switch typ {
	case fbTypeInt, fbTypeFloat, fbTypeBool:
		own = 2
	case fbTypeBinary, fbTypeUtf8:
		own = 3
	case fbTypeList:
		own = 2
	case fbTypeStruct, fbTypeFixedList:
		own = 1
	default:
		return 0, 0, false
	}
	nodes, buffers = 1, own
	start, n := f.vector(5)
	for k := range n {
		cn, cb, ok := fbLayout(f.elem(start, k))
		if !ok {
			return 0, 0, false
		}
		nodes, buffers = nodes+cn, buffers+cb
	}
	return nodes, buffers, true
}

// fbSchema reads the schema message: its custom metadata and columns.
func fbSchema(msg fbTable) (md map[string]string, cols []arrowColumn, err error) {
	if msg.field(fbMsgHeaderType) == 0 || msg.GetUint8(msg.field(fbMsgHeaderType)) != fbHeaderSchema {
		return nil, nil, Refuse(ReasonDecode, "partial: arrow stream does not start with a schema")
	}
	sch, ok := msg.table(fbMsgHeader)
	if !ok {
		return nil, nil, Refuse(ReasonDecode, "partial: arrow schema message without its schema")
	}
	if p := sch.field(0); p != 0 && sch.GetInt16(p) != 0 {
		return nil, nil, Refuse(ReasonDecode, "partial: big-endian arrow stream")
	}
	md = map[string]string{}
	start, n := sch.vector(2)
	for k := range n {
		kv := sch.elem(start, k)
		md[kv.str(0)] = kv.str(1)
	}
	start, n = sch.vector(1)
	node, buf := 0, 0
	for k := range n {
		f := sch.elem(start, k)
		c := arrowColumn{name: f.str(0), typ: f.GetUint8(f.field(2)), node: node, buf: buf}
		if c.typ == 0 && f.field(2) == 0 {
			return nil, nil, Refuse(ReasonDecode, "partial: arrow field %q without a type", c.name)
		}
		var ok bool
		if c.nodes, c.buffers, ok = fbLayout(f); !ok {
			return nil, nil, Refuse(ReasonDecode, "partial: arrow field %q of a type this version does not read", c.name)
		}
		if t, ok := f.table(3); ok {
			c.bits, c.signed = fbTypeParams(c.typ, t)
		}
		if cs, cn := f.vector(5); c.typ == fbTypeList && cn == 1 {
			ch := f.elem(cs, 0)
			c.child = ch.GetUint8(ch.field(2))
			if t, ok := ch.table(3); ok {
				c.childBits, _ = fbTypeParams(c.child, t)
			}
		}
		node, buf = node+c.nodes, buf+c.buffers
		cols = append(cols, c)
	}
	return md, cols, nil
}

// fbTypeParams reads an Int's bit width and signedness, or a
// FloatingPoint's precision.
func fbTypeParams(typ byte, t fbTable) (bits int32, signed bool) {
	switch typ {
	case fbTypeInt:
		if p := t.field(0); p != 0 {
			bits = t.GetInt32(p)
		}
		if p := t.field(1); p != 0 {
			signed = t.GetBool(p)
		}
	case fbTypeFloat:
		if p := t.field(0); p != 0 {
			bits = int32(t.GetInt16(p))
		}
	}
	return bits, signed
}

// fbBatch is one record batch: its row count, and its nodes' and
// buffers' (offset, length) pairs.
type fbBatch struct {
	rows    int64
	nodes   [][2]int64 // length, null count
	buffers [][2]int64 // offset, length in the body
}

// fbRecordBatch reads a record batch message.
func fbRecordBatch(msg fbTable, body []byte) (fbBatch, error) {
	var rb fbBatch
	if msg.field(fbMsgHeaderType) == 0 || msg.GetUint8(msg.field(fbMsgHeaderType)) != fbHeaderBatch {
		return rb, Refuse(ReasonDecode, "partial: arrow message after the schema is not a record batch")
	}
	t, ok := msg.table(fbMsgHeader)
	if !ok {
		return rb, Refuse(ReasonDecode, "partial: arrow record batch message without its batch")
	}
	if _, ok := t.table(3); ok {
		return rb, Refuse(ReasonDecode, "partial: compressed arrow record batch")
	}
	if p := t.field(0); p != 0 {
		rb.rows = t.GetInt64(p)
	}
	for _, v := range []struct {
		field int
		out   *[][2]int64
	}{{1, &rb.nodes}, {2, &rb.buffers}} {
		start, n := t.vector(v.field)
		if int(start)+16*n > len(t.Bytes) {
			return rb, Refuse(ReasonDecode, "partial: arrow record batch metadata truncated")
		}
		*v.out = make([][2]int64, n)
		for k := range n {
			p := start + flatbuffers.UOffsetT(16*k)
			(*v.out)[k] = [2]int64{t.GetInt64(p), t.GetInt64(p + 8)}
		}
	}
	for _, b := range rb.buffers {
		if b[0] < 0 || b[1] < 0 || b[0] > int64(len(body)) || b[1] > int64(len(body))-b[0] {
			return rb, Refuse(ReasonDecode, "partial: arrow buffer past the record batch's body")
		}
	}
	return rb, nil
}

// buffer returns buffer i of the batch's body.
func (rb *fbBatch) buffer(body []byte, i int) []byte {
	b := rb.buffers[i]
	return body[b[0] : b[0]+b[1]]
}

// fixed reinterprets b as n values of T (little-endian, as the stream
// is), pointing into b, which must be aligned for T and hold n of them.
func fixed[T int32 | uint64 | float64 | uint8](b []byte, n int) ([]T, bool) {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if n < 0 || n > len(b)/max(size, 1) {
		return nil, false
	}
	if n == 0 {
		return nil, true
	}
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), true
}

// aligned returns b, or a copy of it in 8-byte aligned memory.
func aligned(b []byte) []byte {
	if len(b) == 0 || uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		return b
	}
	w := make([]uint64, (len(b)+7)/8)
	c := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)[:len(b)]
	copy(c, b)
	return c
}

// littleEndian: the stream is little-endian, and fixed reads it in place.
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()
