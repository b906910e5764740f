// Package acceptance holds issue 24's acceptance tests (its _test.go files;
// this package has no other code): the stage reads topics written by
// producers nobody in this project wrote — kafkajs with
// @kafkajs/confluent-schema-registry (Node, internal/e2e/jsclients) and
// franz-go's pkg/sr serde (internal/e2e/srproducer.go) — in Avro and
// Protobuf through a Schema Registry (the test server internal/srtest),
// with nested fields, the record key, headers, bad input and a registry
// outage, in the single-process and the distributed mode. Counts are exact:
// near-noiseless releases against the bounded truth worked out from the
// produced events alone (internal/e2e), and the stage's own counters.
package acceptance
