// Package srtest is a Schema Registry test server: an in-memory HTTP server
// speaking the subset of Confluent Schema Registry's REST API that the
// stage's decoder and the producer clients its acceptance tests use
// (kafkajs's @kafkajs/confluent-schema-registry 4.x and franz-go's pkg/sr)
// call, and which can be stopped and started again on the same address to
// test registry outages. It is a test tool (above pipeline/, see
// internal/layering); nothing in the data flow imports it.
//
// # Endpoints
//
// Bodies are JSON (content type application/vnd.schemaregistry.v1+json is
// sent back, any request content type is accepted). Errors are
// {"error_code": N, "message": "..."} with Confluent's codes.
//
//	GET  /schemas/ids/{id}                     {"schema", "schemaType" (absent for AVRO), "references"}; 404 40403
//	GET  /schemas/ids/{id}/versions            [{"subject", "version"}]            (franz-go sr CreateSchema)
//	GET  /schemas/ids/{id}/subjects            ["subject", ...]
//	GET  /schemas/types                        ["AVRO", "JSON", "PROTOBUF"]
//	GET  /subjects                             ["subject", ...]
//	GET  /subjects/{s}/versions                [1, 2, ...]; 404 40401
//	GET  /subjects/{s}/versions/{v|latest}     {"subject", "version", "id", "schema", "schemaType", "references"}; 404 40401/40402
//	GET  /subjects/{s}/versions/{v}/schema     the schema text
//	POST /subjects/{s}/versions                register: {"id"}; the same schema again returns its id, no new version
//	POST /subjects/{s}                         look up a schema in a subject: the version object; 404 40401/40403
//	POST /compatibility/subjects/{s}/versions/{v}  {"is_compatible": true} (no check is made)
//	GET  /config, PUT /config                  {"compatibilityLevel"} / {"compatibility"}; global default BACKWARD
//	GET  /config/{s}, PUT /config/{s}          404 40408 until a PUT sets the subject's level (kafkajs reads
//	                                           this before registering and PUTs it after a first registration)
//	GET  /mode, GET /mode/{s}                  {"mode": "READWRITE"}
//
// Schema ids are global and start at 1: the same (type, text, references)
// registered under two subjects shares one id, as in the real registry.
// Query parameters (normalize, deleted, ...) are ignored. Schemas are not
// validated or normalized: the text is stored as given.
package srtest

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Reference is a schema reference, as in the registry's API.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Schema types, as the registry spells them.
const (
	Avro     = "AVRO"
	Protobuf = "PROTOBUF"
	JSON     = "JSON"
)

type schema struct {
	Type       string      `json:"schemaType,omitempty"`
	Schema     string      `json:"schema"`
	References []Reference `json:"references,omitempty"`
}

func (s schema) key() string {
	b, _ := json.Marshal(s)
	return string(b)
}

type version struct {
	id      int
	version int
}

// Server is the test registry. Create it with [New]; it is safe for
// concurrent use.
type Server struct {
	tlsConfig *tls.Config
	user      string
	pass      string

	// mu guards every field below.
	mu       sync.Mutex
	addr     string
	ln       net.Listener
	srv      *http.Server
	schemas  []schema       // by id-1
	byKey    map[string]int // schema.key() → id
	subjects map[string][]version
	order    []string          // subjects in order of creation
	config   map[string]string // subject → compatibility level ("" key: global)
	status   int               // when non-zero, every request gets this status

	idGets atomic.Int64 // GET /schemas/ids/{id} requests served
	total  atomic.Int64 // requests served
}

// Option configures a Server.
type Option func(*Server)

// WithTLS serves HTTPS with cfg (which must hold a certificate).
func WithTLS(cfg *tls.Config) Option { return func(s *Server) { s.tlsConfig = cfg } }

// WithBasicAuth requires HTTP basic authentication with user and pass on
// every request (401 with error code 401 otherwise).
func WithBasicAuth(user, pass string) Option {
	return func(s *Server) { s.user, s.pass = user, pass }
}

// New starts a registry on a free loopback port. Close it when done.
func New(opts ...Option) (*Server, error) {
	s := &Server{byKey: map[string]int{}, subjects: map[string][]version{}, config: map[string]string{"": "BACKWARD"}}
	for _, o := range opts {
		o(s)
	}
	if err := s.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("srtest: listen on %s: %w", addr, err)
	}
	if s.tlsConfig != nil {
		ln = tls.NewListener(ln, s.tlsConfig)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve)}
	s.mu.Lock()
	s.ln, s.srv, s.addr = ln, srv, ln.Addr().String()
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }() // owned by the Server: ends when Stop or Close closes srv
	return nil
}

// URL is the registry's base URL (http:// or https://), stable across
// Stop and Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	scheme := "http"
	if s.tlsConfig != nil {
		scheme = "https"
	}
	return scheme + "://" + s.addr
}

// Stop closes the listener and every open connection: clients get
// "connection refused" until Start. The schemas are kept. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv, s.ln = nil, nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Start listens again on the address the server had (after Stop). Starting
// a running server does nothing.
func (s *Server) Start() error {
	s.mu.Lock()
	running, addr := s.srv != nil, s.addr
	s.mu.Unlock()
	if running {
		return nil
	}
	return s.listen(addr)
}

// Close stops the server for good.
func (s *Server) Close() { s.Stop() }

// FailWith makes every request answer with HTTP status code (e.g. 503, a
// registry that is up but failing); 0 restores normal service.
func (s *Server) FailWith(code int) {
	s.mu.Lock()
	s.status = code
	s.mu.Unlock()
}

// IDLookups is the number of GET /schemas/ids/{id} requests answered so far
// (to check a client's cache).
func (s *Server) IDLookups() int64 { return s.idGets.Load() }

// Requests is the number of requests answered so far.
func (s *Server) Requests() int64 { return s.total.Load() }

// Register registers a schema of type typ (Avro, Protobuf or JSON) under
// subject and returns its id, like POST /subjects/{subject}/versions.
func (s *Server) Register(subject, typ, text string, refs ...Reference) (int, error) {
	if typ == Avro {
		typ = ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.register(subject, schema{Type: typ, Schema: text, References: refs})
}

// register must be called with mu held.
func (s *Server) register(subject string, sc schema) (int, error) {
	if sc.Schema == "" {
		return 0, errors.New("empty schema")
	}
	switch sc.Type {
	case "", Protobuf, JSON:
	default:
		return 0, fmt.Errorf("unknown schema type %q", sc.Type)
	}
	for _, r := range sc.References {
		if _, ok := s.version(r.Subject, strconv.Itoa(r.Version)); !ok {
			return 0, fmt.Errorf("reference %q: subject %q has no version %d", r.Name, r.Subject, r.Version)
		}
	}
	k := sc.key()
	id, ok := s.byKey[k]
	if !ok {
		s.schemas = append(s.schemas, sc)
		id = len(s.schemas)
		s.byKey[k] = id
	}
	vs, exists := s.subjects[subject]
	for _, v := range vs {
		if v.id == id {
			return id, nil
		}
	}
	if !exists {
		s.order = append(s.order, subject)
	}
	s.subjects[subject] = append(vs, version{id: id, version: len(vs) + 1})
	return id, nil
}

// version finds a subject's version ("latest" or a number); mu held.
func (s *Server) version(subject, v string) (version, bool) {
	vs := s.subjects[subject]
	if len(vs) == 0 {
		return version{}, false
	}
	if v == "latest" || v == "-1" {
		return vs[len(vs)-1], true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return version{}, false
	}
	for _, x := range vs {
		if x.version == n {
			return x, true
		}
	}
	return version{}, false
}

type apiError struct {
	status int
	code   int
	msg    string
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.total.Add(1)
	if s.user != "" {
		u, p, ok := r.BasicAuth()
		if !ok || u != s.user || p != s.pass {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error_code": 401, "message": "Unauthorized"})
			return
		}
	}
	s.mu.Lock()
	status := s.status
	s.mu.Unlock()
	if status != 0 {
		writeJSON(w, status, map[string]any{"error_code": status * 100, "message": "srtest: failing on purpose"})
		return
	}
	v, aerr := s.route(r)
	if aerr != nil {
		writeJSON(w, aerr.status, map[string]any{"error_code": aerr.code, "message": aerr.msg})
		return
	}
	if text, ok := v.(rawText); ok {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(text))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

type rawText string

func notFound(code int, format string, a ...any) *apiError {
	return &apiError{status: http.StatusNotFound, code: code, msg: fmt.Sprintf(format, a...)}
}

func badRequest(format string, a ...any) *apiError {
	return &apiError{status: http.StatusUnprocessableEntity, code: 42201, msg: fmt.Sprintf(format, a...)}
}

func (s *Server) subjectVersion(subject string, v version) map[string]any {
	sc := s.schemas[v.id-1]
	m := map[string]any{"subject": subject, "version": v.version, "id": v.id, "schema": sc.Schema}
	if sc.Type != "" {
		m["schemaType"] = sc.Type
	}
	if len(sc.References) > 0 {
		m["references"] = sc.References
	}
	return m
}

// route answers one request; it returns the JSON value to send or an error.
func (s *Server) route(r *http.Request) (any, *apiError) {
	parts := strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/")
	for i, p := range parts {
		if u, err := url.PathUnescape(p); err == nil {
			parts[i] = u
		}
	}
	get, post, put := r.Method == http.MethodGet, r.Method == http.MethodPost, r.Method == http.MethodPut
	var body schema
	if post {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return nil, &apiError{status: http.StatusBadRequest, code: 400, msg: "bad body: " + err.Error()}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(parts)
	switch {
	case get && n == 2 && parts[0] == "schemas" && parts[1] == "types":
		return []string{Avro, JSON, Protobuf}, nil
	case get && n >= 3 && parts[0] == "schemas" && parts[1] == "ids":
		id, err := strconv.Atoi(parts[2])
		if err != nil || id < 1 || id > len(s.schemas) {
			return nil, notFound(40403, "Schema %s not found", parts[2])
		}
		switch {
		case n == 3:
			s.idGets.Add(1)
			sc := s.schemas[id-1]
			return sc, nil
		case n == 4 && parts[3] == "versions":
			out := []map[string]any{}
			for _, sub := range s.order {
				for _, v := range s.subjects[sub] {
					if v.id == id {
						out = append(out, map[string]any{"subject": sub, "version": v.version})
					}
				}
			}
			return out, nil
		case n == 4 && parts[3] == "subjects":
			out := []string{}
			for _, sub := range s.order {
				if slices.ContainsFunc(s.subjects[sub], func(v version) bool { return v.id == id }) {
					out = append(out, sub)
				}
			}
			return out, nil
		}
	case get && n == 1 && parts[0] == "subjects":
		return slices.Clone(s.order), nil
	case parts[0] == "subjects" && n >= 2:
		sub := parts[1]
		switch {
		case post && n == 2: // look up
			sc := body
			if sc.Type == Avro {
				sc.Type = ""
			}
			if _, ok := s.subjects[sub]; !ok {
				return nil, notFound(40401, "Subject '%s' not found.", sub)
			}
			id, ok := s.byKey[sc.key()]
			if ok {
				for _, v := range s.subjects[sub] {
					if v.id == id {
						return s.subjectVersion(sub, v), nil
					}
				}
			}
			return nil, notFound(40403, "Schema not found")
		case post && n == 3 && parts[2] == "versions":
			sc := body
			if sc.Type == Avro {
				sc.Type = ""
			}
			id, err := s.register(sub, sc)
			if err != nil {
				return nil, badRequest("%v", err)
			}
			return map[string]int{"id": id}, nil
		case get && n == 3 && parts[2] == "versions":
			vs := s.subjects[sub]
			if len(vs) == 0 {
				return nil, notFound(40401, "Subject '%s' not found.", sub)
			}
			out := make([]int, len(vs))
			for i, v := range vs {
				out[i] = v.version
			}
			return out, nil
		case get && (n == 4 || (n == 5 && parts[4] == "schema")) && parts[2] == "versions":
			if _, ok := s.subjects[sub]; !ok {
				return nil, notFound(40401, "Subject '%s' not found.", sub)
			}
			v, ok := s.version(sub, parts[3])
			if !ok {
				return nil, notFound(40402, "Version %s not found.", parts[3])
			}
			if n == 5 {
				return rawText(s.schemas[v.id-1].Schema), nil
			}
			return s.subjectVersion(sub, v), nil
		}
	case post && n == 5 && parts[0] == "compatibility" && parts[1] == "subjects" && parts[3] == "versions":
		return map[string]bool{"is_compatible": true}, nil
	case parts[0] == "config" && n <= 2:
		sub := ""
		if n == 2 {
			sub = parts[1]
		}
		if get {
			lvl, ok := s.config[sub]
			if !ok {
				return nil, notFound(40408, "Subject '%s' does not have subject-level compatibility configured", sub)
			}
			return map[string]string{"compatibilityLevel": lvl}, nil
		}
		if put {
			var c struct {
				Compatibility string `json:"compatibility"`
			}
			if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Compatibility == "" {
				return nil, badRequest("bad compatibility body")
			}
			s.config[sub] = strings.ToUpper(c.Compatibility)
			return map[string]string{"compatibility": s.config[sub]}, nil
		}
	case get && parts[0] == "mode" && n <= 2:
		return map[string]string{"mode": "READWRITE"}, nil
	}
	return nil, notFound(404, "srtest: no route for %s %s", r.Method, r.URL.Path)
}
