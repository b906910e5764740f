package cli

// The demo generator's schema-encoded formats (issue 24, item 6): with
// events.format avro or protobuf the generator writes its page views in the
// Confluent wire format under a schema id, which comes from where the
// stage reads its schemas:
//
//   - events.schema_registry.url set: the generator registers its schema
//     (generator.AvroSchema or ProtoSchema) under the subject
//     "<kafka.input_topic>-value" (the registry answers the existing id
//     when it is registered already) and writes that id;
//   - else events.schema_files: the entry whose file holds exactly the
//     generator's schema (examples/schemas/ ships both), and its id.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/generator"
)

// generatorFormat is the generator's format and schema id for cfg (0 for
// json).
func generatorFormat(ctx context.Context, cfg *config.Config) (generator.Format, int32, error) {
	f, err := generator.ParseFormat(cfg.Events.Format)
	if err != nil || f == generator.JSON {
		return f, 0, err
	}
	text, typ := generator.AvroSchema, sr.TypeAvro
	if f == generator.Protobuf {
		text, typ = generator.ProtoSchema, sr.TypeProtobuf
	}
	if reg := cfg.Events.SchemaRegistry; reg.URL != "" {
		opts := []sr.ClientOpt{sr.URLs(reg.URL)}
		if reg.Username != "" || reg.Password != "" {
			opts = append(opts, sr.BasicAuth(reg.Username, reg.Password))
		}
		tlsCfg, err := reg.TLS.ClientConfig()
		if err != nil {
			return f, 0, fmt.Errorf("events.schema_registry.tls: %w", err)
		}
		timeout := reg.Timeout.D()
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		hc := &http.Client{Timeout: timeout}
		if tlsCfg != nil {
			hc.Transport = &http.Transport{TLSClientConfig: tlsCfg}
		}
		opts = append(opts, sr.HTTPClient(hc))
		cl, err := sr.NewClient(opts...)
		if err != nil {
			return f, 0, fmt.Errorf("events.schema_registry: %w", err)
		}
		subject := cfg.Kafka.InputTopic + "-value"
		ctx, cancel := context.WithTimeout(ctx, 3*timeout)
		defer cancel()
		id, err := cl.RegisterSchema(ctx, subject, sr.Schema{Schema: text, Type: typ}, -1, -1)
		if err != nil {
			return f, 0, fmt.Errorf("register the generator's %s schema under subject %q at %s: %w", f, subject, reg.URL, err)
		}
		return f, int32(id), nil
	}
	for _, sf := range cfg.Events.SchemaFiles {
		b, err := os.ReadFile(sf.File)
		if err != nil {
			continue // the stage's own check of events.schema_files says why
		}
		if strings.TrimSpace(string(b)) == strings.TrimSpace(text) {
			return f, int32(sf.ID), nil
		}
	}
	return f, 0, fmt.Errorf("the generator writes %s under a schema id: set events.schema_registry.url, or list the generator's schema (examples/schemas/%s) in events.schema_files", f, demoSchemaFile(f))
}

// demoSchemaFile is the shipped file of the generator's schema of f.
func demoSchemaFile(f generator.Format) string {
	if f == generator.Protobuf {
		return "pageview-demo.proto"
	}
	return "pageview-demo.avsc"
}
