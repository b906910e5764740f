package partial

// The Partial's Arrow IPC encoding (issue 28 item 4).
//
// # Wire format
//
// A Partial's record value is one Arrow IPC stream (the streaming format:
// a schema message, one record batch, the end-of-stream marker) — the
// design card's batch format, decoded without parsing one number at a
// time: JSON partials cost 0.5–1.1 s of decoding per window at 100
// partitions × 10,000 cells, Arrow ones (checks included) some 20 ms of
// CPU, 40–50 ms merge included (BenchmarkDecodeMerge100x10000).
// A value that starts with '{' is the older JSON encoding (EncodeJSON),
// which DecodePartial still reads: partials an older replica wrote during
// a rolling upgrade (docs/distributed.md, "Upgrades", gives the order).
//
// The schema's metadata holds the header:
//
//   - "dpstage.partial.version": ArrowVersion ("2"). A reader refuses a
//     version it does not know (ReasonDecode): a change an older reader
//     must not read past bumps it.
//   - "dpstage.partial.header": the Partial's JSON encoding without
//     Counts and Averages (window, partition, Next, Watermark, Config,
//     First, Prev, Dropped: small, and read once per record).
//
// The record batch has one row per count cell, then one row per kept
// user of each average cell (histograms in increasing order, users
// increasing within one):
//
//	kind   uint8          0: a count cell (Cell), 1: an average user (AverageCell)
//	h      int32          the histogram's config index
//	g      int32          the group's index (count cells; 0 for average rows)
//	user   uint64         the kept user's hash (average rows; 0 for count cells)
//	values list<float64>  the cell's counts, per bin / the user's vector
//
// then, in a Partial with keyed cells (a selecting histogram's group keys:
// keyed.go), one row per key, histograms in increasing order, keys in
// ascending byte order within one (kind 2: h, user = the key's distinct
// users, values = its counts, g 0), and one more column, absent from a
// Partial without keys (older ones too: they decode as having none):
//
//	key    binary         the group key (kind 2 rows; empty for the others)
//
// Extending it: a new column is added with a new name (a per-row figure,
// such as a count cell's distinct users, as a column beside these; a new
// kind of row, as a new kind value; a column of a type other than those
// arrow_read.go can skip needs a new version). A reader takes the columns it knows
// by name and ignores the others, and skips the rows of kinds it does not
// know, so an older releaser reads a newer partial as the partial without
// the addition — which must then be safe to ignore, or the version
// bumped.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

// ArrowVersion is the version of the Arrow encoding of a Partial (the
// JSON one is Version 1).
const ArrowVersion = 2

// Schema metadata keys and row kinds of the Arrow encoding.
const (
	arrowVersionKey = "dpstage.partial.version"
	arrowHeaderKey  = "dpstage.partial.header"
	kindCount       = 0
	kindAverage     = 1
	kindKey         = 2
)

// arrowFields are the columns of the Arrow encoding.
var arrowFields = []arrow.Field{
	{Name: "kind", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "h", Type: arrow.PrimitiveTypes.Int32},
	{Name: "g", Type: arrow.PrimitiveTypes.Int32},
	{Name: "user", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "values", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)},
}

// arrowKeyedFields are the columns of a Partial with keyed cells.
var arrowKeyedFields = append(arrowFields[:len(arrowFields):len(arrowFields)], arrow.Field{Name: "key", Type: arrow.BinaryTypes.Binary})

// arrowMem allocates the encoder's buffers (Encode) on the Go heap.
var arrowMem = memory.NewGoAllocator()

// Encode returns the record value: the Arrow encoding (see above).
func (p *Partial) Encode() []byte {
	hdr := *p
	hdr.V, hdr.Counts, hdr.Averages = Version, nil, nil
	hb, err := json.Marshal(&hdr)
	if err != nil {
		panic(fmt.Sprintf("partial: encode partial header: %v", err)) // plain data: cannot fail
	}
	md := arrow.NewMetadata([]string{arrowVersionKey, arrowHeaderKey}, []string{strconv.Itoa(ArrowVersion), string(hb)})
	fields := arrowFields
	if len(p.Keyed) > 0 {
		fields = arrowKeyedFields
	}
	schema := arrow.NewSchema(fields, &md)
	b := array.NewRecordBuilder(arrowMem, schema)
	defer b.Release()
	kind := b.Field(0).(*array.Uint8Builder)
	hs := b.Field(1).(*array.Int32Builder)
	gs := b.Field(2).(*array.Int32Builder)
	users := b.Field(3).(*array.Uint64Builder)
	lists := b.Field(4).(*array.ListBuilder)
	vals := lists.ValueBuilder().(*array.Float64Builder)
	var keys *array.BinaryBuilder
	if len(p.Keyed) > 0 {
		keys = b.Field(5).(*array.BinaryBuilder)
		keys.Reserve(p.rows())
	}
	for _, c := range p.Cells() {
		kind.Append(kindCount)
		hs.Append(int32(c.H))
		gs.Append(int32(c.G))
		users.Append(0)
		lists.Append(true)
		vals.AppendValues(c.Counts, nil)
		if keys != nil {
			keys.Append(nil)
		}
	}
	for _, a := range p.Averages {
		for i, u := range a.Users {
			kind.Append(kindAverage)
			hs.Append(int32(a.H))
			gs.Append(0)
			users.Append(u)
			lists.Append(true)
			var v []float64
			if i < len(a.Vectors) {
				v = a.Vectors[i]
			}
			vals.AppendValues(v, nil)
			if keys != nil {
				keys.Append(nil)
			}
		}
	}
	for j := range p.Keyed {
		c := &p.Keyed[j]
		for i := range c.Len() {
			_, u, v := c.Key(i)
			kind.Append(kindKey)
			hs.Append(int32(c.H))
			gs.Append(0)
			users.Append(uint64(u))
			lists.Append(true)
			vals.AppendValues(v, nil)
			keys.Append(c.key(i))
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(arrowMem))
	if err := w.Write(rec); err != nil {
		panic(fmt.Sprintf("partial: encode partial: %v", err)) // to memory: cannot fail
	}
	if err := w.Close(); err != nil {
		panic(fmt.Sprintf("partial: encode partial: %v", err))
	}
	return buf.Bytes()
}

// rows is the number of rows of p's record batch.
func (p *Partial) rows() int {
	n := p.cells().len()
	for _, a := range p.Averages {
		n += len(a.Users)
	}
	for j := range p.Keyed {
		n += p.Keyed[j].Len()
	}
	return n
}

// EncodeJSON returns the JSON encoding (Version 1) of the record value,
// which versions before the Arrow encoding wrote and read: for
// kafka.distributed.partials_format json during a rolling upgrade, and
// for tests of the back-compatibility.
func (p *Partial) EncodeJSON() []byte {
	q := *p
	q.V, q.Counts, q.cols = Version, p.Cells(), nil
	b, err := json.Marshal(&q)
	if err != nil {
		panic(fmt.Sprintf("partial: encode partial: %v", err)) // only NaN/Inf counts, which aggregate never makes
	}
	return b
}

// decodeArrow decodes the Arrow encoding into p (unchecked), with the
// reader of arrow_read.go. Whatever the value, it returns: an index out
// of range in its metadata is recovered and refused (a record that
// stopped the releaser would stop every releaser that reads it).
func decodeArrow(b []byte, p *Partial, columns bool) (err error) {
	defer func() {
		if e := recover(); e != nil {
			err = Refuse(ReasonDecode, "partial: malformed arrow metadata: %v", e)
		}
	}()
	if !littleEndian {
		return Refuse(ReasonDecode, "partial: arrow partials are read on little-endian machines only")
	}
	msg, _, rest, done, err := fbMessage(aligned(b))
	if err != nil || done {
		return Refuse(ReasonDecode, "partial: arrow stream without a schema (%v)", err)
	}
	md, cols, err := fbSchema(msg)
	if err != nil {
		return err
	}
	if v, ok := md[arrowVersionKey]; !ok || v != strconv.Itoa(ArrowVersion) {
		return Refuse(ReasonDecode, "partial: arrow encoding version %q, this stage reads %d", v, ArrowVersion)
	}
	h, ok := md[arrowHeaderKey]
	if !ok {
		return Refuse(ReasonDecode, "partial: arrow encoding without its header")
	}
	if err := json.Unmarshal([]byte(h), p); err != nil {
		return Refuse(ReasonDecode, "partial: arrow encoding's header: %v", err)
	}
	p.Counts, p.Averages = nil, nil
	msg, body, _, done, err := fbMessage(rest)
	if err != nil {
		return Refuse(ReasonDecode, "partial: arrow record batch: %v", err)
	}
	if done {
		return nil // no batch: no cells
	}
	rb, err := fbRecordBatch(msg, body)
	if err != nil {
		return err
	}
	return fillCells(p, cols, &rb, body, columns)
}

// fillCells sets p's Counts and Averages from the batch's columns kind,
// h, g, user and values (arrow.go); other columns are ignored. With
// columns, when the count cells are the batch's first rows (as Encode
// writes them), they are kept as p.cols (Counts nil) instead.
func fillCells(p *Partial, cols []arrowColumn, rb *fbBatch, body []byte, columns bool) error {
	if rb.rows < 0 || rb.rows > int64(len(body)) { // a row takes at least its kind's byte
		return Refuse(ReasonDecode, "partial: arrow record batch of %d rows in %d bytes", rb.rows, len(body))
	}
	n := int(rb.rows)
	want := map[string]struct {
		typ    byte
		bits   int32
		signed bool
	}{"kind": {fbTypeInt, 8, false}, "h": {fbTypeInt, 32, true}, "g": {fbTypeInt, 32, true}, "user": {fbTypeInt, 64, false}, "values": {fbTypeList, 0, false}}
	at := map[string]arrowColumn{}
	var keyCol arrowColumn // optional: only a Partial with keyed cells has it
	hasKey := false
	for _, c := range cols {
		w, known := want[c.name]
		if c.name == "key" {
			w, known = struct {
				typ    byte
				bits   int32
				signed bool
			}{fbTypeBinary, 0, false}, true
			keyCol, hasKey = c, true
		}
		if !known {
			continue
		}
		if c.typ != w.typ || c.bits != w.bits || c.signed != w.signed || c.typ == fbTypeList && (c.child != fbTypeFloat || c.childBits != 2) {
			return Refuse(ReasonDecode, "partial: arrow column %q of another type", c.name)
		}
		if c.node+c.nodes > len(rb.nodes) || c.buf+c.buffers > len(rb.buffers) {
			return Refuse(ReasonDecode, "partial: arrow record batch with fewer nodes or buffers than its schema")
		}
		for k := c.node; k < c.node+c.nodes; k++ {
			if rb.nodes[k][1] != 0 {
				return Refuse(ReasonDecode, "partial: arrow column %q with nulls", c.name)
			}
		}
		if rb.nodes[c.node][0] != rb.rows {
			return Refuse(ReasonDecode, "partial: arrow column %q of %d rows in a batch of %d", c.name, rb.nodes[c.node][0], rb.rows)
		}
		if c.name != "key" {
			at[c.name] = c
		}
	}
	if len(at) != len(want) {
		return Refuse(ReasonDecode, "partial: arrow record batch without the columns kind, h, g, user and values")
	}
	ks, ok1 := fixed[uint8](rb.buffer(body, at["kind"].buf+1), n)
	hv, ok2 := fixed[int32](rb.buffer(body, at["h"].buf+1), n)
	gv, ok3 := fixed[int32](rb.buffer(body, at["g"].buf+1), n)
	uv, ok4 := fixed[uint64](rb.buffer(body, at["user"].buf+1), n)
	vc := at["values"]
	offs, ok5 := fixed[int32](rb.buffer(body, vc.buf+1), n+1)
	child := int(rb.nodes[vc.node+1][0])
	vals, ok6 := fixed[float64](rb.buffer(body, vc.buf+3), child)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || child < 0 {
		return Refuse(ReasonDecode, "partial: arrow buffers shorter than their rows, or misaligned")
	}
	var kc keyColumn
	if hasKey {
		kc.offs, ok1 = fixed[int32](rb.buffer(body, keyCol.buf+1), n+1)
		kc.data = rb.buffer(body, keyCol.buf+2)
		if !ok1 {
			return Refuse(ReasonDecode, "partial: arrow buffers shorter than their rows, or misaligned")
		}
	}
	counts := 0
	for _, k := range ks {
		if k == kindCount {
			counts++
		}
	}
	inCols := columns && counts > 0 && !slices.ContainsFunc(ks[:counts], func(k uint8) bool { return k != kindCount })
	if inCols {
		p.cols = &countColumns{h: hv[:counts], g: gv[:counts], offs: offs[:counts+1], vals: vals}
	} else if counts > 0 {
		p.Counts = make([]Cell, 0, counts)
	}
	for i := 0; i < n; i++ {
		lo, hi := int(offs[i]), int(offs[i+1])
		if lo < 0 || hi < lo || hi > len(vals) {
			return Refuse(ReasonDecode, "partial: arrow list offsets out of range")
		}
		if inCols && i < counts {
			continue // offsets checked: the cell is read from the columns
		}
		var v []float64
		if hi > lo {
			v = vals[lo:hi:hi]
		}
		switch ks[i] {
		case kindCount:
			p.Counts = append(p.Counts, Cell{H: int(hv[i]), G: int(gv[i]), Counts: v})
		case kindAverage:
			a := len(p.Averages) - 1
			if a < 0 || p.Averages[a].H != int(hv[i]) {
				p.Averages = append(p.Averages, AverageCell{H: int(hv[i])})
				a++
			}
			p.Averages[a].Users = append(p.Averages[a].Users, uv[i])
			// A copy: the releaser keeps average vectors until their window
			// is released, and v would pin the whole fetched batch.
			p.Averages[a].Vectors = append(p.Averages[a].Vectors, slices.Clone(v))
		case kindKey:
			if err := kc.add(p, i, hv[i], uv, offs, vals); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyColumn is the key column of a record batch: row i's key is
// data[offs[i]:offs[i+1]] (nil offs: no such column).
type keyColumn struct {
	offs []int32
	data []byte
	next int // the row after the last key row added (a row there extends its cell)
}

// add appends key row i of histogram h to p's keyed cells (a row right
// after a key row of the same histogram extends its cell; any other
// starts one), pointing into the columns:
// users uv, list offsets offs (checked up to i+1) over vals.
func (kc *keyColumn) add(p *Partial, i int, h int32, uv []uint64, offs []int32, vals []float64) error {
	if kc.offs == nil {
		return Refuse(ReasonDecode, "partial: arrow key rows without the key column")
	}
	lo, hi := kc.offs[i], kc.offs[i+1]
	if lo < 0 || hi < lo || int(hi) > len(kc.data) {
		return Refuse(ReasonDecode, "partial: arrow key offsets out of range")
	}
	bins := int(offs[i+1] - offs[i])
	j := len(p.Keyed) - 1
	if j < 0 || p.Keyed[j].H != int(h) || i != kc.next {
		if bins < 1 {
			return Refuse(ReasonShape, "partial: arrow key row of histogram %d without counts", h)
		}
		// A cell's columns start at its first row: offs[i:], users uv[i:],
		// counts vals[offs[i]:] (its rows' counts are consecutive).
		p.Keyed = append(p.Keyed, KeyedCell{H: int(h), Bins: bins, data: kc.data, offs: kc.offs[i:i], users: uv[i:i], counts: vals[offs[i]:offs[i]]})
		j++
	}
	c := &p.Keyed[j]
	if bins != c.Bins {
		return Refuse(ReasonShape, "partial: arrow key rows of histogram %d with %d and %d counts", h, c.Bins, bins)
	}
	c.offs = kc.offs[i-c.Len() : i+2]
	c.users = uv[i-c.Len() : i+1]
	c.counts = c.counts[:len(c.counts)+bins]
	kc.next = i + 1
	return nil
}

// errTruncated: a message of the stream runs past the record value.
var errTruncated = errors.New("partial: arrow stream truncated")
