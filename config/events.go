package config

// Events describes the raw event messages.
type Events struct {
	// Format of the message value: "json" (the default: one JSON object
	// per message), "avro" or "protobuf" (the Confluent wire format: magic
	// byte 0, a 4-byte big-endian schema id, for protobuf the message
	// indexes, then the payload; the schemas come from SchemaRegistry or
	// SchemaFiles). See package decode and docs/formats.md.
	Format string `yaml:"format"`
	// TimeField holds the event time: an RFC 3339 string or Unix epoch
	// milliseconds (an Avro long with logical type timestamp-millis or
	// timestamp-micros, a protobuf google.protobuf.Timestamp), or
	// "$timestamp" for the record's own timestamp. A dotted path
	// ("context.time") reaches into nested records; "$header.<name>" reads a
	// record header. Default "ts".
	TimeField string `yaml:"time_field"`
	// UserField holds the privacy unit's identifier: a field or dotted
	// path, "$key" for the record key, or "$header.<name>". Default
	// "user_id".
	UserField string `yaml:"user_field"`
	// MaxMessageBytes: larger messages are dropped as oversized. Default 65536.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// MaxFuture: an event whose time is more than this ahead of its record
	// time (watermark arrival, the default) or of the wall clock (watermark
	// event) is dropped as time_too_far_ahead. Default 1h.
	MaxFuture Duration `yaml:"max_future"`

	// The schema-encoded formats (events.format avro or protobuf; issue 24).
	// omitzero keeps the counting fingerprint of a config without them
	// unchanged.

	// SchemaRegistry is where the writer schemas are fetched by the id each
	// record carries (cached; a new id is fetched when it first appears).
	SchemaRegistry SchemaRegistry `yaml:"schema_registry" json:",omitzero"`
	// SchemaFiles are local schema files by id, for a registry-less setup
	// (or to pin schemas: a listed id is never fetched).
	SchemaFiles []SchemaFile `yaml:"schema_files" json:",omitzero"`
	// Protobuf configures how protobuf records are framed.
	Protobuf ProtobufFraming `yaml:"protobuf" json:",omitzero"`
}

// SchemaRegistry is a Confluent-compatible Schema Registry.
type SchemaRegistry struct {
	// URL of the registry ("https://registry:8081"). Empty: no registry.
	URL string `yaml:"url"`
	// Username and Password for HTTP basic authentication (both or
	// neither). Password may only be given as a ${ENV_VAR} reference.
	Username string `yaml:"username"`
	Password string `yaml:"password" secret:"true"`
	// TLS towards the registry (for an https URL): the same keys as
	// kafka.tls.
	TLS TLS `yaml:"tls"`
	// Timeout of one request to the registry. Default 10s. A registry that
	// does not answer in time holds the partition (see package decode).
	Timeout Duration `yaml:"timeout"`
}

// SchemaFile is one local schema file.
type SchemaFile struct {
	// ID is the schema id records carry in their wire-format header.
	ID int `yaml:"id"`
	// File is an Avro schema (.avsc, JSON) or a protobuf source (.proto)
	// without imports other than google/protobuf's well-known types.
	File string `yaml:"file"`
}

// ProtobufFraming says how protobuf records name their message type.
type ProtobufFraming struct {
	// MessageIndexes: "confluent" (the default: the message indexes follow
	// the schema id, as Confluent's serializers and franz-go's sr write
	// them) or "none" (no indexes: the payload follows the schema id, as
	// @kafkajs/confluent-schema-registry writes it).
	MessageIndexes string `yaml:"message_indexes"`
	// Message is the fully qualified message type ("shop.v1.Event") read
	// when message_indexes is none. Default: the first message of the
	// schema.
	Message string `yaml:"message"`
}
