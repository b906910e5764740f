package generator

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoPageView is ProtoSchema's PageView, its descriptor built by hand.
func protoPageView(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type) *descriptorpb.FieldDescriptorProto {
		return &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(),
			Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(), JsonName: proto.String(name)}
	}
	str, i64 := descriptorpb.FieldDescriptorProto_TYPE_STRING, descriptorpb.FieldDescriptorProto_TYPE_INT64
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name: proto.String("pageview.proto"), Package: proto.String("dpstage.demo"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("PageView"), Field: []*descriptorpb.FieldDescriptorProto{
			field("ts", 1, i64), field("user_id", 2, str), field("page", 3, str), field("country", 4, str),
			field("device", 5, str), field("session", 6, str), field("seq", 7, i64),
		}}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Messages().ByName("PageView")
}

// TestAvroAndProtobufDecode: what AppendAvro and AppendProtobuf write is the
// Confluent wire format (magic 0, the schema id big-endian, Protobuf's
// index byte 0) followed by a payload that hamba/avro (under AvroSchema) and
// google.golang.org/protobuf (under ProtoSchema's message) decode to the
// event's fields, event 0 (seq 0, left out by proto3) included.
func TestAvroAndProtobufDecode(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Seed: 3, Users: 50, UserLifetime: time.Minute, Start: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	sch, err := avro.Parse(AvroSchema)
	if err != nil {
		t.Fatalf("AvroSchema: %v", err)
	}
	md := protoPageView(t)
	const id = 0x01020304
	for e := range g.Events(0, 200) {
		hex := string(appendSession(nil, e.Session))
		b := g.AppendAvro(nil, e, id)
		if b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != id {
			t.Fatalf("avro header % x", b[:5])
		}
		var a struct {
			TS      time.Time `avro:"ts"`
			UserID  string    `avro:"user_id"`
			Page    string    `avro:"page"`
			Country string    `avro:"country"`
			Device  string    `avro:"device"`
			Session string    `avro:"session"`
			Seq     int64     `avro:"seq"`
		}
		if err := avro.Unmarshal(sch, b[5:], &a); err != nil {
			t.Fatalf("event %d: avro: %v", e.Seq, err)
		}
		if !a.TS.Equal(e.Time) || a.UserID != e.UserID || a.Page != e.Page || a.Country != e.Country || a.Device != e.Device || a.Session != hex || a.Seq != e.Seq {
			t.Fatalf("event %d: avro decodes to %+v, want %+v", e.Seq, a, e)
		}
		p := g.AppendProtobuf(nil, e, id)
		if p[0] != 0 || binary.BigEndian.Uint32(p[1:5]) != id || p[5] != 0 {
			t.Fatalf("protobuf header % x", p[:6])
		}
		m := dynamicpb.NewMessage(md)
		if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(p[6:], m); err != nil {
			t.Fatalf("event %d: protobuf: %v", e.Seq, err)
		}
		if len(m.GetUnknown()) != 0 {
			t.Fatalf("event %d: protobuf has unknown fields", e.Seq)
		}
		get := func(n string) protoreflect.Value { return m.Get(md.Fields().ByName(protoreflect.Name(n))) }
		if get("ts").Int() != e.Time.UnixMilli() || get("user_id").String() != e.UserID || get("page").String() != e.Page ||
			get("country").String() != e.Country || get("device").String() != e.Device || get("session").String() != hex || get("seq").Int() != e.Seq {
			t.Fatalf("event %d: protobuf decodes to %v, want %+v", e.Seq, m, e)
		}
	}
}

// TestFormatConfig: Message writes the configured format; a schema-encoded
// format needs a schema id and epoch-millisecond times.
func TestFormatConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   Config
		ok    bool
		magic bool
	}{
		{Config{}, true, false},
		{Config{Format: Avro, SchemaID: 7}, true, true},
		{Config{Format: Protobuf, SchemaID: 7}, true, true},
		{Config{Format: Avro}, false, false},
		{Config{Format: Protobuf, SchemaID: 7, TimeFormat: RFC3339}, false, false},
		{Config{Format: 9, SchemaID: 7}, false, false},
	} {
		g, err := New(tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%+v: error %v, want ok=%v", tc.cfg, err, tc.ok)
			continue
		}
		if err != nil {
			continue
		}
		v := g.Message(5).Value
		if got := v[0] == 0 && binary.BigEndian.Uint32(v[1:5]) == 7; got != tc.magic {
			t.Errorf("%+v: value % x", tc.cfg, v[:8])
		}
	}
	for _, s := range []string{"json", "avro", "protobuf"} {
		if f, err := ParseFormat(s); err != nil || f.String() != s {
			t.Errorf("ParseFormat(%q) = %v, %v", s, f, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("ParseFormat(xml): no error")
	}
}
