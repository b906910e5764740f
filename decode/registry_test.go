package decode

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/srtest"
)

const regV1 = `{"type":"record","name":"E","fields":[{"name":"user","type":{"type":"record","name":"U","fields":[{"name":"id","type":"string"}]}},{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"page","type":"string"}]}`

// regV2 evolves regV1 compatibly: a new field first, the page now a union.
const regV2 = `{"type":"record","name":"E","fields":[{"name":"referrer","type":"string","default":""},{"name":"user","type":{"type":"record","name":"U","fields":[{"name":"id","type":"string"}]}},{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},{"name":"page","type":["null","string"],"default":null}]}`

func registryConfig(url string) *config.Config {
	return &config.Config{
		Events: config.Events{Format: "avro", TimeField: "ts", UserField: "user.id",
			SchemaRegistry: config.SchemaRegistry{URL: url, Username: "stage", Password: "pw", Timeout: config.Duration(2 * time.Second)}},
		Histograms: []config.Histogram{{Name: "pages", Field: "page", Bins: []string{"home", "cart"}}},
	}
}

// TestRegistry: schemas are fetched by id once and cached; a new id that
// appears mid-stream (a new compatible version) is fetched and read without
// a restart; an id the registry does not know is unknown_schema_id (and
// not asked again at once); a registry that cannot be reached, or fails,
// is a hold, never a drop, and a cached id keeps decoding meanwhile.
func TestRegistry(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New(srtest.WithBasicAuth("stage", "pw"))
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	id1, err := reg.Register("events-value", srtest.Avro, regV1)
	if err != nil {
		t.Fatal(err)
	}
	d := mustNew(registryConfig(reg.URL()))
	ev := d.NewEvent()
	v1 := avro.MustParse(regV1)
	rec1 := wire(uint32(id1), mustAvro(t, v1, map[string]any{"user": map[string]any{"id": "u1"}, "ts": t0, "page": "cart"}))
	for range 3 {
		want{timeMs: t0.UnixMilli(), user: "u1", bins: []int32{1}}.check(t, "v1", d.Decode(rec1, ev), ev)
	}
	if n := reg.IDLookups(); n != 1 {
		t.Errorf("%d lookups for one id, want 1 (cached)", n)
	}

	// Evolution: v2 registered while the stage runs.
	id2, err := reg.Register("events-value", srtest.Avro, regV2)
	if err != nil || id2 == id1 {
		t.Fatalf("v2: id %d, %v", id2, err)
	}
	v2 := avro.MustParse(regV2)
	rec2 := wire(uint32(id2), mustAvro(t, v2, map[string]any{"referrer": "x", "user": map[string]any{"id": "u2"}, "ts": t0, "page": "home"}))
	want{timeMs: t0.UnixMilli(), user: "u2", bins: []int32{0}}.check(t, "v2", d.Decode(rec2, ev), ev)
	want{timeMs: t0.UnixMilli(), user: "u1", bins: []int32{1}}.check(t, "v1 after v2", d.Decode(rec1, ev), ev)
	if n := reg.IDLookups(); n != 2 {
		t.Errorf("%d lookups for two ids, want 2", n)
	}

	// An unknown id: the registry says 404.
	unknown := wire(99, mustAvro(t, v1, map[string]any{"user": map[string]any{"id": "u1"}, "ts": t0, "page": "cart"}))
	want{reason: ReasonUnknownSchemaID}.check(t, "unknown id", d.Decode(unknown, ev), ev)
	before := reg.Requests()
	want{reason: ReasonUnknownSchemaID}.check(t, "unknown id again", d.Decode(unknown, ev), ev)
	if reg.Requests() != before {
		t.Error("an unknown id was asked again at once")
	}
	// ... asked again once unknownRetry has passed.
	d.schemas.now = func() time.Time { return time.Now().Add(unknownRetry + time.Second) }
	want{reason: ReasonUnknownSchemaID}.check(t, "unknown id later", d.Decode(unknown, ev), ev)
	if reg.Requests() == before {
		t.Error("an unknown id was never asked again")
	}
	d.schemas.now = time.Now

	// The registry goes away: a new id holds, a cached one decodes.
	id3, err := reg.Register("events-value", srtest.Avro, strings.Replace(regV2, `"default":""`, `"default":"-"`, 1))
	if err != nil {
		t.Fatal(err)
	}
	rec3 := wire(uint32(id3), mustAvro(t, v2, map[string]any{"referrer": "y", "user": map[string]any{"id": "u3"}, "ts": t0, "page": "cart"}))
	reg.Stop()
	r := d.Decode(rec3, ev)
	if r != ReasonSchemaUnavailable || !r.Hold() || ev.Err == nil {
		t.Fatalf("registry down: %v (hold %v), err %v; want schema_registry_unavailable", r, r.Hold(), ev.Err)
	}
	want{timeMs: t0.UnixMilli(), user: "u1", bins: []int32{1}}.check(t, "cached id, registry down", d.Decode(rec1, ev), ev)
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	reg.FailWith(http.StatusServiceUnavailable)
	if r := d.Decode(rec3, ev); !r.Hold() {
		t.Fatalf("registry answering 503: %v, want a hold", r)
	}
	reg.FailWith(0)
	want{timeMs: t0.UnixMilli(), user: "u3", bins: []int32{1}}.check(t, "registry back", d.Decode(rec3, ev), ev)
	if ev.Err != nil {
		t.Errorf("Err %v after a decoded record", ev.Err)
	}

	// Wrong credentials are not bad input either: a hold.
	bad := registryConfig(reg.URL())
	bad.Events.SchemaRegistry.Password = "wrong"
	d = mustNew(bad)
	if r := d.Decode(rec1, ev); !r.Hold() {
		t.Fatalf("wrong password: %v, want a hold", r)
	}
	// ... that the caller can tell from an outage (consume logs it as
	// refused credentials, at error level).
	if !RegistryAuthRefused(ev.Err) {
		t.Errorf("wrong password: RegistryAuthRefused(%v) = false", ev.Err)
	}
	for code, want := range map[int]bool{401: true, 403: true, 503: false, 500: false} {
		if got := RegistryAuthRefused(fmt.Errorf("fetch: %w", &sr.ResponseError{StatusCode: code})); got != want {
			t.Errorf("RegistryAuthRefused(%d) = %v, want %v", code, got, want)
		}
	}
}

// TestRegistryTypeMismatch: an id naming a protobuf schema under format
// avro is unknown_schema_id, as is a schema that does not parse.
func TestRegistryTypeMismatch(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	pid, _ := reg.Register("p", srtest.Protobuf, `syntax = "proto3"; message M { string id = 1; }`)
	bid, _ := reg.Register("b", srtest.Avro, `{"type":"record","name":"X","fields":[{"name":"a","type":"nonsense"}]}`)
	cfg := registryConfig(reg.URL())
	cfg.Events.SchemaRegistry.Username, cfg.Events.SchemaRegistry.Password = "", ""
	d := mustNew(cfg)
	ev := d.NewEvent()
	for _, id := range []int{pid, bid} {
		want{reason: ReasonUnknownSchemaID}.check(t, "mismatch", d.Decode(wire(uint32(id), []byte{2, 'u'}), ev), ev)
	}
}

// TestRegistryConcurrentFetch: workers meeting a new id at once fetch it
// once.
func TestRegistryConcurrentFetch(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	id, _ := reg.Register("events-value", srtest.Avro, regV1)
	cfg := registryConfig(reg.URL())
	cfg.Events.SchemaRegistry.Username, cfg.Events.SchemaRegistry.Password = "", ""
	d := mustNew(cfg)
	var fetches atomic.Int32
	d.schemas.fetchHook = func(int) { fetches.Add(1); time.Sleep(20 * time.Millisecond) }
	rec := wire(uint32(id), mustAvro(t, avro.MustParse(regV1), map[string]any{"user": map[string]any{"id": "u"}, "ts": t0, "page": "home"}))
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			ev := d.NewEvent()
			if r := d.Decode(rec, ev); r != ReasonNone {
				errs <- errors.New(r.String())
				return
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("%d fetches, want 1", n)
	}
}

// TestRegistrySharedAcrossDecoders: the decoders of one configuration (one
// per input partition) share their schemas: a new id is fetched once.
func TestRegistrySharedAcrossDecoders(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	id, _ := reg.Register("events-value", srtest.Avro, regV1)
	cfg := registryConfig(reg.URL())
	cfg.Events.SchemaRegistry.Username, cfg.Events.SchemaRegistry.Password = "", ""
	rec := wire(uint32(id), mustAvro(t, avro.MustParse(regV1), map[string]any{"user": map[string]any{"id": "u"}, "ts": t0, "page": "home"}))
	for p := range 4 {
		d := mustNew(cfg)
		if p > 0 {
			var err error
			if d, err = d.WithPartitionCheck(PartitionerMurmur2, 0, 1); err != nil {
				t.Fatal(err)
			}
		}
		ev := d.NewEvent()
		want{timeMs: t0.UnixMilli(), user: "u", bins: []int32{0}}.check(t, "partition decoder", d.Decode(rec, ev), ev)
	}
	if n := reg.IDLookups(); n != 1 {
		t.Errorf("%d lookups by 4 decoders of one config, want 1", n)
	}
}

// TestRegistryReferences: a protobuf schema importing another registered
// one, and an Avro schema using a named type of another, are compiled with
// their references (GET /subjects/{s}/versions/{v}); a new protobuf version
// mid-stream is read without a restart.
func TestRegistryReferences(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if _, err := reg.Register("geo", srtest.Protobuf, "syntax = \"proto3\";\npackage shop.v1;\nmessage Geo { string country = 1; }\n"); err != nil {
		t.Fatal(err)
	}
	ref := srtest.Reference{Name: "shop/geo.proto", Subject: "geo", Version: 1}
	v1 := "syntax = \"proto3\";\npackage shop.v1;\nimport \"shop/geo.proto\";\nmessage E { string user = 1; int64 ts = 2; Geo geo = 3; }\n"
	v2 := "syntax = \"proto3\";\npackage shop.v1;\nimport \"shop/geo.proto\";\nmessage Other { string x = 1; }\nmessage E { string user = 1; int64 ts = 2; Geo geo = 3; string page = 4; }\n"
	id1, err := reg.Register("events-value", srtest.Protobuf, v1, ref)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{
		Events:     config.Events{Format: "protobuf", TimeField: "ts", UserField: "user", SchemaRegistry: config.SchemaRegistry{URL: reg.URL()}},
		Histograms: []config.Histogram{{Name: "c", Field: "geo.country", Bins: []string{"US", "DE"}}},
	}
	d := mustNew(cfg)
	ev := d.NewEvent()
	// E{user: "u", ts: 5, geo: {country: "DE"}} by hand: 0a 01 'u' 10 05 1a 04 (0a 02 'D' 'E').
	payload := []byte{0x0a, 0x01, 'u', 0x10, 0x05, 0x1a, 0x04, 0x0a, 0x02, 'D', 'E'}
	want{timeMs: 5, user: "u", bins: []int32{1}}.check(t, "v1 with a reference", d.Decode(confluent(t, id1, []int{0}, payload), ev), ev)
	id2, err := reg.Register("events-value", srtest.Protobuf, v2, ref)
	if err != nil {
		t.Fatal(err)
	}
	// In v2, E is the second message: index [1].
	want{timeMs: 5, user: "u", bins: []int32{1}}.check(t, "v2 mid-stream", d.Decode(confluent(t, id2, []int{1}, payload), ev), ev)
	want{reason: ReasonMissingTime}.check(t, "v2, index of Other", d.Decode(confluent(t, id2, []int{0}, payload), ev), ev)

	// Avro: a record type defined in another registered schema.
	if _, err := reg.Register("geo-avro", srtest.Avro, `{"type":"record","name":"Geo","namespace":"shop","fields":[{"name":"country","type":"string"}]}`); err != nil {
		t.Fatal(err)
	}
	aid, err := reg.Register("events-avro", srtest.Avro,
		`{"type":"record","name":"E","namespace":"shop","fields":[{"name":"user","type":"string"},{"name":"ts","type":"long"},{"name":"geo","type":"shop.Geo"}]}`,
		srtest.Reference{Name: "shop.Geo", Subject: "geo-avro", Version: 1})
	if err != nil {
		t.Fatal(err)
	}
	acfg := &config.Config{
		Events:     config.Events{Format: "avro", TimeField: "ts", UserField: "user", SchemaRegistry: config.SchemaRegistry{URL: reg.URL()}},
		Histograms: []config.Histogram{{Name: "c", Field: "geo.country", Bins: []string{"US", "DE"}}},
	}
	ad := mustNew(acfg)
	// {user: "u", ts: 5, geo: {country: "US"}}: 02 'u' 0a 04 'U' 'S'.
	want{timeMs: 5, user: "u", bins: []int32{0}}.check(t, "avro with a reference", ad.Decode(wire(uint32(aid), []byte{0x02, 'u', 0x0a, 0x04, 'U', 'S'}), ev), ev)
}

// TestRegistryUnknownIDStorm: records of many distinct ids the registry
// does not know cost one lookup each, are remembered in a bounded set, do
// not grow the schema cache, and are rate limited (a lookup over the limit
// waits and is counted).
func TestRegistryUnknownIDStorm(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	cfg := registryConfig(reg.URL())
	cfg.Events.SchemaRegistry.Username, cfg.Events.SchemaRegistry.Password = "", ""
	d := mustNew(cfg)
	s := d.schemas
	s.mu.Lock()
	s.rate, s.burst, s.tokens, s.maxUnknown = 1e9, 1e9, 1e9, 500
	s.mu.Unlock()
	ev := d.NewEvent()
	const n = 3000
	for id := 1000; id < 1000+n; id++ {
		want{reason: ReasonUnknownSchemaID}.check(t, "garbage id", d.Decode(wire(uint32(id), []byte{2, 'u'}), ev), ev)
	}
	st := d.SchemaStats()
	if st.Lookups != n || st.UnknownIDs != 500 || len(*s.resolved.Load()) != 0 {
		t.Fatalf("after %d unknown ids: %+v, %d cached schemas; want %d lookups, 500 remembered, none cached", n, st, len(*s.resolved.Load()), n)
	}
	// The last 500 are remembered: no new lookup.
	want{reason: ReasonUnknownSchemaID}.check(t, "remembered id", d.Decode(wire(uint32(1000+n-1), []byte{2, 'u'}), ev), ev)
	if got := d.SchemaStats().Lookups; got != n {
		t.Fatalf("a remembered id was looked up again (%d lookups)", got)
	}

	// The rate limit: a burst of 2, then 20 lookups per second.
	s.mu.Lock()
	s.rate, s.burst, s.tokens = 20, 2, 2
	s.mu.Unlock()
	start := time.Now()
	for id := 9000; id < 9006; id++ {
		d.Decode(wire(uint32(id), []byte{2, 'u'}), ev)
	}
	if el, st := time.Since(start), d.SchemaStats(); st.Delayed != 4 || el < 150*time.Millisecond {
		t.Fatalf("6 lookups at a burst of 2 and 20/s: %+v in %v; want 4 delayed, ≥ 150 ms", st, el)
	}
}

// TestRegistrySchemaNotes: the observer hears, once per resolved id, which
// configured fields the schema lacks (a renamed user field) and which go
// through a list.
func TestRegistrySchemaNotes(t *testing.T) {
	t.Parallel()
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	renamed := `{"type":"record","name":"E","fields":[{"name":"account","type":{"type":"record","name":"U","fields":[{"name":"id","type":"string"}]}},{"name":"ts","type":"long"},{"name":"page","type":{"type":"array","items":"string"}}]}`
	id, _ := reg.Register("events-value", srtest.Avro, renamed)
	cfg := registryConfig(reg.URL())
	cfg.Events.SchemaRegistry.Username, cfg.Events.SchemaRegistry.Password = "", ""
	cfg.Histograms[0].Field = "page.name"
	d := mustNew(cfg)
	var notes []SchemaNote
	var mu sync.Mutex
	d.OnSchema(func(n SchemaNote) { mu.Lock(); notes = append(notes, n); mu.Unlock() })
	ev := d.NewEvent()
	rec := wire(uint32(id), mustAvro(t, avro.MustParse(renamed), map[string]any{"account": map[string]any{"id": "u"}, "ts": int64(1), "page": []string{"x"}}))
	for range 3 {
		want{reason: ReasonMissingUser}.check(t, "renamed user", d.Decode(rec, ev), ev)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notes) != 1 || notes[0].ID != id || !slices.Equal(notes[0].Unresolved, []string{"user.id"}) || !slices.Equal(notes[0].ThroughList, []string{"page.name"}) {
		t.Fatalf("notes %+v; want one for id %d: unresolved [user.id], through a list [page.name]", notes, id)
	}
}
