package config

// The accepted values of the enumerated keys. The strings are a contract
// (they match package mechanism's Kind and Calibration strings).
const (
	FormatJSON     = "json" // events.format
	FormatAvro     = "avro"
	FormatProtobuf = "protobuf"

	MessageIndexesConfluent = "confluent" // events.protobuf.message_indexes
	MessageIndexesNone      = "none"

	MechanismDirichlet = "dirichlet" // privacy.mechanism
	MechanismGaussian  = "gaussian"
	MechanismLaplace   = "laplace"
	// MechanismLaplacePosterior releases a private posterior Dir(α̃): the
	// laplace baseline's noisy counts plus privacy.prior_alpha (see
	// mechanism.CountPosterior).
	MechanismLaplacePosterior = "laplace-posterior"

	CalibrationConcentrated = "concentrated" // privacy.calibration (dirichlet only)
	CalibrationDiffuse      = "diffuse"
	CalibrationClosedForm   = "closed-form"
	CalibrationExact        = "exact"
	CalibrationOptimal      = "optimal"

	WatermarkArrival = "arrival" // window.watermark
	WatermarkEvent   = "event"

	RecordTimesBroker   = "broker" // window.record_times
	RecordTimesProducer = "producer"

	NeighbourReplace   = "replace" // privacy.neighbour
	NeighbourAddRemove = "add_remove"

	SASLPlain       = "plain" // kafka.sasl.mechanism
	SASLScramSHA256 = "scram-sha-256"
	SASLScramSHA512 = "scram-sha-512"

	LogFormatJSON    = "json" // log.format
	LogFormatConsole = "console"

	LogLevelDebug = "debug" // log.level
	LogLevelInfo  = "info"
	LogLevelWarn  = "warn"
	LogLevelError = "error"
)

// ImplicitGroup is the name of the single group of a histogram without
// group_by.
const ImplicitGroup = "*"

// RedactedValue replaces secrets and values from the environment in
// [Config.Redacted] and [Config.String].
const RedactedValue = "[redacted]"

var (
	mechanisms   = []string{MechanismDirichlet, MechanismGaussian, MechanismLaplace, MechanismLaplacePosterior}
	calibrations = []string{CalibrationConcentrated, CalibrationDiffuse, CalibrationClosedForm, CalibrationExact, CalibrationOptimal}
	neighbours   = []string{NeighbourReplace, NeighbourAddRemove}
	watermarks   = []string{WatermarkArrival, WatermarkEvent}
	recordTimes  = []string{RecordTimesBroker, RecordTimesProducer}
	saslMechs    = []string{SASLPlain, SASLScramSHA256, SASLScramSHA512}
	logFormats   = []string{LogFormatJSON, LogFormatConsole}
	logLevels    = []string{LogLevelDebug, LogLevelInfo, LogLevelWarn, LogLevelError}
)
