package config

import (
	"fmt"
	"slices"
	"time"
)

// The defaults ApplyDefaults fills in.
const (
	DefaultGroupID              = "dp-stage"
	DefaultInputTopic           = "events"
	DefaultOutputTopic          = "private-histograms"
	DefaultInputPartitions      = 4
	DefaultFormat               = FormatJSON
	DefaultTimeField            = "ts"
	DefaultUserField            = "user_id"
	DefaultMaxMessageBytes      = 65536
	DefaultWindowSize           = Duration(time.Minute)
	DefaultWatermark            = WatermarkArrival
	DefaultAllowedLateness      = Duration(5 * time.Second)
	DefaultIdlePartitionTimeout = Duration(10 * time.Second)
	DefaultClockSkewMargin      = Duration(2 * time.Second)
	DefaultRecordTimes          = RecordTimesBroker
	DefaultSessionTimeout       = Duration(10 * time.Second)
	DefaultMaxFuture            = Duration(time.Hour)
	DefaultRetain               = Duration(7 * 24 * time.Hour)
	DefaultMaxEventsPerUser     = 1
	DefaultMaxGroupsPerUser     = 1
	DefaultMaxTrackedUsers      = 2_000_000
	DefaultMechanism            = MechanismDirichlet
	DefaultCalibration          = CalibrationConcentrated
	DefaultNeighbour            = NeighbourReplace
	DefaultOrder                = 2.0
	DefaultPriorAlpha           = 1.0
	DefaultTotalShare           = 0.1  // see TotalShare and docs/intervals.md
	DefaultIntervalLevel        = 0.95 // see Output.IntervalLevel
	DefaultDelta                = 1e-6
	DefaultPeriod               = Duration(24 * time.Hour)
	DefaultStateDir             = "./stage-state"
	DefaultLogFormat            = LogFormatJSON
	DefaultLogLevel             = LogLevelInfo
	DefaultGeneratorUsers       = 300
	DefaultGeneratorEPS         = 200
	DefaultGeneratorTimeScale   = 1.0
	DefaultHTTPAddress          = "127.0.0.1:8080"
	DefaultHTTPOperatorAddress  = "127.0.0.1:8081"
)

// ApplyDefaults fills in every setting the file left out, with the defaults
// documented on the fields (and listed as the Default* constants). A value
// the file gave explicitly is kept even when it is zero or empty
// (allowed_lateness: 0s stays 0; max_events_per_user: 0 stays 0 and fails
// validation): for a Config from [Parse] or [Load], "left out" means absent
// or null in the file; for a Config built in Go, a zero value. Calling it
// again changes nothing.
//
// privacy.calibration defaults to concentrated only for the dirichlet
// mechanism; it stays empty for gaussian, laplace and laplace-posterior,
// where it has no meaning. privacy.prior_alpha defaults to 1 only for
// laplace-posterior and stays 0 otherwise. privacy.budget.epsilon has no default. Histograms get no
// implicit group here: see [Histogram.GroupNames].
func (c *Config) ApplyDefaults() {
	str := func(p *string, path, def string) {
		if *p == "" && !c.isSet(path) {
			*p = def
		}
	}
	num := func(p *int, path string, def int) {
		if *p == 0 && !c.isSet(path) {
			*p = def
		}
	}
	flt := func(p *float64, path string, def float64) {
		if *p == 0 && !c.isSet(path) {
			*p = def
		}
	}
	dur := func(p *Duration, path string, def Duration) {
		if *p == 0 && !c.isSet(path) {
			*p = def
		}
	}

	str(&c.Kafka.GroupID, "kafka.group_id", DefaultGroupID)
	str(&c.Kafka.InputTopic, "kafka.input_topic", DefaultInputTopic)
	str(&c.Kafka.OutputTopic, "kafka.output_topic", DefaultOutputTopic)
	num(&c.Kafka.InputPartitions, "kafka.input_partitions", DefaultInputPartitions)
	dur(&c.Kafka.SessionTimeout, "kafka.session_timeout", DefaultSessionTimeout)

	str(&c.Events.Format, "events.format", DefaultFormat)
	str(&c.Events.TimeField, "events.time_field", DefaultTimeField)
	str(&c.Events.UserField, "events.user_field", DefaultUserField)
	num(&c.Events.MaxMessageBytes, "events.max_message_bytes", DefaultMaxMessageBytes)
	dur(&c.Events.MaxFuture, "events.max_future", DefaultMaxFuture)

	dur(&c.Window.Size, "window.size", DefaultWindowSize)
	str(&c.Window.Watermark, "window.watermark", DefaultWatermark)
	dur(&c.Window.AllowedLateness, "window.allowed_lateness", DefaultAllowedLateness)
	dur(&c.Window.IdlePartitionTimeout, "window.idle_partition_timeout", DefaultIdlePartitionTimeout)
	dur(&c.Window.ClockSkewMargin, "window.clock_skew_margin", DefaultClockSkewMargin)
	str(&c.Window.RecordTimes, "window.record_times", DefaultRecordTimes)

	num(&c.Contribution.MaxEventsPerUser, "contribution.max_events_per_user", DefaultMaxEventsPerUser)
	num(&c.Contribution.MaxGroupsPerUser, "contribution.max_groups_per_user", DefaultMaxGroupsPerUser)
	if c.Contribution.MaxWindowsPerUser <= 0 && !c.Kafka.Distributed.Enabled {
		num(&c.Contribution.MaxTrackedUsers, "contribution.max_tracked_users", DefaultMaxTrackedUsers)
	} // with the cross-window bound or kafka.distributed an absent cap stays 0 (no cap; see Contribution)
	flt(&c.Contribution.BlindWarningShare, "contribution.blind_warning_share", DefaultBlindWarningShare)

	str(&c.Privacy.Mechanism, "privacy.mechanism", DefaultMechanism)
	if c.Privacy.Mechanism == MechanismDirichlet {
		def := DefaultCalibration
		if c.Privacy.ExpectedEventsPerRelease > 0 {
			def = CalibrationOptimal // the utility-optimal (r, α) at the planning figure
		}
		str(&c.Privacy.Calibration, "privacy.calibration", def)
	}
	if c.Privacy.Mechanism == MechanismLaplacePosterior {
		flt(&c.Privacy.PriorAlpha, "privacy.prior_alpha", DefaultPriorAlpha)
	}
	str(&c.Privacy.Neighbour, "privacy.neighbour", DefaultNeighbour)
	flt(&c.Privacy.Order, "privacy.order", DefaultOrder)
	flt(&c.Privacy.TotalShare, "privacy.total_share", DefaultTotalShare)
	c.selectionDefaults(flt, num)
	flt(&c.Output.IntervalLevel, "output.interval_level", DefaultIntervalLevel)
	flt(&c.Privacy.Budget.Delta, "privacy.budget.delta", DefaultDelta)
	dur(&c.Privacy.Budget.Period, "privacy.budget.period", DefaultPeriod)

	for i := range c.Histograms {
		h := &c.Histograms[i]
		p := fmt.Sprintf("histograms[%d]", i)
		str(&h.Kind, p+".kind", KindCount)
		if h.Kind == KindAverage && len(h.Bins) > 0 {
			flt(&h.Average.Eta, p+".average.eta", min(0.01, 0.1/float64(len(h.Bins))))
		}
	}

	str(&c.State.Dir, "state.dir", DefaultStateDir)
	dur(&c.State.Retain, "state.retain", DefaultRetain)
	str(&c.State.Ledger, "state.ledger", LedgerBolt)
	if c.Kafka.Distributed.Enabled {
		str(&c.Kafka.Distributed.Partitioner, "kafka.distributed.partitioner", PartitionerMurmur2)
		str(&c.Kafka.Distributed.PartialsFormat, "kafka.distributed.partials_format", PartialsArrow)
		if !c.isSet("kafka.distributed.create_topics") {
			c.Kafka.Distributed.CreateTopics = true
		}
		str(&c.State.LedgerTopic, "state.ledger_topic", c.Kafka.Distributed.Prefix(c.Kafka.GroupID)+"ledger")
		dur(&c.Kafka.Distributed.TransactionTimeout, "kafka.distributed.transaction_timeout", DefaultTransactionTimeout)
		dur(&c.Kafka.Distributed.PartitionChangeGrace, "kafka.distributed.partition_change_grace", DefaultPartitionChangeGrace)
	}

	str(&c.Log.Format, "log.format", DefaultLogFormat)
	str(&c.Log.Level, "log.level", DefaultLogLevel)

	num(&c.Generator.Users, "generator.users", DefaultGeneratorUsers)
	num(&c.Generator.EventsPerSecond, "generator.events_per_second", DefaultGeneratorEPS)
	flt(&c.Generator.TimeScale, "generator.time_scale", DefaultGeneratorTimeScale)

	str(&c.HTTP.Address, "http.address", DefaultHTTPAddress)
	str(&c.HTTP.OperatorAddress, "http.operator_address", DefaultHTTPOperatorAddress)
}

// GroupNames returns the groups a release is made for at every window: the
// declared Groups, or the single implicit group "*" ([ImplicitGroup]) when
// GroupBy is empty. The result is a copy.
func (h Histogram) GroupNames() []string {
	if h.GroupBy == "" {
		return []string{ImplicitGroup}
	}
	return slices.Clone(h.Groups)
}

// DefaultBlindWarningShare is contribution.blind_warning_share's default
// (issue 23 item 3): warn when the window bound dropped more than half of a
// window's contributions.
const DefaultBlindWarningShare = 0.5
