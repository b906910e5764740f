// Acceptance-test producer written with clients nobody in this project
// wrote: kafkajs 2 and @kafkajs/confluent-schema-registry 3 (issue 24).
//
// It reads one JSON request on stdin:
//
//   {"brokers": ["127.0.0.1:9092"], "registry": "http://127.0.0.1:8081",
//    "topic": "events", "format": "avro" | "protobuf",
//    "framing": "confluent" | "library",   (protobuf only; default confluent)
//    "events": [{"user": "u1", "ts": 1767225600000, "page": "home",
//                "country": "US", "device": "mobile"}, ...]}
//
// registers the format's schema (subject <topic>-value) with the library's
// register(), encodes every event with the library's encode() and produces
// it with kafkajs (acks all, Java-compatible murmur2 partitioner): key = the
// user id, record timestamp = the event time, headers source=kafkajs and
// device=<device>. The value is nested: user.id, context.geo.country, ts a
// long with logical type timestamp-millis (Avro) or an int64 of epoch
// milliseconds (Protobuf). It prints {"schema_id": N, "produced": M}.
//
// Protobuf framing. The library writes Protobuf as magic byte, schema id,
// payload — without the message-index array that the Confluent wire format
// puts between the id and the payload (kafkajs/confluent-schema-registry
// issue #152, open; its fix, PR #258, is unmerged). With framing
// "confluent" (the default) this script inserts the index of the first
// message, [0], written as the single byte 0x00 as Confluent's serializers
// write it; the schema registration and the payload bytes (protobufjs) are
// still the library's. With framing "library" the library's bytes are
// produced unchanged.
'use strict';

const fs = require('fs');
const path = require('path');

const { Kafka, Partitioners, logLevel } = require('kafkajs');
const { SchemaRegistry, SchemaType } = require('@kafkajs/confluent-schema-registry');

// The schemas, shared with the Go producer (../srproducer.go).
const AVRO_SCHEMA = JSON.stringify(JSON.parse(fs.readFileSync(path.join(__dirname, 'pageview.avsc'), 'utf8')));
const PROTO_SCHEMA = fs.readFileSync(path.join(__dirname, 'pageview.proto'), 'utf8');

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function main() {
  const req = await readStdin();
  const format = req.format;
  if (format !== 'avro' && format !== 'protobuf') throw new Error(`format ${format}: want avro or protobuf`);
  const framing = req.framing || 'confluent';
  if (framing !== 'confluent' && framing !== 'library') throw new Error(`framing ${framing}: want confluent or library`);

  const registry = new SchemaRegistry({ host: req.registry, retry: { retries: 2 } });
  const schema = format === 'avro'
    ? { type: SchemaType.AVRO, schema: AVRO_SCHEMA }
    : { type: SchemaType.PROTOBUF, schema: PROTO_SCHEMA };
  const { id } = await registry.register(schema, { subject: `${req.topic}-value` });

  const messages = [];
  for (const e of req.events) {
    const value = { user: { id: e.user }, ts: e.ts, page: e.page, context: { geo: { country: e.country } }, device: e.device };
    let buf = await registry.encode(id, value);
    if (format === 'protobuf' && framing === 'confluent') {
      buf = Buffer.concat([buf.subarray(0, 5), Buffer.from([0]), buf.subarray(5)]);
    }
    messages.push({ key: e.user, value: buf, timestamp: String(e.ts), headers: { source: 'kafkajs', device: e.device } });
  }

  const kafka = new Kafka({ clientId: 'stage-acceptance-kafkajs', brokers: req.brokers, logLevel: logLevel.ERROR });
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    for (let i = 0; i < messages.length; i += 500) {
      await producer.send({ topic: req.topic, acks: -1, messages: messages.slice(i, i + 500) });
    }
  } finally {
    await producer.disconnect();
  }
  process.stdout.write(JSON.stringify({ schema_id: id, produced: messages.length }) + '\n');
}

main().catch((err) => {
  process.stderr.write(`produce.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
