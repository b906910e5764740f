package e2e

// The Go producer of issue 24's acceptance tests: franz-go's pkg/sr (its
// registry client and its Serde, which writes the Confluent wire format),
// hamba/avro for Avro and google.golang.org/protobuf's dynamicpb for
// Protobuf, producing with kgo. None of this is the stage's code: the
// Protobuf descriptor is built here by hand from descriptorpb (it mirrors
// jsclients/pageview.proto), never compiled by the decoder's compiler, so
// that an encoder and the decoder do not share a schema parser.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// The acceptance schemas' files in JSDir (shared with produce.js).
const (
	AvroSchemaFile  = "pageview.avsc"
	ProtoSchemaFile = "pageview.proto"
)

// SchemaText is the text of the acceptance schema of format (avro or
// protobuf), as both producers register it.
func SchemaText(t testing.TB, format string) string {
	t.Helper()
	name := AvroSchemaFile
	if format == "protobuf" {
		name = ProtoSchemaFile
	}
	b, err := os.ReadFile(filepath.Join(JSDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// avroPageView is the Avro record of pageview.avsc.
type avroPageView struct {
	User struct {
		ID string `avro:"id"`
	} `avro:"user"`
	TS      int64  `avro:"ts"`
	Page    string `avro:"page"`
	Context struct {
		Geo struct {
			Country string `avro:"country"`
		} `avro:"geo"`
	} `avro:"context"`
	Device string `avro:"device"`
}

// pageViewDescriptor is pageview.proto's PageView message, built by hand.
func pageViewDescriptor() (protoreflect.MessageDescriptor, error) {
	str := descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum()
	i64 := descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
	msg := descriptorpb.FieldDescriptorProto_TYPE_MESSAGE.Enum()
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	field := func(name string, n int32, typ *descriptorpb.FieldDescriptorProto_Type, typeName string) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Label: opt, Type: typ, JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(".dpstage.acceptance." + typeName)
		}
		return f
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name: proto.String(ProtoSchemaFile), Package: proto.String("dpstage.acceptance"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("PageView"), Field: []*descriptorpb.FieldDescriptorProto{
				field("user", 1, msg, "User"), field("ts", 2, i64, ""), field("page", 3, str, ""),
				field("context", 4, msg, "Context"), field("device", 5, str, ""),
			}},
			{Name: proto.String("User"), Field: []*descriptorpb.FieldDescriptorProto{field("id", 1, str, "")}},
			{Name: proto.String("Context"), Field: []*descriptorpb.FieldDescriptorProto{field("geo", 1, msg, "Geo")}},
			{Name: proto.String("Geo"), Field: []*descriptorpb.FieldDescriptorProto{field("country", 1, str, "")}},
		},
	}
	f, err := protodesc.NewFile(fd, nil)
	if err != nil {
		return nil, err
	}
	return f.Messages().ByName("PageView"), nil
}

// protoPageView is e as a dynamic PageView message.
func protoPageView(md protoreflect.MessageDescriptor, e Event) *dynamicpb.Message {
	sub := func(m protoreflect.Message, name string) protoreflect.Message {
		return m.Mutable(m.Descriptor().Fields().ByName(protoreflect.Name(name))).Message()
	}
	set := func(m protoreflect.Message, name string, v protoreflect.Value) {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(name)), v)
	}
	m := dynamicpb.NewMessage(md)
	set(sub(m, "user"), "id", protoreflect.ValueOfString(e.User))
	set(m, "ts", protoreflect.ValueOfInt64(e.At.UnixMilli()))
	set(m, "page", protoreflect.ValueOfString(e.Page))
	set(sub(sub(m, "context"), "geo"), "country", protoreflect.ValueOfString(e.Country))
	set(m, "device", protoreflect.ValueOfString(e.Device))
	return m
}

// ProduceSerde produces evs to topic as produce.js does, with franz-go: the
// schema of format (avro or protobuf; SchemaText) registered with pkg/sr's
// client under subject <topic>-value (RegisterSerde), then written by
// ProduceSerdeID. It returns the schema id.
func ProduceSerde(t testing.TB, brokers []string, registryURL, topic, format string, evs []Event) int {
	t.Helper()
	id := RegisterSerde(t, registryURL, topic+"-value", format, SchemaText(t, format))
	ProduceSerdeID(t, brokers, topic, format, id, evs)
	return id
}

// RegisterSerde registers text, a schema of format (avro or protobuf),
// under subject with pkg/sr's client (CreateSchema) and returns its id.
func RegisterSerde(t testing.TB, registryURL, subject, format, text string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcl, err := sr.NewClient(sr.URLs(registryURL))
	if err != nil {
		t.Fatal(err)
	}
	typ := sr.TypeAvro
	if format == "protobuf" {
		typ = sr.TypeProtobuf
	}
	ss, err := rcl.CreateSchema(ctx, subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatalf("register the %s schema with franz-go sr: %v", format, err)
	}
	return ss.ID
}

// SerdeEncoder returns the encoder of ProduceSerdeID: an event as a pkg/sr
// Serde writes it as schema id (Confluent wire format, Protobuf with message
// index [0]).
func SerdeEncoder(t testing.TB, format string, id int) func(Event) []byte {
	t.Helper()
	var serde sr.Serde
	var value func(Event) any
	switch format {
	case "avro":
		sch, err := avro.Parse(SchemaText(t, format))
		if err != nil {
			t.Fatal(err)
		}
		serde.Register(id, avroPageView{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(sch, v) }))
		value = func(e Event) any {
			var v avroPageView
			v.User.ID, v.TS, v.Page, v.Context.Geo.Country, v.Device = e.User, e.At.UnixMilli(), e.Page, e.Country, e.Device
			return v
		}
	case "protobuf":
		md, err := pageViewDescriptor()
		if err != nil {
			t.Fatal(err)
		}
		serde.Register(id, &dynamicpb.Message{}, sr.EncodeFn(func(v any) ([]byte, error) { return proto.Marshal(v.(*dynamicpb.Message)) }), sr.Index(0))
		value = func(e Event) any { return protoPageView(md, e) }
	default:
		t.Fatalf("format %q: want avro or protobuf", format)
	}
	return func(e Event) []byte {
		b, err := serde.Encode(value(e))
		if err != nil {
			t.Fatalf("encode %+v: %v", e, err)
		}
		return b
	}
}

// ProduceSerdeID writes evs to topic, every event encoded by SerdeEncoder
// as schema id (whose schema must be SchemaText(format) up to its doc
// strings), keyed by its user (kgo's default partitioner: murmur2, as
// Kafka's), its record time its event time, headers source=franz-go-sr and
// device. It needs no registry.
func ProduceSerdeID(t testing.TB, brokers []string, topic, format string, id int, evs []Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enc := SerdeEncoder(t, format, id)
	recs := make([]*kgo.Record, len(evs))
	for i, e := range evs {
		recs[i] = &kgo.Record{Topic: topic, Key: []byte(e.User), Value: enc(e), Timestamp: e.At,
			Headers: []kgo.RecordHeader{{Key: "source", Value: []byte("franz-go-sr")}, {Key: "device", Value: []byte(e.Device)}}}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d %s events with kgo: %v", len(recs), format, err)
	}
	t.Logf("franz-go sr serde produced %d %s events (schema id %d)", len(recs), format, id)
}
