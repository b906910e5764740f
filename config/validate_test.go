package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// base is a valid config with two histograms, one grouped.
const base = `
kafka:
  brokers: [localhost:9092]
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
    overflow_bin: other
  - name: by_country
    field: page
    bins: [home, search]
    group_by: country
    groups: [US, DE, FR]
privacy:
  budget:
    epsilon: 1
`

func TestValidateRules(t *testing.T) {
	tlsDir := t.TempDir()
	writeTLSFiles(t, tlsDir)
	otherDir := t.TempDir()
	writeTLSFiles(t, otherDir)
	notPEM := filepath.Join(tlsDir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(tlsDir, "missing.pem")

	for _, tc := range []struct {
		name   string
		mutate func(c *Config)
		path   string
		frag   string
	}{
		// kafka
		{"broker without port", func(c *Config) { c.Kafka.Brokers = []string{"localhost:9092", "kafka"} }, "kafka.brokers[1]", `"kafka" is not host:port`},
		{"broker without host", func(c *Config) { c.Kafka.Brokers = []string{":9092"} }, "kafka.brokers[0]", "is not host:port"},
		{"broker port out of range", func(c *Config) { c.Kafka.Brokers = []string{"k:70000"} }, "kafka.brokers[0]", "port 1 to 65535"},
		{"broker port not a number", func(c *Config) { c.Kafka.Brokers = []string{"k:http"} }, "kafka.brokers[0]", "is not host:port"},
		{"empty group id", func(c *Config) { c.Kafka.GroupID = "" }, "kafka.group_id", "must not be empty"},
		{"empty input topic", func(c *Config) { c.Kafka.InputTopic = "" }, "kafka.input_topic", "must not be empty"},
		{"empty output topic", func(c *Config) { c.Kafka.OutputTopic = "" }, "kafka.output_topic", "must not be empty"},
		{"invalid topic name", func(c *Config) { c.Kafka.InputTopic = "my events" }, "kafka.input_topic", "not a valid Kafka topic name"},
		{"topic name ..", func(c *Config) { c.Kafka.OutputTopic = ".." }, "kafka.output_topic", "not a valid Kafka topic name"},
		{"topic name too long", func(c *Config) { c.Kafka.OutputTopic = strings.Repeat("t", 250) }, "kafka.output_topic", "not a valid Kafka topic name"},
		{"output is input", func(c *Config) { c.Kafka.OutputTopic = c.Kafka.InputTopic }, "kafka.output_topic", "must differ from kafka.input_topic"},
		{"dead letter is input", func(c *Config) { c.Kafka.DeadLetterTopic = c.Kafka.InputTopic }, "kafka.dead_letter_topic", "must differ from kafka.input_topic"},
		{"dead letter is output", func(c *Config) { c.Kafka.DeadLetterTopic = c.Kafka.OutputTopic }, "kafka.dead_letter_topic", "must differ from kafka.output_topic"},
		{"invalid dead letter topic", func(c *Config) { c.Kafka.DeadLetterTopic = "dlq/1" }, "kafka.dead_letter_topic", "not a valid Kafka topic name"},
		{"input partitions", func(c *Config) { c.Kafka.InputPartitions = 0 }, "kafka.input_partitions", "at least 1"},
		{"embedded port too large", func(c *Config) { c.Kafka.EmbeddedPort = 65536 }, "kafka.embedded_port", "from 1 to 65535"},
		{"embedded port negative", func(c *Config) { c.Kafka.EmbeddedPort = -1 }, "kafka.embedded_port", "or 0 for a free one"},
		{"rebalance timeout too short", func(c *Config) { c.Kafka.RebalanceTimeout = Duration(100 * time.Millisecond) }, "kafka.rebalance_timeout", "at least 250ms"},
		{"rebalance timeout negative", func(c *Config) { c.Kafka.RebalanceTimeout = Duration(-time.Second) }, "kafka.rebalance_timeout", "at least 250ms"},
		{"rebalance timeout over session", func(c *Config) { c.Kafka.RebalanceTimeout = c.Kafka.SessionTimeout + 1 }, "kafka.rebalance_timeout", "must not exceed kafka.session_timeout"},
		// kafka.tls
		{"tls ca file missing", func(c *Config) { c.Kafka.TLS = TLS{Enabled: true, CAFile: missing} }, "kafka.tls.ca_file", "cannot read"},
		{"tls ca file a directory", func(c *Config) { c.Kafka.TLS = TLS{Enabled: true, CAFile: tlsDir} }, "kafka.tls.ca_file", "is a directory"},
		{"tls ca file not PEM", func(c *Config) { c.Kafka.TLS = TLS{Enabled: true, CAFile: notPEM} }, "kafka.tls.ca_file", "holds no PEM certificate"},
		{"tls cert file missing", func(c *Config) {
			c.Kafka.TLS = TLS{Enabled: true, CertFile: missing, KeyFile: filepath.Join(tlsDir, "client-key.pem")}
		}, "kafka.tls.cert_file", "cannot read"},
		{"tls key file missing", func(c *Config) {
			c.Kafka.TLS = TLS{Enabled: true, CertFile: filepath.Join(tlsDir, "client.pem"), KeyFile: missing}
		}, "kafka.tls.key_file", "cannot read"},
		{"tls cert without key", func(c *Config) {
			c.Kafka.TLS = TLS{Enabled: true, CertFile: filepath.Join(tlsDir, "client.pem")}
		}, "kafka.tls.key_file", "required with kafka.tls.cert_file"},
		{"tls key without cert", func(c *Config) {
			c.Kafka.TLS = TLS{Enabled: true, KeyFile: filepath.Join(tlsDir, "client-key.pem")}
		}, "kafka.tls.cert_file", "required with kafka.tls.key_file"},
		{"tls key of another cert", func(c *Config) {
			c.Kafka.TLS = TLS{Enabled: true, CertFile: filepath.Join(tlsDir, "client.pem"), KeyFile: filepath.Join(otherDir, "client-key.pem")}
		}, "kafka.tls.cert_file", "cannot load the key pair"},
		// kafka.sasl
		{"sasl mechanism", func(c *Config) { c.Kafka.SASL = SASL{Mechanism: "gssapi", Username: "u", Password: "p"} }, "kafka.sasl.mechanism", `must be one of plain, scram-sha-256, scram-sha-512, got "gssapi"`},
		{"sasl mechanism upper case", func(c *Config) { c.Kafka.SASL = SASL{Mechanism: "PLAIN", Username: "u", Password: "p"} }, "kafka.sasl.mechanism", "must be one of"},
		{"sasl mechanism missing", func(c *Config) { c.Kafka.SASL = SASL{Username: "u", Password: "p"} }, "kafka.sasl.mechanism", "must be one of"},
		{"sasl username missing", func(c *Config) { c.Kafka.SASL = SASL{Mechanism: "plain", Password: "p"} }, "kafka.sasl.username", "must not be empty"},
		{"sasl password missing", func(c *Config) { c.Kafka.SASL = SASL{Mechanism: "plain", Username: "u"} }, "kafka.sasl.password", "must be set"},
		// events
		{"format", func(c *Config) { c.Events.Format = "xml" }, "events.format", `must be one of json, avro, protobuf, got "xml"`},
		{"empty format", func(c *Config) { c.Events.Format = "" }, "events.format", "must be one of json, avro, protobuf"},
		{"path through a list", func(c *Config) { c.Events.UserField = "users[0].id" }, "events.user_field", "goes through a list or map"},
		{"path through a map", func(c *Config) { c.Histograms[0].Field = "attrs.*" }, "histograms[0].field", "goes through a list or map"},
		{"empty path level", func(c *Config) { c.Events.TimeField = "context..ts" }, "events.time_field", "has an empty level"},
		{"unknown record field", func(c *Config) { c.Events.UserField = "$value" }, "events.user_field", "is not a record field"},
		{"timestamp as user", func(c *Config) { c.Events.UserField = "$timestamp" }, "events.user_field", "can only be events.time_field"},
		{"key as time", func(c *Config) { c.Events.TimeField = "$key" }, "events.time_field", "cannot be the event time"},
		{"header without a name", func(c *Config) { c.Events.UserField = "$header." }, "events.user_field", "needs a header name"},
		{"path too deep", func(c *Config) { c.Events.UserField = strings.Repeat("a.", MaxPathDepth) + "a" }, "events.user_field", "levels, at most"},
		{"avro without schemas", func(c *Config) { c.Events.Format = FormatAvro }, "events.schema_registry.url", "required with events.format avro or protobuf"},
		{"registry url", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL = FormatAvro, "registry:8081"
		}, "events.schema_registry.url", "must be an http:// or https:// URL"},
		{"registry url credentials", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL = FormatAvro, "http://u:p@registry:8081"
		}, "events.schema_registry.url", "must not hold credentials"},
		{"registry username without password", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL, c.Events.SchemaRegistry.Username = FormatAvro, "http://r:8081", "u"
		}, "events.schema_registry.password", "required with events.schema_registry.username"},
		{"registry with json", func(c *Config) { c.Events.SchemaRegistry.URL = "http://r:8081" }, "events.schema_registry", "only used with events.format avro or protobuf"},
		{"registry tls key without cert", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL = FormatAvro, "https://r:8081"
			c.Events.SchemaRegistry.TLS = TLS{Enabled: true, KeyFile: "/dev/null"}
		}, "events.schema_registry.tls.cert_file", "required with events.schema_registry.tls.key_file"},
		{"schema file id", func(c *Config) {
			c.Events.Format, c.Events.SchemaFiles = FormatAvro, []SchemaFile{{ID: 0, File: "/dev/null"}}
		}, "events.schema_files[0].id", "must be a schema id ≥ 1"},
		{"schema file duplicate id", func(c *Config) {
			c.Events.Format, c.Events.SchemaFiles = FormatAvro, []SchemaFile{{ID: 1, File: "/dev/null"}, {ID: 1, File: "/dev/null"}}
		}, "events.schema_files[1].id", "duplicate schema id 1"},
		{"schema file unreadable", func(c *Config) {
			c.Events.Format, c.Events.SchemaFiles = FormatAvro, []SchemaFile{{ID: 1, File: "/nonexistent/x.avsc"}}
		}, "events.schema_files[0].file", "cannot read"},
		{"protobuf framing", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL, c.Events.Protobuf.MessageIndexes = FormatProtobuf, "http://r:8081", "kafkajs"
		}, "events.protobuf.message_indexes", "must be one of confluent, none"},
		{"protobuf message with confluent framing", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL, c.Events.Protobuf.Message = FormatProtobuf, "http://r:8081", "a.B"
		}, "events.protobuf.message", "only used with events.protobuf.message_indexes: none"},
		{"protobuf keys with avro", func(c *Config) {
			c.Events.Format, c.Events.SchemaRegistry.URL, c.Events.Protobuf.MessageIndexes = FormatAvro, "http://r:8081", "none"
		}, "events.protobuf", "only used with events.format protobuf"},
		{"vector from a header", func(c *Config) {
			c.Histograms[0].Kind, c.Histograms[0].Field = KindAverage, "$header.v"
		}, "histograms[0].field", "a header cannot hold an average histogram's vector"},
		{"group by path through a list", func(c *Config) {
			c.Histograms[0].GroupBy, c.Histograms[0].Groups = "geo[1]", []string{"a"}
		}, "histograms[0].group_by", "goes through a list or map"},
		{"empty time field", func(c *Config) { c.Events.TimeField = "" }, "events.time_field", "must not be empty"},
		{"empty user field", func(c *Config) { c.Events.UserField = "" }, "events.user_field", "must not be empty"},
		{"user field is time field", func(c *Config) { c.Events.UserField = c.Events.TimeField }, "events.user_field", "must differ from events.time_field"},
		{"max message bytes", func(c *Config) { c.Events.MaxMessageBytes = 0 }, "events.max_message_bytes", "at least 1"},
		// window
		{"window size zero", func(c *Config) { c.Window.Size = 0 }, "window.size", "greater than 0"},
		{"window size negative", func(c *Config) { c.Window.Size = -1 }, "window.size", "greater than 0"},
		{"negative lateness", func(c *Config) { c.Window.AllowedLateness = Duration(-time.Second) }, "window.allowed_lateness", "must not be negative"},
		{"idle timeout zero", func(c *Config) { c.Window.IdlePartitionTimeout = 0 }, "window.idle_partition_timeout", "greater than 0"},
		{"clock skew margin negative", func(c *Config) { c.Window.ClockSkewMargin = -1 }, "window.clock_skew_margin", "must not be negative"},
		{"record times unknown", func(c *Config) { c.Window.RecordTimes = "LogAppendTime" }, "window.record_times", "must be one of broker, producer"},
		// histograms
		{"no histograms", func(c *Config) { c.Histograms = nil }, "histograms", "at least one histogram"},
		{"unknown kind", func(c *Config) { c.Histograms[0].Kind = "sum" }, "histograms[0].kind", `must be count or average, got "sum"`},
		{"average without users", func(c *Config) { avg(c); c.Histograms[0].Average.Users = 0 }, "histograms[0].average.users", "required"},
		{"average too many cells", func(c *Config) { avg(c); c.Histograms[0].Average.Users = 40_000_000 }, "histograms[0].average.users", "exceeds"},
		{"average without k", func(c *Config) { avg(c); c.Histograms[0].Average.K = 0 }, "histograms[0].average.k", "required"},
		{"average k inf", func(c *Config) { avg(c); c.Histograms[0].Average.K = math.Inf(1) }, "histograms[0].average.k", "finite"},
		{"average eta too large", func(c *Config) { avg(c); c.Histograms[0].Average.Eta = 0.34 }, "histograms[0].average.eta", "(0, 1/3)"},
		{"average eta NaN", func(c *Config) { avg(c); c.Histograms[0].Average.Eta = math.NaN() }, "histograms[0].average.eta", "(0, 1/3)"},
		{"average delta 1", func(c *Config) { avg(c); c.Histograms[0].Average.Delta = 1 }, "histograms[0].average.delta", "(0, 1)"},
		{"average with overflow bin", func(c *Config) { avg(c); c.Histograms[0].OverflowBin = "other" }, "histograms[0].overflow_bin", "not allowed for kind average"},
		{"average with group_by", func(c *Config) { avg(c); c.Histograms[0].GroupBy = "country"; c.Histograms[0].Groups = []string{"US"} }, "histograms[0].group_by", "not supported for kind average"},
		{"empty name", func(c *Config) { c.Histograms[1].Name = "" }, "histograms[1].name", "must not be empty"},
		{"name with slash", func(c *Config) { c.Histograms[0].Name = "a/b" }, "histograms[0].name", "must not contain /"},
		{"duplicate name", func(c *Config) { c.Histograms[1].Name = "pages" }, "histograms[1].name", `duplicate histogram name "pages" (also histograms[0])`},
		{"empty field", func(c *Config) { c.Histograms[0].Field = "" }, "histograms[0].field", "must not be empty"},
		{"one bin", func(c *Config) { c.Histograms[1].Bins = []string{"home"}; c.Histograms[1].OverflowBin = "" }, "histograms[1].bins", "must list at least 2 bins"},
		{"no bins", func(c *Config) { c.Histograms[1].Bins = nil }, "histograms[1].bins", "must list at least 2 bins"},
		{"duplicate bin", func(c *Config) { c.Histograms[0].Bins = []string{"home", "search", "home", "other"} }, "histograms[0].bins[2]", `duplicate bin "home" (also bins[0])`},
		{"empty bin", func(c *Config) { c.Histograms[0].Bins = []string{"home", "", "other"} }, "histograms[0].bins[1]", "bin must not be empty"},
		{"overflow bin not a bin", func(c *Config) { c.Histograms[0].OverflowBin = "misc" }, "histograms[0].overflow_bin", `"misc" is not among the bins`},
		{"selection epsilon_share 0", func(c *Config) { c.Histograms[1].Groups = nil; c.Selection.EpsilonShare = 0 }, "selection.epsilon_share", "greater than 0"},
		{"selection epsilon_share NaN", func(c *Config) { c.Selection.EpsilonShare = math.NaN() }, "selection.epsilon_share", "finite"},
		{"selection delta_share 1", func(c *Config) { c.Selection.DeltaShare = 1 }, "selection.delta_share", "at most 0.9"},
		{"selection key_sample_rate +Inf", func(c *Config) { c.Selection.KeySampleRate = math.Inf(1) }, "selection.key_sample_rate", "at most 1"},
		{"selection max_keys_per_window 0", func(c *Config) { c.Selection.MaxKeysPerWindow = 0 }, "selection.max_keys_per_window", "at least 1"},
		{"groups without group_by", func(c *Config) { c.Histograms[0].Groups = []string{"US"} }, "histograms[0].groups", "given without group_by"},
		{"duplicate group", func(c *Config) { c.Histograms[1].Groups = []string{"US", "DE", "US"} }, "histograms[1].groups[2]", `duplicate group "US" (also groups[0])`},
		{"empty group", func(c *Config) { c.Histograms[1].Groups = []string{"US", ""} }, "histograms[1].groups[1]", "group must not be empty"},
		{"histogram window negative", func(c *Config) { c.Histograms[0].Window = Duration(-time.Minute) }, "histograms[0].window", "greater than 0"},
		{"histogram window not a multiple", func(c *Config) { c.Histograms[1].Window = Duration(90 * time.Second) }, "histograms[1].window", "whole multiple of window.size (1m), got 1m30s"},
		{"histogram window does not divide the period", func(c *Config) { c.Histograms[0].Window = Duration(7 * time.Minute) }, "histograms[0].window", "must divide privacy.budget.period (24h), got 7m"},
		{"histogram window longer than the period", func(c *Config) { c.Histograms[0].Window = Duration(48 * time.Hour) }, "histograms[0].window", "must divide privacy.budget.period"},
		{"hour view without its own bound", func(c *Config) {
			c.Histograms[0].Window = Duration(time.Hour)
			c.Contribution.MaxWindowsPerUser = 5
			c.Contribution.MaxTrackedUsers = 0
		}, "histograms[0].max_windows_per_user", "required with contribution.max_windows_per_user for a histogram with its own window (1h, 24 per privacy.budget.period)"},
		{"histogram bound above its windows", func(c *Config) {
			c.Histograms[0].Window, c.Histograms[0].MaxWindowsPerUser = Duration(time.Hour), 25
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 5, 0
		}, "histograms[0].max_windows_per_user", "must be at most 24, the histogram's windows (1h) per privacy.budget.period (24h)"},
		{"day view bound above 1", func(c *Config) {
			c.Histograms[1].Window, c.Histograms[1].MaxWindowsPerUser = Duration(24*time.Hour), 2
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 5, 0
		}, "histograms[1].max_windows_per_user", "must be at most 1"},
		{"histogram bound without the bound on", func(c *Config) {
			c.Histograms[0].Window, c.Histograms[0].MaxWindowsPerUser = Duration(time.Hour), 3
		}, "histograms[0].max_windows_per_user", "needs contribution.max_windows_per_user"},
		{"histogram bound negative", func(c *Config) {
			c.Histograms[0].MaxWindowsPerUser = -1
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 5, 0
		}, "histograms[0].max_windows_per_user", "must be ≥ 1"},
		{"two bounds on one window size", func(c *Config) {
			c.Histograms[1].MaxWindowsPerUser = 3
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 5, 0
		}, "histograms[1].max_windows_per_user", "is 3 but histograms[0] (pages), with the same window (1m), is bounded by 5"},
		{"group_by is field", func(c *Config) { c.Histograms[1].GroupBy = "page" }, "histograms[1].group_by", "must differ from field"},
		// contribution
		{"max events per user", func(c *Config) { c.Contribution.MaxEventsPerUser = 0 }, "contribution.max_events_per_user", "at least 1"},
		{"max groups per user", func(c *Config) { c.Contribution.MaxGroupsPerUser = -1 }, "contribution.max_groups_per_user", "at least 1"},
		{"max tracked users", func(c *Config) { c.Contribution.MaxTrackedUsers = -1 }, "contribution.max_tracked_users", "≥ 0"},
		{"max windows per user", func(c *Config) { c.Contribution.MaxWindowsPerUser = -1 }, "contribution.max_windows_per_user", "≥ 0"},
		{"max windows per user too large", func(c *Config) { c.Contribution.MaxWindowsPerUser = 1 << 16 }, "contribution.max_windows_per_user", "at most 65535"},
		{"blind warning share NaN", func(c *Config) { c.Contribution.BlindWarningShare = math.NaN() }, "contribution.blind_warning_share", "must be a share in (0, 1]"},
		{"blind warning share Inf", func(c *Config) { c.Contribution.BlindWarningShare = math.Inf(1) }, "contribution.blind_warning_share", "must be a share in (0, 1]"},
		{"blind warning share negative", func(c *Config) { c.Contribution.BlindWarningShare = -0.1 }, "contribution.blind_warning_share", "must be a share in (0, 1]"},
		{"blind warning share above 1", func(c *Config) { c.Contribution.BlindWarningShare = 1.5 }, "contribution.blind_warning_share", "1 turns the warning off"},
		{"max windows with tracked cap", func(c *Config) { c.Contribution.MaxWindowsPerUser = 5; c.Contribution.MaxTrackedUsers = 1000 }, "contribution.max_tracked_users", "cannot be combined with contribution.max_windows_per_user"},
		// privacy
		{"mechanism", func(c *Config) { c.Privacy.Mechanism = "exponential" }, "privacy.mechanism", `must be one of dirichlet, gaussian, laplace, laplace-posterior, got "exponential"`},
		{"prior_alpha with dirichlet", func(c *Config) { c.Privacy.PriorAlpha = 1 }, "privacy.prior_alpha", "only applies to mechanism laplace-posterior"},
		{"prior_alpha with laplace", func(c *Config) { c.Privacy.Mechanism = "laplace"; c.Privacy.PriorAlpha = 2 }, "privacy.prior_alpha", "only applies to mechanism laplace-posterior"},
		{"prior_alpha zero", func(c *Config) { c.Privacy.Mechanism = "laplace-posterior"; c.Privacy.PriorAlpha = 0 }, "privacy.prior_alpha", "greater than 0"},
		{"prior_alpha negative", func(c *Config) { c.Privacy.Mechanism = "laplace-posterior"; c.Privacy.PriorAlpha = -1 }, "privacy.prior_alpha", "greater than 0"},
		{"prior_alpha NaN", func(c *Config) { c.Privacy.Mechanism = "laplace-posterior"; c.Privacy.PriorAlpha = math.NaN() }, "privacy.prior_alpha", "finite"},
		{"interval_level 1", func(c *Config) { c.Output.IntervalLevel = 1 }, "output.interval_level", "confidence level in [0.5, 0.999]"},
		{"interval_level 0.4", func(c *Config) { c.Output.IntervalLevel = 0.4 }, "output.interval_level", "confidence level"},
		{"interval_level NaN", func(c *Config) { c.Output.IntervalLevel = math.NaN() }, "output.interval_level", "confidence level"},
		{"total_share 0", func(c *Config) { c.Privacy.TotalShare = 0 }, "privacy.total_share", "greater than 0 and at most 0.5"},
		{"total_share 0.6", func(c *Config) { c.Privacy.TotalShare = 0.6 }, "privacy.total_share", "at most 0.5"},
		{"total_share +Inf", func(c *Config) { c.Privacy.TotalShare = math.Inf(1) }, "privacy.total_share", "greater than 0"},
		{"prior_alpha Inf", func(c *Config) { c.Privacy.Mechanism = "laplace-posterior"; c.Privacy.PriorAlpha = math.Inf(1) }, "privacy.prior_alpha", "finite"},
		{"prior_alpha too large", func(c *Config) { c.Privacy.Mechanism = "laplace-posterior"; c.Privacy.PriorAlpha = 2e12 }, "privacy.prior_alpha", "at most 1e12"},
		{"calibration with laplace-posterior", func(c *Config) {
			c.Privacy.Mechanism = "laplace-posterior"
			c.Privacy.PriorAlpha = 1
			c.Privacy.Calibration = "diffuse"
		}, "privacy.calibration", "only applies to mechanism dirichlet"},
		{"calibration", func(c *Config) { c.Privacy.Calibration = "tight" }, "privacy.calibration", "must be one of concentrated, diffuse, closed-form"},
		{"optimal without its planning figure", func(c *Config) { c.Privacy.Calibration = "optimal" }, "privacy.calibration", "optimal needs privacy.expected_events_per_release"},
		{"expected events negative", func(c *Config) { c.Privacy.ExpectedEventsPerRelease = -1 }, "privacy.expected_events_per_release", "finite number ≥ 0"},
		{"expected events NaN", func(c *Config) { c.Privacy.ExpectedEventsPerRelease = math.NaN() }, "privacy.expected_events_per_release", "finite number ≥ 0"},
		{"calibration with gaussian", func(c *Config) { c.Privacy.Mechanism = "gaussian"; c.Privacy.Calibration = "diffuse" }, "privacy.calibration", "only applies to mechanism dirichlet"},
		{"calibration with laplace", func(c *Config) { c.Privacy.Mechanism = "laplace"; c.Privacy.Calibration = "closed-form" }, "privacy.calibration", "only applies to mechanism dirichlet"},
		{"neighbour", func(c *Config) { c.Privacy.Neighbour = "bounded" }, "privacy.neighbour", "must be one of replace, add_remove"},
		{"order 1", func(c *Config) { c.Privacy.Order = 1 }, "privacy.order", "greater than 1"},
		{"order NaN", func(c *Config) { c.Privacy.Order = math.NaN() }, "privacy.order", "finite"},
		{"order Inf", func(c *Config) { c.Privacy.Order = math.Inf(1) }, "privacy.order", "finite"},
		{"epsilon zero", func(c *Config) { c.Privacy.Budget.Epsilon = 0 }, "privacy.budget.epsilon", "greater than 0"},
		{"epsilon negative", func(c *Config) { c.Privacy.Budget.Epsilon = -1 }, "privacy.budget.epsilon", "greater than 0"},
		{"epsilon NaN", func(c *Config) { c.Privacy.Budget.Epsilon = math.NaN() }, "privacy.budget.epsilon", "finite"},
		{"epsilon Inf", func(c *Config) { c.Privacy.Budget.Epsilon = math.Inf(1) }, "privacy.budget.epsilon", "finite"},
		{"delta zero", func(c *Config) { c.Privacy.Budget.Delta = 0 }, "privacy.budget.delta", "strictly between 0 and 1"},
		{"delta one", func(c *Config) { c.Privacy.Budget.Delta = 1 }, "privacy.budget.delta", "strictly between 0 and 1"},
		{"delta NaN", func(c *Config) { c.Privacy.Budget.Delta = math.NaN() }, "privacy.budget.delta", "finite"},
		{"delta one half", func(c *Config) { c.Privacy.Budget.Delta = 0.5 }, "privacy.budget.delta", "0.5 is above 0.0001"},
		{"delta just above the bound", func(c *Config) { c.Privacy.Budget.Delta = 1.01e-4 }, "privacy.budget.delta", "is above 0.0001"},
		{"delta at 1/expected users", func(c *Config) { c.Privacy.ExpectedUsers = 1_000_000 }, "privacy.budget.delta", "at least 1/privacy.expected_users (δ·users = 1)"},
		{"delta above 1/expected users", func(c *Config) { c.Privacy.Budget.Delta = 1e-5; c.Privacy.ExpectedUsers = 200_000 }, "privacy.budget.delta", "δ·users = 2)"},
		{"expected users negative", func(c *Config) { c.Privacy.ExpectedUsers = -1 }, "privacy.expected_users", "≥ 0"},
		{"period zero", func(c *Config) { c.Privacy.Budget.Period = 0 }, "privacy.budget.period", "greater than 0"},
		{"period not a multiple", func(c *Config) { c.Privacy.Budget.Period = Duration(90 * time.Second) }, "privacy.budget.period", "must be a whole multiple of window.size (1m), got 1m30s: choose a period of whole windows (e.g. 2m) or a window.size that divides 1m30s"},
		// state, log
		{"state dir", func(c *Config) { c.State.Dir = "" }, "state.dir", "must not be empty"},
		{"state ledger", func(c *Config) { c.State.Ledger = "etcd" }, "state.ledger", `must be one of bolt, kafka, got "etcd"`},
		{"kafka ledger without topic", func(c *Config) { c.State.Ledger = LedgerKafka }, "state.ledger_topic", "must be set when state.ledger is kafka"},
		{"kafka ledger bad topic", func(c *Config) { c.State.Ledger, c.State.LedgerTopic = LedgerKafka, "a/b" }, "state.ledger_topic", "not a valid Kafka topic name"},
		{"kafka ledger on the output topic", func(c *Config) { c.State.Ledger, c.State.LedgerTopic = LedgerKafka, c.Kafka.OutputTopic }, "state.ledger_topic", "must differ from kafka.output_topic"},
		{"kafka ledger on the embedded broker", func(c *Config) { c.State.Ledger, c.State.LedgerTopic, c.Kafka.Brokers = LedgerKafka, "ledger", nil }, "state.ledger", "kafka needs kafka.brokers"},
		// kafka.distributed
		{"distributed on bolt", func(c *Config) { dist(c); c.State.Ledger = LedgerBolt }, "kafka.distributed", "needs state.ledger: kafka"},
		{"distributed partitioner", func(c *Config) { dist(c); c.Kafka.Distributed.Partitioner = "crc32" }, "kafka.distributed.partitioner", "must be one of murmur2, fnv1a"},
		{"distributed prefix", func(c *Config) { dist(c); c.Kafka.Distributed.InternalTopicPrefix = "a b" }, "kafka.distributed.internal_topic_prefix", "not a valid Kafka topic name"},
		{"distributed replication", func(c *Config) { dist(c); c.Kafka.Distributed.ReplicationFactor = -1 }, "kafka.distributed.replication_factor", "must be 0"},
		{"distributed txn timeout short", func(c *Config) { dist(c); c.Kafka.Distributed.TransactionTimeout = Duration(500 * time.Millisecond) }, "kafka.distributed.transaction_timeout", "must be from 1s to 15m0s"},
		{"distributed txn timeout long", func(c *Config) { dist(c); c.Kafka.Distributed.TransactionTimeout = Duration(time.Hour) }, "kafka.distributed.transaction_timeout", "got 1h0m0s"},
		{"distributed txn timeout negative", func(c *Config) { dist(c); c.Kafka.Distributed.TransactionTimeout = Duration(-time.Second) }, "kafka.distributed.transaction_timeout", "must be from"},
		{"distributed partition change grace negative", func(c *Config) { dist(c); c.Kafka.Distributed.PartitionChangeGrace = Duration(-time.Second) }, "kafka.distributed.partition_change_grace", "must not be negative"},
		{"distributed topic clash", func(c *Config) { dist(c); c.Kafka.OutputTopic = c.Kafka.PartialsTopic() }, "kafka.distributed.internal_topic_prefix", "must differ from kafka.output_topic"},
		{"distributed average users too many", func(c *Config) { dist(c); avg(c); c.Histograms[0].Average.Users = 10000 }, "histograms", "more than the 35000 one partial record"},
		{"distributed too many cells", func(c *Config) {
			dist(c)
			c.Histograms[1].Groups = make([]string, 20000)
			for i := range c.Histograms[1].Groups {
				c.Histograms[1].Groups[i] = fmt.Sprintf("g%d", i)
			}
		}, "histograms", "more than the 35000 one partial record"},
		{"log format", func(c *Config) { c.Log.Format = "text" }, "log.format", `must be one of json, console, got "text"`},
		{"log level", func(c *Config) { c.Log.Level = "trace" }, "log.level", "must be one of debug, info, warn, error"},
		// generator
		{"generator users", func(c *Config) { c.Generator = Generator{Enabled: true, Users: 0, EventsPerSecond: 1, TimeScale: 1} }, "generator.users", "at least 1"},
		{"generator rate", func(c *Config) { c.Generator = Generator{Enabled: true, Users: 1, EventsPerSecond: 0, TimeScale: 1} }, "generator.events_per_second", "at least 1"},
		{"generator time scale", func(c *Config) { c.Generator = Generator{Enabled: true, Users: 1, EventsPerSecond: 1, TimeScale: 0.5} }, "generator.time_scale", "at least 1"},
		{"generator time scale NaN even when off", func(c *Config) { c.Generator.TimeScale = math.NaN() }, "generator.time_scale", "finite"},
		// http
		{"http address not host:port", func(c *Config) { c.HTTP.Address = "8080" }, "http.address", "is not host:port"},
		{"http every interface without allow_remote", func(c *Config) { c.HTTP.Address = ":8080" }, "http.address", "set http.allow_remote: true"},
		{"http public address without allow_remote", func(c *Config) { c.HTTP.Address = "10.0.0.1:8080" }, "http.address", "beyond loopback"},
		// the operator listener (issue #21, item 8)
		{"operator address not host:port", func(c *Config) { c.HTTP.OperatorAddress = "localhost" }, "http.operator_address", "is not host:port"},
		{"operator beyond loopback without its own allow_remote", func(c *Config) {
			c.HTTP = HTTP{Address: ":8080", AllowRemote: true, OperatorAddress: ":8081"}
		}, "http.operator_address", "set http.operator_allow_remote: true"},
		{"operator on the public listener", func(c *Config) { c.HTTP.OperatorAddress = c.HTTP.Address }, "http.operator_address", "is the listener of http.address"},
		{"operator on every interface, public on loopback, same port", func(c *Config) {
			c.HTTP = HTTP{Address: "127.0.0.1:8080", OperatorAddress: "0.0.0.0:8080", OperatorAllowRemote: true}
		}, "http.operator_address", "served apart from the dashboard"},
		{"operator on localhost, public on 127.0.0.1, same port", func(c *Config) {
			c.HTTP = HTTP{Address: "127.0.0.1:9000", OperatorAddress: "localhost:9000"}
		}, "http.operator_address", "give it another port"},
		{"operator token is the public token", func(c *Config) { c.HTTP.BearerToken, c.HTTP.OperatorToken = "t", "t" }, "http.operator_token", "same as http.bearer_token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, base, nil)
			tc.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("want %s: ...%s..., got no error", tc.path, tc.frag)
			}
			probs := problems(t, err)
			if _, ok := findProblem(probs, tc.path, tc.frag); !ok {
				t.Fatalf("want %s: ...%s..., got\n%v", tc.path, tc.frag, err)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	dir := t.TempDir()
	writeTLSFiles(t, dir)
	for _, tc := range []struct {
		name   string
		mutate func(c *Config)
	}{
		{"embedded broker", func(c *Config) { c.Kafka.Brokers = nil }},
		{"ipv6 broker", func(c *Config) { c.Kafka.Brokers = []string{"[::1]:9092"} }},
		{"zero lateness", func(c *Config) { c.Window.AllowedLateness = 0 }},
		{"gaussian with default calibration", func(c *Config) { c.Privacy.Mechanism = "gaussian" }},
		{"laplace without calibration", func(c *Config) { c.Privacy.Mechanism = "laplace"; c.Privacy.Calibration = "" }},
		{"more groups per user than groups", func(c *Config) { c.Contribution.MaxGroupsPerUser = 10 }},
		{"tls off ignores its files", func(c *Config) { c.Kafka.TLS = TLS{CAFile: "/does/not/exist"} }},
		{"tls system roots", func(c *Config) { c.Kafka.TLS = TLS{Enabled: true} }},
		{"tls with files", func(c *Config) {
			c.Kafka.TLS = TLS{Enabled: true, CAFile: dir + "/ca.pem", CertFile: dir + "/client.pem", KeyFile: dir + "/client-key.pem"}
		}},
		{"sasl", func(c *Config) { c.Kafka.SASL = SASL{Mechanism: "scram-sha-256", Username: "u", Password: "p"} }},
		{"generator off ignores its numbers", func(c *Config) { c.Generator = Generator{Users: -1} }},
		{"period equals window", func(c *Config) { c.Privacy.Budget.Period = c.Window.Size }},
		{"histogram windows", func(c *Config) {
			c.Histograms[0].Window = Duration(time.Hour)
			c.Histograms[1].Window = Duration(24 * time.Hour)
		}},
		{"histogram window equal to window.size", func(c *Config) { c.Histograms[0].Window = c.Window.Size }},
		{"minute, hour and day views with their own bounds", func(c *Config) {
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 2, 0
			c.Histograms[0].Window, c.Histograms[0].MaxWindowsPerUser = Duration(time.Hour), 24
			c.Histograms = append(c.Histograms, c.Histograms[1])
			c.Histograms[2].Name, c.Histograms[2].Window, c.Histograms[2].MaxWindowsPerUser = "daily", Duration(24*time.Hour), 1
		}},
		{"hour view with the bound of the minute view", func(c *Config) {
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 2, 0
			c.Histograms[0].Window, c.Histograms[0].MaxWindowsPerUser = Duration(time.Hour), 2
		}},
		{"a lone minute histogram overriding the contribution bound", func(c *Config) {
			c.Contribution.MaxWindowsPerUser, c.Contribution.MaxTrackedUsers = 2, 0
			c.Histograms[1].Window, c.Histograms[1].MaxWindowsPerUser = Duration(time.Hour), 4
			c.Histograms[0].MaxWindowsPerUser = 7
		}},
		{"average histogram window", func(c *Config) { avg(c); c.Histograms[0].Window = Duration(3 * time.Minute) }},
		{"delta at the bound", func(c *Config) { c.Privacy.Budget.Delta = MaxDelta }},
		{"delta just under 1/expected users", func(c *Config) { c.Privacy.ExpectedUsers = 999_999 }},
		{"embedded port", func(c *Config) { c.Kafka.Brokers, c.Kafka.EmbeddedPort = nil, 65535 }},
		{"http off", func(c *Config) { c.HTTP.Address = "" }},
		{"kafka ledger", func(c *Config) { c.State.Ledger, c.State.LedgerTopic = LedgerKafka, "dp-stage-ledger" }},
		{"bolt ledger ignores the ledger topic", func(c *Config) { c.State.LedgerTopic = "a/b" }},
		{"distributed", func(c *Config) { dist(c) }},
		{"kafka ledger and distributed with sasl", func(c *Config) {
			dist(c)
			c.Kafka.SASL = SASL{Mechanism: "plain", Username: "u", Password: "p"}
		}},
		{"distributed with the window bound", func(c *Config) { dist(c); c.Contribution.MaxWindowsPerUser = 5 }},
		{"distributed with max_tracked_users", func(c *Config) { dist(c); c.Contribution.MaxTrackedUsers = 10 }},
		{"distributed with histogram windows", func(c *Config) { dist(c); c.Histograms[1].Window = Duration(time.Hour) }},
		{"distributed with an average histogram", func(c *Config) { dist(c); avg(c) }},
		{"rebalance timeout default", func(c *Config) { c.Kafka.RebalanceTimeout = 0 }},
		{"rebalance timeout at session", func(c *Config) { c.Kafka.RebalanceTimeout = c.Kafka.SessionTimeout }},
		{"http ipv6 loopback", func(c *Config) { c.HTTP.Address = "[::1]:0" }},
		{"http localhost", func(c *Config) { c.HTTP.Address = "localhost:9000" }},
		{"http remote allowed", func(c *Config) { c.HTTP = HTTP{Address: ":8080", AllowRemote: true} }},
		{"operator off", func(c *Config) { c.HTTP.OperatorAddress = "" }},
		{"both off", func(c *Config) { c.HTTP.Address, c.HTTP.OperatorAddress = "", "" }},
		{"both on port 0", func(c *Config) { c.HTTP.Address, c.HTTP.OperatorAddress = "127.0.0.1:0", "127.0.0.1:0" }},
		{"same port on other interfaces", func(c *Config) {
			c.HTTP = HTTP{Address: "10.0.0.1:8080", AllowRemote: true, OperatorAddress: "127.0.0.1:8080"}
		}},
		{"both remote, own tokens", func(c *Config) {
			c.HTTP = HTTP{Address: ":8080", AllowRemote: true, BearerToken: "a", OperatorAddress: ":8081", OperatorAllowRemote: true, OperatorToken: "b"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, base, nil)
			tc.mutate(c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestValidateReportsEverything(t *testing.T) {
	c := mustParse(t, base, nil)
	c.Histograms[1].Bins = []string{"x"}
	c.Privacy.Budget.Epsilon = -1
	c.Log.Level = "loud"
	c.Kafka.OutputTopic = c.Kafka.InputTopic
	probs := problems(t, c.Validate())
	want := []string{
		// Values changed in Go keep the line of the file's key for their
		// path (or its nearest enclosing key); log is not in the file.
		"kafka.output_topic: line 2: must differ from kafka.input_topic",
		"histograms[1].bins: line 11: must list at least 2 bins",
		"privacy.budget.epsilon: line 16: must be a finite number greater than 0",
		`log.level: must be one of debug, info, warn, error, got "loud"`,
	}
	if len(probs) != len(want) {
		t.Fatalf("got %d problems: %v", len(probs), probs)
	}
	for i, w := range want {
		if probs[i].String() != w {
			t.Errorf("problem %d = %q, want %q", i, probs[i], w)
		}
	}
	msg := c.Validate().Error()
	if strings.Count(msg, "\n") != len(want) {
		t.Errorf("want one problem per line:\n%s", msg)
	}
}

func TestTLSClientConfigOff(t *testing.T) {
	tc, err := TLS{CAFile: "/nope"}.ClientConfig()
	if tc != nil || err != nil {
		t.Errorf("disabled TLS: %v, %v", tc, err)
	}
	if _, err := (TLS{Enabled: true, CAFile: "/nope/ca.pem"}).ClientConfig(); err == nil {
		t.Error("want an error for a missing CA file")
	}
}

// avg turns histogram 0 of the base config into a valid average histogram.
func avg(c *Config) {
	h := &c.Histograms[0]
	h.Kind, h.OverflowBin = KindAverage, ""
	h.Average = Average{Users: 100, K: 50, Eta: 0.01}
}

func TestAverageHistogramDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`
kafka:
  brokers: [localhost:9092]
histograms:
  - name: interests
    kind: average
    field: interests
    bins: [a, b, c, d, e, f, g, h, i, j, k, l]
    average: {users: 500, k: 100}
privacy:
  budget:
    epsilon: 1
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Histograms[0]
	if !h.IsAverage() || h.Average.Eta != 0.1/12 || h.Average.Delta != 0 {
		t.Errorf("average defaults: kind %q eta %g delta %g, want average, 0.1/12, 0", h.Kind, h.Average.Eta, h.Average.Delta)
	}
}

// Kafka.Rebalance is rebalance_timeout when set, else half the session
// timeout (the takeover bound in source/group.go relies on it).
func TestKafkaRebalance(t *testing.T) {
	for _, tc := range []struct {
		session, rebalance, want time.Duration
	}{
		{10 * time.Second, 0, 5 * time.Second},
		{time.Second, 0, 500 * time.Millisecond},
		{10 * time.Second, 3 * time.Second, 3 * time.Second},
	} {
		k := Kafka{SessionTimeout: Duration(tc.session), RebalanceTimeout: Duration(tc.rebalance)}
		if got := k.Rebalance().D(); got != tc.want {
			t.Errorf("session %v, rebalance_timeout %v: Rebalance() = %v, want %v", tc.session, tc.rebalance, got, tc.want)
		}
	}
}

// dist turns the distributed mode on as a loaded config would have it.
func dist(c *Config) {
	c.Kafka.Distributed = Distributed{Enabled: true, Partitioner: PartitionerMurmur2, CreateTopics: true}
	c.State.Ledger, c.State.LedgerTopic = LedgerKafka, "dp-stage.ledger"
	c.Contribution.MaxTrackedUsers = 0
}

func TestDistributedDefaults(t *testing.T) {
	const doc = `
kafka:
  brokers: [localhost:9092]
  group_id: views
  distributed:
    enabled: true
%s
state:
  ledger: kafka
histograms:
  - name: pages
    field: page
    bins: [home, other]
privacy:
  budget:
    epsilon: 1
`
	cfg, err := Parse([]byte(fmt.Sprintf(doc, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Kafka.Distributed
	if d.Partitioner != PartitionerMurmur2 || !d.CreateTopics || cfg.State.LedgerTopic != "views.ledger" || cfg.Contribution.MaxTrackedUsers != 0 {
		t.Errorf("defaults: %+v, ledger topic %q, max_tracked_users %d", d, cfg.State.LedgerTopic, cfg.Contribution.MaxTrackedUsers)
	}
	if d.TransactionTimeout != DefaultTransactionTimeout || d.Txn() != 10*time.Second || (Distributed{}).Txn() != 10*time.Second {
		t.Errorf("transaction timeout default: %v, Txn %v", d.TransactionTimeout, d.Txn())
	}
	if cfg.Kafka.PartialsTopic() != "views.partials" || cfg.Kafka.ProgressTopic() != "views.progress" || cfg.Kafka.BoundTransactionalID(7) != "views.bound/7" || cfg.Kafka.ReleaseGroupID() != "views.release" {
		t.Errorf("names: %s %s %s %s", cfg.Kafka.PartialsTopic(), cfg.Kafka.ProgressTopic(), cfg.Kafka.BoundTransactionalID(7), cfg.Kafka.ReleaseGroupID())
	}
	cfg, err = Parse([]byte(fmt.Sprintf(doc, "    create_topics: false\n    internal_topic_prefix: x-")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Distributed.CreateTopics || cfg.State.LedgerTopic != "x-ledger" || cfg.Kafka.PartialsTopic() != "x-partials" {
		t.Errorf("explicit create_topics false / prefix: %+v, ledger %q", cfg.Kafka.Distributed, cfg.State.LedgerTopic)
	}
}
