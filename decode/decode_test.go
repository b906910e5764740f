package decode

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dpstage/stage/config"
)

func TestReasonStrings(t *testing.T) {
	seen := map[string]bool{}
	for r := range NumReasons {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] || strings.ToLower(s) != s || strings.ContainsAny(s, " -") {
			t.Errorf("reason %d: bad label %q", r, s)
		}
		seen[s] = true
	}
	if len(AllReasons) != int(ReasonBadVector) || AllReasons[len(AllReasons)-1] != ReasonBadVector {
		t.Errorf("AllReasons has %d entries, want the %d decoder reasons", len(AllReasons), ReasonBadVector)
	}
	for _, r := range append(append([]Reason{}, WindowReasons...), BoundReasons...) {
		if r <= ReasonBadVector {
			t.Errorf("%v is a decoder reason", r)
		}
	}
	for r := range NumReasons {
		label, ok := r.Bound()
		if ok != strings.HasPrefix(r.String(), "bound_") || (ok && "bound_"+label != r.String()) {
			t.Errorf("%v: Bound() = %q, %v", r, label, ok)
		}
	}
	if Reason(200).String() != "unknown" {
		t.Errorf("out-of-range reason label %q", Reason(200).String())
	}
}

func TestNewErrors(t *testing.T) {
	for name, mutate := range map[string]func(*config.Config){
		"nil histograms":   func(c *config.Config) { c.Histograms = nil },
		"no time field":    func(c *config.Config) { c.Events.TimeField = "" },
		"no user field":    func(c *config.Config) { c.Events.UserField = "" },
		"format":           func(c *config.Config) { c.Events.Format = "xml" },
		"avro, no schemas": func(c *config.Config) { c.Events.Format = "avro" },
		"negative max":     func(c *config.Config) { c.Events.MaxMessageBytes = -1 },
		"no field":         func(c *config.Config) { c.Histograms[1].Field = "" },
		"no bins":          func(c *config.Config) { c.Histograms[1].Bins = nil },
		"duplicate bin":    func(c *config.Config) { c.Histograms[1].Bins = []string{"a", "a"} },
		"overflow missing": func(c *config.Config) { c.Histograms[1].OverflowBin = "zzz" },
		"key sample rate":  func(c *config.Config) { c.Histograms[1].GroupBy, c.Selection.KeySampleRate = "x", 1.5 },
		"duplicate group":  func(c *config.Config) { c.Histograms[0].Groups = []string{"US", "US"} },
		"unknown kind":     func(c *config.Config) { c.Histograms[1].Kind = "median" },
		"average overflow": func(c *config.Config) {
			c.Histograms[1].Kind, c.Histograms[1].OverflowBin = config.KindAverage, "mobile"
		},
		"average group_by": func(c *config.Config) {
			c.Histograms[1].Kind, c.Histograms[1].GroupBy, c.Histograms[1].Groups = config.KindAverage, "country", []string{"US"}
		},
		"average duplicate bin": func(c *config.Config) {
			c.Histograms[1].Kind, c.Histograms[1].Bins = config.KindAverage, []string{"a", "a"}
		},
	} {
		cfg := testConfig()
		mutate(cfg)
		if _, err := New(cfg, testSeed); err == nil {
			t.Errorf("%s: New succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "decode: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
	if _, err := New(nil, testSeed); err == nil {
		t.Error("New(nil) succeeded")
	}
}

type tcase struct {
	name string
	msg  string
	want Reason
	// for ReasonNone results:
	time   int64
	user   string // user id whose hash is expected ("" = don't check)
	bins   []int32
	groups []int32
	drops  []Reason
}

const ok0 = `"ts":1700000000000,"user_id":"u1"`

func TestDecodeTable(t *testing.T) {
	none := []Reason{0, 0, 0}
	cases := []tcase{
		// Whole-event reasons.
		{name: "empty", msg: ``, want: ReasonBadJSON},
		{name: "not object", msg: `[1,2]`, want: ReasonBadJSON},
		{name: "string top", msg: `"x"`, want: ReasonBadJSON},
		{name: "truncated", msg: `{"ts":1700000000000,"user_id":"u1"`, want: ReasonBadJSON},
		{name: "trailing", msg: `{` + ok0 + `} x`, want: ReasonBadJSON},
		{name: "two objects", msg: `{` + ok0 + `}{}`, want: ReasonBadJSON},
		{name: "trailing comma", msg: `{` + ok0 + `,}`, want: ReasonBadJSON},
		{name: "missing colon", msg: `{"ts" 1}`, want: ReasonBadJSON},
		{name: "single quotes", msg: `{'ts':1}`, want: ReasonBadJSON},
		{name: "bad literal", msg: `{` + ok0 + `,"x":tru}`, want: ReasonBadJSON},
		{name: "literal glued", msg: `{` + ok0 + `,"x":truex}`, want: ReasonBadJSON},
		{name: "leading zero", msg: `{"ts":01700000000000,"user_id":"u1"}`, want: ReasonBadJSON},
		{name: "bad number", msg: `{"ts":1.,"user_id":"u1"}`, want: ReasonBadJSON},
		{name: "bad exp", msg: `{"ts":1e,"user_id":"u1"}`, want: ReasonBadJSON},
		{name: "plus number", msg: `{"ts":+1,"user_id":"u1"}`, want: ReasonBadJSON},
		{name: "control char", msg: "{\"ts\":1700000000000,\"user_id\":\"u\x01\"}", want: ReasonBadJSON},
		{name: "bad escape", msg: `{` + ok0 + `,"x":"\q"}`, want: ReasonBadJSON},
		{name: "short unicode escape", msg: `{` + ok0 + `,"x":"\u12"}`, want: ReasonBadJSON},
		{name: "unbalanced nested", msg: `{` + ok0 + `,"x":[1,{"a":2]}`, want: ReasonBadJSON},
		{name: "nested trailing comma", msg: `{` + ok0 + `,"x":[1,2,]}`, want: ReasonBadJSON},
		{name: "nested key not string", msg: `{` + ok0 + `,"x":{1:2}}`, want: ReasonBadJSON},
		{name: "too deep", msg: `{` + ok0 + `,"x":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, want: ReasonBadJSON},
		{name: "invalid utf8 in unrelated value", msg: "{" + ok0 + ",\"x\":\"\xff\"}", want: ReasonInvalidUTF8},
		{name: "invalid utf8 in nested key", msg: "{" + ok0 + ",\"x\":{\"\xc3\":1}}", want: ReasonInvalidUTF8},
		{name: "overlong utf8", msg: "{" + ok0 + ",\"x\":\"\xc0\xaf\"}", want: ReasonInvalidUTF8},
		{name: "utf8 surrogate bytes", msg: "{" + ok0 + ",\"x\":\"\xed\xa0\x80\"}", want: ReasonInvalidUTF8},
		{name: "lone high surrogate", msg: `{` + ok0 + `,"x":"\ud800"}`, want: ReasonInvalidUTF8},
		{name: "lone low surrogate", msg: `{` + ok0 + `,"x":"\udc00x"}`, want: ReasonInvalidUTF8},
		{name: "high then non-low", msg: `{` + ok0 + `,"x":"\ud800\u0041"}`, want: ReasonInvalidUTF8},
		{name: "oversized", msg: `{` + ok0 + `,"x":"` + strings.Repeat("a", 5000) + `"}`, want: ReasonOversized},
		{name: "no time", msg: `{"user_id":"u1","page":"home"}`, want: ReasonMissingTime},
		{name: "null time", msg: `{"ts":null,"user_id":"u1"}`, want: ReasonMissingTime},
		{name: "time in nested only", msg: `{"x":{"ts":1700000000000},"user_id":"u1"}`, want: ReasonMissingTime},
		{name: "time bool", msg: `{"ts":true,"user_id":"u1"}`, want: ReasonWrongType},
		{name: "time object", msg: `{"ts":{},"user_id":"u1"}`, want: ReasonWrongType},
		{name: "time negative", msg: `{"ts":-1,"user_id":"u1"}`, want: ReasonBadTime},
		{name: "time huge", msg: `{"ts":99999999999999999999999999,"user_id":"u1"}`, want: ReasonBadTime},
		{name: "time huge exp", msg: `{"ts":1e999999999999,"user_id":"u1"}`, want: ReasonBadTime},
		{name: "time above 9999", msg: `{"ts":253402300800000,"user_id":"u1"}`, want: ReasonBadTime},
		{name: "time bad string", msg: `{"ts":"yesterday","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time empty string", msg: `{"ts":"","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time feb 30", msg: `{"ts":"2023-02-30T00:00:00Z","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time leap second", msg: `{"ts":"2016-12-31T23:59:60Z","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time no zone", msg: `{"ts":"2023-11-14T22:13:20","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time offset 24h", msg: `{"ts":"2023-11-14T22:13:20+24:00","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time before 1970", msg: `{"ts":"1969-12-31T23:59:59Z","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time signed string", msg: `{"ts":"-1700000000000","user_id":"u1"}`, want: ReasonBadTime},
		{name: "time digit string huge", msg: `{"ts":"99999999999999999999999","user_id":"u1"}`, want: ReasonBadTime},
		{name: "no user", msg: `{"ts":1700000000000,"page":"home"}`, want: ReasonMissingUser},
		{name: "null user", msg: `{"ts":1700000000000,"user_id":null}`, want: ReasonMissingUser},
		{name: "empty user", msg: `{"ts":1700000000000,"user_id":""}`, want: ReasonMissingUser},
		{name: "user float", msg: `{"ts":1700000000000,"user_id":1.5}`, want: ReasonWrongType},
		{name: "user exp", msg: `{"ts":1700000000000,"user_id":1e3}`, want: ReasonWrongType},
		{name: "user bool", msg: `{"ts":1700000000000,"user_id":false}`, want: ReasonWrongType},
		{name: "user array", msg: `{"ts":1700000000000,"user_id":["u1"]}`, want: ReasonWrongType},

		// Usable events.
		{name: "basic", msg: `{"ts":1700000000000,"user_id":"u12345","page":"checkout","country":"DE","device":"mobile","code":1}`,
			time: 1700000000000, user: "u12345", bins: []int32{3, 0, -1}, groups: []int32{1, 0, -1}, drops: []Reason{0, 0, ReasonUnknownGroup}},
		{name: "whitespace everywhere", msg: " \t\r\n{ \"ts\" :\n1700000000000 ,\t\"user_id\" : \"u1\" , \"page\" : \"home\" , \"country\":\"US\" } \n",
			time: 1700000000000, user: "u1", bins: []int32{0, -1, -1}, groups: []int32{0, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "empty object fields missing", msg: `{"ts":0,"user_id":"u"}`, time: 0, user: "u",
			bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonMissingField, ReasonMissingField, ReasonMissingField}},
		{name: "escaped bin and group", msg: `{"ts":1,"user_id":"u","page":"c\u0061f\u00e9","country":"\u00dc","device":"d\u0065sktop"}`,
			time: 1, user: "u", bins: []int32{5, 1, -1}, groups: []int32{3, 0, -1}, drops: []Reason{0, 0, ReasonMissingField}},
		{name: "escaped quote bin", msg: `{"ts":1,"user_id":"u","page":"a\"b","country":"FR"}`,
			time: 1, user: "u", bins: []int32{6, -1, -1}, groups: []int32{2, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "surrogate pair bin", msg: `{"ts":1,"user_id":"u","page":"\ud83d\ude00","country":"FR"}`,
			time: 1, user: "u", bins: []int32{7, -1, -1}, groups: []int32{2, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "raw utf8 bin", msg: `{"ts":1,"user_id":"u","page":"😀","country":"FR"}`,
			time: 1, user: "u", bins: []int32{7, -1, -1}, groups: []int32{2, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "escaped keys", msg: `{"t\u0073":1,"user\u005fid":"u","\u0070age":"home","country":"US"}`,
			time: 1, user: "u", bins: []int32{0, -1, -1}, groups: []int32{0, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "escaped user equals plain", msg: `{"ts":1,"user_id":"\u0075\u0031"}`,
			time: 1, user: "u1", bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonMissingField, ReasonMissingField, ReasonMissingField}},
		{name: "long escaped user", msg: `{"ts":1,"user_id":"` + strings.Repeat(`\u00e9x\n`, 100) + `"}`,
			time: 1, user: strings.Repeat("éx\n", 100), bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonMissingField, ReasonMissingField, ReasonMissingField}},
		{name: "numeric user same as string", msg: `{"ts":1,"user_id":12345}`,
			time: 1, user: "12345", bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonMissingField, ReasonMissingField, ReasonMissingField}},
		{name: "huge integer user", msg: `{"ts":1,"user_id":-123456789012345678901234567890}`,
			time: 1, user: "-123456789012345678901234567890", bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonMissingField, ReasonMissingField, ReasonMissingField}},
		{name: "nested unrelated values skipped", msg: `{"a":{"ts":5,"page":"x","b":[1,[2,{"c":"}"}],"]"]},"ts":7,"arr":[],"obj":{},"user_id":"u","page":"cart","country":"US","z":[[[[{}]]]]}`,
			time: 7, user: "u", bins: []int32{2, -1, -1}, groups: []int32{0, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "duplicate keys last wins", msg: `{"ts":1,"ts":2,"user_id":"a","user_id":"b","page":"home","page":"cart","country":"US","country":"FR"}`,
			time: 2, user: "b", bins: []int32{2, -1, -1}, groups: []int32{2, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "duplicate key later invalid", msg: `{"ts":1,"user_id":"a","ts":"nope"}`, want: ReasonBadTime},
		{name: "overflow bin", msg: `{"ts":1,"user_id":"u","page":"pricing","country":"US"}`,
			time: 1, user: "u", bins: []int32{4, -1, -1}, groups: []int32{0, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "overflow for long escaped value", msg: `{"ts":1,"user_id":"u","page":"` + strings.Repeat(`\u0061`, 400) + `","country":"US"}`,
			time: 1, user: "u", bins: []int32{4, -1, -1}, groups: []int32{0, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},
		{name: "out of domain, unknown group, wrong type", msg: `{"ts":1,"user_id":"u","page":"home","country":"CN","device":"tv","code":[1]}`,
			time: 1, user: "u", bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonUnknownGroup, ReasonOutOfDomain, ReasonWrongType}},
		{name: "group null and object bin", msg: `{"ts":1,"user_id":"u","page":"home","country":null,"device":{"x":1}}`,
			time: 1, user: "u", bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonMissingField, ReasonWrongType, ReasonMissingField}},
		{name: "case sensitive group", msg: `{"ts":1,"user_id":"u","page":"home","country":"us"}`,
			time: 1, user: "u", bins: []int32{-1, -1, -1}, groups: []int32{-1, -1, -1}, drops: []Reason{ReasonUnknownGroup, ReasonMissingField, ReasonMissingField}},
		{name: "numeric and bool bins", msg: `{"ts":1,"user_id":"u","code":true,"page":"cart"}`,
			time: 1, user: "u", bins: []int32{-1, -1, 2}, groups: []int32{-1, -1, 1}, drops: []Reason{ReasonMissingField, ReasonMissingField, 0}},
		{name: "negative and fraction number bins", msg: `{"ts":1,"user_id":"u","code":-3,"page":"home","country":"DE"}`,
			time: 1, user: "u", bins: []int32{0, -1, 3}, groups: []int32{1, -1, 0}, drops: []Reason{0, ReasonMissingField, 0}},
		{name: "number spelling matters", msg: `{"ts":1,"user_id":"u","code":1.0,"page":"home","country":"DE"}`,
			time: 1, user: "u", bins: []int32{0, -1, -1}, groups: []int32{1, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonOutOfDomain}},
		{name: "number bin in overflow histogram", msg: `{"ts":1,"user_id":"u","page":42,"country":"DE"}`,
			time: 1, user: "u", bins: []int32{4, -1, -1}, groups: []int32{1, -1, -1}, drops: []Reason{0, ReasonMissingField, ReasonMissingField}},

		// Time forms.
		{name: "time exponent", msg: `{"ts":1.7e12,"user_id":"u"}`, time: 1700000000000, user: "u", drops: none[:0]},
		{name: "time exponent E+", msg: `{"ts":17E+11,"user_id":"u"}`, time: 1700000000000, user: "u"},
		{name: "time fraction floors", msg: `{"ts":1700000000000.999,"user_id":"u"}`, time: 1700000000000, user: "u"},
		{name: "time tiny", msg: `{"ts":1e-300,"user_id":"u"}`, time: 0, user: "u"},
		{name: "time negative zero", msg: `{"ts":-0.0,"user_id":"u"}`, time: 0, user: "u"},
		{name: "time max", msg: `{"ts":253402300799999,"user_id":"u"}`, time: 253402300799999, user: "u"},
		{name: "time long fraction", msg: `{"ts":1700000000000.` + strings.Repeat("9", 300) + `,"user_id":"u"}`, time: 1700000000000, user: "u"},
		{name: "time digit string", msg: `{"ts":"1700000000000","user_id":"u"}`, time: 1700000000000, user: "u"},
		{name: "time rfc3339 Z", msg: `{"ts":"2023-11-14T22:13:20Z","user_id":"u"}`, time: 1700000000000, user: "u"},
		{name: "time rfc3339 nanos", msg: `{"ts":"2023-11-14T22:13:20.123999999Z","user_id":"u"}`, time: 1700000000123, user: "u"},
		{name: "time rfc3339 offset", msg: `{"ts":"2023-11-14T23:13:20.5+01:00","user_id":"u"}`, time: 1700000000500, user: "u"},
		{name: "time rfc3339 lower t z", msg: `{"ts":"2023-11-14t22:13:20z","user_id":"u"}`, time: 1700000000000, user: "u"},
		{name: "time rfc3339 leap day", msg: `{"ts":"2024-02-29T00:00:00-00:30","user_id":"u"}`, time: 1709166600000, user: "u"},
		{name: "time rfc3339 escaped", msg: `{"ts":"2023-11-14T22:13:20\u005a","user_id":"u"}`, time: 1700000000000, user: "u"},
	}
	d := mustNew(testConfig())
	ev := d.NewEvent()
	for _, c := range cases {
		r := d.Decode([]byte(c.msg), ev)
		if r != c.want {
			t.Errorf("%s: reason %v, want %v", c.name, r, c.want)
			continue
		}
		if r != ReasonNone {
			for h := range ev.Bins {
				if ev.Bins[h] != -1 || ev.Groups[h] != -1 || ev.Drops[h] != ReasonNone {
					t.Errorf("%s: dropped event has per-histogram values", c.name)
				}
			}
			continue
		}
		if ev.TimeMs != c.time {
			t.Errorf("%s: time %d, want %d", c.name, ev.TimeMs, c.time)
		}
		if c.user != "" && ev.User != testSeed.String(c.user) {
			t.Errorf("%s: user hash differs from hash of %q", c.name, c.user)
		}
		if c.bins != nil && (fmt.Sprint(ev.Bins) != fmt.Sprint(c.bins) || fmt.Sprint(ev.Groups) != fmt.Sprint(c.groups) || fmt.Sprint(ev.Drops) != fmt.Sprint(c.drops)) {
			t.Errorf("%s: bins/groups/drops %v/%v/%v, want %v/%v/%v", c.name, ev.Bins, ev.Groups, ev.Drops, c.bins, c.groups, c.drops)
		}
		// Every case must agree with the encoding/json reference too.
		if e, ok := reference(testConfig(), []byte(c.msg)); ok {
			if msg := e.check(r, ev); msg != "" {
				t.Errorf("%s: reference: %s", c.name, msg)
			}
		}
	}
}

// TestDecodeVectors: the vector field of an average histogram (the fourth
// histogram of avgConfig, three coordinates).
func TestDecodeVectors(t *testing.T) {
	cases := []struct {
		name  string
		value string // the raw JSON value of "interests"; "" = absent
		drop  Reason
		want  []float64 // for ReasonNone: the normalized vector (within 1e-15)
	}{
		{name: "plain", value: `[0.2,0.5,0.3]`, want: []float64{0.2, 0.5, 0.3}},
		{name: "ints", value: `[0,1,0]`, want: []float64{0, 1, 0}},
		{name: "exponents", value: `[2e-1,5E-1,0.03e+1]`, want: []float64{0.2, 0.5, 0.3}},
		{name: "whitespace", value: " [ \n0.25 ,\t0.25\r\n, 0.5 ] ", want: []float64{0.25, 0.25, 0.5}},
		{name: "negative zero", value: `[-0,-0.0e5,1]`, want: []float64{0, 0, 1}},
		{name: "underflow to negative zero", value: `[-1e-400,0.5,0.5]`, want: []float64{0, 0.5, 0.5}},
		{name: "underflow to zero", value: `[1e-400,0.5,0.5]`, want: []float64{0, 0.5, 0.5}},
		{name: "long literals", value: `[0.333333333333333333333333333333333333333333,0.333333333333333333333333333333333333333333,0.333333333333333333333333333333333333333334]`,
			want: []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}},
		{name: "normalized above", value: `[0.5,0.5,5e-7]`, want: []float64{0.5 / (1 + 5e-7), 0.5 / (1 + 5e-7), 5e-7 / (1 + 5e-7)}},
		{name: "normalized below", value: `[0.5,0.4999995,0]`, want: []float64{0.5 / 0.9999995, 0.4999995 / 0.9999995, 0}},
		{name: "sum at upper tolerance", value: `[1,0,0.000001]`, want: []float64{1 / 1.000001, 0, 0.000001 / 1.000001}},

		{name: "absent", value: "", drop: ReasonMissingField},
		{name: "null", value: `null`, drop: ReasonMissingField},
		{name: "string", value: `"0.2,0.5,0.3"`, drop: ReasonWrongType},
		{name: "object", value: `{"sport":0.2,"news":0.5,"music":0.3}`, drop: ReasonWrongType},
		{name: "number", value: `1`, drop: ReasonWrongType},
		{name: "bool", value: `true`, drop: ReasonWrongType},

		{name: "empty", value: `[]`, drop: ReasonBadVector},
		{name: "too short", value: `[0.5,0.5]`, drop: ReasonBadVector},
		{name: "too long", value: `[0.5,0.5,0,0]`, drop: ReasonBadVector},
		{name: "string element", value: `[0.2,"0.5",0.3]`, drop: ReasonBadVector},
		{name: "null element", value: `[0.2,null,0.3]`, drop: ReasonBadVector},
		{name: "bool element", value: `[0.2,true,0.3]`, drop: ReasonBadVector},
		{name: "nested array", value: `[[0.2],0.5,0.3]`, drop: ReasonBadVector},
		{name: "nested object", value: `[0.2,{"x":0.5},0.3]`, drop: ReasonBadVector},
		{name: "negative", value: `[0.6,0.6,-0.2]`, drop: ReasonBadVector},
		{name: "negative tiny", value: `[0.5,0.5,-1e-300]`, drop: ReasonBadVector},
		{name: "overflow", value: `[1e400,0,0]`, drop: ReasonBadVector},
		{name: "sums overflow", value: `[1e308,1e308,0]`, drop: ReasonBadVector},
		{name: "sum too small", value: `[0.2,0.5,0.2]`, drop: ReasonBadVector},
		{name: "sum too large", value: `[0.2,0.5,0.4]`, drop: ReasonBadVector},
		{name: "sum just above tolerance", value: `[0.5,0.5,2e-6]`, drop: ReasonBadVector},
		{name: "sum just below tolerance", value: `[0.5,0.499998,0]`, drop: ReasonBadVector},
		{name: "all zero", value: `[0,0,0]`, drop: ReasonBadVector},
	}
	cfg := avgConfig()
	d := mustNew(cfg)
	ev := d.NewEvent()
	counts := `"page":"cart","country":"FR","device":"desktop","code":"1"`
	wantBins, wantGroups := []int32{2, 1, 0}, []int32{2, 0, 1}
	for _, c := range cases {
		for _, key := range []string{`"interests"`, `"interests"`} {
			msg := `{` + ok0 + `,` + counts
			if c.value != "" {
				msg += `,` + key + `:` + c.value
			}
			msg += `}`
			r := d.Decode([]byte(msg), ev)
			if r != ReasonNone {
				t.Errorf("%s: reason %v", msg, r)
				continue
			}
			// The count histograms are unaffected by the vector.
			if !slices.Equal(ev.Bins[:3], wantBins) || !slices.Equal(ev.Groups[:3], wantGroups) || !slices.Equal(ev.Drops[:3], []Reason{0, 0, 0}) {
				t.Errorf("%s: count parts %v/%v/%v, want %v/%v/none", msg, ev.Bins[:3], ev.Groups[:3], ev.Drops[:3], wantBins, wantGroups)
			}
			if ev.Bins[3] != -1 || ev.Groups[3] != -1 || ev.Drops[3] != c.drop {
				t.Errorf("%s: average part bin %d group %d drop %v, want -1 -1 %v", msg, ev.Bins[3], ev.Groups[3], ev.Drops[3], c.drop)
			}
			if ev.Vectors[0] != nil || ev.Vectors[1] != nil || ev.Vectors[2] != nil || len(ev.Vectors[3]) != 3 {
				t.Errorf("%s: vectors shaped %v", msg, ev.Vectors)
			}
			if c.drop == ReasonNone {
				sum := 0.0
				for i, x := range ev.Vectors[3] {
					sum += x
					if math.Abs(x-c.want[i]) > 1e-15 || x < 0 {
						t.Errorf("%s: vector %v, want %v", msg, ev.Vectors[3], c.want)
						break
					}
				}
				if math.Abs(sum-1) > 1e-15 {
					t.Errorf("%s: vector %v sums to %v", msg, ev.Vectors[3], sum)
				}
			}
			if e, ok := reference(cfg, []byte(msg)); !ok {
				t.Errorf("%s: the reference cannot judge", msg)
			} else if s := e.check(r, ev); s != "" {
				t.Errorf("%s: reference: %s", msg, s)
			}
		}
	}
	// A whole-event reason leaves the average part at -1/-1/none too.
	if r := d.Decode([]byte(`{"user_id":"u","interests":[0.2,0.5,0.3]}`), ev); r != ReasonMissingTime ||
		ev.Bins[3] != -1 || ev.Groups[3] != -1 || ev.Drops[3] != ReasonNone {
		t.Errorf("reason %v bins %v groups %v drops %v", r, ev.Bins, ev.Groups, ev.Drops)
	}
}

func TestEventFromOtherDecoder(t *testing.T) {
	small := mustNew(&config.Config{Events: config.Events{TimeField: "t", UserField: "u"},
		Histograms: []config.Histogram{{Name: "x", Field: "x", Bins: []string{"a", "b"}}}})
	d := mustNew(testConfig())
	ev := small.NewEvent()
	if r := d.Decode([]byte(`{"ts":1,"user_id":"u","device":"desktop"}`), ev); r != ReasonNone || len(ev.Bins) != 3 || ev.Bins[1] != 1 {
		t.Fatalf("reason %v bins %v", r, ev.Bins)
	}
	// Same number of histograms, but a vector of another length.
	cfg2 := avgConfig()
	cfg2.Histograms[3].Bins = []string{"a", "b"}
	ev = mustNew(cfg2).NewEvent()
	if r := mustNew(avgConfig()).Decode([]byte(`{"ts":1,"user_id":"u","interests":[0.5,0.25,0.25]}`), ev); r != ReasonNone ||
		ev.Drops[3] != ReasonNone || len(ev.Vectors[3]) != 3 || ev.Vectors[3][2] != 0.25 {
		t.Fatalf("reason %v drops %v vectors %v", r, ev.Drops, ev.Vectors)
	}
}

func TestManyFieldsUseMap(t *testing.T) {
	cfg := &config.Config{Events: config.Events{TimeField: "ts", UserField: "user"}}
	for i := range 20 {
		cfg.Histograms = append(cfg.Histograms, config.Histogram{Name: fmt.Sprint("h", i), Field: fmt.Sprint("f", i), Bins: []string{"a", "b"}})
	}
	d := mustNew(cfg)
	if d.root.m == nil {
		t.Fatal("expected map lookup for 22 fields")
	}
	ev := d.NewEvent()
	if r := d.Decode([]byte(`{"ts":1,"user":"u","f7":"b","f\u0031\u0039":"a"}`), ev); r != ReasonNone {
		t.Fatal(r)
	}
	if ev.Bins[7] != 1 || ev.Bins[19] != 0 || ev.Drops[0] != ReasonMissingField {
		t.Fatalf("bins %v drops %v", ev.Bins, ev.Drops)
	}
}

func TestLongDeclaredValues(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes: longer than the stack buffer
	key := strings.Repeat("k", 300)
	cfg := &config.Config{Events: config.Events{TimeField: "ts", UserField: "u"},
		Histograms: []config.Histogram{{Name: "h", Field: key, Bins: []string{"short", long}}}}
	d := mustNew(cfg)
	ev := d.NewEvent()
	esc := strings.Repeat(`\u00e9`, 300)
	msg := `{"ts":1,"u":"x","` + strings.Repeat(`\u006b`, 300) + `":"` + esc + `"}`
	if r := d.Decode([]byte(msg), ev); r != ReasonNone || ev.Bins[0] != 1 {
		t.Fatalf("reason %v bins %v drops %v", r, ev.Bins, ev.Drops)
	}
	msg = `{"ts":1,"u":"x","` + key + `":"` + esc + `é"}`
	if r := d.Decode([]byte(msg), ev); r != ReasonNone || ev.Drops[0] != ReasonOutOfDomain {
		t.Fatalf("reason %v bins %v drops %v", r, ev.Bins, ev.Drops)
	}
}

func TestParseEpochNumber(t *testing.T) {
	for s, want := range map[string]int64{
		"0": 0, "-0": 0, "0.0": 0, "1": 1, "10": 10, "1.9": 1, "0.05e2": 5, "123e-2": 1, "1e15": -1, "2.5e14": 250000000000000, "9.99e14": -1,
		"253402300799999": MaxTimeMs, "253402300799999.9": MaxTimeMs, "253402300800000": -1, "2.534023007999999e14": MaxTimeMs,
		"-1": -1, "-0.5": -1, "1e-1000000000000000000000": 0, "00": 0, "0.000001e6": 1,
	} {
		got, ok := parseEpochNumber([]byte(s))
		if (want < 0) == ok || (ok && got != want) {
			t.Errorf("parseEpochNumber(%s) = %d, %v; want %d", s, got, ok, want)
		}
	}
}

// ---- differential test against encoding/json ----

type gen struct{ r *rand.Rand }

func (g *gen) pick(n int) int { return g.r.IntN(n) }

func (g *gen) ws() string {
	if g.pick(5) > 0 {
		return ""
	}
	return []string{" ", "\n", "\t", "\r\n  ", "  "}[g.pick(5)]
}

// str encodes s as a JSON string with random (valid) escaping.
func (g *gen) str(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		esc := g.pick(6) == 0
		switch {
		case r == '"' || r == '\\':
			if esc && g.pick(2) == 0 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteByte('\\')
				b.WriteRune(r)
			}
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04X`, r)
		case r == '/' && esc:
			b.WriteString(`\/`)
		case esc && r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04X`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		case esc:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

var words = []string{"home", "search", "cart", "checkout", "other", "café", "a\"b", "😀", "US", "DE", "FR", "Ü", "us",
	"mobile", "desktop", "tv", "1", "2", "true", "-3", "1.5", "", "x/y", "tab\there", "\x01", "ü\\", "pricing"}

func (g *gen) scalar() string {
	switch g.pick(8) {
	case 0:
		return "null"
	case 1:
		return []string{"true", "false"}[g.pick(2)]
	case 2:
		return []string{"0", "1", "2", "-3", "1.5", "1.0", "1e2", "-0", "12345678901234567890123"}[g.pick(9)]
	default:
		return g.str(words[g.pick(len(words))])
	}
}

func (g *gen) junk(depth int) string {
	if depth > 3 || g.pick(3) > 0 {
		return g.scalar()
	}
	n := g.pick(4)
	var parts []string
	if g.pick(2) == 0 {
		for range n {
			parts = append(parts, g.ws()+g.junk(depth+1)+g.ws())
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	for range n {
		parts = append(parts, g.ws()+g.str([]string{"ts", "page", "a", "user_id", "b"}[g.pick(5)])+g.ws()+":"+g.ws()+g.junk(depth+1))
	}
	return "{" + strings.Join(parts, ",") + g.ws() + "}"
}

func (g *gen) timeVal() string {
	ms := int64(1_600_000_000_000 + g.r.Int64N(200_000_000_000))
	switch g.pick(14) {
	case 0:
		return g.scalar()
	case 1:
		return `"` + strconv.FormatInt(ms, 10) + `"`
	case 2:
		return strconv.FormatFloat(float64(ms), 'e', -1, 64)
	case 3:
		return strconv.FormatInt(ms, 10) + "." + strconv.Itoa(g.pick(1000))
	case 4:
		return []string{"-5", "1e16", "253402300800000", "99999999999999999999", "0", "1e-5", "-0"}[g.pick(7)]
	case 5, 6:
		tm := time.UnixMilli(ms)
		layouts := []string{"2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05.000Z07:00", "2006-01-02T15:04:05.999999999Z07:00", "2006-01-02t15:04:05.0z"}
		s := tm.In(zones[g.pick(len(zones))]).Format(layouts[g.pick(len(layouts))])
		return g.str(s)
	case 7:
		return g.str([]string{"2023-02-29T00:00:00Z", "2023-13-01T00:00:00Z", "2023-01-01T24:00:00Z", "2023-01-01 00:00:00+01:00",
			"2023-01-01T00:00:00,5Z", "2023-01-01T00:00:00.Z", "2023-01-01T00:00:00+0100", "1969-12-31T23:59:59.999Z", "2023-1-01T00:00:00Z", "now"}[g.pick(10)])
	}
	return strconv.FormatInt(ms, 10)
}

func (g *gen) userVal() string {
	switch g.pick(8) {
	case 0:
		return g.scalar()
	case 1:
		return strconv.Itoa(g.pick(100000))
	case 2:
		return g.junk(1)
	}
	return g.str("u" + strconv.Itoa(g.pick(1000)) + []string{"", "é", "😀", "\\", "\""}[g.pick(5)])
}

func (g *gen) binVal(words []string) string {
	switch g.pick(10) {
	case 0:
		return g.scalar()
	case 1:
		return g.junk(1)
	}
	return g.str(words[g.pick(len(words))])
}

// vecVal is a value for the vector field (three coordinates): mostly
// probability vectors in various spellings, some near misses.
func (g *gen) vecVal() string {
	num := func(x float64) string {
		switch g.pick(4) {
		case 0:
			return strconv.FormatFloat(x, 'e', -1, 64)
		case 1:
			return strconv.FormatFloat(x, 'f', 3+g.pick(40), 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	switch g.pick(12) {
	case 0:
		return g.scalar()
	case 1:
		return g.junk(1)
	case 2: // a single element spelled oddly
		elems := []string{"0", "-0", "1", "0.5", "-0.5", "1e400", "-1e400", "1e-400", "-1e-400", "5e-7", "2e-6", "1E0", `"0.5"`, "null", "true", "[]", "[0.5]", "{}"}
		parts := []string{"0", "0", "0"}
		for range 1 + g.pick(3) {
			parts[g.pick(3)] = elems[g.pick(len(elems))]
		}
		if g.pick(2) == 0 {
			parts[g.pick(3)] = "1"
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 3: // wrong length
		n := []int{0, 1, 2, 4, 5}[g.pick(5)]
		parts := make([]string, n)
		for i := range parts {
			parts[i] = num(1 / float64(n))
		}
		return "[" + g.ws() + strings.Join(parts, g.ws()+","+g.ws()) + "]"
	}
	x := [3]float64{g.r.Float64(), g.r.Float64(), g.r.Float64()}
	if g.pick(4) == 0 {
		x[g.pick(3)] = 0
	}
	sum := x[0] + x[1] + x[2]
	scale := 1.0
	switch g.pick(6) {
	case 0:
		scale += (g.r.Float64()*2 - 1) * 2e-6 // near the tolerance, either side
	case 1:
		scale = g.r.Float64() * 2
	}
	parts := make([]string, 3)
	for i := range x {
		parts[i] = g.ws() + num(x[i]/sum*scale) + g.ws()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func (g *gen) event() []byte {
	type kv struct{ k, v string }
	var kvs []kv
	add := func(k, v string) { kvs = append(kvs, kv{k, v}) }
	if g.pick(20) > 0 {
		add("ts", g.timeVal())
	}
	if g.pick(20) > 0 {
		add("user_id", g.userVal())
	}
	if g.pick(8) > 0 {
		add("page", g.binVal([]string{"home", "search", "cart", "checkout", "other", "café", "a\"b", "😀", "pricing", "Home"}))
	}
	if g.pick(8) > 0 {
		add("country", g.binVal([]string{"US", "DE", "FR", "Ü", "CN", "us"}))
	}
	if g.pick(3) > 0 {
		add("device", g.binVal([]string{"mobile", "desktop", "tv"}))
	}
	if g.pick(3) > 0 {
		add("interests", g.vecVal())
	}
	if g.pick(3) > 0 {
		add("code", []string{"1", "2", "true", "-3", "1.5", "3", "false", `"1"`, `"true"`, "1.50"}[g.pick(10)])
	}
	for range g.pick(4) {
		add([]string{"session", "x", "nested", "ts2", "Page", "user"}[g.pick(6)], g.junk(0))
	}
	if g.pick(6) == 0 && len(kvs) > 0 { // duplicate a key with a new value
		k := kvs[g.pick(len(kvs))].k
		add(k, g.junk(0))
	}
	g.r.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
	var b strings.Builder
	b.WriteString(g.ws() + "{")
	for i, p := range kvs {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(g.ws() + g.str(p.k) + g.ws() + ":" + g.ws() + p.v + g.ws())
	}
	b.WriteString("}" + g.ws())
	msg := []byte(b.String())
	// Corrupt some messages.
	switch g.pick(12) {
	case 0:
		msg = msg[:g.pick(len(msg))]
	case 1:
		i := g.pick(len(msg))
		msg[i] = "\x00\xff\xc3{}[]\",:\\"[g.pick(11)]
	case 2:
		msg = append(msg, "x,}{ \xff"[g.pick(6)])
	}
	return msg
}

func TestDifferentialEncodingJSON(t *testing.T) {
	cfg := avgConfig()
	d := mustNew(cfg)
	ev := d.NewEvent()
	g := &gen{rand.New(rand.NewPCG(1, 2))}
	n := 20000
	if testing.Short() {
		n = 3000
	}
	judged, usable := 0, 0
	byReason := map[Reason]int{}
	vectorDrops := map[Reason]int{}
	for i := range n {
		msg := g.event()
		r := d.Decode(msg, ev)
		byReason[r]++
		e, ok := reference(cfg, msg)
		if !ok {
			continue
		}
		judged++
		if r == ReasonNone {
			usable++
			vectorDrops[ev.Drops[3]]++
		}
		if s := e.check(r, ev); s != "" {
			t.Fatalf("event %d %q: %s", i, msg, s)
		}
		checkReencode(t, d, msg, r, ev)
	}
	t.Logf("%d events, %d judged by encoding/json, %d usable; by reason %v; vectors of usable events %v", n, judged, usable, byReason, vectorDrops)
	if usable < n/10 {
		t.Errorf("only %d usable events: generator too hostile", usable)
	}
	for _, r := range []Reason{ReasonNone, ReasonMissingField, ReasonWrongType, ReasonBadVector} {
		if vectorDrops[r] < usable/50 {
			t.Errorf("only %d usable events with vector outcome %v: generator unbalanced", vectorDrops[r], r)
		}
	}
}

var zones = []*time.Location{time.UTC, time.FixedZone("+01:00", 3600), time.FixedZone("-05:30", -19800), time.FixedZone("+14:00", 50400)}

// checkReencode: re-encode the extracted values of a usable event with
// encoding/json and check that decoding the result agrees.
func checkReencode(t testing.TB, d *Decoder, msg []byte, r Reason, ev *Event) {
	t.Helper()
	if r != ReasonNone {
		return
	}
	m := map[string]json.RawMessage{}
	for slot, name := range d.fields {
		sp := ev.slots[slot]
		if sp.kind == kindNone {
			continue
		}
		raw := msg[sp.start:sp.end]
		if sp.kind == kindString {
			s := string(raw)
			if sp.esc {
				buf := make([]byte, len(raw))
				n, ok := unescape(buf, raw)
				if !ok {
					t.Fatalf("unescape of %q failed", raw)
				}
				s = string(buf[:n])
			}
			raw, _ = json.Marshal(s)
		}
		m[name] = json.RawMessage(raw)
	}
	m[d.fields[d.timeSlot]], _ = json.Marshal(ev.TimeMs)
	want := *ev
	want.Bins = append([]int32(nil), ev.Bins...)
	want.Groups = append([]int32(nil), ev.Groups...)
	want.Drops = append([]Reason(nil), ev.Drops...)
	want.Vectors = make([][]float64, len(ev.Vectors))
	for h, v := range ev.Vectors {
		want.Vectors[h] = slices.Clone(v)
	}
	re, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	ev2 := d.NewEvent()
	if r2 := d.Decode(re, ev2); r2 != ReasonNone {
		t.Fatalf("re-encoded %q of %q: reason %v", re, msg, r2)
	}
	if ev2.TimeMs != want.TimeMs || ev2.User != want.User || fmt.Sprint(ev2.Bins, ev2.Groups, ev2.Drops) != fmt.Sprint(want.Bins, want.Groups, want.Drops) {
		t.Fatalf("re-encoded %q of %q: got %+v want %+v", re, msg, *ev2, want)
	}
	for h := range want.Vectors {
		if want.Vectors[h] != nil && want.Drops[h] == ReasonNone && !sameFloats(ev2.Vectors[h], want.Vectors[h]) {
			t.Fatalf("re-encoded %q of %q: vector %d %v, want %v", re, msg, h, ev2.Vectors[h], want.Vectors[h])
		}
	}
}

// ---- fuzzing ----

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"ts":1700000000000,"user_id":"u12345","page":"checkout","country":"DE","session":"abcdef0123"}`,
		`{"ts":"2023-11-14T22:13:20.5+01:00","user_id":12,"page":"c\u0061f\u00e9","country":"\u00dc","code":true}`,
		`{"a":[1,{"b":[]}],"ts":1.7e12,"user_id":"x","device":"tv"}`,
		`{"ts":1,"user_id":"u","page":"home","interests":[0.2,0.5,0.3]}`,
		`{"ts":1,"user_id":"u","interests":[ 2e-1 , 0.5E0 ,-0, 0.3]}`,
		`{"ts":1,"user_id":"u","interests":[1e400,-1e-400,[0.5],{"a":1},"x",null,true]}`,
		`{"ts":1,"user_id":"u","interests":[0.5,0.5,5e-7],"device":"mobile"}`,
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"user":{"id":"u1","tags":["a"]},"context":{"ts":1,"geo":{"country":"DE"}},"page":"cart","interests":[1,0,0]}`))
	f.Add([]byte(`{"user":{"id":1},"user":null,"context":{"geo":[{"country":"DE"}],"ts":"2023-11-14T22:13:20Z"}}`))
	cfg := avgConfig()
	d := mustNew(cfg)
	ev := d.NewEvent()
	// The same message through nested paths: the scan validates the
	// whole message alike, whatever levels it follows.
	dn := mustNew(nestedConfig("json", []string{"home", "search", "cart"}))
	evn := dn.NewEvent()
	// And through a decoder whose histograms 0 and 2 select their groups.
	dk := mustNew(keyedConfig(0.5))
	evk := dk.NewEvent()
	malformed := func(r Reason) bool { return r == ReasonBadJSON || r == ReasonInvalidUTF8 || r == ReasonOversized }
	f.Fuzz(func(t *testing.T, msg []byte) {
		rn := dn.Decode(msg, evn)
		checkShape(t, dn, rn, evn)
		r := d.Decode(msg, ev)
		rk := dk.Decode(msg, evk)
		checkShape(t, dk, rk, evk)
		if rk != r {
			t.Fatalf("%q: keyed decoder %v, flat decoder %v", msg, rk, r)
		}
		if r == ReasonNone {
			checkKeysAgainstListed(t, cfg, ev, evk)
		}
		if malformed(r) != malformed(rn) {
			t.Fatalf("%q: flat decoder %v, nested decoder %v", msg, r, rn)
		}
		if r > ReasonBadVector || r.PerHistogram() {
			t.Fatalf("whole-event reason %v", r)
		}
		for h, hs := range d.hists {
			b, g := ev.Bins[h], ev.Groups[h]
			if hs.average {
				checkFuzzVector(t, r, ev, h, hs.dim)
				continue
			}
			if (b == -1) != (g == -1) || b < -1 || int(b) >= len(hs.bins) || g < -1 || (hs.groupSlot < 0 && g > 0) || (hs.groupSlot >= 0 && int(g) >= len(hs.groups)) {
				t.Fatalf("histogram %d: bin %d group %d out of range", h, b, g)
			}
			if (b == -1) != (r != ReasonNone || ev.Drops[h] != ReasonNone) {
				t.Fatalf("histogram %d: bin %d with drop %v (event %v)", h, b, ev.Drops[h], r)
			}
		}
		if r == ReasonNone && (ev.TimeMs < MinTimeMs || ev.TimeMs > MaxTimeMs) {
			t.Fatalf("time %d out of range", ev.TimeMs)
		}
		if r == ReasonNone && !json.Valid(msg) {
			t.Fatalf("accepted invalid JSON %q", msg)
		}
		if e, ok := reference(cfg, msg); ok {
			if s := e.check(r, ev); s != "" {
				t.Fatalf("%q: %s", msg, s)
			}
		} else if r == ReasonNone && !utf8.Valid(msg) {
			t.Fatalf("accepted invalid UTF-8 %q", msg)
		}
		checkReencode(t, d, msg, r, ev)
	})
}

// checkFuzzVector checks the invariants of average histogram h's part.
func checkFuzzVector(t *testing.T, r Reason, ev *Event, h, dim int) {
	t.Helper()
	if ev.Bins[h] != -1 || ev.Groups[h] != -1 || len(ev.Vectors[h]) != dim {
		t.Fatalf("average histogram %d: bin %d group %d vector %v", h, ev.Bins[h], ev.Groups[h], ev.Vectors[h])
	}
	switch ev.Drops[h] {
	case ReasonNone:
	case ReasonMissingField, ReasonWrongType, ReasonBadVector:
		if r != ReasonNone {
			t.Fatalf("average histogram %d: drop %v with event reason %v", h, ev.Drops[h], r)
		}
		return
	default:
		t.Fatalf("average histogram %d: drop %v", h, ev.Drops[h])
	}
	if r != ReasonNone {
		return
	}
	sum := 0.0
	for _, x := range ev.Vectors[h] {
		if !(x >= 0 && x <= 1) {
			t.Fatalf("average histogram %d: vector %v", h, ev.Vectors[h])
		}
		sum += x
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("average histogram %d: vector %v sums to %v", h, ev.Vectors[h], sum)
	}
}

// ---- benchmarks ----

var benchMsg = []byte(`{"ts":1700000000000,"user_id":"u12345","page":"checkout","country":"DE","session":"abcdef0123"}`)

func benchConfig() *config.Config {
	return &config.Config{
		Events: config.Events{TimeField: "ts", UserField: "user_id"},
		Histograms: []config.Histogram{{Name: "pages", Field: "page", Bins: []string{"home", "search", "cart", "checkout", "other"},
			OverflowBin: "other", GroupBy: "country", Groups: []string{"US", "DE", "FR"}}},
	}
}

type jsonEvent struct {
	TS      int64  `json:"ts"`
	UserID  string `json:"user_id"`
	Page    string `json:"page"`
	Country string `json:"country"`
	Session string `json:"session"`
}

// BenchmarkDecode compares this decoder with encoding/json.Unmarshal into a
// struct on the same ~100-byte event, in the same run.
func BenchmarkDecode(b *testing.B) {
	b.Run("stage", func(b *testing.B) {
		d := mustNew(benchConfig())
		ev := d.NewEvent()
		b.SetBytes(int64(len(benchMsg)))
		b.ReportAllocs()
		for b.Loop() {
			if d.Decode(benchMsg, ev) != ReasonNone || ev.Bins[0] != 3 {
				b.Fatal("decode failed")
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		var ev jsonEvent
		b.SetBytes(int64(len(benchMsg)))
		b.ReportAllocs()
		for b.Loop() {
			if err := json.Unmarshal(benchMsg, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDecodeZeroAllocs(t *testing.T) {
	d := mustNew(testConfig())
	ev := d.NewEvent()
	for _, msg := range []string{
		string(benchMsg),
		`{"ts":"2023-11-14T22:13:20.5+01:00","user_id":"\u0075\u00e9` + strings.Repeat(`\n`, 100) + `","page":"c\u0061f\u00e9","country":"\u00dc","code":1,"x":[[{"a":[]}]]}`,
		`{"t\u0073":1.7e12,"user_id":12,"page":"` + strings.Repeat(`\u0061`, 400) + `"}`,
		`{"ts":1,"user_id":"u","x":"\xff"}`,
	} {
		b := []byte(msg)
		if a := testing.AllocsPerRun(100, func() { d.Decode(b, ev) }); a != 0 {
			t.Errorf("%.1f allocs decoding %q", a, msg)
		}
	}
}

// TestDecodeVectorZeroAllocs: valid average events, short and long number
// spellings (a string(b) conversion would allocate above 32 bytes), decode
// without allocating.
func TestDecodeVectorZeroAllocs(t *testing.T) {
	d := mustNew(avgConfig())
	ev := d.NewEvent()
	for _, msg := range []string{
		`{"ts":1700000000000,"user_id":"u1","page":"home","country":"US","interests":[0.2,0.5,0.3]}`,
		`{"ts":1,"user_id":"u","interests":[ 2e-1 ,` + "\n\t" + ` 5E-1, 0.3 ],"device":"mobile","code":1}`,
		`{"ts":1,"user_id":"u","interests":[0.33333333333333333333333333333333333333333333333333,0.333333333333333333333333333333333333333333333333333,0.3333333333333333333333333333333333333333333333334]}`,
		`{"ts":1,"user_id":"u","interests":[0.5,0.5,5e-7]}`,
		`{"ts":1,"user_id":"u","interests":[0,1,0]}`,
	} {
		b := []byte(msg)
		if r := d.Decode(b, ev); r != ReasonNone || ev.Drops[3] != ReasonNone {
			t.Fatalf("%s: reason %v drops %v", msg, r, ev.Drops)
		}
		if a := testing.AllocsPerRun(100, func() { d.Decode(b, ev) }); a != 0 {
			t.Errorf("%.1f allocs decoding %q", a, msg)
		}
	}
}
