package config

import (
	"fmt"
	"math"
)

// Warning is a setting that is valid but weakens what the stage promises;
// `stage validate` prints each one and `stage run` logs it.
type Warning struct {
	Path    string // YAML path of the setting
	Message string
	// Line is the 1-based line of the setting in the file (Config.LineOf);
	// 0 when unknown.
	Line int
}

// String formats the warning as "path: line N: message", like a Problem.
func (w Warning) String() string {
	if w.Line > 0 {
		return fmt.Sprintf("%s: line %d: %s", w.Path, w.Line, w.Message)
	}
	return fmt.Sprintf("%s: %s", w.Path, w.Message)
}

// LineOf is the 1-based line in the file of the setting at path (a YAML
// path such as "contribution.max_windows_per_user"), or of its nearest
// enclosing key the file gave; 0 when there is none (a default, or a
// Config built in Go).
func (c *Config) LineOf(path string) int { return c.lineOf(path) }

// Warnings lists the settings of a valid configuration that weaken the
// guarantee or rest on a trust assumption the operator must check.
func (c *Config) Warnings() []Warning {
	var out []Warning
	if c.Window.Watermark == WatermarkEvent {
		out = append(out, Warning{Path: "window.watermark", Message: "event: windows close by the events' own time field, " +
			"which users control: one event stamped ahead (up to events.max_future) can close open windows early and make " +
			"other users' events late, changing released values by more than one user's contribution. Use it only to replay " +
			"trusted historical data; the default, arrival, closes by Kafka record time"})
	}
	if c.Window.Arrival() && c.Window.RecordTimes == RecordTimesProducer {
		out = append(out, Warning{Path: "window.record_times", Message: "producer: record times set by producers (CreateTime) are accepted; " +
			"a record appended more than allowed_lateness after its own record time (a retry, a stalled producer, a producer clock behind) " +
			"is counted or dropped as late depending on whether the stage was lagging, i.e. on other users' load. " +
			"Prefer message.timestamp.type=LogAppendTime on the input topic and record_times: broker"})
	}
	if n, d := c.Privacy.ExpectedUsers, c.Privacy.Budget.Delta; n > 0 && d*float64(n) > DeltaUsersWarn {
		out = append(out, Warning{Path: "privacy.budget.delta", Message: fmt.Sprintf("δ·expected_users = %.3g: "+
			"a mechanism that publishes each user's events in the clear with probability δ meets this guarantee and would expose "+
			"some user with a chance of 1−(1−δ)^users ≈ %.2g%% per period; δ ≤ %.3g (δ·users ≤ %g) keeps that below 1%%",
			d*float64(n), -100*math.Expm1(float64(n)*math.Log1p(-d)), DeltaUsersWarn/float64(n), DeltaUsersWarn)})
	}
	if d := c.Kafka.Distributed; d.Enabled && d.PartitionChangeGrace < DefaultPartitionChangeGrace {
		out = append(out, Warning{Path: "kafka.distributed.partition_change_grace", Message: fmt.Sprintf("%v, below the default (%v), which covers the common producer clients' default metadata refresh plus delivery timeout: "+
			"after partitions are added, producers that have not refreshed their metadata yet write with the old count, and windows of theirs "+
			"released after the grace would say \"complete\": true without the events dropped as wrong_partition. "+
			"Set it to at least the longest metadata refresh interval of the input's producers plus their delivery timeout "+
			"(Java metadata.max.age.ms + delivery.timeout.ms, librdkafka topic.metadata.refresh.interval.ms + message.timeout.ms, "+
			"Sarama Metadata.RefreshFrequency; docs/distributed.md, \"Partitions added\")",
			d.PartitionChangeGrace.D(), DefaultPartitionChangeGrace.D())})
	}
	out = append(out, c.collisionWarnings()...)
	return out
}
