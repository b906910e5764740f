package release

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/dpstage/stage/ledger"
)

// ReleaseSchema is the Arrow schema of the released histograms written with
// output.arrow_dir: one row per (histogram, group, bin) of one window, with
// the private probability — the same values as the output topic's
// messages, never a count.
var ReleaseSchema = arrow.NewSchema([]arrow.Field{
	{Name: "release_id", Type: arrow.BinaryTypes.String},
	{Name: "histogram", Type: arrow.BinaryTypes.String},
	{Name: "group", Type: arrow.BinaryTypes.String},
	{Name: "window_start", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
	{Name: "window_end", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}},
	{Name: "bin", Type: arrow.BinaryTypes.String},
	{Name: "probability", Type: arrow.PrimitiveTypes.Float64},
}, nil)

// WriteArrow writes the releases of a published unit as an Arrow IPC file
// <dir>/<histogram>/<window_start>.arrow (written to a temporary name, then
// renamed, so a reader never sees half a file). Status units (nothing
// released) write nothing. It is post-processing of published values.
func WriteArrow(dir string, u *ledger.Unit) error {
	if u.Status != ledger.StatusReleased {
		return nil
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, ReleaseSchema)
	defer b.Release()
	for _, m := range ReleaseMessages(u) {
		var r Release
		if err := json.Unmarshal(m.Value, &r); err != nil {
			return fmt.Errorf("arrow output: decode release: %w", err)
		}
		for i, bin := range r.Bins {
			b.Field(0).(*array.StringBuilder).Append(r.ReleaseID)
			b.Field(1).(*array.StringBuilder).Append(r.Histogram)
			b.Field(2).(*array.StringBuilder).Append(r.Group)
			b.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(u.WindowStart))
			b.Field(4).(*array.TimestampBuilder).Append(arrow.Timestamp(u.WindowEnd))
			b.Field(5).(*array.StringBuilder).Append(bin)
			b.Field(6).(*array.Float64Builder).Append(r.Probabilities[i])
		}
	}
	rec := b.NewRecord()
	defer rec.Release()

	hdir := filepath.Join(dir, u.Histogram)
	if err := os.MkdirAll(hdir, 0o750); err != nil {
		return fmt.Errorf("arrow output: %w", err)
	}
	name := time.UnixMilli(u.WindowStart).UTC().Format("20060102T150405.000Z") + ".arrow"
	tmp, err := os.CreateTemp(hdir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("arrow output: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	w, err := ipc.NewFileWriter(tmp, ipc.WithSchema(ReleaseSchema))
	if err == nil {
		err = w.Write(rec)
	}
	if err == nil {
		err = w.Close()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(hdir, name))
	}
	if err != nil {
		return fmt.Errorf("arrow output %s: %w", filepath.Join(hdir, name), err)
	}
	return nil
}
