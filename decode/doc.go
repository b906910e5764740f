// Package decode turns one raw event record — its value (a JSON object, or
// Avro or Protobuf in the Confluent wire format), key, timestamp and
// headers — into the few values the stage needs: event time, a keyed hash
// of the user id, and for every configured histogram a bin index and a
// group index (count histograms) or a probability vector (average
// histograms). It is the first thing hostile input meets, so it validates
// the whole message, never panics, and never allocates on the hot path
// (JSON, and Avro and Protobuf once a schema id is resolved).
//
// # Fields: paths and the record
//
// A field key is a dotted path into the value ("user.id",
// "context.geo.country": a dot separates the levels of nested JSON objects,
// Avro records or protobuf messages; a key containing a dot cannot be
// named), or a part of the record: "$key" (the key's bytes; a key starting
// with the wire format's magic byte 0 is wrong_type, since hashing a
// schema-encoded key would split a user whenever the key schema's id
// changes), "$timestamp" (the record timestamp, time field only) or
// "$header.<name>" (the last header of that name, as text). A path whose
// level is null or absent leaves the field missing; a level that is a list,
// a map or a scalar makes it wrong_type (config's validation refuses list
// and map syntax, "items[0]", with a line). [Decoder.DecodeRecord] reads a
// [Record]; [Decoder.Decode] is the value-only form. The Event may keep
// references to the record's key and header bytes until the next decode
// (it never reads them after DecodeRecord returns).
//
// A $timestamp event time keeps the window rule's "an event counts on its
// own merits" (package window, Rule.Decide): with watermark arrival the
// event time equals the record time, so the event is never
// time_too_far_ahead and never late by its own times, and falls in the
// window of its own record time; with window.record_times broker (checked:
// LogAppendTime) that time is the broker's, which no user or producer
// sets. See docs/formats.md.
//
// # What is accepted (JSON)
//
//   - The message is exactly one JSON object (RFC 8259) with optional
//     surrounding whitespace. Values of keys that are not configured may be
//     anything, nested up to [MaxDepth]; they are validated and skipped.
//     Nested objects on a configured path are followed (and count toward
//     MaxDepth like any other). Keys are matched exactly
//     (case-sensitively) after unescaping, so "p\u0061ge" is "page".
//   - Every string in the message must be valid UTF-8, and \u escapes must
//     not encode unpaired surrogates; otherwise the event is invalid_utf8
//     (encoding/json would silently substitute U+FFFD instead).
//   - Duplicate keys: the last occurrence wins, as in encoding/json (for a
//     nested level as a whole: {"user":{"id":1},"user":{}} has no user.id).
//     One message is one event whatever its keys say, so a duplicate cannot
//     make a user count twice.
//   - Time field: a JSON number of Unix epoch milliseconds (any number form,
//     "1.7e12" included; fractions of a millisecond are floored); a JSON
//     string of ASCII digits only, read as epoch milliseconds
//     ("1700000000000" — unambiguous, since no RFC 3339 time is all digits);
//     or an RFC 3339 date-time string, "2023-11-14T22:13:20Z",
//     "2023-11-14T23:13:20.123456+01:00": 'T', 't' or ' ' between date and
//     time, 'Z', 'z' or ±hh:mm as offset, any number of fraction digits
//     (floored to milliseconds); no leap second 60 (time.Parse rejects it
//     too). Times outside [MinTimeMs, MaxTimeMs] (before 1970 or after 9999)
//     are bad_time. null counts as missing; true/false/objects/arrays are
//     wrong_type.
//   - User field: a non-empty string, or an integer JSON number (no
//     fraction, no exponent: those are wrong_type). The id is the string's
//     unescaped content or the number's literal text, so "123" and 123 are
//     the same user. null and "" are missing_user.
//   - Bin and group fields: a string's unescaped content, or the literal text
//     of a number, true or false ("1", "true"), matched exactly against the
//     declared values. A number matches only in the spelling it was declared
//     in ("1.0" does not match a bin "1"). null or absent is missing_field;
//     an object or array is wrong_type (for that histogram only).
//   - Group keys (group_by without listed groups: the histogram selects its
//     groups, issue 30): the group field's text as above is the key
//     ([Event.Keys], group index 0), unmatched. A key longer than
//     [MaxKeyBytes] is key_too_long; a key whose public hash (package
//     internal/lib/keyhash, a function of the key alone) is not below
//     selection.key_sample_rate·2⁶⁴ is unsampled_key (never released, so
//     never counted); the empty string is a key like any other. Both drop
//     that histogram's part only.
//   - Vector fields (the field of a histogram of kind average): a JSON array
//     of exactly len(bins) JSON numbers, one per bin in config order, each
//     non-negative and finite as parsed to float64 (-0, and negative numbers
//     so small they parse to -0, are fine; 1e400 overflows and is not),
//     whose float64 sum, added in order, is within 1 ± 1e-6. The vector is
//     then divided by that sum, so [Event.Vectors] sums to 1 up to rounding.
//     Anything else in an array is bad_vector (for that histogram only):
//     another length, an element that is a string, literal, object or array,
//     a negative or infinite element, a sum outside the tolerance. null or
//     absent is missing_field; a value that is not an array is wrong_type.
//
// # Avro and Protobuf
//
// events.format avro or protobuf: the value is the Confluent wire format,
// magic byte 0, a 4-byte big-endian schema id, for protobuf the message
// indexes (zig-zag varints; a single 0 for the first message; or none with
// events.protobuf.message_indexes none, as @kafkajs/confluent-schema-registry
// writes), then the payload. Anything else is unknown_magic_byte. The
// writer schema of each id comes from events.schema_files, else from the
// Schema Registry ([Registry]: GET /schemas/ids/{id}, and GET
// /subjects/{s}/versions/{v} for references), is compiled against the
// configured paths and cached for good (a schema id names one immutable
// schema), so a new version registered mid-stream is read without a
// restart. The decoders built from one configuration (one per input
// partition) share that cache: a new id is fetched once per process, and
// schema files are read when the first of them is built. An id the registry does not have (404), or whose schema is of
// another type or does not compile, is unknown_schema_id (a 404 is asked
// again after 30 s). Unseen ids are looked up once each however many
// workers meet them, at most 50 per second on average (bursts of 100; a
// lookup over the limit waits: garbage records carrying fresh ids cannot
// flood the registry), and the ids the registry does not have are
// remembered in a bounded set (100,000) apart from the schema cache. When
// an id is first resolved, the fields the schema lacks or reaches only
// through a list are reported once ([Decoder.OnSchema]; the stage logs
// them): a renamed user or time field shows at once, not only as drops. Bytes that do not decode under their schema
// (truncated, trailing bytes, a bad length, varint, union branch, enum or
// message index) are undecodable; invalid UTF-8 in a string the stage reads
// is invalid_utf8.
//
// Avro fields are found by name in the writer's schema, or by one of its
// aliases (a field renamed in a later version keeps working under its old
// name). Values: Avro string, bytes, fixed and enum (by symbol), int and long
// (decimal text; with logical type timestamp-millis or timestamp-micros an
// event time in ms, micros floored), float and double, boolean; a union
// takes its branch (null: missing). Protobuf: every scalar kind, enums by
// value name (an unknown number by its decimal text),
// google.protobuf.Timestamp as an event time (floored to ms); a proto3
// scalar without presence absent on the wire takes its default (0, false,
// "", the enum's zero value), except the user and time fields, for which
// absent is missing. A message field given twice merges (the later one's
// fields win), as protobuf parsers do. An average histogram's vector is an
// Avro array of double, float, int or long, or a packed repeated
// double/float. Only the fields on a configured path are decoded: the rest
// of a protobuf message is checked for wire structure, the rest of an Avro
// record walked in schema order.
//
// The libraries: schemas are parsed by github.com/hamba/avro/v2 (Avro; the
// actively maintained Go Avro library, already in the module graph through
// Arrow, handles named types, namespaces, aliases and logical types) and
// compiled by github.com/bufbuild/protocompile (Buf's pure-Go protobuf
// compiler, the one behind the buf CLI; imports of the well-known types
// built in) into google.golang.org/protobuf descriptors, and the registry
// is read with franz-go's pkg/sr (the family of the kgo client the stage
// already uses; only the standard library below it, so package decode
// stays free of Kafka clients). The payloads are walked by this package's own allocation-free
// walkers (avro.go, proto.go; protowire for the protobuf wire), because the
// libraries' generic decoding is an order of magnitude slower
// (BenchmarkFormats, this 2-core machine under load: avro 0.87 µs/record
// and 0 allocations here, against 19 µs and 54 allocations for hamba into a
// map, or 2.4 µs and 8 allocations into a Go struct — which needs the
// schema at compile time; protobuf 0.65 µs here against 15.8 µs and 58
// allocations for dynamicpb). `stage bench` keeps both within 1.5× of
// JSON's CPU per event.
//
// # Holding a partition
//
// A Schema Registry that cannot be reached, times out
// (events.schema_registry.timeout, default 10 s) or answers an error other
// than 404 (a 5xx, a 401) is not bad input. DecodeRecord then returns
// [ReasonSchemaUnavailable], whose [Reason.Hold] is true, with the error in
// Event.Err: the caller must not count, drop, dead-letter or commit the
// record, but hold its partition (and its windows open) and decode the same
// record again after a back-off; each attempt makes one request. Records
// whose schema id is cached keep decoding during an outage.
//
// # The user hash
//
// [Event.User] is SipHash-2-4 (package internal/lib/siphash) of the user id
// bytes (a string's unescaped bytes, a number's literal) under the 16-byte
// key given to [New]. The stage generates the key from crypto/rand at its
// first start and keeps it in its ledger (state.dir, a secret like the rest
// of it), so the hash of a user is the same after a restart: the
// cross-window bound (contribution.max_windows_per_user) keeps per-user
// state across restarts under it. The key is secret, so the hash cannot be
// precomputed by whoever produces events to force collisions. A collision
// between two users merges them under one contribution bound: together they
// count at most as much as one user may, and hashing never splits a user
// (which would let one user contribute twice). A merge is not free of cost,
// though: under the add_remove relation, removing one of two merged users
// can let the other's event count instead, a change of one user out and one
// in (the replace sensitivity). The key makes that an accident, not an
// attack: with 64-bit hashes the expected number of colliding pairs among n
// users is n²/2⁶⁵, about 3·10⁻⁸ at one million users; and with the
// tracked-user cap on (the default) add_remove is charged the replace
// sensitivity anyway.
package decode
