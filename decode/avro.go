package decode

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// Avro: the writer schema (from the registry or a schema file) is parsed
// with github.com/hamba/avro/v2 and compiled, against the configured paths,
// into a tree of avroOps: one per schema node, knowing which slot its value
// fills. The binary payload is then walked once, in schema order, without
// allocating: every byte is checked (lengths, varints, union branches, enum
// indexes, no trailing bytes), values of unconfigured fields are skipped,
// and configured ones are recorded as spans (see package doc, "Avro").

type avroKind uint8

const (
	aNull avroKind = iota
	aBool
	aInt
	aLong
	aFloat
	aDouble
	aBytes
	aString
	aFixed
	aEnum
	aArray
	aMap
	aUnion
	aRecord
)

// avroOp is one node of a compiled Avro schema.
type avroOp struct {
	k    avroKind
	slot int // the slot this value fills (-1: none)
	// unit: a long with logical type timestamp-millis (1) or
	// timestamp-micros (1000): the slot gets kindTimeMs, value / unit.
	unit     int64
	size     int      // aFixed
	symbols  [][]byte // aEnum
	items    *avroOp  // aArray items, aMap values
	branches []*avroOp
	fields   []*avroOp
	// wrong: the slots of configured paths that continue below this value
	// although it is not a record (a path through a list, a map, a
	// string...): wrong_type whenever this value is walked.
	wrong []int
	// vector: the slot (an average histogram's) takes this array of
	// numbers as a kindVector.
	vector bool
	// zero: the value always encodes to zero bytes (null, an empty record
	// or fixed): arrays of them are not walked item by item.
	zero bool
}

// The element encodings of a kindVector span.
const (
	vecAvroDouble uint8 = iota + 1
	vecAvroFloat
	vecAvroLong // int or long
	vecProtoDouble
	vecProtoFloat
)

var (
	trueText  = []byte("true")
	falseText = []byte("false")
)

// avroCompiler compiles one schema; skip memoizes the ops of named types
// walked without any slot (recursive types compile once).
type avroCompiler struct {
	d    *Decoder
	skip map[avro.Schema]*avroOp
}

// compileAvro compiles the parsed schema s for the decoder's paths.
func compileAvro(d *Decoder, s avro.Schema) (*avroOp, error) {
	c := &avroCompiler{d: d, skip: map[avro.Schema]*avroOp{}}
	op := c.compile(s, d.root, -1, nil)
	if op.k != aRecord {
		return nil, fmt.Errorf("the schema is a %s, not a record", s.Type())
	}
	return op, nil
}

// compile builds the op of schema s, found where the path node (nil: no
// configured path continues here) and the slot leaf (-1: none) are; under
// is every slot below node.
func (c *avroCompiler) compile(s avro.Schema, node *pathNode, leaf int, under []int) *avroOp {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if node == nil && leaf < 0 {
		if op, ok := c.skip[s]; ok {
			return op
		}
	}
	op := &avroOp{slot: leaf}
	switch t := s.(type) {
	case *avro.RecordSchema:
		op.k = aRecord
		if node == nil && leaf < 0 {
			c.skip[s] = op // before the fields: a recursive type refers to itself
		}
		op.zero = true
		for _, f := range t.Fields() {
			var sub *pathNode
			fl, fu := -1, []int(nil)
			if node != nil {
				if i := node.index(f.Name()); i >= 0 {
					sub, fl, fu = node.sub[i], node.leaf[i], node.under[i]
				}
			}
			fo := c.compile(f.Type(), sub, fl, fu)
			op.fields = append(op.fields, fo)
			op.zero = op.zero && fo.zero
		}
		return op
	case *avro.UnionSchema:
		op.k = aUnion
		op.slot = -1 // the branch records it
		for _, b := range t.Types() {
			op.branches = append(op.branches, c.compile(b, node, leaf, under))
		}
		return op
	case *avro.EnumSchema:
		op.k = aEnum
		for _, sym := range t.Symbols() {
			op.symbols = append(op.symbols, []byte(sym))
		}
	case *avro.ArraySchema:
		op.k = aArray
		op.items = c.compile(t.Items(), nil, -1, nil)
		if leaf >= 0 && c.d.vectorSlot[leaf] {
			switch op.items.k {
			case aDouble, aFloat, aInt, aLong:
				op.vector = true
			}
		}
	case *avro.MapSchema:
		op.k = aMap
		op.items = c.compile(t.Values(), nil, -1, nil)
	case *avro.FixedSchema:
		op.k = aFixed
		op.size = t.Size()
		op.zero = op.size == 0
	case *avro.NullSchema:
		op.k = aNull
		op.zero = true
		return op // a null level: the paths below are absent (missing)
	case *avro.PrimitiveSchema:
		switch t.Type() {
		case avro.Null:
			op.k, op.zero = aNull, true
			return op
		case avro.Boolean:
			op.k = aBool
		case avro.Int:
			op.k = aInt
		case avro.Long:
			op.k = aLong
			if l := t.Logical(); l != nil {
				switch l.Type() {
				case avro.TimestampMillis:
					op.unit = 1
				case avro.TimestampMicros:
					op.unit = 1000
				}
			}
		case avro.Float:
			op.k = aFloat
		case avro.Double:
			op.k = aDouble
		case avro.Bytes:
			op.k = aBytes
		case avro.String:
			op.k = aString
		}
	}
	if node != nil {
		op.wrong = under
	}
	return op
}

// avroLong reads a zig-zag varint long at b[i:].
func avroLong(b []byte, i int) (int64, int, bool) {
	var u uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, i, false
		}
		c := b[i]
		i++
		if shift == 63 && c > 1 {
			return 0, i, false // overflows 64 bits
		}
		u |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return int64(u>>1) ^ -int64(u&1), i, true
		}
	}
	return 0, i, false
}

// walkAvro walks the record payload b with the compiled root op, filling
// slots (cleared by the caller).
func walkAvro(op *avroOp, b []byte, slots []span) Reason {
	end, r := avroWalk(op, b, 0, slots, 1)
	if r == ReasonNone && end != len(b) {
		return ReasonUndecodable // trailing bytes
	}
	return r
}

func avroWalk(op *avroOp, b []byte, i int, slots []span, depth int) (int, Reason) {
	if depth > MaxDepth {
		return i, ReasonUndecodable
	}
	for _, s := range op.wrong {
		slots[s] = throughNonObject
	}
	switch op.k {
	case aNull:
		if op.slot >= 0 {
			slots[op.slot] = span{kind: kindNull}
		}
		return i, ReasonNone
	case aBool:
		if i >= len(b) || b[i] > 1 {
			return i, ReasonUndecodable
		}
		if op.slot >= 0 {
			if b[i] == 1 {
				slots[op.slot] = span{kind: kindTrue, ext: trueText, end: 4}
			} else {
				slots[op.slot] = span{kind: kindFalse, ext: falseText, end: 5}
			}
		}
		return i + 1, ReasonNone
	case aInt, aLong:
		v, j, ok := avroLong(b, i)
		if !ok || (op.k == aInt && (v < math.MinInt32 || v > math.MaxInt32)) {
			return j, ReasonUndecodable
		}
		if op.slot >= 0 {
			switch op.unit {
			case 0:
				slots[op.slot] = span{kind: kindInt, num: v}
			case 1:
				slots[op.slot] = span{kind: kindTimeMs, num: v}
			default:
				q := v / op.unit
				if v%op.unit < 0 {
					q-- // floor
				}
				slots[op.slot] = span{kind: kindTimeMs, num: q}
			}
		}
		return j, ReasonNone
	case aFloat:
		if len(b)-i < 4 {
			return i, ReasonUndecodable
		}
		if op.slot >= 0 {
			f := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
			slots[op.slot] = span{kind: kindFloat, num: int64(math.Float64bits(f))}
		}
		return i + 4, ReasonNone
	case aDouble:
		if len(b)-i < 8 {
			return i, ReasonUndecodable
		}
		if op.slot >= 0 {
			slots[op.slot] = span{kind: kindFloat, num: int64(binary.LittleEndian.Uint64(b[i:]))}
		}
		return i + 8, ReasonNone
	case aBytes, aString:
		n, j, ok := avroLong(b, i)
		if !ok || n < 0 || n > int64(len(b)-j) {
			return j, ReasonUndecodable
		}
		end := j + int(n)
		if op.slot >= 0 {
			if op.k == aString && !utf8.Valid(b[j:end]) {
				return j, ReasonInvalidUTF8
			}
			slots[op.slot] = span{kind: kindString, start: j, end: end}
		}
		return end, ReasonNone
	case aFixed:
		if len(b)-i < op.size {
			return i, ReasonUndecodable
		}
		if op.slot >= 0 {
			slots[op.slot] = span{kind: kindString, start: i, end: i + op.size}
		}
		return i + op.size, ReasonNone
	case aEnum:
		v, j, ok := avroLong(b, i)
		if !ok || v < 0 || v >= int64(len(op.symbols)) {
			return j, ReasonUndecodable
		}
		if op.slot >= 0 {
			sym := op.symbols[v]
			slots[op.slot] = span{kind: kindString, ext: sym, end: len(sym)}
		}
		return j, ReasonNone
	case aUnion:
		v, j, ok := avroLong(b, i)
		if !ok || v < 0 || v >= int64(len(op.branches)) {
			return j, ReasonUndecodable
		}
		return avroWalk(op.branches[v], b, j, slots, depth+1)
	case aRecord:
		for _, f := range op.fields {
			var r Reason
			if i, r = avroWalk(f, b, i, slots, depth+1); r != ReasonNone {
				return i, r
			}
		}
		if op.slot >= 0 {
			slots[op.slot] = span{kind: kindObject}
		}
		return i, ReasonNone
	case aArray, aMap:
		start := i
		for {
			n, j, ok := avroLong(b, i)
			if !ok {
				return j, ReasonUndecodable
			}
			i = j
			if n == 0 {
				break
			}
			if n < 0 { // a block with its size in bytes
				if n == math.MinInt64 {
					return i, ReasonUndecodable
				}
				n = -n
				size, j, ok := avroLong(b, i)
				if !ok || size < 0 || size > int64(len(b)-j) {
					return j, ReasonUndecodable
				}
				i = j
				if op.k == aArray && op.items.zero {
					i += int(size)
					continue
				}
			}
			if op.items.zero && op.k == aArray {
				continue // n items of zero bytes each
			}
			if n > int64(len(b)-i) { // every item (a map's key) takes a byte at least
				return i, ReasonUndecodable
			}
			for range n {
				if op.k == aMap {
					kl, j, ok := avroLong(b, i)
					if !ok || kl < 0 || kl > int64(len(b)-j) {
						return j, ReasonUndecodable
					}
					i = j + int(kl)
				}
				var r Reason
				if i, r = avroWalk(op.items, b, i, slots, depth+1); r != ReasonNone {
					return i, r
				}
			}
		}
		if op.slot >= 0 {
			if op.vector {
				slots[op.slot] = span{kind: kindVector, start: start, end: i, elem: avroVecElem(op.items.k)}
			} else {
				slots[op.slot] = span{kind: kindObject}
			}
		}
		return i, ReasonNone
	}
	return i, ReasonUndecodable
}

func avroVecElem(k avroKind) uint8 {
	switch k {
	case aDouble:
		return vecAvroDouble
	case aFloat:
		return vecAvroFloat
	}
	return vecAvroLong
}

// parseBinaryVector reads a kindVector (b: its encoding, validated by the
// walk) into out; false unless it holds exactly len(out) numbers, each
// non-negative and finite.
func parseBinaryVector(b []byte, elem uint8, out []float64) bool {
	n := 0
	put := func(x float64) bool {
		if n >= len(out) || !(x >= 0) || math.IsInf(x, 0) {
			return false
		}
		out[n] = x
		n++
		return true
	}
	switch elem {
	case vecProtoDouble:
		if len(b)%8 != 0 {
			return false
		}
		for i := 0; i < len(b); i += 8 {
			if !put(math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))) {
				return false
			}
		}
		return n == len(out)
	case vecProtoFloat:
		if len(b)%4 != 0 {
			return false
		}
		for i := 0; i < len(b); i += 4 {
			if !put(float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))) {
				return false
			}
		}
		return n == len(out)
	}
	i := 0
	for {
		c, j, ok := avroLong(b, i)
		if !ok {
			return false
		}
		i = j
		if c == 0 {
			return n == len(out)
		}
		if c < 0 {
			c = -c
			if _, i, ok = avroLong(b, i); !ok {
				return false
			}
		}
		for range c {
			var x float64
			switch elem {
			case vecAvroDouble:
				if len(b)-i < 8 {
					return false
				}
				x = math.Float64frombits(binary.LittleEndian.Uint64(b[i:]))
				i += 8
			case vecAvroFloat:
				if len(b)-i < 4 {
					return false
				}
				x = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
				i += 4
			default:
				v, j, ok := avroLong(b, i)
				if !ok {
					return false
				}
				x, i = float64(v), j
			}
			if !put(x) {
				return false
			}
		}
	}
}
