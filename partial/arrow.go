package partial

// The Partial's Arrow IPC encoding (issue 28 item 4).
//
// # Wire format
//
// A Partial's record value is one Arrow IPC stream (the streaming format:
// a schema message, one record batch, the end-of-stream marker) — the
// design card's batch format, decoded without parsing one number at a
// time: JSON partials cost 0.5–1.1 s of decoding per window at 100
// partitions × 10,000 cells, Arrow ones a few ms (BenchmarkDecodeMerge).
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
// Extending it: a new column is added with a new name (a per-row figure,
// such as a count cell's distinct users, as a column beside these; a new
// kind of row, as a new kind value). A reader takes the columns it knows
// by name and ignores the others, and skips the rows of kinds it does not
// know, so an older releaser reads a newer partial as the partial without
// the addition — which must then be safe to ignore, or the version
// bumped.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

// arrowFields are the columns of the Arrow encoding.
var arrowFields = []arrow.Field{
	{Name: "kind", Type: arrow.PrimitiveTypes.Uint8},
	{Name: "h", Type: arrow.PrimitiveTypes.Int32},
	{Name: "g", Type: arrow.PrimitiveTypes.Int32},
	{Name: "user", Type: arrow.PrimitiveTypes.Uint64},
	{Name: "values", Type: arrow.ListOf(arrow.PrimitiveTypes.Float64)},
}

// arrowMem allocates the decoded buffers on the Go heap: the decoded
// Partial's count slices point into them, so they must outlive the
// reader (Go's allocator frees nothing itself; the GC does).
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
	schema := arrow.NewSchema(arrowFields, &md)
	b := array.NewRecordBuilder(arrowMem, schema)
	defer b.Release()
	kind := b.Field(0).(*array.Uint8Builder)
	hs := b.Field(1).(*array.Int32Builder)
	gs := b.Field(2).(*array.Int32Builder)
	users := b.Field(3).(*array.Uint64Builder)
	lists := b.Field(4).(*array.ListBuilder)
	vals := lists.ValueBuilder().(*array.Float64Builder)
	for _, c := range p.Counts {
		kind.Append(kindCount)
		hs.Append(int32(c.H))
		gs.Append(int32(c.G))
		users.Append(0)
		lists.Append(true)
		vals.AppendValues(c.Counts, nil)
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

// EncodeJSON returns the JSON encoding (Version 1) of the record value,
// which versions before the Arrow encoding wrote and read: for
// kafka.distributed.partials_format json during a rolling upgrade, and
// for tests of the back-compatibility.
func (p *Partial) EncodeJSON() []byte {
	q := *p
	q.V = Version
	b, err := json.Marshal(&q)
	if err != nil {
		panic(fmt.Sprintf("partial: encode partial: %v", err)) // only NaN/Inf counts, which aggregate never makes
	}
	return b
}

// decodeArrow decodes the Arrow encoding into p (unchecked).
func decodeArrow(b []byte, p *Partial) error {
	r, err := ipc.NewReaderFromMessageReader(&bytesMessages{b: b}, ipc.WithAllocator(arrowMem))
	if err != nil {
		return Refuse(ReasonDecode, "partial: arrow stream: %v", err)
	}
	defer r.Release()
	md := r.Schema().Metadata()
	if v := md.FindKey(arrowVersionKey); v < 0 || md.Values()[v] != strconv.Itoa(ArrowVersion) {
		got := "none"
		if v >= 0 {
			got = md.Values()[v]
		}
		return Refuse(ReasonDecode, "partial: arrow encoding version %s, this stage reads %d", got, ArrowVersion)
	}
	h := md.FindKey(arrowHeaderKey)
	if h < 0 {
		return Refuse(ReasonDecode, "partial: arrow encoding without its header")
	}
	if err := json.Unmarshal([]byte(md.Values()[h]), p); err != nil {
		return Refuse(ReasonDecode, "partial: arrow encoding's header: %v", err)
	}
	p.Counts, p.Averages = nil, nil
	if !r.Next() {
		if err := r.Err(); err != nil {
			return Refuse(ReasonDecode, "partial: arrow record batch: %v", err)
		}
		return nil // no batch: no cells
	}
	rec := r.Record()
	cols := map[string]arrow.Array{}
	for i, f := range rec.Schema().Fields() {
		cols[f.Name] = rec.Column(i)
	}
	kind, ok1 := cols["kind"].(*array.Uint8)
	hs, ok2 := cols["h"].(*array.Int32)
	gs, ok3 := cols["g"].(*array.Int32)
	users, ok4 := cols["user"].(*array.Uint64)
	lists, ok5 := cols["values"].(*array.List)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return Refuse(ReasonDecode, "partial: arrow record batch without the columns kind, h, g, user, values of the expected types")
	}
	flt, ok := lists.ListValues().(*array.Float64)
	if !ok || kind.NullN()+hs.NullN()+gs.NullN()+users.NullN()+lists.NullN()+flt.NullN() > 0 {
		return Refuse(ReasonDecode, "partial: arrow record batch with nulls, or values that are not float64")
	}
	vals, offs := flt.Float64Values(), lists.Offsets()
	n := int(rec.NumRows())
	ks, hv, gv, uv := kind.Uint8Values(), hs.Int32Values(), gs.Int32Values(), users.Uint64Values()
	counts := 0
	for _, k := range ks {
		if k == kindCount {
			counts++
		}
	}
	if counts > 0 {
		p.Counts = make([]Cell, 0, counts)
	}
	for i := 0; i < n; i++ {
		lo, hi := int(offs[i]), int(offs[i+1])
		if lo < 0 || hi < lo || hi > len(vals) {
			return Refuse(ReasonDecode, "partial: arrow list offsets out of range")
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
		}
	}
	return nil
}

// bytesMessages is an ipc.MessageReader over one record value that hands
// out its messages' bodies without copying them (ipc.NewReader reads each
// body into a new zeroed buffer: two passes over every byte). The decoded
// arrays point into b; the decoded Partial's count slices too.
type bytesMessages struct {
	b   []byte
	msg *ipc.Message
}

// errTruncated: a message of the stream runs past the record value.
var errTruncated = errors.New("partial: arrow stream truncated")

// Message returns the next message, io.EOF at the end of the stream.
func (r *bytesMessages) Message() (*ipc.Message, error) {
	if len(r.b) == 0 {
		return nil, io.EOF
	}
	if len(r.b) < 8 || binary.LittleEndian.Uint32(r.b) != 0xFFFFFFFF {
		return nil, errTruncated // a stream this encoder wrote has continuation markers
	}
	n := int(int32(binary.LittleEndian.Uint32(r.b[4:])))
	if n == 0 {
		r.b = nil
		return nil, io.EOF // end of stream
	}
	if n < 0 || n > len(r.b)-8 {
		return nil, errTruncated
	}
	meta := memory.NewBufferBytes(r.b[8 : 8+n])
	probe := ipc.NewMessage(meta, memory.NewBufferBytes(nil))
	bodyLen := probe.BodyLen()
	rest := r.b[8+n:]
	if bodyLen < 0 || bodyLen > int64(len(rest)) {
		return nil, errTruncated
	}
	if r.msg != nil {
		r.msg.Release()
	}
	r.msg = ipc.NewMessage(meta, memory.NewBufferBytes(rest[:bodyLen]))
	r.b = rest[bodyLen:]
	return r.msg, nil
}

// Retain and Release: ipc.MessageReader (the buffers are b's: nothing to
// free).
func (r *bytesMessages) Retain() {}

func (r *bytesMessages) Release() {
	if r.msg != nil {
		r.msg.Release()
		r.msg = nil
	}
}
