package decode

// Reason says why an event, or one histogram's part of an event, was dropped.
// Its String form is a stable snake_case label used as a metric label and as
// the dead-letter header value; the labels are a contract.
type Reason uint8

// The reasons. The first group applies to a whole event ([Decoder.Decode]
// returns it); the second to one histogram's part of an event
// ([Event.Drops]).
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

	numReasons
)

// AllReasons lists every reason except [ReasonNone], in a stable order, for
// registering metrics up front. Do not modify it.
var AllReasons = []Reason{
	ReasonBadJSON, ReasonInvalidUTF8, ReasonOversized, ReasonMissingTime,
	ReasonBadTime, ReasonMissingUser, ReasonWrongType, ReasonMissingField,
	ReasonOutOfDomain, ReasonUnknownGroup, ReasonBadVector,
}

var reasonNames = [numReasons]string{
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
}

// String returns the stable snake_case label ("bad_json", ...); "none" for
// ReasonNone and "unknown" for a value outside the declared constants.
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// PerHistogram reports whether r can only ever drop one histogram's part of
// an event: missing_field, out_of_domain, unknown_group, bad_vector.
// (wrong_type is whole-event when Decode returns it and per-histogram in
// [Event.Drops].)
func (r Reason) PerHistogram() bool {
	return r == ReasonMissingField || r == ReasonOutOfDomain || r == ReasonUnknownGroup || r == ReasonBadVector
}
