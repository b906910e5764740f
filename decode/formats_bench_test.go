package decode

import (
	"testing"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

// BenchmarkFormats compares the decoder's schema walkers with the libraries'
// own decoding of the same records (the figures behind the choice in the
// package doc): hamba/avro into a map and into a struct, and dynamicpb.
func BenchmarkFormats(b *testing.B) {
	cfg, schema := avroConfig(b)
	d := mustNew(cfg)
	ev := d.NewEvent()
	payload := mustAvro(b, schema, avroEvent("u12345", t0, "DE", "cart", "desktop", 2, []float64{0.5, 0.25, 0.25}))
	msg := wire(7, payload)
	b.Run("avro/stage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d.Decode(msg, ev)
		}
	})
	b.Run("avro/hamba-map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			_ = avro.Unmarshal(schema, payload, &m)
		}
	})
	type geo struct {
		Country string `avro:"country"`
	}
	type ev2 struct {
		User struct {
			ID   *string  `avro:"id"`
			Tags []string `avro:"tags"`
		} `avro:"user"`
		Context struct {
			TS  int64 `avro:"ts"`
			Geo *geo  `avro:"geo"`
		} `avro:"context"`
		Page      string            `avro:"page"`
		Device    string            `avro:"device"`
		Code      int64             `avro:"code"`
		Interests []float64         `avro:"interests"`
		Extra     map[string]string `avro:"extra"`
	}
	b.Run("avro/hamba-struct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v ev2
			if err := avro.Unmarshal(schema, payload, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	text := readTestdata(b, "event.proto")
	fd := protoSchema(b, text)
	pc := nestedConfig("protobuf", []string{"HOME", "SEARCH", "CART"})
	withSchemaFile(b, pc, 3, "event.proto", text)
	pd := mustNew(pc)
	pev := pd.NewEvent()
	pp := protoEvent(b, fd, fullProtoEvent(fd))
	pmsg := confluent(b, 3, []int{0}, pp)
	b.Run("protobuf/stage", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			pd.Decode(pmsg, pev)
		}
	})
	md := fd.Messages().ByName("Event")
	b.Run("protobuf/dynamicpb", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m := dynamicpb.NewMessage(md)
			if err := proto.Unmarshal(pp, m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
