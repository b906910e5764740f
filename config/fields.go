package config

import (
	"fmt"
	"net/url"
	"strings"
)

// Record fields: a field key (events.time_field, events.user_field,
// histograms[].field, group_by) names either a value field — a dotted path
// into the message value, "context.geo.country" — or a part of the Kafka
// record itself.
const (
	// FieldKey is the record key (events.user_field, field, group_by).
	FieldKey = "$key"
	// FieldTimestamp is the record timestamp (events.time_field only).
	FieldTimestamp = "$timestamp"
	// FieldHeaderPrefix starts a record header field: "$header.<name>".
	FieldHeaderPrefix = "$header."
)

// MaxPathDepth is the most levels a field path may have.
const MaxPathDepth = 32

// PathSegments splits a value field path at its dots ("user.id" → "user",
// "id"). A dot always separates levels: a key that itself contains a dot
// cannot be named.
func PathSegments(path string) []string { return strings.Split(path, ".") }

type fieldRole uint8

const (
	roleTime   fieldRole = iota // events.time_field
	roleUser                    // events.user_field
	roleValue                   // a bin or group field
	roleVector                  // an average histogram's field
)

// fieldPath checks the field key v at path p for its role.
func (k *checker) fieldPath(p, v string, role fieldRole) {
	switch {
	case v == FieldTimestamp:
		if role != roleTime {
			k.add(p, "$timestamp (the record timestamp) can only be events.time_field")
		}
		return
	case v == FieldKey:
		switch role {
		case roleTime:
			k.add(p, "$key (the record key) cannot be the event time; use $timestamp or a value field")
		case roleVector:
			k.add(p, "$key cannot hold an average histogram's vector; use a value field")
		}
		return
	case strings.HasPrefix(v, FieldHeaderPrefix):
		if v == FieldHeaderPrefix {
			k.add(p, "$header. needs a header name: $header.<name>")
		} else if role == roleVector {
			k.add(p, "a header cannot hold an average histogram's vector; use a value field")
		}
		return
	case strings.HasPrefix(v, "$"):
		k.add(p, "%s is not a record field: use $key, $timestamp or $header.<name> (a value field cannot start with $)", k.show(p, v))
		return
	}
	segs := PathSegments(v)
	if len(segs) > MaxPathDepth {
		k.add(p, "has %d levels, at most %d", len(segs), MaxPathDepth)
		return
	}
	for _, s := range segs {
		switch {
		case s == "":
			k.add(p, "%s has an empty level: a dot separates the levels of a path such as user.id", k.show(p, v))
			return
		case strings.ContainsAny(s, "[]*"):
			k.add(p, "%s goes through a list or map: a path can only name fields of nested records (user.id), not elements of a list or map", k.show(p, v))
			return
		}
	}
}

var formats = []string{FormatJSON, FormatAvro, FormatProtobuf}

// schemas checks the schema keys of events (format avro or protobuf).
func (k *checker) schemas() {
	e := k.c.Events
	r := e.SchemaRegistry
	hasReg := r.URL != "" || r.Username != "" || r.Password != "" || r.TLS.Enabled
	if e.Format == FormatJSON || e.Format == "" { // schema_files are ignored

		if hasReg {
			k.add("events.schema_registry", "is only used with events.format avro or protobuf")
		}
		if e.Protobuf != (ProtobufFraming{}) {
			k.add("events.protobuf", "is only used with events.format protobuf")
		}
		return
	}
	if r.URL == "" && len(e.SchemaFiles) == 0 {
		k.add("events.schema_registry.url", "required with events.format avro or protobuf, unless events.schema_files lists the schemas")
	}
	if r.URL != "" {
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.add("events.schema_registry.url", "must be an http:// or https:// URL such as https://registry:8081, got %s", k.show("events.schema_registry.url", r.URL))
		} else if u.User != nil {
			k.add("events.schema_registry.url", "must not hold credentials: use events.schema_registry.username and password")
		}
	} else if hasReg {
		k.add("events.schema_registry.url", "required when other events.schema_registry keys are set")
	}
	switch {
	case r.Username != "" && r.Password == "":
		k.add("events.schema_registry.password", "required with events.schema_registry.username (through a ${ENV_VAR} reference)")
	case r.Password != "" && r.Username == "":
		k.add("events.schema_registry.username", "required with events.schema_registry.password")
	}
	if r.Timeout < 0 {
		k.add("events.schema_registry.timeout", "must not be negative (0: the default 10s)")
	}
	k.tlsAt("events.schema_registry.tls", r.TLS)
	ids := map[int]int{}
	for i, f := range e.SchemaFiles {
		p := fmt.Sprintf("events.schema_files[%d]", i)
		if f.ID < 1 {
			k.add(p+".id", "must be a schema id ≥ 1 (the id records carry after the magic byte)")
		} else if j, dup := ids[f.ID]; dup {
			k.add(p+".id", "duplicate schema id %d (also events.schema_files[%d])", f.ID, j)
		} else {
			ids[f.ID] = i
		}
		if k.nonEmpty(p+".file", f.File) {
			k.readable(p+".file", f.File)
		}
	}
	pb := e.Protobuf
	if e.Format != FormatProtobuf {
		if pb != (ProtobufFraming{}) {
			k.add("events.protobuf", "is only used with events.format protobuf")
		}
		return
	}
	if pb.MessageIndexes != "" {
		k.oneOf("events.protobuf.message_indexes", pb.MessageIndexes, []string{MessageIndexesConfluent, MessageIndexesNone})
	}
	if pb.Message != "" && pb.MessageIndexes != MessageIndexesNone {
		k.add("events.protobuf.message", "is only used with events.protobuf.message_indexes: none (with Confluent's framing each record names its message)")
	}
}
