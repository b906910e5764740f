package decode

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dpstage/stage/config"
)

// nestedConfig reads nested fields: user.id, context.ts, a group by
// context.geo.country, an enum or string page, and (tagx) a path through a
// list, which is wrong_type for its histogram whenever the list is there.
func nestedConfig(format string, pages []string) *config.Config {
	return &config.Config{
		Events: config.Events{Format: format, TimeField: "context.ts", UserField: "user.id", MaxMessageBytes: 4096},
		Histograms: []config.Histogram{
			{Name: "pages", Field: "page", Bins: pages, GroupBy: "context.geo.country", Groups: []string{"US", "DE"}},
			{Name: "devices", Field: "device", Bins: []string{"mobile", "desktop"}},
			{Name: "codes", Field: "code", Bins: []string{"1", "2", "-3"}},
			{Name: "interests", Field: "interests", Bins: []string{"sport", "news", "music"}, Kind: config.KindAverage},
			{Name: "tagx", Field: "user.tags.first", Bins: []string{"a", "b"}},
		},
	}
}

// withSchemaFile writes text to a file and lists it as schema id.
func withSchemaFile(t testing.TB, cfg *config.Config, id int, name, text string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Events.SchemaFiles = append(cfg.Events.SchemaFiles, config.SchemaFile{ID: id, File: p})
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wire prefixes payload with the wire format's magic byte and schema id.
func wire(id uint32, payload []byte) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], id)
	return append(b, payload...)
}

func avroEvent(user any, ts time.Time, country any, page, device string, code int64, interests []float64) map[string]any {
	var geo any
	if country != nil {
		geo = map[string]any{"shop.Geo": map[string]any{"country": country}} // a union's record: by its name
	}
	return map[string]any{
		"user":      map[string]any{"id": user, "tags": []string{}},
		"context":   map[string]any{"ts": ts, "geo": geo},
		"page":      page,
		"device":    device,
		"code":      code,
		"interests": interests,
		"extra":     map[string]any{"k": "v"},
	}
}

// want is the outcome expected of one record.
type want struct {
	reason Reason
	timeMs int64
	user   string
	bins   []int32
	groups []int32
	drops  []Reason
	vec    []float64 // interests (histogram 3)
}

func (w want) check(t *testing.T, name string, r Reason, ev *Event) {
	t.Helper()
	if r != w.reason {
		t.Errorf("%s: reason %v, want %v", name, r, w.reason)
		return
	}
	if r != ReasonNone {
		return
	}
	if ev.TimeMs != w.timeMs {
		t.Errorf("%s: time %d, want %d", name, ev.TimeMs, w.timeMs)
	}
	if w.user != "" && ev.User != testSeed.Sum64([]byte(w.user)) {
		t.Errorf("%s: user hash is not that of %q", name, w.user)
	}
	if w.bins != nil && !slices.Equal(ev.Bins, w.bins) {
		t.Errorf("%s: bins %v, want %v", name, ev.Bins, w.bins)
	}
	if w.groups != nil && !slices.Equal(ev.Groups, w.groups) {
		t.Errorf("%s: groups %v, want %v", name, ev.Groups, w.groups)
	}
	if w.drops != nil && !slices.Equal(ev.Drops, w.drops) {
		t.Errorf("%s: drops %v, want %v", name, ev.Drops, w.drops)
	}
	if w.vec != nil && !slices.Equal(ev.Vectors[3], w.vec) {
		t.Errorf("%s: vector %v, want %v", name, ev.Vectors[3], w.vec)
	}
}

var t0 = time.UnixMilli(1_700_000_000_123).UTC()

func TestJSONPaths(t *testing.T) {
	d := mustNew(nestedConfig("json", []string{"home", "search", "cart"}))
	ev := d.NewEvent()
	none := []Reason{0, 0, 0, 0, 0}
	for _, tc := range []struct {
		name, msg string
		w         want
	}{
		{"nested", `{"user":{"id":"u1","tags":{"first":"b"}},"context":{"ts":1700000000123,"geo":{"country":"DE"}},"page":"cart","device":"mobile","code":-3,"interests":[0.5,0.25,0.25]}`,
			want{timeMs: 1700000000123, user: "u1", bins: []int32{2, 0, 2, -1, 1}, groups: []int32{1, 0, 0, -1, 0}, drops: none, vec: []float64{0.5, 0.25, 0.25}}},
		{"escaped nested keys", `{"us\u0065r":{"\u0069d":7},"context":{"ts":"2023-11-14T22:13:20Z","geo":{"country":"US"}},"page":"home"}`,
			want{timeMs: 1700000000000, user: "7", bins: []int32{0, -1, -1, -1, -1}}},
		{"missing level", `{"user":{"id":"u1"},"page":"home"}`, want{reason: ReasonMissingTime}},
		{"null level", `{"user":null,"context":{"ts":1}}`, want{reason: ReasonMissingUser}},
		{"string level", `{"user":"u1","context":{"ts":1}}`, want{reason: ReasonWrongType}},
		{"array level", `{"user":[{"id":"u1"}],"context":{"ts":1}}`, want{reason: ReasonWrongType}},
		{"leaf is an object", `{"user":{"id":{"x":1}},"context":{"ts":1}}`, want{reason: ReasonWrongType}},
		{"duplicate level: the last wins", `{"user":{"id":"u1"},"user":{"name":"x"},"context":{"ts":1}}`, want{reason: ReasonMissingUser}},
		{"duplicate level: the last wins (2)", `{"user":{"name":"x"},"user":{"id":"u2"},"context":{"ts":5}}`, want{timeMs: 5, user: "u2"}},
		{"group level through a list", `{"user":{"id":"u"},"context":{"ts":5,"geo":["DE"]},"page":"home","user2":1}`,
			want{timeMs: 5, drops: []Reason{ReasonWrongType, ReasonMissingField, ReasonMissingField, ReasonMissingField, ReasonMissingField}}},
		{"path through a list (tagx)", `{"user":{"id":"u","tags":["a"]},"context":{"ts":5}}`,
			want{timeMs: 5, drops: []Reason{ReasonMissingField, ReasonMissingField, ReasonMissingField, ReasonMissingField, ReasonWrongType}}},
		{"bad JSON inside a followed level", `{"user":{"id":"u1",},"context":{"ts":1}}`, want{reason: ReasonBadJSON}},
		{"invalid UTF-8 inside a followed level", "{\"user\":{\"id\":\"u\xff\"},\"context\":{\"ts\":1}}", want{reason: ReasonInvalidUTF8}},
		{"bad JSON after the levels", `{"user":{"id":"u1"},"context":{"ts":1}} x`, want{reason: ReasonBadJSON}},
	} {
		tc.w.check(t, tc.name, d.Decode([]byte(tc.msg), ev), ev)
	}
	// Depth: a followed level counts toward MaxDepth like any other.
	deep := `{"user":{"id":"u"},"context":{"ts":1,"geo":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}}`
	if r := d.Decode([]byte(deep), ev); r != ReasonBadJSON {
		t.Errorf("nesting past MaxDepth under a followed level: %v, want bad_json", r)
	}
	ok := `{"user":{"id":"u"},"context":{"ts":1,"geo":` + strings.Repeat("[", MaxDepth-2) + strings.Repeat("]", MaxDepth-2) + `}}`
	if r := d.Decode([]byte(ok), ev); r != ReasonNone {
		t.Errorf("nesting at MaxDepth under a followed level: %v, want none", r)
	}
}

func TestRecordFields(t *testing.T) {
	cfg := &config.Config{
		Events: config.Events{Format: "json", TimeField: "$timestamp", UserField: "$key", MaxMessageBytes: 4096},
		Histograms: []config.Histogram{
			{Name: "pages", Field: "page", Bins: []string{"home", "cart"}, GroupBy: "$header.country", Groups: []string{"US", "DE"}},
			{Name: "src", Field: "$header.source", Bins: []string{"web", "app"}},
		},
	}
	d := mustNew(cfg)
	ev := d.NewEvent()
	hdr := func(kv ...string) []Header {
		var hs []Header
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	for _, tc := range []struct {
		name string
		rec  Record
		w    want
	}{
		{"key, timestamp, headers", Record{Key: []byte("u1"), Value: []byte(`{"page":"cart"}`), TimestampMs: 1234, Headers: hdr("country", "DE", "source", "app")},
			want{timeMs: 1234, user: "u1", bins: []int32{1, 1}, groups: []int32{1, 0}}},
		{"the last header of a name wins", Record{Key: []byte("u1"), Value: []byte(`{"page":"home"}`), TimestampMs: 9, Headers: hdr("country", "DE", "country", "US")},
			want{timeMs: 9, bins: []int32{0, -1}, groups: []int32{0, -1}, drops: []Reason{ReasonNone, ReasonMissingField}}},
		{"a numeric key is the same user as the JSON number", Record{Key: []byte("123"), Value: []byte(`{}`), TimestampMs: 1},
			want{timeMs: 1, user: "123"}},
		{"no key", Record{Value: []byte(`{}`), TimestampMs: 1}, want{reason: ReasonMissingUser}},
		{"empty key", Record{Key: []byte{}, Value: []byte(`{}`), TimestampMs: 1}, want{reason: ReasonMissingUser}},
		{"schema-encoded key", Record{Key: []byte{0, 0, 0, 0, 1, 2, 'u'}, Value: []byte(`{}`), TimestampMs: 1}, want{reason: ReasonWrongType}},
		{"no timestamp", Record{Key: []byte("u"), Value: []byte(`{}`), TimestampMs: -1}, want{reason: ReasonBadTime}},
		{"the value is still checked", Record{Key: []byte("u"), Value: []byte(`{`), TimestampMs: 1}, want{reason: ReasonBadJSON}},
		{"missing header", Record{Key: []byte("u"), Value: []byte(`{"page":"home"}`), TimestampMs: 1},
			want{timeMs: 1, drops: []Reason{ReasonMissingField, ReasonMissingField}}},
		{"null header", Record{Key: []byte("u"), Value: []byte(`{"page":"home"}`), TimestampMs: 1, Headers: []Header{{Key: "source"}}},
			want{timeMs: 1, drops: []Reason{ReasonMissingField, ReasonMissingField}}},
	} {
		tc.w.check(t, tc.name, d.DecodeRecord(&tc.rec, ev), ev)
	}
	// A header may be the time field too, in any accepted spelling.
	cfg.Events.TimeField = "$header.t"
	d = mustNew(cfg)
	for _, c := range []struct {
		v    string
		want int64
		r    Reason
	}{{"1700000000000", 1700000000000, ReasonNone}, {"2023-11-14T22:13:20.5Z", 1700000000500, ReasonNone}, {"soon", 0, ReasonBadTime}} {
		rec := Record{Key: []byte("u"), Value: []byte(`{}`), Headers: hdr("t", c.v)}
		want{reason: c.r, timeMs: c.want}.check(t, "header time "+c.v, d.DecodeRecord(&rec, ev), ev)
	}
}

func avroConfig(t testing.TB) (*config.Config, avro.Schema) {
	cfg := nestedConfig("avro", []string{"home", "search", "cart"})
	text := readTestdata(t, "event.avsc")
	withSchemaFile(t, cfg, 7, "event.avsc", text)
	return cfg, avro.MustParse(text)
}

func mustAvro(t testing.TB, s avro.Schema, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(s, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAvro(t *testing.T) {
	cfg, schema := avroConfig(t)
	d := mustNew(cfg)
	ev := d.NewEvent()
	good := mustAvro(t, schema, avroEvent("u1", t0, "DE", "cart", "desktop", 2, []float64{0.5, 0.25, 0.25}))
	withTags := avroEvent("u1", t0, "US", "home", "tablet", -3, []float64{1, 0, 0})
	withTags["user"] = map[string]any{"id": "u1", "tags": []string{"x"}}
	invalid := mustAvro(t, schema, avroEvent("u\xffx", t0, "DE", "cart", "desktop", 2, []float64{1, 0, 0}))
	for _, tc := range []struct {
		name string
		msg  []byte
		w    want
	}{
		{"nested record", wire(7, good), want{timeMs: t0.UnixMilli(), user: "u1", bins: []int32{2, 1, 1, -1, -1}, groups: []int32{1, 0, 0, -1, -1},
			drops: []Reason{0, 0, 0, 0, ReasonWrongType}, vec: []float64{0.5, 0.25, 0.25}}}, // tagx: user.tags is a list, always there
		{"path through a list", wire(7, mustAvro(t, schema, withTags)), want{timeMs: t0.UnixMilli(), bins: []int32{0, -1, 2, -1, -1},
			drops: []Reason{0, ReasonOutOfDomain, 0, 0, ReasonWrongType}}},
		{"null union branch (user)", wire(7, mustAvro(t, schema, avroEvent(nil, t0, "DE", "cart", "mobile", 1, []float64{1, 0, 0}))), want{reason: ReasonMissingUser}},
		{"null union level (group)", wire(7, mustAvro(t, schema, avroEvent("u", t0, nil, "cart", "mobile", 1, []float64{1, 0, 0}))),
			want{timeMs: t0.UnixMilli(), drops: []Reason{ReasonMissingField, 0, 0, 0, ReasonWrongType}}},
		{"bad vector", wire(7, mustAvro(t, schema, avroEvent("u", t0, "DE", "cart", "mobile", 1, []float64{1, 1}))),
			want{timeMs: t0.UnixMilli(), drops: []Reason{0, 0, 0, ReasonBadVector, ReasonWrongType}}},
		{"invalid UTF-8 in a read string", wire(7, invalid), want{reason: ReasonInvalidUTF8}},
		{"magic byte 1", append([]byte{1}, wire(7, good)[1:]...), want{reason: ReasonUnknownMagicByte}},
		{"plain JSON", []byte(`{"user":{"id":"u"}}`), want{reason: ReasonUnknownMagicByte}},
		{"short header", []byte{0, 0, 0}, want{reason: ReasonUnknownMagicByte}},
		{"unknown id, no registry", wire(8, good), want{reason: ReasonUnknownSchemaID}},
		{"truncated", wire(7, good[:len(good)-3]), want{reason: ReasonUndecodable}},
		{"trailing bytes", wire(7, append(slices.Clone(good), 0)), want{reason: ReasonUndecodable}},
		{"union index out of range", wire(7, append([]byte{0x04}, good[1:]...)), want{reason: ReasonUndecodable}},
		{"empty payload", wire(7, nil), want{reason: ReasonUndecodable}},
	} {
		tc.w.check(t, tc.name, d.Decode(tc.msg, ev), ev)
	}
}

// TestAvroTimes: timestamp-millis and -micros longs are event times (micros
// floored to milliseconds), a plain long is epoch milliseconds like JSON's
// numbers, a string is parsed like JSON's.
func TestAvroTimes(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		v    any
		want int64
		r    Reason
	}{
		{`{"type":"long","logicalType":"timestamp-millis"}`, time.UnixMilli(1_700_000_000_123), 1_700_000_000_123, ReasonNone},
		{`{"type":"long","logicalType":"timestamp-micros"}`, time.UnixMicro(1_700_000_000_123_999), 1_700_000_000_123, ReasonNone},
		{`"long"`, int64(1_700_000_000_000), 1_700_000_000_000, ReasonNone},
		{`"long"`, int64(-5), 0, ReasonBadTime},
		{`"string"`, "2023-11-14T22:13:20Z", 1_700_000_000_000, ReasonNone},
		{`"double"`, 1.7e12 + 0.9, 1_700_000_000_000, ReasonNone},
		{`"boolean"`, true, 0, ReasonWrongType},
	} {
		text := `{"type":"record","name":"T","fields":[{"name":"u","type":"string"},{"name":"t","type":` + tc.typ + `}]}`
		cfg := &config.Config{Events: config.Events{Format: "avro", TimeField: "t", UserField: "u"},
			Histograms: []config.Histogram{{Name: "h", Field: "x", Bins: []string{"a", "b"}}}}
		withSchemaFile(t, cfg, 1, "t.avsc", text)
		d := mustNew(cfg)
		ev := d.NewEvent()
		msg := wire(1, mustAvro(t, avro.MustParse(text), map[string]any{"u": "u", "t": tc.v}))
		want{reason: tc.r, timeMs: tc.want}.check(t, tc.typ, d.Decode(msg, ev), ev)
	}
}

// protoSchema compiles testdata/event.proto with protocompile and returns
// the message descriptors, for encoding with dynamicpb.
func protoSchema(t testing.TB, text string) protoreflect.FileDescriptor {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"e.proto": text})})}
	fs, err := c.Compile(context.Background(), "e.proto")
	if err != nil {
		t.Fatal(err)
	}
	return fs[0]
}

// protoEvent encodes an Event with dynamicpb (google.golang.org/protobuf).
func protoEvent(t testing.TB, fd protoreflect.FileDescriptor, set func(m *dynamicpb.Message)) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(fd.Messages().ByName("Event"))
	set(m)
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func setPath(m protoreflect.Message, path string, v protoreflect.Value) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(p))
		m = m.Mutable(fd).Message()
	}
	m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(parts[len(parts)-1])), v)
}

func fullProtoEvent(fd protoreflect.FileDescriptor) func(m *dynamicpb.Message) {
	return func(m *dynamicpb.Message) {
		setPath(m, "user.id", protoreflect.ValueOfString("u1"))
		setPath(m, "context.ts.seconds", protoreflect.ValueOfInt64(1_700_000_000))
		setPath(m, "context.ts.nanos", protoreflect.ValueOfInt32(123_999_999))
		setPath(m, "context.geo.country", protoreflect.ValueOfString("DE"))
		setPath(m, "page", protoreflect.ValueOfEnum(2))
		setPath(m, "device", protoreflect.ValueOfString("desktop"))
		setPath(m, "code", protoreflect.ValueOfInt64(-3))
		l := m.Mutable(fd.Messages().ByName("Event").Fields().ByName("interests")).List()
		for _, x := range []float64{0.5, 0.25, 0.25} {
			l.Append(protoreflect.ValueOfFloat64(x))
		}
		mp := m.Mutable(fd.Messages().ByName("Event").Fields().ByName("extra")).Map()
		mp.Set(protoreflect.ValueOfString("k").MapKey(), protoreflect.ValueOfString("v"))
	}
}

// confluent frames a protobuf payload as franz-go's sr serde does.
func confluent(t testing.TB, id int, index []int, payload []byte) []byte {
	t.Helper()
	b, err := (&sr.ConfluentHeader{}).AppendEncode(nil, id, index)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, payload...)
}

func TestProtobuf(t *testing.T) {
	text := readTestdata(t, "event.proto")
	fd := protoSchema(t, text)
	// The Event is the first message: index [0]. A second config reads
	// the bool field mobile, absent on the wire when false.
	cfg := nestedConfig("protobuf", []string{"HOME", "SEARCH", "CART"})
	cfg.Histograms = append(cfg.Histograms, config.Histogram{Name: "mobile", Field: "mobile", Bins: []string{"true", "false"}})
	withSchemaFile(t, cfg, 3, "event.proto", text)
	d := mustNew(cfg)
	ev := d.NewEvent()
	full := protoEvent(t, fd, fullProtoEvent(fd))
	tagged := protoEvent(t, fd, func(m *dynamicpb.Message) {
		fullProtoEvent(fd)(m)
		l := m.Mutable(fd.Messages().ByName("Event").Fields().ByName("user")).Message()
		l.Mutable(l.Descriptor().Fields().ByName("tags")).List().Append(protoreflect.ValueOfString("a"))
		setPath(m, "mobile", protoreflect.ValueOfBool(true))
		setPath(m, "page", protoreflect.ValueOfEnum(7)) // not a declared value: its number
	})
	noGeo := protoEvent(t, fd, func(m *dynamicpb.Message) {
		fullProtoEvent(fd)(m)
		m.Mutable(fd.Messages().ByName("Event").Fields().ByName("context")).Message().Clear(fd.Messages().ByName("Context").Fields().ByName("geo"))
	})
	noUser := protoEvent(t, fd, func(m *dynamicpb.Message) {
		fullProtoEvent(fd)(m)
		m.Clear(fd.Messages().ByName("Event").Fields().ByName("user"))
	})
	ms := t0.UnixMilli()
	msFull := int64(1_700_000_000_123)
	for _, tc := range []struct {
		name string
		msg  []byte
		w    want
	}{
		{"confluent [0]", confluent(t, 3, []int{0}, full), want{timeMs: msFull, user: "u1", bins: []int32{2, 1, 2, -1, -1, 1}, groups: []int32{1, 0, 0, -1, -1, 0},
			drops: []Reason{0, 0, 0, 0, ReasonMissingField, 0}, vec: []float64{0.5, 0.25, 0.25}}},
		{"explicit [0] count 1", append(wire(3, []byte{2, 0}), full...), want{timeMs: msFull, user: "u1"}},
		{"path through a list, unknown enum number, bool true", confluent(t, 3, []int{0}, tagged), want{timeMs: msFull,
			drops: []Reason{ReasonOutOfDomain, 0, 0, 0, ReasonWrongType, 0}, bins: []int32{-1, 1, 2, -1, -1, 0}}},
		{"absent message level", confluent(t, 3, []int{0}, noGeo), want{timeMs: msFull, drops: []Reason{ReasonMissingField, 0, 0, 0, ReasonMissingField, 0}}},
		{"absent user", confluent(t, 3, []int{0}, noUser), want{reason: ReasonMissingUser}},
		{"index of another message", confluent(t, 3, []int{1}, full), want{reason: ReasonMissingTime}},
		{"index out of range", confluent(t, 3, []int{9}, full), want{reason: ReasonUndecodable}},
		{"nested index out of range", confluent(t, 3, []int{0, 3}, full), want{reason: ReasonUndecodable}},
		{"truncated", confluent(t, 3, []int{0}, full[:len(full)-1]), want{reason: ReasonUndecodable}},
		{"unknown id", confluent(t, 4, []int{0}, full), want{reason: ReasonUnknownSchemaID}},
		{"magic", append([]byte{9}, confluent(t, 3, []int{0}, full)[1:]...), want{reason: ReasonUnknownMagicByte}},
	} {
		tc.w.check(t, tc.name, d.Decode(tc.msg, ev), ev)
	}
	_ = ms
	// Without message indexes (@kafkajs/confluent-schema-registry): the
	// first message, or the one named.
	cfg.Events.Protobuf = config.ProtobufFraming{MessageIndexes: "none"}
	d = mustNew(cfg)
	want{timeMs: msFull, user: "u1"}.check(t, "no indexes", d.Decode(wire(3, full), ev), ev)
	cfg.Events.Protobuf.Message = "shop.v1.User"
	d = mustNew(cfg)
	want{reason: ReasonMissingTime}.check(t, "no indexes, message User", d.Decode(wire(3, full), ev), ev)
	cfg.Events.Protobuf.Message = "shop.v1.Nope"
	if _, err := New(cfg, testSeed); err == nil || !strings.Contains(err.Error(), "shop.v1.Nope") {
		t.Errorf("unknown message: %v", err)
	}
}
