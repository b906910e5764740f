package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes is the largest config file Parse accepts.
const MaxFileBytes = 4 << 20

// maxValues bounds the work of decoding one document (values visited,
// counting every expansion of an alias), so that alias bombs stay cheap.
const maxValues = 1 << 20

// maxMergeDepth bounds nested merge keys (<<), which may form cycles.
const maxMergeDepth = 16

// meta records what the file said. It is immutable once Parse returns and
// shared by copies of the Config.
type meta struct {
	set map[string]bool // YAML paths the file gave a non-null value
	env map[string]bool // YAML paths whose value came from ${ENV} interpolation
	// line maps a YAML path to its 1-based line in the file: the line of
	// its key for a mapping or list given as a block, of the value itself
	// for a scalar, of the "- " for a list item.
	line map[string]int
}

func (c *Config) isSet(path string) bool { return c.meta != nil && c.meta.set[path] }

// lineOf is the file line of path's value, or of its nearest enclosing key
// the file gave (a default has no line of its own); 0 when there is none.
func (c *Config) lineOf(path string) int {
	if c.meta == nil {
		return 0
	}
	for path != "" {
		if l, ok := c.meta.line[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

// written reports whether path itself was written in the loaded YAML (not
// only a parent of it).
func (c *Config) written(path string) bool {
	if c.meta == nil {
		return false
	}
	_, ok := c.meta.line[path]
	return ok
}

func (c *Config) fromEnv(path string) bool { return c.meta != nil && c.meta.env[path] }

// Load reads the YAML file at path and returns the configuration it
// describes, with ${ENV_VAR} references resolved from the process environment
// (os.LookupEnv), defaults applied and everything validated. See [Parse].
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data, os.LookupEnv)
}

// Parse decodes one YAML document strictly, resolving ${ENV_VAR} references
// with lookupEnv (nil: no variable is set), then applies defaults
// ([Config.ApplyDefaults]) and validates ([Config.Validate]).
//
// Decoding problems (syntax, unknown or duplicate keys, wrong types,
// unresolvable references, literal secrets) are returned together as a
// *[ValidationError] whose problems carry their line; only when there are none
// are defaults applied and the result validated, whose problems come back the
// same way, with the line of the offending value (or of its nearest enclosing
// key the file gave). A file with a YAML syntax error is also checked without
// the top-level sections the error is in (see checkAroundSyntax), so that its
// other problems come in the same report. No error ever contains a value that
// came from the environment.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	if len(data) > MaxFileBytes {
		return nil, &ValidationError{Problems: []Problem{{Message: fmt.Sprintf("file larger than %d bytes", MaxFileBytes)}}}
	}
	doc, second, err := parseYAML(data)
	switch {
	case err != nil:
		return nil, &ValidationError{Problems: checkAroundSyntax(data, err, lookupEnv)}
	case second > 0:
		return nil, &ValidationError{Problems: []Problem{secondDocument(second)}}
	}
	cfg, probs := decode(doc, lookupEnv)
	if len(probs) > 0 {
		return nil, &ValidationError{Problems: probs}
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

type decoder struct {
	lookup   func(string) (string, bool)
	probs    []Problem
	resolved map[*yaml.Node]*interpolated
	set      map[string]bool
	env      map[string]bool
	line     map[string]int
	budget   int
	overrun  bool
}

// decode decodes the document's root node (nil: an empty document) into a
// Config, without defaults or validation.
func decode(doc *yaml.Node, lookup func(string) (string, bool)) (*Config, []Problem) {
	d := &decoder{
		lookup:   lookup,
		resolved: map[*yaml.Node]*interpolated{},
		set:      map[string]bool{},
		env:      map[string]bool{},
		line:     map[string]int{},
		budget:   maxValues,
	}
	cfg := &Config{}
	if doc != nil {
		d.value(doc, reflect.ValueOf(cfg).Elem(), "", false)
	}
	if len(d.probs) > 0 {
		return nil, dedupe(d.probs)
	}
	cfg.meta = &meta{set: d.set, env: d.env, line: d.line}
	return cfg, nil
}

// errParser stands for a panic of the YAML parser.
var errParser = errors.New("yaml: parser failure")

// parseYAML parses data into the root node of its single document (nil for
// an empty document). A second document is not an error here: second is the
// line it starts on (0: none). yaml.v3's Decoder is used for parsing only: it
// cannot decode a yaml.Node into a struct with KnownFields, and its type
// errors quote values, so the structure is decoded by decoder below.
func parseYAML(data []byte) (root *yaml.Node, second int, err error) {
	defer func() {
		// The parser reports errors by panicking internally and recovers
		// them itself; anything else escaping it must not crash the caller.
		if r := recover(); r != nil {
			root, second, err = nil, 0, errParser
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, 0, err
		}
		second = max(extra.Line, 1)
		if len(extra.Content) > 0 {
			second = max(extra.Content[0].Line, 1)
		}
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, second, nil
		}
		return doc.Content[0], second, nil
	}
	return &doc, second, nil
}

func secondDocument(line int) Problem {
	return Problem{Line: line, Message: "a second YAML document starts here; the config is a single document"}
}

func (d *decoder) add(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.probs = append(d.probs, Problem{Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) spend(n *yaml.Node, path string) bool {
	if d.budget <= 0 {
		if !d.overrun {
			d.overrun = true
			d.add(n, path, "document too large: more than %d values (counting alias expansions)", maxValues)
		}
		return false
	}
	d.budget--
	return true
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

var durationType = reflect.TypeOf(Duration(0))

// value decodes n into v. path is the YAML path of v; secret marks a field
// that may only come from the environment.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string, secret bool) {
	if !d.spend(n, path) {
		return
	}
	use := n // where the value is written: an alias's own line, not its anchor's
	if n = deref(n); n == nil || n.Kind == yaml.AliasNode {
		d.add(n, path, "unresolvable alias")
		return
	}
	// A key's path already holds the key's line (structure); a scalar's
	// problems point at the scalar itself, which may be on a later line.
	if _, keyed := d.line[path]; path != "" && use.Line > 0 && (!keyed || n.Kind == yaml.ScalarNode) {
		d.line[path] = use.Line
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return // absent: the default applies
	}
	switch {
	case v.Type() == durationType, v.Kind() == reflect.String, v.Kind() == reflect.Int,
		v.Kind() == reflect.Float64, v.Kind() == reflect.Bool:
		d.scalar(n, v, path, secret)
	case v.Kind() == reflect.Struct:
		d.structure(n, v, path)
	case v.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	default:
		d.add(n, path, "internal error: unsupported field type %s", v.Type())
	}
}

type field struct {
	index  int
	secret bool
}

func structFields(t reflect.Type) (map[string]field, []string) {
	fields := map[string]field{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = field{index: i, secret: f.Tag.Get("secret") == "true"}
		names = append(names, name)
	}
	return fields, names
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		what := "a mapping of keys"
		if path == "" {
			what = "a mapping of config sections (kafka, events, window, ...)"
		}
		d.add(n, path, "expected %s, got %s", what, kindName(n))
		return
	}
	fields, names := structFields(v.Type())
	for _, p := range d.pairs(n, path, map[*yaml.Node]bool{n: true}) {
		name := p.key.Value
		kpath := join(path, name)
		f, ok := fields[name]
		if !ok {
			if path == "" && strings.HasPrefix(name, "x-") {
				continue // extension key, e.g. to hold YAML anchors
			}
			msg := "unknown key " + quoteLiteral(name)
			if s := suggest(name, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += " (known keys: " + strings.Join(names, ", ") + ")"
			}
			d.add(p.key, kpath, "%s", msg)
			continue
		}
		if p.key.Line > 0 {
			d.line[kpath] = p.key.Line
		}
		d.value(p.val, v.Field(f.index), kpath, f.secret)
	}
}

type pair struct{ key, val *yaml.Node }

// pairs lists the key/value pairs of a mapping, resolving merge keys (<<): a
// key given in the mapping itself wins over a merged one, an earlier merged
// mapping over a later one. Duplicate keys are problems.
func (d *decoder) pairs(n *yaml.Node, path string, active map[*yaml.Node]bool) []pair {
	var out []pair
	var merges []*yaml.Node
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := deref(n.Content[i]), n.Content[i+1]
		if !d.spend(k, path) {
			return out
		}
		if k == nil || k.Kind != yaml.ScalarNode {
			d.add(n.Content[i], path, "mapping keys must be plain strings, got %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.add(k, join(path, k.Value), "duplicate key %s (first at line %d)", quoteLiteral(k.Value), first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, pair{k, val})
	}
	if len(merges) == 0 {
		return out
	}
	if len(active) > maxMergeDepth {
		d.add(n, path, "merge keys (<<) nested more than %d deep", maxMergeDepth)
		return out
	}
	for _, m := range merges {
		src := deref(m)
		var maps []*yaml.Node
		switch {
		case src != nil && src.Kind == yaml.MappingNode:
			maps = []*yaml.Node{src}
		case src != nil && src.Kind == yaml.SequenceNode:
			for _, c := range src.Content {
				if c = deref(c); c != nil && c.Kind == yaml.MappingNode {
					maps = append(maps, c)
				} else {
					d.add(m, path, "merge key (<<) needs a mapping or a list of mappings")
				}
			}
		default:
			d.add(m, path, "merge key (<<) needs a mapping or a list of mappings")
		}
		for _, src := range maps {
			if active[src] {
				d.add(m, path, "merge key (<<) refers to a mapping that contains it")
				continue
			}
			active[src] = true
			merged := d.pairs(src, path, active)
			delete(active, src)
			for _, p := range merged {
				if _, ok := seen[p.key.Value]; ok {
					continue
				}
				seen[p.key.Value] = p.key.Line
				out = append(out, p)
			}
		}
	}
	return out
}

func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && v.Type().Elem().Kind() == reflect.String {
		// A list of strings may come from one environment variable holding a
		// comma-separated list (KAFKA_BROKERS=a:9092,b:9092).
		r := d.interpolate(n, path)
		if r == nil {
			return
		}
		if r.fromEnv {
			var items []string
			for _, s := range strings.Split(r.value, ",") {
				if s = strings.TrimSpace(s); s != "" {
					items = append(items, s)
				}
			}
			if len(items) == 0 {
				return // empty: absent
			}
			v.Set(reflect.ValueOf(items))
			d.set[path] = true
			d.env[path] = true
			return
		}
	}
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "expected a list, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.value(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i), false)
	}
	v.Set(s)
	d.set[path] = true
}

// scalar decodes a string, int, float64, bool or Duration.
func (d *decoder) scalar(n *yaml.Node, v reflect.Value, path string, secret bool) {
	want := typeName(v.Type())
	if n.Kind != yaml.ScalarNode {
		d.add(n, path, "expected %s, got %s", want, kindName(n))
		return
	}
	r := d.interpolate(n, path)
	if r == nil {
		return
	}
	if secret && !r.pure && r.value != "" {
		d.add(n, path, "must be given as a ${ENV_VAR} reference and nothing else: a literal secret in the file is not allowed")
		return
	}
	if r.fromEnv && r.value == "" {
		return // an empty value from the environment counts as absent
	}
	text, tag := r.value, n.ShortTag()
	// bad reports a value that does not fit; a value from the environment
	// is never quoted.
	bad := func(format string, args ...any) {
		if r.fromEnv {
			d.add(n, path, "value of %s: "+format, append([]any{r.refs()}, args...)...)
		} else {
			d.add(n, path, "%s: "+format, append([]any{quoteLiteral(text)}, args...)...)
		}
	}
	literalOK := func(tags ...string) bool {
		// A value from the environment is parsed from its text; a literal
		// must be of the right YAML type (no quoted numbers).
		if r.fromEnv {
			return true
		}
		for _, t := range tags {
			if tag == t {
				return true
			}
		}
		return false
	}
	switch {
	case v.Type() == durationType:
		dur, err := ParseDuration(text)
		if err != nil {
			bad("%v", err)
			return
		}
		v.SetInt(int64(dur))
	case v.Kind() == reflect.String:
		v.SetString(text)
	case v.Kind() == reflect.Int:
		if !literalOK("!!int", "!!float") {
			bad("expected %s", want)
			return
		}
		i, err := parseInt(text)
		if err != nil {
			bad("%v", err)
			return
		}
		v.SetInt(i)
	case v.Kind() == reflect.Float64:
		if !literalOK("!!int", "!!float") {
			bad("expected %s", want)
			return
		}
		f, err := parseFloat(text)
		if err != nil {
			bad("%v", err)
			return
		}
		v.SetFloat(f)
	case v.Kind() == reflect.Bool:
		b, err := parseBool(text, r.fromEnv)
		if err != nil || !literalOK("!!bool") {
			bad("expected true or false")
			return
		}
		v.SetBool(b)
	}
	d.set[path] = true
	if r.fromEnv {
		d.env[path] = true
	}
}

// quoteLiteral quotes a value written in the file, cut short.
func quoteLiteral(s string) string {
	if r := []rune(s); len(r) > 40 {
		s = string(r[:40]) + "..."
	}
	return strconv.Quote(s)
}

var (
	errNotNumber = errors.New("expected a number")
	errNotWhole  = errors.New("expected a whole number")
	errRange     = errors.New("number out of range")
	leadingZeros = regexp.MustCompile(`^[+-]?0[0-9]+$`)
)

func parseInt(s string) (int64, error) {
	plain := strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	base := 0
	if leadingZeros.MatchString(plain) {
		base = 10 // "010" is ten, not an octal eight
	}
	i, err := strconv.ParseInt(plain, base, strconv.IntSize)
	if err == nil {
		return i, nil
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, errRange
	}
	f, ferr := parseFloat(s)
	if ferr != nil {
		return 0, errNotWhole
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, errNotWhole
	}
	if f < math.MinInt64 || f >= math.MaxInt64 {
		return 0, errRange
	}
	return int64(f), nil
}

// parseFloat accepts YAML and Go spellings, including .inf and .nan (which
// validation then rejects with a clear message).
func parseFloat(s string) (float64, error) {
	t := strings.TrimSpace(s)
	switch t {
	case ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF":
		return math.Inf(1), nil
	case "-.inf", "-.Inf", "-.INF":
		return math.Inf(-1), nil
	case ".nan", ".NaN", ".NAN":
		return math.NaN(), nil
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(t, "_", ""), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, errRange
		}
		return 0, errNotNumber
	}
	return f, nil
}

func parseBool(s string, lenient bool) (bool, error) {
	switch strings.TrimSpace(s) {
	case "true", "True", "TRUE":
		return true, nil
	case "false", "False", "FALSE":
		return false, nil
	}
	if lenient {
		return strconv.ParseBool(strings.TrimSpace(s))
	}
	return false, errors.New("not a bool")
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 1m, 5s or 24h"
	case t.Kind() == reflect.String:
		return "a string"
	case t.Kind() == reflect.Int:
		return "a whole number"
	case t.Kind() == reflect.Float64:
		return "a number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	}
	return t.String()
}

func kindName(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return "a number"
	case "!!bool":
		return "a bool"
	case "!!null":
		return "null"
	}
	return "a string"
}

// suggest returns the known key closest to name, if close enough to be a
// likely misspelling.
func suggest(name string, known []string) string {
	best, bestD := "", 1<<30
	norm := strings.NewReplacer("-", "_", " ", "_").Replace(strings.ToLower(name))
	for _, k := range known {
		if k == norm {
			return k
		}
		if len(norm) >= 4 && (strings.HasPrefix(k, norm) || strings.HasPrefix(norm, k)) {
			return k
		}
		if dist := levenshtein(norm, k); dist < bestD {
			best, bestD = k, dist
		}
	}
	limit := 2
	if len(name) <= 4 {
		limit = 1
	}
	if bestD <= limit {
		return best
	}
	return ""
}

func levenshtein(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// dedupe drops repeated problems (an aliased node decoded twice reports its
// problem twice) and orders them by line, keeping the order within a line.
func dedupe(probs []Problem) []Problem {
	seen := map[Problem]bool{}
	out := probs[:0:0]
	for _, p := range probs {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}
