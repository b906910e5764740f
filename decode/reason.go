package decode

// Reason says why an event, or one histogram's part of an event, was dropped:
// the one enum of every drop the stage counts, whether the decoder, the
// window rule or the bounder decided it. Its String form is a stable
// snake_case label used as a metric label and as the dead-letter header
// value; the labels are a contract. No other package spells a drop reason
// as a string literal.
type Reason uint8

// The reasons. The first group applies to a whole event ([Decoder.Decode]
// returns it); the second to one histogram's part of an event
// ([Event.Drops]); the third to a decoded event the window rule does not
// count (package window); the fourth to contributions the per-user bounds
// drop (package aggregate), counted under their own metric.
const (
	// ReasonNone: nothing was dropped.
	ReasonNone Reason = iota

	// ReasonBadJSON: the message is not one well-formed JSON object
	// (including nesting deeper than [MaxDepth] and trailing data).
	ReasonBadJSON
	// ReasonInvalidUTF8: a string (key or value, anywhere in the message)
	// holds invalid UTF-8, or a \u escape encodes an unpaired surrogate.
	ReasonInvalidUTF8
	// ReasonOversized: the message is longer than events.max_message_bytes.
	ReasonOversized
	// ReasonMissingTime: the time field is absent or null.
	ReasonMissingTime
	// ReasonBadTime: the time field has the right type but is not a valid
	// time, or is outside [MinTimeMs, MaxTimeMs].
	ReasonBadTime
	// ReasonMissingUser: the user field is absent, null or the empty string.
	ReasonMissingUser
	// ReasonWrongType: the time or user field (whole event), or a histogram's
	// bin or group field (that histogram only), is an object or array, or
	// otherwise of a type the field does not accept; for an average
	// histogram's vector field (that histogram only), a value that is not an
	// array.
	ReasonWrongType

	// ReasonMissingField: a histogram's bin field, group_by field or vector
	// field (average histograms) is absent or null.
	ReasonMissingField
	// ReasonOutOfDomain: the bin value is not among the declared bins and the
	// histogram has no overflow_bin.
	ReasonOutOfDomain
	// ReasonUnknownGroup: the group value is not among the declared groups.
	// Groups are public: they are never created from data.
	ReasonUnknownGroup
	// ReasonBadVector: an average histogram's vector field is an array but
	// not a probability vector: its length is not the number of bins, an
	// element is not a number, is negative or overflows float64, or the sum
	// is not within 1 ± 1e-6 (see the package doc).
	ReasonBadVector

	// ReasonLate: the event's window was already closed (or, with watermark
	// arrival, its record time is past its window's end + lateness).
	ReasonLate
	// ReasonTimeTooFarAhead: the event time is more than events.max_future
	// after its record time (watermark arrival) or the wall clock
	// (watermark event).
	ReasonTimeTooFarAhead

	// ReasonBoundUserEvents: over contribution.max_events_per_user.
	ReasonBoundUserEvents
	// ReasonBoundUserGroups: over contribution.max_groups_per_user.
	ReasonBoundUserGroups
	// ReasonBoundCapacity: the user is not among the window's
	// contribution.max_tracked_users.
	ReasonBoundCapacity
	// ReasonBoundDisplaced: counted on arrival, then pushed out by a
	// smaller-hash event or group of the same user, or by the user's
	// eviction from a full window.
	ReasonBoundDisplaced
	// ReasonBoundWindows: the user was admitted to
	// contribution.max_windows_per_user earlier windows of the budget
	// period (dropped on arrival, or at the window's close when earlier
	// windows closed after the event arrived).
	ReasonBoundWindows
	// ReasonBoundAverageUsers: an average histogram's vector from a user not
	// among the window's average.users kept users at arrival.
	ReasonBoundAverageUsers

	// ReasonWrongPartition: the user id does not assign to the input
	// partition the event was read from under the producers' partitioner
	// (distributed mode: kafka.distributed.partitioner, see
	// Decoder.WithPartitionCheck). Whole event, like the first group;
	// declared last so that the values above keep their numbers.
	ReasonWrongPartition

	// The schema-encoded formats (events.format avro or protobuf; whole
	// event, declared after the others so that their values keep their
	// numbers).

	// ReasonUnknownMagicByte: the record does not start with the wire
	// format's magic byte 0 followed by a 4-byte schema id (or is shorter
	// than that).
	ReasonUnknownMagicByte
	// ReasonUnknownSchemaID: the schema id is not in events.schema_files
	// and the Schema Registry answers that it has no such schema (HTTP
	// 404), or the id names a schema of another type (a JSON schema, a
	// protobuf schema for events.format avro), or one that does not parse.
	ReasonUnknownSchemaID
	// ReasonUndecodable: the bytes do not decode under their schema
	// (truncated, trailing bytes, a bad length or varint, an out-of-range
	// union branch or enum index, protobuf message indexes naming no
	// message).
	ReasonUndecodable
	// ReasonSchemaUnavailable is not a drop: the record's schema could not
	// be fetched (the registry unreachable or failing). The caller holds
	// the partition and retries; [Reason.Hold] reports it. It is never
	// counted as a drop nor written to the dead-letter topic.
	ReasonSchemaUnavailable

	// The group keys of a histogram that selects its groups (group_by and
	// no listed groups; one histogram's part, declared last so that the
	// values above keep their numbers).

	// ReasonUnsampledKey: the group key is not sampled
	// (selection.key_sample_rate: a public hash of the key alone is above
	// the rate's threshold); such a key is never released.
	ReasonUnsampledKey
	// ReasonKeyTooLong: the group key is longer than [MaxKeyBytes].
	ReasonKeyTooLong

	// NumReasons is the number of reasons, ReasonNone included: Reason
	// values are below it.
	NumReasons
)

// AllReasons lists every reason except [ReasonNone], in a stable order, for
// registering metrics up front. Do not modify it.
var AllReasons = []Reason{
	ReasonBadJSON, ReasonInvalidUTF8, ReasonOversized, ReasonMissingTime,
	ReasonBadTime, ReasonMissingUser, ReasonWrongType, ReasonMissingField,
	ReasonOutOfDomain, ReasonUnknownGroup, ReasonBadVector,
}

// WindowReasons are the window rule's reasons, exported from the start
// like AllReasons.
var WindowReasons = []Reason{ReasonLate, ReasonTimeTooFarAhead}

// BoundReasons are the bounding outcomes counted in the stage's drop
// counters (ReasonBoundAverageUsers is counted apart, see Bound).
var BoundReasons = []Reason{ReasonBoundUserEvents, ReasonBoundUserGroups, ReasonBoundCapacity, ReasonBoundDisplaced, ReasonBoundWindows}

var reasonNames = [NumReasons]string{
	ReasonNone:         "none",
	ReasonBadJSON:      "bad_json",
	ReasonInvalidUTF8:  "invalid_utf8",
	ReasonOversized:    "oversized",
	ReasonMissingTime:  "missing_time",
	ReasonBadTime:      "bad_time",
	ReasonMissingUser:  "missing_user",
	ReasonWrongType:    "wrong_type",
	ReasonMissingField: "missing_field",
	ReasonOutOfDomain:  "out_of_domain",
	ReasonUnknownGroup: "unknown_group",
	ReasonBadVector:    "bad_vector",

	ReasonLate:            "late",
	ReasonTimeTooFarAhead: "time_too_far_ahead",

	ReasonBoundUserEvents:   "bound_user_events",
	ReasonBoundUserGroups:   "bound_user_groups",
	ReasonBoundCapacity:     "bound_capacity",
	ReasonBoundDisplaced:    "bound_displaced",
	ReasonBoundWindows:      "bound_windows",
	ReasonBoundAverageUsers: "bound_average_users",

	ReasonWrongPartition: "wrong_partition",

	ReasonUnknownMagicByte:  "unknown_magic_byte",
	ReasonUnknownSchemaID:   "unknown_schema_id",
	ReasonUndecodable:       "undecodable",
	ReasonSchemaUnavailable: "schema_registry_unavailable",

	ReasonUnsampledKey: "unsampled_key",
	ReasonKeyTooLong:   "key_too_long",
}

// KeyReasons are the drops of a selecting histogram's group keys (one
// histogram's part), for registering metrics up front like AllReasons.
var KeyReasons = []Reason{ReasonUnsampledKey, ReasonKeyTooLong}

// SchemaReasons are the drops of the schema-encoded formats (whole event),
// for registering metrics up front like AllReasons.
var SchemaReasons = []Reason{ReasonUnknownMagicByte, ReasonUnknownSchemaID, ReasonUndecodable}

// Hold reports whether r is not a drop but a reason to hold the partition
// and retry the same record later: [ReasonSchemaUnavailable].
func (r Reason) Hold() bool { return r == ReasonSchemaUnavailable }

// boundPrefix starts the String form of every bounding outcome.
const boundPrefix = "bound_"

// String returns the stable snake_case label ("bad_json", ...); "none" for
// ReasonNone and "unknown" for a value outside the declared constants.
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Bound reports whether r is a bounding outcome and, if so, its label under
// the contributions-bounded metric (the String form without "bound_":
// "user_events", …, "average_users").
func (r Reason) Bound() (string, bool) {
	if r >= ReasonBoundUserEvents && r <= ReasonBoundAverageUsers {
		return reasonNames[r][len(boundPrefix):], true
	}
	return "", false
}

// PerHistogram reports whether r can only ever drop one histogram's part of
// an event: missing_field, out_of_domain, unknown_group, bad_vector,
// unsampled_key, key_too_long.
// (wrong_type is whole-event when Decode returns it and per-histogram in
// [Event.Drops].)
func (r Reason) PerHistogram() bool {
	return r == ReasonMissingField || r == ReasonOutOfDomain || r == ReasonUnknownGroup || r == ReasonBadVector ||
		r == ReasonUnsampledKey || r == ReasonKeyTooLong
}
