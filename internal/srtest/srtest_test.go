package srtest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

const avroV1 = `{"type":"record","name":"E","fields":[{"name":"u","type":"string"}]}`
const avroV2 = `{"type":"record","name":"E","fields":[{"name":"u","type":"string"},{"name":"c","type":"string","default":""}]}`

// TestFranzGoClient drives the server with franz-go's sr client: register
// (CreateSchema also reads /schemas/ids/{id}/versions and the subject
// version), read by id, list subjects and versions.
func TestFranzGoClient(t *testing.T) {
	t.Parallel()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := sr.NewClient(sr.URLs(s.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ss, err := cl.CreateSchema(ctx, "events-value", sr.Schema{Schema: avroV1})
	if err != nil {
		t.Fatal(err)
	}
	if ss.ID != 1 || ss.Version != 1 || ss.Subject != "events-value" {
		t.Fatalf("created %+v, want id 1 version 1", ss)
	}
	ss2, err := cl.CreateSchema(ctx, "events-value", sr.Schema{Schema: avroV2})
	if err != nil || ss2.ID != 2 || ss2.Version != 2 {
		t.Fatalf("second version: %+v, %v", ss2, err)
	}
	again, err := cl.CreateSchema(ctx, "events-value", sr.Schema{Schema: avroV1})
	if err != nil || again.ID != 1 || again.Version != 1 {
		t.Fatalf("re-registering v1: %+v, %v", again, err)
	}
	proto := "syntax = \"proto3\";\nmessage E { string u = 1; }\n"
	ps, err := cl.CreateSchema(ctx, "other-value", sr.Schema{Schema: proto, Type: sr.TypeProtobuf})
	if err != nil || ps.ID != 3 {
		t.Fatalf("protobuf: %+v, %v", ps, err)
	}
	got, err := cl.SchemaByID(ctx, 3)
	if err != nil || got.Type != sr.TypeProtobuf || got.Schema != proto {
		t.Fatalf("SchemaByID(3) = %+v, %v", got, err)
	}
	got, err = cl.SchemaByID(ctx, 2)
	if err != nil || got.Type != sr.TypeAvro || got.Schema != avroV2 {
		t.Fatalf("SchemaByID(2) = %+v, %v", got, err)
	}
	_, err = cl.SchemaByID(ctx, 9)
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 404 || re.ErrorCode != 40403 {
		t.Fatalf("SchemaByID(9): %v, want 404 40403", err)
	}
	subs, err := cl.Subjects(ctx)
	if err != nil || strings.Join(subs, ",") != "events-value,other-value" {
		t.Fatalf("Subjects = %v, %v", subs, err)
	}
	vs, err := cl.SubjectVersions(ctx, "events-value")
	if err != nil || len(vs) != 2 {
		t.Fatalf("SubjectVersions = %v, %v", vs, err)
	}
	latest, err := cl.SchemaByVersion(ctx, "events-value", -1)
	if err != nil || latest.ID != 2 {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	look, err := cl.LookupSchema(ctx, "events-value", sr.Schema{Schema: avroV1})
	if err != nil || look.ID != 1 || look.Version != 1 {
		t.Fatalf("LookupSchema = %+v, %v", look, err)
	}
	// GET /schemas/ids/{id} is counted when answered with a schema: the
	// two SchemaByID hits (not the 404, not CreateSchema's /versions).
	if n := s.IDLookups(); n != 2 {
		t.Fatalf("IDLookups = %d, want 2", n)
	}
}

// TestKafkajsFlow replays the requests @kafkajs/confluent-schema-registry
// makes to register a schema: GET /config/{s} (404 the first time), POST
// /subjects/{s}/versions, PUT /config/{s}; then GET /config/{s} answers the
// level, and GET /subjects/{s}/versions/latest the id.
func TestKafkajsFlow(t *testing.T) {
	t.Parallel()
	s, err := New(WithBasicAuth("u", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	do := func(method, path, body string, auth bool) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
		if auth {
			req.SetBasicAuth("u", "p")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, m
	}
	if code, _ := do("GET", "/subjects", "", false); code != 401 {
		t.Fatalf("no auth: %d, want 401", code)
	}
	if code, m := do("GET", "/config/events-value", "", true); code != 404 || m["error_code"] != 40408.0 {
		t.Fatalf("config before: %d %v", code, m)
	}
	b, _ := json.Marshal(map[string]string{"schema": avroV1})
	if code, m := do("POST", "/subjects/events-value/versions", string(b), true); code != 200 || m["id"] != 1.0 {
		t.Fatalf("register: %d %v", code, m)
	}
	if code, m := do("PUT", "/config/events-value", `{"compatibility":"BACKWARD"}`, true); code != 200 || m["compatibility"] != "BACKWARD" {
		t.Fatalf("put config: %d %v", code, m)
	}
	if code, m := do("GET", "/config/events-value", "", true); code != 200 || m["compatibilityLevel"] != "BACKWARD" {
		t.Fatalf("config after: %d %v", code, m)
	}
	if code, m := do("GET", "/subjects/events-value/versions/latest", "", true); code != 200 || m["id"] != 1.0 || m["schema"] != avroV1 {
		t.Fatalf("latest: %d %v", code, m)
	}
	if code, m := do("POST", "/subjects/events-value", string(b), true); code != 200 || m["id"] != 1.0 {
		t.Fatalf("lookup: %d %v", code, m)
	}
	if code, m := do("POST", "/compatibility/subjects/events-value/versions/latest", string(b), true); code != 200 || m["is_compatible"] != true {
		t.Fatalf("compatibility: %d %v", code, m)
	}
}

// TestStopStart: a stopped server refuses connections, keeps its schemas,
// and serves them again on the same URL after Start; FailWith answers an
// error status until cleared.
func TestStopStart(t *testing.T) {
	t.Parallel()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id, err := s.Register("t-value", Avro, avroV1)
	if err != nil || id != 1 {
		t.Fatalf("Register = %d, %v", id, err)
	}
	url := s.URL()
	cl, _ := sr.NewClient(sr.URLs(url))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cl.SchemaByID(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := http.Get(url + "/schemas/ids/1"); err == nil {
		t.Fatal("stopped server answered")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if s.URL() != url {
		t.Fatalf("URL moved from %s to %s", url, s.URL())
	}
	if got, err := cl.SchemaByID(ctx, 1); err != nil || got.Schema != avroV1 {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
	s.FailWith(503)
	resp, err := http.Get(url + "/schemas/ids/1")
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("FailWith(503): %v %v", resp, err)
	}
	resp.Body.Close()
	s.FailWith(0)
	if _, err := cl.SchemaByID(ctx, 1); err != nil {
		t.Fatal(err)
	}
}
