package decode

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/lib/siphash"
)

// testConfig: three histograms exercising overflow, groups, no groups,
// numeric and boolean bins, and a bin field shared with another histogram's
// group field.
func testConfig() *config.Config {
	return &config.Config{
		Events: config.Events{Format: "json", TimeField: "ts", UserField: "user_id", MaxMessageBytes: 4096},
		Histograms: []config.Histogram{
			{Name: "pages", Field: "page", Bins: []string{"home", "search", "cart", "checkout", "other", "café", "a\"b", "😀"},
				OverflowBin: "other", GroupBy: "country", Groups: []string{"US", "DE", "FR", "Ü"}},
			{Name: "devices", Field: "device", Bins: []string{"mobile", "desktop"}},
			{Name: "codes", Field: "code", Bins: []string{"1", "2", "true", "-3", "1.5"}, GroupBy: "page", Groups: []string{"home", "cart"}},
		},
	}
}

// avgConfig is testConfig with a fourth histogram of kind average, whose
// vector field "interests" has three coordinates.
func avgConfig() *config.Config {
	cfg := testConfig()
	cfg.Histograms = append(cfg.Histograms, config.Histogram{Name: "interests", Field: "interests",
		Bins: []string{"sport", "news", "music"}, Kind: config.KindAverage})
	return cfg
}

var testSeed = siphash.MustNewKey()

func mustNew(cfg *config.Config) *Decoder {
	d, err := New(cfg, testSeed)
	if err != nil {
		panic(err)
	}
	return d
}

// expected is the reference result for one message.
type expected struct {
	reason Reason
	// alt, when non-zero, is a second acceptable whole-event reason (the scan
	// order decides between bad_json and invalid_utf8).
	alt    Reason
	timeMs int64
	user   uint64
	bins   []int32
	groups []int32
	drops  []Reason
	// vectors[h]: the normalized vector of an average histogram h whose
	// part is kept (nil otherwise).
	vectors [][]float64
}

var rfc3339RE = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$`)

// refTime interprets a time value the documented way using the standard
// library: math/big for numbers, time.Parse for RFC 3339.
// refHugeExponent decides a JSON number whose exponent big.Rat refuses (it
// does not fit an int64): a zero mantissa is 0 whatever the exponent; any
// other mantissa is out of range for a large positive exponent, and for a
// large negative one lies strictly between -1 and 1, so it floors to 0 when
// positive and to -1 (out of range) when negative.
func refHugeExponent(s string) (int64, Reason) {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return 0, ReasonBadTime
	}
	mant, exp := s[:i], s[i+1:]
	if strings.Trim(mant, "-0.") == "" {
		return 0, ReasonNone
	}
	if !strings.HasPrefix(exp, "-") || strings.HasPrefix(mant, "-") {
		return 0, ReasonBadTime
	}
	return 0, ReasonNone
}

func refTime(v any) (int64, Reason) {
	switch v := v.(type) {
	case nil:
		return 0, ReasonMissingTime
	case json.Number:
		r, ok := new(big.Rat).SetString(string(v))
		if !ok {
			return refHugeExponent(string(v))
		}
		f := new(big.Int).Quo(r.Num(), r.Denom()) // truncates toward zero
		if r.Sign() < 0 && !r.IsInt() {
			f.Sub(f, big.NewInt(1))
		}
		if !f.IsInt64() || f.Int64() < MinTimeMs || f.Int64() > MaxTimeMs {
			return 0, ReasonBadTime
		}
		return f.Int64(), ReasonNone
	case string:
		if v != "" && strings.Trim(v, "0123456789") == "" {
			n, ok := new(big.Int).SetString(v, 10)
			if !ok || !n.IsInt64() || n.Int64() > MaxTimeMs {
				return 0, ReasonBadTime
			}
			return n.Int64(), ReasonNone
		}
		if !rfc3339RE.MatchString(v) {
			return 0, ReasonBadTime
		}
		b := []byte(v)
		b[10] = 'T'
		if b[len(b)-1] == 'z' {
			b[len(b)-1] = 'Z'
		}
		t, err := time.Parse(time.RFC3339Nano, string(b))
		if err != nil {
			return 0, ReasonBadTime
		}
		ms := t.UnixMilli()
		if t.Before(time.Unix(0, 0)) || ms > MaxTimeMs {
			return 0, ReasonBadTime
		}
		return ms, ReasonNone
	}
	return 0, ReasonWrongType
}

// refText is the text a bin/group value is matched by.
func refText(v any) (string, Reason) {
	switch v := v.(type) {
	case nil:
		return "", ReasonMissingField
	case string:
		return v, ReasonNone
	case json.Number:
		return string(v), ReasonNone
	case bool:
		if v {
			return "true", ReasonNone
		}
		return "false", ReasonNone
	}
	return "", ReasonWrongType
}

// refVector interprets an average histogram's value the documented way:
// encoding/json's generic decoding (with UseNumber) and strconv.ParseFloat.
func refVector(v any, dim int) ([]float64, Reason) {
	switch v := v.(type) {
	case nil:
		return nil, ReasonMissingField
	case []any:
		if len(v) != dim {
			return nil, ReasonBadVector
		}
		out := make([]float64, dim)
		sum := 0.0
		for i, x := range v {
			n, isNum := x.(json.Number)
			if !isNum {
				return nil, ReasonBadVector
			}
			f, err := strconv.ParseFloat(string(n), 64)
			if math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
				return nil, ReasonBadVector
			}
			if err != nil {
				panic("ParseFloat error on a finite number: " + err.Error())
			}
			out[i] = f
			sum += f
		}
		if sum < 1-1e-6 || sum > 1+1e-6 {
			return nil, ReasonBadVector
		}
		for i := range out {
			out[i] /= sum
		}
		return out, ReasonNone
	}
	return nil, ReasonWrongType
}

var (
	surrogateEscRE  = regexp.MustCompile(`\\u[dD][89a-fA-F]`)
	surrogatePairRE = regexp.MustCompile(`\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}`)
)

// reference computes what Decode must return for msg using encoding/json.
// ok is false when encoding/json cannot judge (see the cases below).
func reference(cfg *config.Config, msg []byte) (e expected, ok bool) {
	max := cfg.Events.MaxMessageBytes
	if max == 0 {
		max = DefaultMaxMessageBytes
	}
	if len(msg) > max {
		return expected{reason: ReasonOversized}, true
	}
	if !json.Valid(msg) {
		return expected{reason: ReasonBadJSON, alt: ReasonInvalidUTF8}, true
	}
	var top any
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return e, false
	}
	m, isObj := top.(map[string]any)
	if !isObj {
		return expected{reason: ReasonBadJSON}, true
	}
	if !utf8.Valid(msg) {
		return expected{reason: ReasonInvalidUTF8}, true
	}
	// Escaped backslashes first (left to right, as a JSON parser pairs
	// them), so that `\\ud800` is not read as the escape \ud800.
	unescaped := bytes.ReplaceAll(msg, []byte(`\\`), []byte("__"))
	if surrogateEscRE.Match(surrogatePairRE.ReplaceAll(unescaped, []byte("X"))) || bytes.Count(msg, []byte("["))+bytes.Count(msg, []byte("{")) >= MaxDepth {
		return e, false // lone surrogates / depth: judged elsewhere
	}
	t, r := refTime(m[cfg.Events.TimeField])
	if r != ReasonNone {
		return expected{reason: r}, true
	}
	e.timeMs = t
	switch u := m[cfg.Events.UserField].(type) {
	case nil:
		return expected{reason: ReasonMissingUser}, true
	case string:
		if u == "" {
			return expected{reason: ReasonMissingUser}, true
		}
		e.user = testSeed.String(u)
	case json.Number:
		if strings.ContainsAny(string(u), ".eE") {
			return expected{reason: ReasonWrongType}, true
		}
		e.user = testSeed.String(string(u))
	default:
		return expected{reason: ReasonWrongType}, true
	}
	for _, h := range cfg.Histograms {
		if h.IsAverage() {
			vec, drop := refVector(m[h.Field], len(h.Bins))
			e.bins = append(e.bins, -1)
			e.groups = append(e.groups, -1)
			e.drops = append(e.drops, drop)
			e.vectors = append(e.vectors, vec)
			continue
		}
		e.vectors = append(e.vectors, nil)
		bin, grp, drop := int32(-1), int32(-1), ReasonNone
		bt, r := refText(m[h.Field])
		if r != ReasonNone {
			drop = r
		} else {
			bin = int32(indexOf(h.Bins, bt))
			if bin < 0 && h.OverflowBin != "" {
				bin = int32(indexOf(h.Bins, h.OverflowBin))
			}
			if bin < 0 {
				drop = ReasonOutOfDomain
			} else if h.GroupBy == "" {
				grp = 0
			} else {
				gt, r := refText(m[h.GroupBy])
				if r != ReasonNone {
					drop = r
				} else if grp = int32(indexOf(h.Groups, gt)); grp < 0 {
					drop = ReasonUnknownGroup
				}
			}
			if drop != ReasonNone {
				bin, grp = -1, -1
			}
		}
		e.bins = append(e.bins, bin)
		e.groups = append(e.groups, grp)
		e.drops = append(e.drops, drop)
	}
	return e, true
}

func indexOf(xs []string, s string) int {
	for i, x := range xs {
		if x == s {
			return i
		}
	}
	return -1
}

// check compares a decode result with the reference; "" when they agree.
func (e expected) check(r Reason, ev *Event) string {
	if r != e.reason && (e.alt == ReasonNone || r != e.alt) {
		return "reason " + r.String() + ", want " + e.reason.String()
	}
	if r != ReasonNone {
		for h := range ev.Bins {
			if ev.Bins[h] != -1 || ev.Groups[h] != -1 || ev.Drops[h] != ReasonNone {
				return "dropped event has per-histogram values"
			}
		}
		return ""
	}
	if ev.TimeMs != e.timeMs {
		return "time differs"
	}
	if ev.User != e.user {
		return "user hash differs"
	}
	for h := range e.bins {
		if ev.Bins[h] != e.bins[h] || ev.Groups[h] != e.groups[h] || ev.Drops[h] != e.drops[h] {
			return "histogram " + string(rune('0'+h)) + " differs: bin/group/drop " +
				itoa(ev.Bins[h]) + "/" + itoa(ev.Groups[h]) + "/" + ev.Drops[h].String() + ", want " +
				itoa(e.bins[h]) + "/" + itoa(e.groups[h]) + "/" + e.drops[h].String()
		}
		if want := e.vectors[h]; want != nil && !sameFloats(ev.Vectors[h], want) {
			return "histogram " + string(rune('0'+h)) + " vector " + fmtFloats(ev.Vectors[h]) + ", want " + fmtFloats(want)
		}
	}
	return ""
}

// sameFloats reports whether a and b hold the same float64 values, bit for
// bit.
func sameFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

func fmtFloats(xs []float64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	}
	b.WriteByte(']')
	return b.String()
}

func itoa(i int32) string { return big.NewInt(int64(i)).String() }
