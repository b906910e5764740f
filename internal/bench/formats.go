package bench

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/generator"
)

// The in-process phase's Avro and Protobuf runs (issue 24): the same
// events as the JSON run, with the JSON's flat fields, in the Confluent
// wire format under schema id 1 read from a schema file, so that the
// figures compare the decoders alone (no registry is involved once a
// schema is resolved: it is cached).

const benchAvroSchema = `{"type": "record", "name": "PageView", "namespace": "bench", "fields": [
  {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
  {"name": "user_id", "type": "string"},
  {"name": "page", "type": "string"},
  {"name": "country", "type": "string"},
  {"name": "device", "type": "string"},
  {"name": "session", "type": "string"},
  {"name": "seq", "type": "long"}
]}`

const benchProtoSchema = `syntax = "proto3";
package bench;
message PageView {
  int64 ts = 1;
  string user_id = 2;
  string page = 3;
  string country = 4;
  string device = 5;
  string session = 6;
  int64 seq = 7;
}
`

// formatConfig returns lc read as format (avro or protobuf), its schema
// file written under dir.
func formatConfig(lc *config.Config, format, dir string) (*config.Config, error) {
	text, name := benchAvroSchema, "pageview.avsc"
	if format == config.FormatProtobuf {
		text, name = benchProtoSchema, "pageview.proto"
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		return nil, fmt.Errorf("bench: %s schema: %w", format, err)
	}
	c := *lc
	c.Events.Format = format
	c.Events.SchemaFiles = []config.SchemaFile{{ID: 1, File: p}}
	return &c, nil
}

var hexDigits = "0123456789abcdef"

func appendSession(dst []byte, s uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(s>>shift)&0xf])
	}
	return dst
}

// appendAvro appends event e in the wire format (schema id 1) under
// benchAvroSchema.
func appendAvro(dst []byte, e generator.Event) []byte {
	dst = append(dst, 0, 0, 0, 0, 1)
	long := func(v int64) { dst = binary.AppendVarint(dst, v) } // Avro's zig-zag varint
	str := func(s string) { long(int64(len(s))); dst = append(dst, s...) }
	long(e.Time.UnixMilli())
	str(e.UserID)
	str(e.Page)
	str(e.Country)
	str(e.Device)
	long(16)
	dst = appendSession(dst, e.Session)
	long(e.Seq)
	return dst
}

// appendProto appends event e in the wire format (schema id 1, message
// index [0]) under benchProtoSchema.
func appendProto(dst []byte, e generator.Event) []byte {
	dst = append(dst, 0, 0, 0, 0, 1, 0)
	str := func(field byte, s string) {
		dst = append(dst, field<<3|2)
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	dst = append(dst, 1<<3)
	dst = binary.AppendUvarint(dst, uint64(e.Time.UnixMilli()))
	str(2, e.UserID)
	str(3, e.Page)
	str(4, e.Country)
	str(5, e.Device)
	dst = append(dst, 6<<3|2, 16)
	dst = appendSession(dst, e.Session)
	if e.Seq != 0 {
		dst = append(dst, 7<<3)
		dst = binary.AppendUvarint(dst, uint64(e.Seq))
	}
	return dst
}
