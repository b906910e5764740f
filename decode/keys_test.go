package decode

import (
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/keyhash"
)

// keyedConfig is testConfig with histograms 0 (group_by country) and 2
// (group_by page) selecting their groups (no listed groups), keys sampled
// at rate.
func keyedConfig(rate float64) *config.Config {
	cfg := testConfig()
	cfg.Histograms[0].Groups = nil
	cfg.Histograms[2].Groups = nil
	cfg.Selection.KeySampleRate = rate
	return cfg
}

// checkKeysAgainstListed: where the listed decoder (cfg) found a listed
// group, the keyed decoder's key is that group's name, unless not sampled.
func checkKeysAgainstListed(t *testing.T, cfg *config.Config, ev, evk *Event) {
	t.Helper()
	for _, h := range []int{0, 2} {
		g := ev.Groups[h]
		if g < 0 {
			continue
		}
		want := cfg.Histograms[h].Groups[g]
		if evk.Drops[h] == ReasonUnsampledKey && keyhash.String(want) >= keyhash.Threshold(0.5) {
			continue
		}
		if string(evk.Keys[h]) != want || evk.Bins[h] != ev.Bins[h] {
			t.Fatalf("histogram %d: listed group %q bin %d, key %q (%v) bin %d", h, want, ev.Bins[h], evk.Keys[h], evk.Drops[h], evk.Bins[h])
		}
	}
}

// keysAt returns a key that rate samples and one that it does not.
func keysAt(rate float64) (sampled, unsampled string) {
	th := keyhash.Threshold(rate)
	for i := 0; sampled == "" || unsampled == ""; i++ {
		k := "k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('0'+i/26%10))
		if keyhash.Sampled(keyhash.String(k), th) {
			sampled = k
		} else {
			unsampled = k
		}
	}
	return sampled, unsampled
}

// TestDecodeKeys: a selecting histogram's part carries its group_by value
// as its key (group 0), in every spelling JSON allows; a key longer than
// MaxKeyBytes or not sampled drops the part with its own reason; the empty
// string is a key; keys of two histograms unescaped through the same
// scratch do not overwrite each other.
func TestDecodeKeys(t *testing.T) {
	d := mustNew(keyedConfig(1))
	ev := d.NewEvent()
	in, out := keysAt(0.5)
	long := strings.Repeat("é", MaxKeyBytes/2) // exactly MaxKeyBytes bytes
	for _, tc := range []struct {
		name       string
		country    string // JSON value text, "" for absent
		page       string // JSON value text, "" for absent
		want0      string
		drop0      Reason
		want2      string
		drop2      Reason
		bin0, bin2 int32
	}{
		{"plain", `"` + in + `"`, `"home"`, in, 0, "home", 0, 0, -1},
		{"escaped, both through scratch", `"\u00dc` + in + `"`, `"h\u006fme"`, "Ü" + in, 0, "home", 0, 0, -1},
		{"number and literal", `12`, `true`, "12", 0, "true", 0, 0, -1},
		{"empty key", `""`, `"home"`, "", 0, "home", 0, 0, -1},
		{"at the limit", `"` + long + `"`, `"home"`, long, 0, "home", 0, 0, -1},
		{"over the limit", `"` + long + `x"`, `"home"`, "", ReasonKeyTooLong, "home", 0, -1, -1},
		{"escaped, longer than the limit before unescaping", `"` + strings.Repeat(`\u00e9`, 200) + `"`, `"home"`, strings.Repeat("é", 200), 0, "home", 0, 0, -1},
		{"escaped over the limit", `"` + strings.Repeat(`\u00e9`, MaxKeyBytes/2) + `x"`, `"home"`, "", ReasonKeyTooLong, "home", 0, -1, -1},
		{"absent", ``, `"home"`, "", ReasonMissingField, "home", 0, -1, -1},
		{"object", `{}`, `"home"`, "", ReasonWrongType, "home", 0, -1, -1},
	} {
		msg := `{"ts":1700000000000,"user_id":"u","page":` + tc.page + `,"code":1`
		if tc.country != "" {
			msg += `,"country":` + tc.country
		}
		msg += "}"
		if r := d.Decode([]byte(msg), ev); r != ReasonNone {
			t.Errorf("%s: reason %v", tc.name, r)
			continue
		}
		for _, c := range []struct {
			h    int
			want string
			drop Reason
		}{{0, tc.want0, tc.drop0}, {2, tc.want2, tc.drop2}} {
			k := ev.Keys[c.h]
			if ev.Drops[c.h] != c.drop {
				t.Errorf("%s: histogram %d drop %v, want %v", tc.name, c.h, ev.Drops[c.h], c.drop)
			} else if c.drop != ReasonNone {
				if k != nil || ev.Bins[c.h] != -1 || ev.Groups[c.h] != -1 {
					t.Errorf("%s: histogram %d dropped with key %q bin %d group %d", tc.name, c.h, k, ev.Bins[c.h], ev.Groups[c.h])
				}
			} else if k == nil || string(k) != c.want || ev.Groups[c.h] != 0 {
				t.Errorf("%s: histogram %d key %q (nil %v) group %d, want %q", tc.name, c.h, k, k == nil, ev.Groups[c.h], c.want)
			}
		}
		if ev.Keys[1] != nil {
			t.Errorf("%s: a histogram without group_by has key %q", tc.name, ev.Keys[1])
		}
	}
	// A whole-event drop clears the keys.
	if r := d.Decode([]byte(`{"user_id":"u","country":"zz"}`), ev); r != ReasonMissingTime || ev.Keys[0] != nil {
		t.Errorf("missing time: %v, key %q", r, ev.Keys[0])
	}
	// At rate ½, a key whose public hash is above the threshold is
	// dropped, one below kept: a function of the key alone.
	dh := mustNew(keyedConfig(0.5))
	evh := dh.NewEvent()
	for _, c := range []struct {
		key  string
		drop Reason
	}{{in, ReasonNone}, {out, ReasonUnsampledKey}} {
		r := dh.Decode([]byte(`{"ts":1,"user_id":"u","country":"`+c.key+`","page":"home","code":1}`), evh)
		if r != ReasonNone || evh.Drops[0] != c.drop || (c.drop == ReasonNone) != (string(evh.Keys[0]) == c.key) {
			t.Errorf("rate ½, key %q: %v, drop %v, key %q", c.key, r, evh.Drops[0], evh.Keys[0])
		}
	}
	// Rate 1 (and the zero value of a config not through Load) samples
	// every key.
	for _, rate := range []float64{1, 0} {
		d := mustNew(keyedConfig(rate))
		ev := d.NewEvent()
		if r := d.Decode([]byte(`{"ts":1,"user_id":"u","country":"`+out+`","page":"cart","code":1}`), ev); r != ReasonNone || string(ev.Keys[0]) != out {
			t.Errorf("rate %v: %v, key %q", rate, ev.Drops[0], ev.Keys[0])
		}
	}
}

// TestDecodeKeysZeroAllocs: a keyed part decodes without allocating.
func TestDecodeKeysZeroAllocs(t *testing.T) {
	d := mustNew(keyedConfig(1))
	ev := d.NewEvent()
	msg := []byte(`{"ts":1700000000000,"user_id":"u","country":"\u00dcber","page":"home","code":1}`)
	if n := testing.AllocsPerRun(100, func() { d.Decode(msg, ev) }); n != 0 {
		t.Errorf("%v allocations per keyed decode", n)
	}
}

// TestDecodeKeysFormats: Avro and protobuf reach the group_by value as
// JSON does: the key of a selecting histogram is the value's text.
func TestDecodeKeysFormats(t *testing.T) {
	cfg, schema := avroConfig(t)
	cfg.Histograms[0].Groups = nil
	d := mustNew(cfg)
	ev := d.NewEvent()
	msg := wire(7, mustAvro(t, schema, avroEvent("u1", t0, "DE", "cart", "desktop", 2, []float64{1, 0, 0})))
	if r := d.Decode(msg, ev); r != ReasonNone || string(ev.Keys[0]) != "DE" || ev.Bins[0] != 2 || ev.Groups[0] != 0 || ev.Keys[1] != nil {
		t.Errorf("avro: %v, key %q bin %d drops %v", r, ev.Keys[0], ev.Bins[0], ev.Drops)
	}
	msg = wire(7, mustAvro(t, schema, avroEvent("u1", t0, nil, "cart", "desktop", 2, []float64{1, 0, 0})))
	if r := d.Decode(msg, ev); r != ReasonNone || ev.Drops[0] != ReasonMissingField || ev.Keys[0] != nil {
		t.Errorf("avro, null group: %v, key %q drops %v", r, ev.Keys[0], ev.Drops)
	}
	_ = avro.MustParse

	text := readTestdata(t, "event.proto")
	fd := protoSchema(t, text)
	pc := nestedConfig("protobuf", []string{"HOME", "SEARCH", "CART"})
	pc.Histograms[0].Groups = nil
	// A second selecting histogram keyed by the enum page: its symbol.
	pc.Histograms[1].GroupBy = "page"
	withSchemaFile(t, pc, 3, "event.proto", text)
	d = mustNew(pc)
	ev = d.NewEvent()
	full := protoEvent(t, fd, fullProtoEvent(fd))
	if r := d.Decode(confluent(t, 3, []int{0}, full), ev); r != ReasonNone || string(ev.Keys[0]) != "DE" || string(ev.Keys[1]) != "CART" {
		t.Errorf("protobuf: %v, keys %q %q, drops %v", r, ev.Keys[0], ev.Keys[1], ev.Drops)
	}
	var _ *dynamicpb.Message
}
