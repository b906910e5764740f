package decode

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

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
