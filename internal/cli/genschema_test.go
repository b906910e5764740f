package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/generator"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/internal/srtest"
)

// TestDemoSchemaFiles: the schema files the Avro and Protobuf demos read
// (examples/schemas) are the generator's schemas, byte for byte.
func TestDemoSchemaFiles(t *testing.T) {
	t.Parallel()
	for f, want := range map[generator.Format]string{generator.Avro: generator.AvroSchema, generator.Protobuf: generator.ProtoSchema} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "schemas", demoSchemaFile(f)))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != want {
			t.Errorf("examples/schemas/%s differs from the generator's %s schema: write generator.%sSchema to it", demoSchemaFile(f), f, map[generator.Format]string{generator.Avro: "Avro", generator.Protobuf: "Proto"}[f])
		}
	}
}

// decodeAll decodes n of gen's messages with a decoder of cfg and returns
// the events (time, user hash, bins, groups) of each; it fails the test on
// any drop.
func decodeAll(t *testing.T, cfg *config.Config, gen *generator.Generator, n int) [][]int64 {
	t.Helper()
	dec, err := decode.New(cfg, siphash.Key{K0: 1, K1: 2})
	if err != nil {
		t.Fatalf("decoder of %s: %v", cfg.Events.Format, err)
	}
	ev := dec.NewEvent()
	out := make([][]int64, n)
	for i := range n {
		m := gen.Message(int64(i))
		if r := dec.DecodeRecord(&decode.Record{Key: m.Key, Value: m.Value, TimestampMs: -1}, ev); r != decode.ReasonNone {
			t.Fatalf("%s: generator message %d dropped as %s (% x)", cfg.Events.Format, i, r, m.Value)
		}
		row := []int64{ev.TimeMs, int64(ev.User)}
		for h := range ev.Bins {
			if ev.Drops[h] != decode.ReasonNone {
				t.Fatalf("%s: message %d: histogram %d part dropped as %s", cfg.Events.Format, i, h, ev.Drops[h])
			}
			row = append(row, int64(ev.Bins[h]), int64(ev.Groups[h]))
		}
		out[i] = row
	}
	return out
}

// TestDemoFormats: the Avro and Protobuf demos (examples/quickstart-avro.yaml
// and -protobuf.yaml, run from the repository's root as documented) give
// the generator the schema id of their events.schema_files entry, and the
// stage's decoder reads every generated event exactly as it reads the same
// event in the JSON demo: the same time, user, bins and groups.
func TestDemoFormats(t *testing.T) {
	t.Chdir(filepath.Join("..", "..")) // the examples' paths are relative to the repository's root
	const n = 3000
	load := func(name string) *config.Config {
		cfg, err := config.Load(filepath.Join("examples", name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return cfg
	}
	jsonGen, err := generator.New(generator.Config{Seed: 5, Users: 500})
	if err != nil {
		t.Fatal(err)
	}
	want := decodeAll(t, load("quickstart.yaml"), jsonGen, n)
	for _, name := range []string{"quickstart-avro.yaml", "quickstart-protobuf.yaml"} {
		cfg := load(name)
		f, id, err := generatorFormat(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f.String() != cfg.Events.Format || id != 1 {
			t.Errorf("%s: the generator writes %s under schema id %d, want %s under 1", name, f, id, cfg.Events.Format)
		}
		gen, err := generator.New(generator.Config{Seed: 5, Users: 500, Format: f, SchemaID: id, Start: jsonGen.Start()})
		if err != nil {
			t.Fatal(err)
		}
		// What `stage run` and `stage generate` build (newGenerator) writes
		// that format under that id, and it decodes.
		runGen, err := newGenerator(context.Background(), cfg, generator.Config{})
		if err != nil {
			t.Fatalf("%s: newGenerator: %v", name, err)
		}
		if c := runGen.Config(); c.Format != f || c.SchemaID != id {
			t.Errorf("%s: newGenerator writes %s under id %d, want %s under %d", name, c.Format, c.SchemaID, f, id)
		}
		decodeAll(t, cfg, runGen, 200)
		got := decodeAll(t, cfg, gen, n)
		for i := range got {
			if len(got[i]) != len(want[i]) {
				t.Fatalf("%s: message %d: %v, JSON %v", name, i, got[i], want[i])
			}
			for j := range got[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("%s: message %d decodes to %v, the JSON demo's to %v", name, i, got[i], want[i])
				}
			}
		}
	}
}

// TestGeneratorRegistersItsSchema: with events.schema_registry.url set the
// generator registers its schema under <input_topic>-value and writes the
// id the registry answers (the same id again at a second start), and the
// stage's decoder, fetching that id from the registry, reads its events.
func TestGeneratorRegistersItsSchema(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"avro", "protobuf"} {
		reg, err := srtest.New()
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		// Another schema first, so that the generator's id is not 1 by chance.
		if _, err := reg.Register("other-value", srtest.Avro, `"string"`); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(raw, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		cfg.Events.Format = format
		cfg.Events.SchemaRegistry.URL = reg.URL()
		var ids []int32
		for range 2 {
			f, id, err := generatorFormat(context.Background(), cfg)
			if err != nil {
				t.Fatalf("%s: %v", format, err)
			}
			if f.String() != format {
				t.Errorf("format %s, want %s", f, format)
			}
			ids = append(ids, id)
		}
		if ids[0] != 2 || ids[1] != 2 {
			t.Errorf("%s: the generator wrote schema ids %v, want the registered id 2 both times", format, ids)
		}
		gen, err := generator.New(generator.Config{Seed: 9, Format: map[string]generator.Format{"avro": generator.Avro, "protobuf": generator.Protobuf}[format], SchemaID: ids[0]})
		if err != nil {
			t.Fatal(err)
		}
		decodeAll(t, cfg, gen, 500)
		if reg.IDLookups() < 1 {
			t.Errorf("%s: the decoder never fetched the schema from the registry", format)
		}
	}
}

// TestGeneratorFormatErrors: a schema-encoded format without a registry and
// without the generator's schema among events.schema_files is refused with
// what to set; an unreachable registry is an error, not a guess.
func TestGeneratorFormatErrors(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{}
	cfg.Kafka.InputTopic = "events"
	cfg.Events.Format = "avro"
	other := filepath.Join(t.TempDir(), "other.avsc")
	if err := os.WriteFile(other, []byte(`"string"`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Events.SchemaFiles = []config.SchemaFile{{ID: 3, File: other}}
	if _, _, err := generatorFormat(context.Background(), cfg); err == nil {
		t.Error("no error without the generator's schema among events.schema_files")
	}
	reg, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	url := reg.URL()
	reg.Close()
	cfg.Events.SchemaRegistry.URL = url
	cfg.Events.SchemaRegistry.Timeout = config.Duration(200 * 1e6)
	if _, _, err := generatorFormat(context.Background(), cfg); err == nil {
		t.Error("no error with the registry down")
	}
	cfg.Events.Format = "json"
	if f, id, err := generatorFormat(context.Background(), cfg); err != nil || f != generator.JSON || id != 0 {
		t.Errorf("json: %v %d %v", f, id, err)
	}
}
