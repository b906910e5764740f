package decode

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// unknown: the id is not a usable schema (ReasonUnknownSchemaID); the
	// registry is asked again after until.
	unknown bool
	until   time.Time
	err     error // why it is unknown (for logs)
}

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
	d         *Decoder
	protobuf  bool
	indexes   bool   // protobuf: Confluent's message indexes follow the id
	message   string // protobuf without indexes: the message (default: the first)
	fetcher   SchemaFetcher
	timeout   time.Duration
	now       func() time.Time
	resolved  atomic.Pointer[map[int]*schemaEntry] // copy on write; read without locking
	fetchMu   sync.Mutex                           // serializes fetches and the writes of resolved
	fetchHook func(id int)                         // tests: called before each fetch
}

func newSchemaSet(d *Decoder, cfg *config.Config) (*schemaSet, error) {
	ev := cfg.Events
	s := &schemaSet{
		d:        d,
		protobuf: ev.Format == config.FormatProtobuf,
		indexes:  ev.Protobuf.MessageIndexes != config.MessageIndexesNone,
		message:  ev.Protobuf.Message,
		timeout:  ev.SchemaRegistry.Timeout.D(),
		now:      time.Now,
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
			return nil, fmt.Errorf("decode: events.schema_files[%d] (id %d): %w", i, f.ID, err)
		}
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
	for name, ref := range refs {
		if _, err := avro.ParseWithCache(ref, "", cache); err != nil {
			return nil, fmt.Errorf("the referenced schema %q: %w", name, err)
		}
	}
	parsed, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	op, err := compileAvro(s.d, parsed)
	if err != nil {
		return nil, err
	}
	return &schemaEntry{avro: op}, nil
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
	if s.indexes {
		return &schemaEntry{proto: compileProtoTree(s.d, fd.Messages())}, nil
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
	return &schemaEntry{msg: compileProto(s.d, md, s.d.root)}, nil
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
	if e == nil || (e.unknown && s.now().After(e.until)) {
		var err error
		if e, err = s.fetch(int(id)); err != nil {
			ev.Err = err
			return nil, ReasonSchemaUnavailable
		}
	}
	if e.unknown {
		return nil, ReasonUnknownSchemaID
	}
	if e.avro != nil {
		payload := msg[wireHeader:]
		return payload, walkAvro(e.avro, payload, ev.slots)
	}
	m, i := e.msg, wireHeader
	if m == nil {
		var ok bool
		if m, i, ok = messageIndexes(e.proto, msg, wireHeader); !ok {
			return nil, ReasonUndecodable
		}
	}
	return msg, walkProto(m, msg, i, len(msg), ev.slots, 1)
}

// fetch asks the registry for schema id (once for concurrent callers) and
// stores the outcome. An error means the registry could not answer: the
// caller holds.
func (s *schemaSet) fetch(id int) (*schemaEntry, error) {
	s.fetchMu.Lock()
	defer s.fetchMu.Unlock()
	if e := (*s.resolved.Load())[id]; e != nil && !(e.unknown && s.now().After(e.until)) {
		return e, nil // fetched by another worker meanwhile
	}
	var e *schemaEntry
	if s.fetcher == nil {
		e = &schemaEntry{unknown: true, until: s.now().Add(unknownRetry), err: errors.New("not in events.schema_files and no schema registry configured")}
	} else {
		if s.fetchHook != nil {
			s.fetchHook(id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		text, typ, refs, err := s.fetcher.FetchSchema(ctx, id)
		cancel()
		switch {
		case errors.Is(err, ErrSchemaNotFound):
			e = &schemaEntry{unknown: true, until: s.now().Add(unknownRetry), err: err}
		case err != nil:
			return nil, fmt.Errorf("decode: fetching schema id %d: %w", id, err)
		default:
			if e, err = s.compile(text, typ, refs); err != nil {
				e = &schemaEntry{unknown: true, until: s.now().Add(unknownRetry), err: fmt.Errorf("schema id %d: %w", id, err)}
			}
		}
	}
	old := *s.resolved.Load()
	m := make(map[int]*schemaEntry, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[id] = e
	s.resolved.Store(&m)
	return e, nil
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

// registryError wraps a 404 in ErrSchemaNotFound.
func registryError(err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %v", ErrSchemaNotFound, err)
	}
	return err
}
