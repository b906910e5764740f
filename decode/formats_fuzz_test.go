package decode

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/keyhash"
	"time"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// schemaReasons are the whole-event reasons of the schema-encoded formats.
var schemaReasons = map[Reason]bool{
	ReasonNone: true, ReasonUnknownMagicByte: true, ReasonUnknownSchemaID: true, ReasonUndecodable: true,
	ReasonInvalidUTF8: true, ReasonMissingTime: true, ReasonBadTime: true, ReasonMissingUser: true, ReasonWrongType: true,
}

// jsonReasons are the whole-event reasons of JSON.
var jsonReasons = map[Reason]bool{
	ReasonNone: true, ReasonBadJSON: true, ReasonInvalidUTF8: true, ReasonOversized: true,
	ReasonMissingTime: true, ReasonBadTime: true, ReasonMissingUser: true, ReasonWrongType: true,
}

// checkShape: the reason is a whole-event one of the format, and bins,
// groups and drops agree with it.
func checkShape(t *testing.T, d *Decoder, r Reason, ev *Event) {
	t.Helper()
	allowed := schemaReasons
	if d.schemas == nil {
		allowed = jsonReasons
	}
	if !allowed[r] {
		t.Fatalf("reason %v", r)
	}
	for h, hs := range d.hists {
		if hs.average {
			checkFuzzVector(t, r, ev, h, hs.dim)
			continue
		}
		b, g := ev.Bins[h], ev.Groups[h]
		if (b == -1) != (g == -1) || b < -1 || int(b) >= len(hs.bins) || g < -1 || (hs.groupSlot >= 0 && !hs.selects && int(g) >= len(hs.groups)) {
			t.Fatalf("histogram %d: bin %d group %d out of range", h, b, g)
		}
		checkKey(t, d, h, ev)
		if (b == -1) != (r != ReasonNone || ev.Drops[h] != ReasonNone) {
			t.Fatalf("histogram %d: bin %d with drop %v (event %v)", h, b, ev.Drops[h], r)
		}
	}
	if r == ReasonNone && (ev.TimeMs < MinTimeMs || ev.TimeMs > MaxTimeMs) {
		t.Fatalf("time %d out of range", ev.TimeMs)
	}
}

// checkKey checks histogram h's key: present (not nil, at most MaxKeyBytes,
// sampled) iff the histogram selects and its part is kept, with group 0.
func checkKey(t *testing.T, d *Decoder, h int, ev *Event) {
	t.Helper()
	k, kept := ev.Keys[h], ev.Bins[h] >= 0
	if !d.hists[h].selects || !kept {
		if k != nil {
			t.Fatalf("histogram %d: key %q on a part that has none", h, k)
		}
		return
	}
	if k == nil || len(k) > MaxKeyBytes || ev.Groups[h] != 0 || !keyhash.Sampled(keyhash.Sum(k), d.keyRate) {
		t.Fatalf("histogram %d: key %q (%d bytes), group %d", h, k, len(k), ev.Groups[h])
	}
}

// keyedTwin decodes what a fuzzer decodes with histogram 0 selecting its
// groups (no listed groups, every key sampled).
type keyedTwin struct {
	d  *Decoder
	ev *Event
}

func newKeyedTwin(cfg *config.Config) keyedTwin {
	kc := *cfg
	kc.Histograms = slices.Clone(cfg.Histograms)
	kc.Histograms[0].Groups = nil
	d := mustNew(&kc)
	return keyedTwin{d, d.NewEvent()}
}

// check: the twin's outcome is well formed and the listed decoder's (r,
// ev, of cfg) for the whole event; where the listed decoder found a
// listed group of histogram 0, the twin's key is that group's name.
func (k keyedTwin) check(t *testing.T, msg []byte, cfg *config.Config, r Reason, ev *Event) {
	t.Helper()
	rk := k.d.Decode(msg, k.ev)
	checkShape(t, k.d, rk, k.ev)
	if rk != r {
		t.Fatalf("keyed decoder %v, listed decoder %v", rk, r)
	}
	if g := ev.Groups[0]; r == ReasonNone && g >= 0 {
		if want := cfg.Histograms[0].Groups[g]; string(k.ev.Keys[0]) != want || k.ev.Bins[0] != ev.Bins[0] {
			t.Fatalf("listed group %q bin %d; key %q (%v) bin %d", want, ev.Bins[0], k.ev.Keys[0], k.ev.Drops[0], k.ev.Bins[0])
		}
	}
}

// FuzzDecodeAvro mutates Avro records of testdata/event.avsc. Whatever the
// bytes, the decoder does not panic and its outcome is well formed; a
// record it accepts is one hamba/avro decodes too, to the same user, time,
// page and device.
func FuzzDecodeAvro(f *testing.F) {
	cfg, schema := avroConfig(f)
	for _, e := range []map[string]any{
		avroEvent("u1", t0, "DE", "cart", "desktop", 2, []float64{0.5, 0.25, 0.25}),
		avroEvent(nil, t0, nil, "home", "tv", -3, []float64{}),
		avroEvent("ü", time.UnixMilli(0), "US", "other", "mobile", 1<<40, []float64{1, 0, 0, 0}),
	} {
		f.Add(mustAvro(f, schema, e))
	}
	d := mustNew(cfg)
	ev := d.NewEvent()
	page := d.hists[0]
	twin := newKeyedTwin(cfg)
	f.Fuzz(func(t *testing.T, payload []byte) {
		msg := wire(7, payload)
		r := d.Decode(msg, ev)
		checkShape(t, d, r, ev)
		twin.check(t, msg, cfg, r, ev)
		if r != ReasonNone {
			return
		}
		var m map[string]any
		if err := avro.Unmarshal(schema, payload, &m); err != nil {
			t.Fatalf("accepted %x, which hamba/avro refuses: %v", payload, err)
		}
		user := m["user"].(map[string]any)["id"]
		if u, ok := user.(map[string]any); ok { // a union, by branch name
			user = u["string"]
		}
		if id, ok := user.(string); !ok || ev.User != testSeed.Sum64([]byte(id)) {
			t.Fatalf("user hash is not that of %v", user)
		}
		if ts := m["context"].(map[string]any)["ts"].(time.Time); ts.UnixMilli() != ev.TimeMs {
			t.Fatalf("time %d, hamba %v", ev.TimeMs, ts)
		}
		if p := m["page"].(string); ev.Bins[0] >= 0 && page.binListOrMap(ev.Bins[0]) != p {
			t.Fatalf("page bin %d, hamba %q", ev.Bins[0], p)
		}
		if dv := m["device"].(string); ev.Bins[1] >= 0 && d.hists[1].binListOrMap(ev.Bins[1]) != dv {
			t.Fatalf("device bin %d, hamba %q", ev.Bins[1], dv)
		}
	})
}

// binListOrMap returns the name of bin b (tests).
func (hs histogram) binListOrMap(b int32) string {
	for k, v := range hs.bins {
		if v == b {
			return k
		}
	}
	return fmt.Sprint("bin ", b)
}

// FuzzDecodeProtobuf mutates protobuf records of testdata/event.proto
// (message indexes included). Whatever the bytes, the decoder does not
// panic and its outcome is well formed; a payload google.golang.org/protobuf
// parses is never undecodable, and when both accept it they agree on the
// user, the time and the device.
func FuzzDecodeProtobuf(f *testing.F) {
	text := readTestdata(f, "event.proto")
	fd := protoSchema(f, text)
	cfg := nestedConfig("protobuf", []string{"HOME", "SEARCH", "CART"})
	withSchemaFile(f, cfg, 3, "event.proto", text)
	f.Add(confluent(f, 3, []int{0}, protoEvent(f, fd, fullProtoEvent(fd)))[5:])
	f.Add(confluent(f, 3, []int{0}, protoEvent(f, fd, func(*dynamicpb.Message) {}))[5:])
	f.Add(confluent(f, 3, []int{0, 0}, []byte{0x0a, 0x02, 0x0a, 0x00})[5:])
	d := mustNew(cfg)
	ev := d.NewEvent()
	md := fd.Messages().ByName("Event")
	twin := newKeyedTwin(cfg)
	f.Fuzz(func(t *testing.T, framed []byte) {
		r := d.Decode(wire(3, framed), ev)
		checkShape(t, d, r, ev)
		twin.check(t, wire(3, framed), cfg, r, ev)
		if len(framed) == 0 || framed[0] != 0 { // only index [0] is checked against the reference
			return
		}
		m := dynamicpb.NewMessage(md)
		if err := proto.Unmarshal(framed[1:], m); err != nil {
			return
		}
		if r == ReasonUndecodable || r == ReasonInvalidUTF8 {
			t.Fatalf("%v for %x, which google.golang.org/protobuf parses", r, framed)
		}
		if r != ReasonNone {
			return
		}
		get := func(path ...string) protoreflect.Value {
			var msg protoreflect.Message = m
			for _, p := range path[:len(path)-1] {
				msg = msg.Get(msg.Descriptor().Fields().ByName(protoreflect.Name(p))).Message()
			}
			return msg.Get(msg.Descriptor().Fields().ByName(protoreflect.Name(path[len(path)-1])))
		}
		if id := get("user", "id").String(); ev.User != testSeed.Sum64([]byte(id)) {
			t.Fatalf("user hash is not that of %q", id)
		}
		ms := get("context", "ts", "seconds").Int()*1000 + get("context", "ts", "nanos").Int()/1e6
		if ms != ev.TimeMs {
			t.Fatalf("time %d, protobuf %d", ev.TimeMs, ms)
		}
		if dv := get("device").String(); ev.Bins[1] >= 0 && d.hists[1].binListOrMap(ev.Bins[1]) != dv {
			t.Fatalf("device bin %d, protobuf %q", ev.Bins[1], dv)
		}
	})
}
