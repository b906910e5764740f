package decode

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/dpstage/stage/config"
)

// Record is one Kafka record as the decoder reads it. The caller fills it
// from its client's record (reusing one Record and one Headers slice per
// worker); DecodeRecord does not retain it.
type Record struct {
	Key   []byte // nil: no key
	Value []byte
	// TimestampMs is the record timestamp in Unix milliseconds (CreateTime
	// or LogAppendTime, as the topic says; -1 when there is none).
	TimestampMs int64
	Headers     []Header
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// DefaultRegistryTimeout bounds one request to the Schema Registry when
// events.schema_registry.timeout is 0.
const DefaultRegistryTimeout = 10 * time.Second

// unknownRetry is how long a "no such schema" answer is remembered: the
// records of an unknown id are dropped without asking the registry again
// until then.
const unknownRetry = 30 * time.Second

// The wire format's header: magic byte 0 and a 4-byte big-endian schema id.
const wireHeader = 5

// schemaEntry is one resolved schema id.
type schemaEntry struct {
	avro  *avroOp      // format avro
	proto []*protoNode // format protobuf, Confluent framing: the file's messages
	msg   *protoMsg    // format protobuf without message indexes
	// unknown: the id is not a usable schema (ReasonUnknownSchemaID).
	unknown bool
	// note is what the compilation found (paths that do not resolve or go
	// through a list or map), reported once per id to the observer.
	note SchemaNote
}

// unknownEntry stands for an id the registry does not have.
var unknownEntry = &schemaEntry{unknown: true}

// SchemaNote is what the decoder found about one schema id when it first
// resolved it: the configured fields the schema does not have (every record
// of that id will miss them: a renamed field?), those whose path goes
// through a list, a map or a scalar (wrong_type), or why the schema is not
// usable (Err: its records are unknown_schema_id).
type SchemaNote struct {
	ID          int
	Unresolved  []string // field keys with no such field in the schema
	ThroughList []string // field keys whose path goes through a list, map or scalar
	Err         error
}

// SchemaStats are the counters of a decoder's schema lookups (shared by
// the decoders of one configuration).
type SchemaStats struct {
	// Lookups: registry requests for unseen ids; Delayed: those that
	// waited for the lookup rate limit; UnknownIDs: ids the registry said
	// it does not have, remembered now.
	Lookups, Delayed int64
	UnknownIDs       int
}

// The registry lookups of unseen ids are rate limited, so that a stream of
// garbage records with fresh ids (each starting with the magic byte 0)
// cannot turn into a flood of registry requests: lookupsPerSec on average,
// bursts of lookupBurst. A lookup over the limit waits (the partition is
// delayed, and the delay counted). maxUnknown bounds the ids remembered as
// unknown (the oldest forgotten first).
const (
	lookupsPerSec = 50
	lookupBurst   = 100
	maxUnknown    = 100_000
)

// SchemaFetcher fetches a schema by id from a registry: the text, its type
// as the registry names it ("" or "AVRO", "PROTOBUF", "JSON") and the texts
// of the schemas it references, by reference name. A "not found" answer
// must wrap [ErrSchemaNotFound]; any other error makes the caller hold.
type SchemaFetcher interface {
	FetchSchema(ctx context.Context, id int) (text, typ string, refs map[string]string, err error)
}

// ErrSchemaNotFound is a registry's answer that it has no schema of that id.
var ErrSchemaNotFound = errors.New("schema not found")

// schemaSet resolves the schema ids of the records: from
// events.schema_files (compiled by New), else from the registry, cached.
type schemaSet struct {
	d        *Decoder
	protobuf bool
	indexes  bool   // protobuf: Confluent's message indexes follow the id
	message  string // protobuf without indexes: the message (default: the first)
	fetcher  SchemaFetcher
	timeout  time.Duration
	now      func() time.Time
	// resolved holds the ids whose schema the registry returned (usable
	// or not) and the schema files: read without locking, copied on write —
	// a new entry per schema registered, few.
	resolved atomic.Pointer[map[int]*schemaEntry]
	// mu guards unknown, unknownOrder, inflight, the rate limiter's
	// tokens and last, and the writes of resolved.
	mu           sync.Mutex
	unknown      map[int]time.Time // ids the registry said it does not have, until when
	unknownOrder []int             // unknown's ids, oldest first (with stale duplicates)
	inflight     map[int]*fetchCall
	tokens       float64
	last         time.Time
	rate, burst  float64 // lookups per second, burst (lookupsPerSec, lookupBurst; tests change them)
	maxUnknown   int
	lookups      atomic.Int64
	delayed      atomic.Int64
	observer     atomic.Pointer[func(SchemaNote)]
	fetchHook    func(id int) // tests: called before each fetch
	fileNotes    []SchemaNote // what the compilation of each schema file found
}

// fetchCall is one registry lookup that concurrent callers wait for.
type fetchCall struct {
	done chan struct{}
	e    *schemaEntry
	err  error
}

// sharedSets are the schema sets of the decoders built so far, by
// schemaSetKey: the stage builds one decoder per input partition, and
// decoders of one configuration share their schemas (one registry request
// per new id, not one per partition).
var sharedSets sync.Map // string → *schemaSet

// schemaSetKey is what a schema set's compiled schemas depend on: the
// events section and the fields and kinds of the histograms (the slots).
func schemaSetKey(cfg *config.Config) string {
	type hist struct{ Field, GroupBy, Kind string }
	hs := make([]hist, len(cfg.Histograms))
	for i, h := range cfg.Histograms {
		hs[i] = hist{h.Field, h.GroupBy, h.Kind}
	}
	b, err := json.Marshal(struct {
		Events     config.Events
		Histograms []hist
	}{cfg.Events, hs})
	if err != nil {
		return "" // plain data: cannot fail; "" is never shared
	}
	return string(b)
}

func newSchemaSet(d *Decoder, cfg *config.Config) (*schemaSet, error) {
	key := schemaSetKey(cfg)
	if s, ok := sharedSets.Load(key); ok && key != "" {
		return s.(*schemaSet), nil
	}
	s, err := buildSchemaSet(d, cfg)
	if err != nil || key == "" {
		return s, err
	}
	actual, _ := sharedSets.LoadOrStore(key, s)
	return actual.(*schemaSet), nil
}

func buildSchemaSet(d *Decoder, cfg *config.Config) (*schemaSet, error) {
	ev := cfg.Events
	s := &schemaSet{
		d:          d,
		protobuf:   ev.Format == config.FormatProtobuf,
		indexes:    ev.Protobuf.MessageIndexes != config.MessageIndexesNone,
		message:    ev.Protobuf.Message,
		timeout:    ev.SchemaRegistry.Timeout.D(),
		now:        time.Now,
		unknown:    map[int]time.Time{},
		inflight:   map[int]*fetchCall{},
		tokens:     lookupBurst,
		rate:       lookupsPerSec,
		burst:      lookupBurst,
		maxUnknown: maxUnknown,
	}
	if ev.SchemaRegistry.URL == "" && len(ev.SchemaFiles) == 0 {
		return nil, fmt.Errorf("decode: events.format %s needs events.schema_registry.url or events.schema_files", ev.Format)
	}
	if s.timeout <= 0 {
		s.timeout = DefaultRegistryTimeout
	}
	m := map[int]*schemaEntry{}
	for i, f := range ev.SchemaFiles {
		text, err := os.ReadFile(f.File)
		if err != nil {
			return nil, fmt.Errorf("decode: events.schema_files[%d]: %w", i, err)
		}
		e, err := s.compile(string(text), "", nil)
		if err != nil {
			return nil, fmt.Errorf("decode: events.schema_files[%d] (id %d): %w", i, f.ID, shortError(err))
		}
		e.note.ID = f.ID
		s.fileNotes = append(s.fileNotes, e.note)
		m[f.ID] = e
	}
	s.resolved.Store(&m)
	if r := ev.SchemaRegistry; r.URL != "" {
		f, err := NewRegistry(r)
		if err != nil {
			return nil, err
		}
		s.fetcher = f
	}
	return s, nil
}

// compile compiles a schema text of registry type typ ("" for the
// format's own) with its references.
func (s *schemaSet) compile(text, typ string, refs map[string]string) (*schemaEntry, error) {
	typ = strings.ToUpper(typ)
	if s.protobuf {
		if typ != "" && typ != "PROTOBUF" {
			return nil, fmt.Errorf("a %s schema, not PROTOBUF", typ)
		}
		return s.compileProto(text, refs)
	}
	if typ != "" && typ != "AVRO" {
		return nil, fmt.Errorf("a %s schema, not AVRO", typ)
	}
	cache := &avro.SchemaCache{}
	// References may use each other: parse them in passes until none is
	// left or a pass makes no progress.
	left := maps.Clone(refs)
	for len(left) > 0 {
		progress := false
		var lastErr error
		for name, ref := range left {
			if _, err := avro.ParseWithCache(ref, "", cache); err != nil {
				lastErr = fmt.Errorf("the referenced schema %q: %w", name, err)
				continue
			}
			delete(left, name)
			progress = true
		}
		if !progress {
			return nil, lastErr
		}
	}
	parsed, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	op, note, err := compileAvroNote(s.d, parsed)
	if err != nil {
		return nil, err
	}
	return &schemaEntry{avro: op, note: note}, nil
}

// protoRoot is the name the schema itself is compiled under.
const protoRoot = "dpstage-schema.proto"

func (s *schemaSet) compileProto(text string, refs map[string]string) (*schemaEntry, error) {
	srcs := map[string]string{protoRoot: text}
	for name, ref := range refs {
		srcs[name] = ref
	}
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(srcs)}),
	}
	files, err := c.Compile(context.Background(), protoRoot)
	if err != nil {
		return nil, err
	}
	fd := files[0]
	if fd.Messages().Len() == 0 {
		return nil, errors.New("the schema declares no message")
	}
	check := pathCheck{}
	if s.indexes {
		tree := compileProtoTree(s.d, fd.Messages(), check)
		return &schemaEntry{proto: tree, note: check.note(s.d)}, nil
	}
	md := fd.Messages().Get(0)
	if s.message != "" {
		d := fd.FindDescriptorByName(protoreflect.FullName(s.message))
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			return nil, fmt.Errorf("events.protobuf.message %q is not a message of the schema", s.message)
		}
		md = m
	}
	m := compileProto(s.d, md, s.d.root, check)
	return &schemaEntry{msg: m, note: check.note(s.d)}, nil
}

// decode reads the wire-format header of msg, resolves its schema and walks
// the payload into ev.slots; it returns the buffer the spans point into.
func (s *schemaSet) decode(msg []byte, ev *Event) ([]byte, Reason) {
	clear(ev.slots)
	if len(msg) < wireHeader || msg[0] != 0 {
		return nil, ReasonUnknownMagicByte
	}
	id := binary.BigEndian.Uint32(msg[1:wireHeader])
	if id > math.MaxInt32 {
		return nil, ReasonUnknownSchemaID
	}
	e := (*s.resolved.Load())[int(id)]
	if e == nil {
		var err error
		if e, err = s.lookup(int(id)); err != nil {
			ev.Err = err
			return nil, ReasonSchemaUnavailable
		}
	}
	if e.unknown {
		return nil, ReasonUnknownSchemaID
	}
	if e.avro != nil {
		payload := msg[wireHeader:]
		return payload, walkAvro(e.avro, payload, ev.slots, ev.ext)
	}
	m, i := e.msg, wireHeader
	if m == nil {
		var ok bool
		if m, i, ok = messageIndexes(e.proto, msg, wireHeader); !ok {
			return nil, ReasonUndecodable
		}
	}
	return msg, walkProto(m, msg, i, len(msg), ev.slots, ev.ext, 1)
}

// lookup resolves an id not in resolved: an id remembered as unknown, or
// one registry request per id however many callers wait for it. An error
// means the registry could not answer: the caller holds.
func (s *schemaSet) lookup(id int) (*schemaEntry, error) {
	if s.fetcher == nil {
		return unknownEntry, nil // not in events.schema_files, and no registry
	}
	s.mu.Lock()
	if until, ok := s.unknown[id]; ok {
		if s.now().Before(until) {
			s.mu.Unlock()
			return unknownEntry, nil
		}
		delete(s.unknown, id)
	}
	if e := (*s.resolved.Load())[id]; e != nil {
		s.mu.Unlock()
		return e, nil
	}
	if c := s.inflight[id]; c != nil {
		s.mu.Unlock()
		<-c.done
		return c.e, c.err
	}
	c := &fetchCall{done: make(chan struct{})}
	s.inflight[id] = c
	wait := s.take()
	s.mu.Unlock()

	if wait > 0 {
		s.delayed.Add(1)
		time.Sleep(wait)
	}
	c.e, c.err = s.fetch(id)

	s.mu.Lock()
	delete(s.inflight, id)
	switch {
	case c.err != nil:
	case c.e == unknownEntry:
		s.unknown[id] = s.now().Add(unknownRetry)
		s.unknownOrder = append(s.unknownOrder, id)
		s.evictUnknown()
	default:
		old := *s.resolved.Load()
		m := make(map[int]*schemaEntry, len(old)+1)
		maps.Copy(m, old)
		m[id] = c.e
		s.resolved.Store(&m)
	}
	s.mu.Unlock()
	close(c.done)
	if c.err == nil && c.e != unknownEntry {
		if f := s.observer.Load(); f != nil {
			(*f)(c.e.note)
		}
	}
	return c.e, c.err
}

// take takes a lookup token and returns how long to wait for it (0: one
// was there); mu held.
func (s *schemaSet) take() time.Duration {
	now := s.now()
	if el := now.Sub(s.last); el > 0 { // a clock stepping back adds nothing
		if !s.last.IsZero() {
			s.tokens = min(s.burst, s.tokens+el.Seconds()*s.rate)
		}
		s.last = now
	}
	s.tokens--
	if s.tokens >= 0 {
		return 0
	}
	return time.Duration(-s.tokens / s.rate * float64(time.Second))
}

// evictUnknown forgets the oldest unknown ids past maxUnknown; mu held.
func (s *schemaSet) evictUnknown() {
	for len(s.unknown) > s.maxUnknown && len(s.unknownOrder) > 0 {
		delete(s.unknown, s.unknownOrder[0])
		s.unknownOrder = s.unknownOrder[1:]
	}
	if len(s.unknownOrder) > 2*s.maxUnknown { // stale duplicates: compact
		kept := s.unknownOrder[:0]
		seen := map[int]bool{}
		for _, id := range s.unknownOrder {
			if _, ok := s.unknown[id]; ok && !seen[id] {
				seen[id] = true
				kept = append(kept, id)
			}
		}
		s.unknownOrder = slices.Clone(kept)
	}
}

// fetch asks the registry for schema id and compiles it: unknownEntry for
// a 404, an unknown entry with its note for a schema that is not usable.
func (s *schemaSet) fetch(id int) (*schemaEntry, error) {
	s.lookups.Add(1)
	if s.fetchHook != nil {
		s.fetchHook(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	text, typ, refs, err := s.fetcher.FetchSchema(ctx, id)
	cancel()
	switch {
	case errors.Is(err, ErrSchemaNotFound):
		return unknownEntry, nil
	case err != nil:
		return nil, fmt.Errorf("decode: fetching schema id %d: %w", id, shortError(err))
	}
	e, err := s.compile(text, typ, refs)
	if err != nil {
		return &schemaEntry{unknown: true, note: SchemaNote{ID: id, Err: shortError(err)}}, nil
	}
	e.note.ID = id
	return e, nil
}

// maxErrorLen bounds the text of a schema or registry error kept (a parse
// error may quote a whole multi-megabyte schema).
const maxErrorLen = 300

// shortError cuts err's text to maxErrorLen bytes.
func shortError(err error) error {
	if err == nil || len(err.Error()) <= maxErrorLen {
		return err
	}
	m := err.Error()[:maxErrorLen]
	for len(m) > 0 && !utf8.ValidString(m) {
		m = m[:len(m)-1]
	}
	return errors.New(m + "… (cut)")
}

// OnSchema sets fn to be called once for each schema id the registry
// resolves, with what the decoder found (see [SchemaNote]), so that the
// caller can log a schema that misses configured fields — a renamed user
// or time field would otherwise only show as drops. The decoders of one
// configuration share it (the last one set wins). fn must be fast and safe
// for concurrent use.
func (d *Decoder) OnSchema(fn func(SchemaNote)) {
	if d.schemas != nil {
		d.schemas.observer.Store(&fn)
	}
}

// SchemaFileNotes returns what the compilation of each of
// events.schema_files found (in their order): `stage validate` refuses a
// path through a list, a map or a scalar, and reports fields a schema does
// not have.
func (d *Decoder) SchemaFileNotes() []SchemaNote {
	if d.schemas == nil {
		return nil
	}
	return slices.Clone(d.schemas.fileNotes)
}

// SchemaStats returns the counters of the schema lookups (zero for json).
func (d *Decoder) SchemaStats() SchemaStats {
	s := d.schemas
	if s == nil {
		return SchemaStats{}
	}
	s.mu.Lock()
	n := len(s.unknown)
	s.mu.Unlock()
	return SchemaStats{Lookups: s.lookups.Load(), Delayed: s.delayed.Load(), UnknownIDs: n}
}

// Registry is a [SchemaFetcher] over a Confluent-compatible Schema
// Registry's REST API (franz-go's pkg/sr client): GET /schemas/ids/{id},
// and GET /subjects/{s}/versions/{v} for each reference, recursively.
type Registry struct {
	cl *sr.Client
}

// NewRegistry returns a client of the registry configured by r.
func NewRegistry(r config.SchemaRegistry) (*Registry, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.TLS.Enabled {
		tc, err := r.TLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("decode: events.schema_registry.tls: %w", err)
		}
		tr.TLSClientConfig = tc
	} else if strings.HasPrefix(r.URL, "https:") {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	opts := []sr.ClientOpt{sr.URLs(r.URL), sr.HTTPClient(&http.Client{Transport: tr})}
	if r.Username != "" {
		opts = append(opts, sr.BasicAuth(r.Username, r.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("decode: events.schema_registry: %w", err)
	}
	return &Registry{cl: cl}, nil
}

// maxReferences bounds the references followed for one schema.
const maxReferences = 64

// FetchSchema implements [SchemaFetcher].
func (g *Registry) FetchSchema(ctx context.Context, id int) (string, string, map[string]string, error) {
	s, err := g.cl.SchemaByID(ctx, id)
	if err != nil {
		return "", "", nil, registryError(err)
	}
	refs := map[string]string{}
	todo := s.References
	for len(todo) > 0 {
		r := todo[0]
		todo = todo[1:]
		if _, done := refs[r.Name]; done {
			continue
		}
		if len(refs) >= maxReferences {
			return "", "", nil, fmt.Errorf("%w: more than %d references", ErrSchemaNotFound, maxReferences)
		}
		rs, err := g.cl.SchemaByVersion(ctx, r.Subject, r.Version)
		if err != nil {
			return "", "", nil, registryError(err)
		}
		refs[r.Name] = rs.Schema.Schema
		todo = append(todo, rs.References...)
	}
	return s.Schema, s.Type.String(), refs, nil
}

// RegistryAuthRefused reports whether err (decode.Event.Err of a hold) is
// the Schema Registry refusing the stage's credentials: 401 or 403.
func RegistryAuthRefused(err error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && (re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden)
}

// registryError wraps a 404 in ErrSchemaNotFound.
func registryError(err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %v", ErrSchemaNotFound, err)
	}
	return err
}
