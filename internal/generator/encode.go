package generator

// The generator's Avro and Protobuf encodings (issue 24): the same flat page
// view as the JSON, in the Confluent wire format — magic byte 0, the schema
// id as 4 big-endian bytes, for Protobuf the message indexes ([0], written as
// the single byte 0, as Confluent's serializers write the first message),
// then the payload. The payload is written by hand (a flat record of longs
// and strings), allocation-free like AppendJSON, and checked against
// hamba/avro and google.golang.org/protobuf in the tests; the schemas are
// AvroSchema and ProtoSchema, which the stage's decoder reads from a Schema
// Registry or from events.schema_files.

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Format selects the encoding of the message value.
type Format int

const (
	// JSON: one flat JSON object (AppendJSON). The default.
	JSON Format = iota
	// Avro: AvroSchema's record in the Confluent wire format (AppendAvro).
	Avro
	// Protobuf: ProtoSchema's PageView in the Confluent wire format
	// (AppendProtobuf).
	Protobuf
)

// String is the format as events.format spells it.
func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case Avro:
		return "avro"
	case Protobuf:
		return "protobuf"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// ParseFormat is the Format of an events.format value.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "", "json":
		return JSON, nil
	case "avro":
		return Avro, nil
	case "protobuf":
		return Protobuf, nil
	}
	return 0, fmt.Errorf("generator: format %q: want json, avro or protobuf", s)
}

// AvroSchema is the Avro schema of the generator's events: the JSON's
// fields, ts a long of logical type timestamp-millis.
const AvroSchema = `{
  "type": "record",
  "name": "PageView",
  "namespace": "dpstage.demo",
  "doc": "A synthetic page view of the stage's demo generator (internal/generator).",
  "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "user_id", "type": "string"},
    {"name": "page", "type": "string"},
    {"name": "country", "type": "string"},
    {"name": "device", "type": "string"},
    {"name": "session", "type": "string"},
    {"name": "seq", "type": "long"}
  ]
}
`

// ProtoSchema is the Protobuf schema of the generator's events: the
// JSON's fields, ts an int64 of epoch milliseconds.
const ProtoSchema = `// A synthetic page view of the stage's demo generator (internal/generator).
syntax = "proto3";
package dpstage.demo;

message PageView {
  int64 ts = 1; // event time, Unix epoch milliseconds
  string user_id = 2;
  string page = 3;
  string country = 4;
  string device = 5;
  string session = 6;
  int64 seq = 7;
}
`

// appendHeader appends the Confluent wire-format header of schema id.
func appendHeader(dst []byte, id int32) []byte {
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint32(dst, uint32(id))
}

// appendSession appends the session as 16 hex digits.
func appendSession(dst []byte, s uint64) []byte {
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(s>>shift)&0xf])
	}
	return dst
}

// AppendAvro appends e as AvroSchema's record in the Confluent wire format
// with schema id id.
func (g *Generator) AppendAvro(dst []byte, e Event, id int32) []byte {
	dst = appendHeader(dst, id)
	long := func(dst []byte, v int64) []byte { return binary.AppendVarint(dst, v) } // Avro longs are zigzag varints
	str := func(dst []byte, s string) []byte { return append(long(dst, int64(len(s))), s...) }
	dst = long(dst, e.Time.UnixMilli())
	dst = str(dst, e.UserID)
	dst = str(dst, e.Page)
	dst = str(dst, e.Country)
	dst = str(dst, e.Device)
	dst = long(dst, 16)
	dst = appendSession(dst, e.Session)
	return long(dst, e.Seq)
}

// AppendProtobuf appends e as ProtoSchema's PageView in the Confluent wire
// format with schema id id and message index [0].
func (g *Generator) AppendProtobuf(dst []byte, e Event, id int32) []byte {
	dst = append(appendHeader(dst, id), 0)
	str := func(dst []byte, n protowire.Number, s string) []byte {
		dst = protowire.AppendTag(dst, n, protowire.BytesType)
		return protowire.AppendString(dst, s)
	}
	// proto3 leaves zero values out: a ts or seq of 0 is not written.
	if ms := e.Time.UnixMilli(); ms != 0 {
		dst = protowire.AppendTag(dst, 1, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(ms))
	}
	dst = str(dst, 2, e.UserID)
	dst = str(dst, 3, e.Page)
	dst = str(dst, 4, e.Country)
	dst = str(dst, 5, e.Device)
	dst = protowire.AppendTag(dst, 6, protowire.BytesType)
	dst = protowire.AppendVarint(dst, 16)
	dst = appendSession(dst, e.Session)
	if e.Seq != 0 {
		dst = protowire.AppendTag(dst, 7, protowire.VarintType)
		dst = protowire.AppendVarint(dst, uint64(e.Seq))
	}
	return dst
}

// AppendValue appends e in the configured Format (Config.Format, with
// Config.SchemaID for Avro and Protobuf).
func (g *Generator) AppendValue(dst []byte, e Event) []byte {
	switch g.cfg.Format {
	case Avro:
		return g.AppendAvro(dst, e, g.cfg.SchemaID)
	case Protobuf:
		return g.AppendProtobuf(dst, e, g.cfg.SchemaID)
	}
	return g.AppendJSON(dst, e)
}
