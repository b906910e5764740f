package config

import (
	"fmt"
	"time"
)

// Config is the whole stage configuration.
type Config struct {
	Kafka        Kafka        `yaml:"kafka"`
	Events       Events       `yaml:"events"`
	Window       Window       `yaml:"window"`
	Histograms   []Histogram  `yaml:"histograms"`
	Contribution Contribution `yaml:"contribution"`
	Privacy      Privacy      `yaml:"privacy"`
	State        State        `yaml:"state"`
	Log          Log          `yaml:"log"`
	Generator    Generator    `yaml:"generator"`
	Output       Output       `yaml:"output"`
	HTTP         HTTP         `yaml:"http"`
	// Selection configures the private selection of unlisted groups
	// (histograms with group_by and no groups).
	Selection Selection `yaml:"selection"`

	// meta records what the file said (which keys it set, which values came
	// from the environment); nil for a Config built in Go.
	meta *meta
}

// Kafka says where events come from and where releases go.
type Kafka struct {
	// Brokers lists bootstrap brokers (host:port). Empty (the default) starts
	// an embedded in-process Kafka-protocol broker on loopback.
	Brokers []string `yaml:"brokers"`
	// GroupID is the consumer group. Default "dp-stage".
	GroupID string `yaml:"group_id"`
	// InputTopic holds the raw events. Default "events".
	InputTopic string `yaml:"input_topic"`
	// OutputTopic receives one JSON message per release. Default
	// "private-histograms".
	OutputTopic string `yaml:"output_topic"`
	// DeadLetterTopic, when set, receives every malformed event with the
	// reason in a header. Default empty (malformed events are only counted).
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// InputPartitions is how many partitions the embedded broker creates for
	// the input topic. Default 4. Ignored with external brokers.
	InputPartitions int `yaml:"input_partitions"`
	// EmbeddedPort pins the embedded broker's port on 127.0.0.1, so that
	// other clients (kcat, kafkajs, a second `stage generate`) can attach to
	// a demo: `stage run` prints the address either way. Default 0: a free
	// port chosen at start. Ignored with external brokers.
	EmbeddedPort int `yaml:"embedded_port"`
	// SessionTimeout of the consumer group: how long the broker keeps a
	// silent member (a crashed stage) in the group. Default 10s.
	SessionTimeout Duration `yaml:"session_timeout"`
	// RebalanceTimeout is how long a rebalance waits for the group's members
	// to rejoin; a member that does not (a crashed stage whose session has
	// not expired yet) is dropped when it runs out. Takeover after a crash
	// costs at most the state.dir lock poll (1s) + start-up + 2 ×
	// RebalanceTimeout (see [Kafka.Rebalance]). Default 0: half the session
	// timeout, so takeover stays within one session timeout (+1s).
	RebalanceTimeout Duration `yaml:"rebalance_timeout"`
	// TLS secures the connection to external brokers. Off by default.
	TLS TLS `yaml:"tls"`
	// SASL authenticates to external brokers. Off by default (no mechanism,
	// no username, no password).
	SASL SASL `yaml:"sasl"`
	// Distributed runs the stage as one of N instances sharing the work
	// (see [Distributed]). Off by default: one process owns every input
	// partition.
	Distributed Distributed `yaml:"distributed"`
}

// Distributed configures the scale-out mode (kafka.distributed): every
// instance bounds and pre-aggregates the input partitions the consumer
// group gives it and sends exact bounded partial counts, per (window,
// source partition), through an internal partials topic to the one
// releasing instance, which merges them when every source partition has
// passed the window, then charges, draws, records and publishes as the
// single-process stage does (package pipeline, "Distributed mode").
type Distributed struct {
	// Enabled turns the mode on. It needs state.ledger: kafka (the
	// release log must move between machines) and refuses, in this
	// version, average histograms, histograms[].window and
	// contribution.max_tracked_users. Default false.
	Enabled bool `yaml:"enabled"`
	// InternalTopicPrefix names the internal topics: <prefix>partials
	// (one partition), <prefix>progress (one partition per input
	// partition, compacted) and, unless state.ledger_topic is set,
	// <prefix>ledger. They hold raw bounded counts and user hashes: give
	// them the input topic's ACLs. Default "<kafka.group_id>.".
	InternalTopicPrefix string `yaml:"internal_topic_prefix"`
	// Partitioner is how the producers of the input topic choose a
	// partition from the record key, which must be the user id (the
	// events.user_field value as text): "murmur2" (default; Kafka's Java
	// client, kafka-go's Murmur2Balancer, franz-go's default) or "fnv1a"
	// (kafka-go's Hash balancer). An event whose user does not hash to
	// the partition it came from is dropped as wrong_partition: a user
	// read by two instances would be bounded twice.
	Partitioner string `yaml:"partitioner"`
	// CreateTopics creates the internal topics when they do not exist.
	// Default true.
	CreateTopics bool `yaml:"create_topics"`
	// ReplicationFactor of the internal topics the stage creates. Default
	// 0: min(3, number of brokers).
	ReplicationFactor int `yaml:"replication_factor"`

	// TransactionTimeout is the Kafka transaction timeout of the bounders'
	// and the releaser's transactional producers: how long a transaction
	// whose owner hangs (paused, cut off) holds the partials topic's last
	// stable offset — and so every release — before the broker aborts it.
	// A transaction that runs longer is aborted by the broker and its
	// owner's producer fenced; the stage reports that as a timeout. From
	// 1s to 15m (the broker's transaction.max.timeout.ms default); it
	// must not exceed the broker's transaction.max.timeout.ms. Default
	// 10s (DefaultTransactionTimeout; 0 in a Config built in code).
	TransactionTimeout Duration `yaml:"transaction_timeout"`

	// PartitionChangeGrace is how long after the stage saw the input
	// topic's partition count change producers may still write with the
	// old count: their metadata refresh interval (Java metadata.max.age.ms
	// and librdkafka topic.metadata.refresh.interval.ms, 5 minutes by
	// default; Sarama Metadata.RefreshFrequency, 10) plus how long a record
	// partitioned before the refresh may be retried (Java
	// delivery.timeout.ms, 2 minutes; librdkafka message.timeout.ms, 5).
	// Such events land on a partition their user no longer hashes to and
	// are dropped as wrong_partition, so every window that starts before
	// the change was seen plus this grace (plus events.max_future and
	// window.clock_skew_margin: how far ahead of its record time such an
	// event's time may be) — up to the end of the window holding that
	// moment — is released with "complete": false in its coverage
	// (docs/distributed.md, "Partitions added"). 0 or more; default 11m
	// (DefaultPartitionChangeGrace; 0 in a Config built in code).
	PartitionChangeGrace Duration `yaml:"partition_change_grace"`

	// PartialsFormat is how bounders encode their partials: "arrow" (the
	// default: an Arrow IPC stream, package partial) or "json" (what
	// versions before it wrote). Every version since reads both; set json
	// for the first roll of an upgrade from an older version, whose
	// releasers read JSON only (docs/distributed.md, "Upgrades"). ""
	// (a Config built in code) is arrow.
	PartialsFormat string `yaml:"partials_format"`
}

// DefaultPartitionChangeGrace: kafka.distributed.partition_change_grace.
// It covers the default metadata refresh plus delivery timeout of the
// common producer clients: Java 5 + 2 min, librdkafka 5 + 5 min, Sarama
// 10 min + 3 × (100 ms + 10 s) ≈ 10.5 min (docs/distributed.md's table).
const DefaultPartitionChangeGrace = Duration(11 * time.Minute)

// DefaultTransactionTimeout: kafka.distributed.transaction_timeout.
const DefaultTransactionTimeout = Duration(10 * time.Second)

// The bounds of kafka.distributed.transaction_timeout: the broker's
// transaction.max.timeout.ms defaults to 15 minutes.
const (
	MinTransactionTimeout = time.Second
	MaxTransactionTimeout = 15 * time.Minute
)

// Txn returns TransactionTimeout, or DefaultTransactionTimeout when 0.
func (d Distributed) Txn() time.Duration {
	if d.TransactionTimeout == 0 {
		return DefaultTransactionTimeout.D()
	}
	return d.TransactionTimeout.D()
}

// MaxDistributedCells bounds the (group, bin) cells of all histograms with
// kafka.distributed: one partial record carries all of a window's counts.
const MaxDistributedCells = 35000

// The values of kafka.distributed.partitioner.
const (
	PartitionerMurmur2 = "murmur2"
	PartitionerFNV1a   = "fnv1a"
)

// The values of kafka.distributed.partials_format.
const (
	PartialsArrow = "arrow"
	PartialsJSON  = "json"
)

// Prefix is the internal topics' prefix: InternalTopicPrefix, or
// "<groupID>." when it is empty.
func (d Distributed) Prefix(groupID string) string {
	if d.InternalTopicPrefix != "" {
		return d.InternalTopicPrefix
	}
	return groupID + "."
}

// PartialsTopic is the internal topic of partial counts (one partition).
func (k Kafka) PartialsTopic() string { return k.Distributed.Prefix(k.GroupID) + "partials" }

// ProgressTopic is the internal, compacted topic of each source
// partition's progress (one partition per input partition).
func (k Kafka) ProgressTopic() string { return k.Distributed.Prefix(k.GroupID) + "progress" }

// ReleaseGroupID is the consumer group of the partials topic, whose one
// member assigned its partition releases.
func (k Kafka) ReleaseGroupID() string { return k.GroupID + ".release" }

// BoundTransactionalID is the transactional id of the bounder of input
// partition p: "<prefix>bound/<p>". Like LedgerTransactionalID it is a
// function of what is written, never of the instance, so that the new
// owner of a partition fences every older writer of it.
func (k Kafka) BoundTransactionalID(p int) string {
	return fmt.Sprintf("%sbound/%d", k.Distributed.Prefix(k.GroupID), p)
}

// Rebalance returns the effective rebalance timeout: RebalanceTimeout, or
// half of SessionTimeout when it is zero. Half keeps a member that rejoins
// within its session even on brokers (the embedded one) that keep its
// session clock running while it waits in a rebalance.
func (k Kafka) Rebalance() Duration {
	if k.RebalanceTimeout > 0 {
		return k.RebalanceTimeout
	}
	return k.SessionTimeout / 2
}

// Window configures tumbling windows. An event belongs to the window of its
// own event time (events.time_field); when a window closes depends on
// Watermark.
type Window struct {
	// Size of a tumbling window. Default 1m.
	Size Duration `yaml:"size"`
	// Watermark says what closes a window (see pipeline's package doc for
	// the argument):
	//
	//   - "arrival" (the default): the record timestamps Kafka stores with
	//     each event (set by the producer or, with
	//     message.timestamp.type=LogAppendTime, by the broker — never by the
	//     user). An event of window [s, e) counts if its record timestamp is
	//     before e + allowed_lateness; the window closes once every input
	//     partition has been read up to that record time. Whether an event
	//     counts then depends only on that event (its own event time and
	//     record time), never on other users' events or on consumer lag.
	//   - "event": the largest user-supplied event time seen (minus
	//     allowed_lateness), as in classic event-time processing. Opt-in,
	//     flagged by `stage validate`: it trusts every event's time field,
	//     so one event stamped ahead can close windows early and make other
	//     users' events late. For replaying historical data whose record
	//     timestamps are not its event times.
	Watermark string `yaml:"watermark"`
	// AllowedLateness: with watermark arrival, how long after a window's end
	// an event of it may still arrive (record time) and count; with
	// watermark event, how far the watermark trails the largest event time.
	// Default 5s.
	AllowedLateness Duration `yaml:"allowed_lateness"`
	// IdlePartitionTimeout (watermark event only): a partition read to its
	// end that delivers no message for this long (wall clock) stops holding
	// back the watermark — never one whose fetches fail or that has unread
	// records (lag, or records held back by an open transaction), so the
	// fetch retry back-off does not count toward it. Default 10s. With watermark arrival a partition read to its end
	// advances by the wall clock instead, and one that has unread records or
	// cannot be fetched holds the windows open.
	IdlePartitionTimeout Duration `yaml:"idle_partition_timeout"`
	// Start (RFC 3339) is the first window released, for a stage started on
	// a fresh state.dir; earlier events are late. Default: the window
	// containing the wall-clock time of that first start. Which windows are
	// released never depends on the data: not on the first event seen.
	// Ignored once the ledger has recorded its first window.
	Start string `yaml:"start"`
	// CloseAfter, when set (> 0), is the allowed lateness of watermark
	// arrival under its older name: the window [s, e) is released once
	// every partition has been read up to record time e + close_after
	// (for a partition read to its end, a fetch sent at e + 2·close_after
	// or later); events whose record time is later are late. It cannot be combined with watermark event. Default 0 (use
	// allowed_lateness).
	CloseAfter Duration `yaml:"close_after"`

	// ClockSkewMargin (watermark arrival): how far the clocks behind the
	// record times may disagree — a broker time running backwards along a
	// partition (a leader change to a broker whose clock is behind, an NTP
	// step back) or the stage host's clock running ahead of the brokers'.
	// A window closes only once every partition is read up to record time
	// end + lateness + clock_skew_margin; which events count is unchanged
	// (record time < end + lateness). Every window is released that much
	// later. Default 2s: NTP keeps clocks within tens of milliseconds and
	// steps a clock only past 128 ms of offset, so two NTP-synchronised
	// machines stay well inside it. A broker-time regression larger than
	// it is logged and counted (dpstage_source_broker_time_regressions_total).
	ClockSkewMargin Duration `yaml:"clock_skew_margin"`
	// RecordTimes (watermark arrival) says who sets the record times the
	// counting rule reads. "broker" (the default) requires the input topic
	// to have message.timestamp.type=LogAppendTime, checked with
	// DescribeConfigs at every start and rebalance: the stage refuses to
	// start on a CreateTime topic, or when it may not read the topic's
	// config (the DESCRIBE_CONFIGS ACL on the topic). "producer" is the
	// explicit opt-in to producer-set times (CreateTime): a record appended
	// more than allowed_lateness after its own record time — a producer
	// retry, a stalled producer, a producer clock behind — is then counted
	// or dropped as late depending on whether the stage was lagging when it
	// was appended, i.e. on other users' load (ground rule 7 no longer holds
	// for such records), and a producer clock ahead delays releases.
	RecordTimes string `yaml:"record_times"`
}

// Histogram declares one released histogram. Bins and groups are public.
type Histogram struct {
	// Name identifies the histogram in the output. Required, unique.
	Name string `yaml:"name"`
	// Field is the event field holding the bin value. Required.
	Field string `yaml:"field"`
	// Bins is the public list of bin values, in output order. At least 2,
	// no duplicates.
	Bins []string `yaml:"bins"`
	// OverflowBin, when set (it must be one of Bins), receives values not
	// among Bins; without it such events are dropped and counted.
	OverflowBin string `yaml:"overflow_bin"`
	// GroupBy is the optional event field that splits the histogram into
	// groups. Empty: one group, named "*".
	GroupBy string `yaml:"group_by"`
	// Groups is the public list of groups. A release is made for every
	// listed group at every window, with or without events. With GroupBy and
	// no Groups the groups are selected privately in each window (Selects,
	// package selection, the Selection section).
	Groups []string `yaml:"groups"`
	// Kind is "count" (default: each event counts one into the bin its Field
	// names) or "average" (each event carries in Field a JSON array of
	// len(Bins) non-negative numbers summing to 1, one probability vector;
	// the window releases the private average of the users' vectors with the
	// simplex Dirichlet mechanism, configured by Average). An average
	// histogram takes no overflow_bin, group_by or groups.
	Kind string `yaml:"kind"`
	// Average configures a kind: average histogram (ignored otherwise).
	Average Average `yaml:"average"`
	// Window, when set, is this histogram's own tumbling window, overriding
	// window.size: a whole multiple of window.size that divides
	// privacy.budget.period (e.g. 1h or 1d next to 1m windows). Its windows
	// are aligned to the Unix epoch like the base windows; one closes when
	// the base windows' watermark passes its end and is recorded with the
	// base window that ends at the same time. Bounding (max_events_per_user,
	// max_groups_per_user, average.users) is per window of this histogram.
	// Default 0: window.size.
	Window Duration `yaml:"window"`

	// MaxWindowsPerUser (K_h) is this histogram's own cross-window bound:
	// a user's events count in at most K_h of this histogram's windows per
	// budget period (its K_h earliest windows with an event to count; see
	// Contribution.MaxWindowsPerUser). It needs the bound on
	// (contribution.max_windows_per_user > 0) and is at most the
	// histogram's windows per period (period / its window).
	//
	// Default (0): contribution.max_windows_per_user for a histogram at
	// window.size. A histogram with its own, coarser window has no default
	// when the bound is on: the contribution-level K counts windows of
	// window.size (5 one-minute windows), and reading it as 5 hourly
	// windows — or capping it at the 24 hours of a day — would silently
	// change what a returning user contributes to the view; validation
	// asks for the value instead (HistWindowBound). Histograms of one
	// window size share one admission state, so they must have the same
	// bound.
	//
	// Left out of the JSON when 0 (omitempty), so that the distributed
	// mode's counting fingerprint (CountingFingerprint) of a config
	// without it is the fingerprint it had before the key existed.
	MaxWindowsPerUser int `yaml:"max_windows_per_user" json:",omitempty"`

	// BudgetShare, when set, is the share of the count histograms' period
	// budget this count histogram (view) gets, in (0, 1]; the count
	// histograms without one split the rest as without shares, in
	// proportion to their windows per period (shares.go, plan's "Budget
	// shares"). Default 0: no share of its own. Not part of the counting
	// fingerprint (fingerprint zeroes it): it changes the noise, not what
	// is counted.
	BudgetShare float64 `yaml:"budget_share" json:",omitempty"`
}

// HistWindowBound is the cross-window bound K_h of the histogram of config
// index i: its own histograms[].max_windows_per_user, else
// contribution.max_windows_per_user when the histogram has the base
// window; 0 when the bound is off, or (refused by Validate) for a coarser
// histogram that sets none under the bound.
func (c *Config) HistWindowBound(i int) int {
	h := c.Histograms[i]
	if c.Contribution.MaxWindowsPerUser <= 0 {
		return 0
	}
	if h.MaxWindowsPerUser > 0 {
		return h.MaxWindowsPerUser
	}
	if h.WindowSize(c.Window.Size) == c.Window.Size {
		return c.Contribution.MaxWindowsPerUser
	}
	return 0
}

// HistWindowBoundKey is the config key that sets HistWindowBound(i), for
// messages that tell the operator what to change: histograms[i].
// max_windows_per_user when the histogram sets its own (a view), else
// contribution.max_windows_per_user.
func (c *Config) HistWindowBoundKey(i int) string {
	if c.Histograms[i].MaxWindowsPerUser > 0 {
		return fmt.Sprintf("histograms[%d].max_windows_per_user", i)
	}
	return "contribution.max_windows_per_user"
}

// WindowSize is the window of the histogram: its own window when set, else
// base (window.size).
func (h Histogram) WindowSize(base Duration) Duration {
	if h.Window > 0 {
		return h.Window
	}
	return base
}

// Histogram kinds.
const (
	KindCount   = "count"
	KindAverage = "average"
)

// Average configures the simplex Dirichlet mechanism of an average histogram
// (mechanism.AverageSpec; the guarantee is derived in mechanism/average.go).
// Per window, at most Users users are kept (those with the smallest keyed
// hashes of the user id, whatever the order of arrival), each user's vectors
// in the window are averaged into one, the kept users' vectors are padded with
// uniform vectors to exactly Users of them and averaged, the average is
// smoothed towards uniform by Eta and released as one draw of Dir(K·p).
type Average struct {
	// Users is the public number of users averaged per window (N_pub ≥ 1):
	// larger means less noise per user but more padding when fewer users
	// contribute. Required.
	Users int `yaml:"users"`
	// K is the Dirichlet concentration (k > 0): the release's variance is
	// p_i(1−p_i)/(K+1); larger K is more accurate and costs more ε. Required.
	K float64 `yaml:"k"`
	// Eta is the smoothing (0 < Eta < 1/len(bins)): every coordinate gets at
	// least Eta. Default min(0.01, 0.1/len(bins)).
	Eta float64 `yaml:"eta"`
	// Delta is the δ of one release, in (0, 1). Default: the period's δ
	// split evenly over the period's average releases, half of it when count
	// histograms share the budget.
	Delta float64 `yaml:"delta"`
}

// IsAverage reports whether h is an average histogram.
func (h Histogram) IsAverage() bool { return h.Kind == KindAverage }

// Contribution bounds each user's contribution before counting.
type Contribution struct {
	// MaxEventsPerUser: per window, per histogram; the user's events that
	// rank first by a keyed hash of their content count, whatever order they
	// arrive in (package aggregate). Default 1.
	MaxEventsPerUser int `yaml:"max_events_per_user"`
	// MaxGroupsPerUser: per window, per histogram, a user's events count
	// toward at most this many groups (those ranked first by a keyed hash).
	// Default 1.
	MaxGroupsPerUser int `yaml:"max_groups_per_user"`
	// MaxTrackedUsers caps the users the bounder tracks in each window: the
	// users with the smallest keyed hashes; the others' events in that
	// window are dropped (never miscounted). 0: no cap. With a cap, one
	// user's presence can displace another user in a full window, so under
	// add_remove the stage charges the replace sensitivity
	// (plan/plan.go). Default 2,000,000.
	MaxTrackedUsers int `yaml:"max_tracked_users"`
	// MaxWindowsPerUser (K) bounds the windows of one budget period a
	// user's events count in: the user's K earliest windows of the period
	// in which the user has an event that passes decoding and the arrival
	// rule; the user's events in later windows of the period are dropped
	// (bound_windows). The budget then composes K windows' charges per
	// period instead of all of the period's windows (the batch analogue is
	// Privacy on Beam's MaxPartitionsContributed). 0 (the default): no
	// bound. K > 0 cannot be combined with max_tracked_users (which then
	// defaults to 0): a capped window's displacement would depend on users
	// the cross-window bound later drops.
	MaxWindowsPerUser int `yaml:"max_windows_per_user"`

	// BlindWarningShare (issue 23 item 3) is the share of a closed window's
	// contributions, per histogram, dropped by max_windows_per_user above
	// which the stage logs a warning that the window counted few of its
	// users (it went "blind": its release is noise over a nearly empty
	// count) and lists the histogram under window_bound_blind on the
	// operator listener's /readyz. In (0, 1]; 1 turns the warning off (a
	// share never exceeds 1). Default 0.5. Operator-side only: the share is
	// private (a function of the window's drop counts) and never reaches a
	// release, the output topic or the public listener. It changes no
	// count, so it is left out of CountingFingerprint (json "-").
	BlindWarningShare float64 `yaml:"blind_warning_share" json:"-"`
}

// Privacy configures the mechanism and the budget.
type Privacy struct {
	// Mechanism: dirichlet (default) | gaussian | laplace |
	// laplace-posterior. laplace-posterior is the laplace baseline's noise
	// (same calibration, same RDP curve and charge) with the noisy counts
	// x̃ turned into a Dirichlet posterior Dir(α̃), α̃_i = prior_alpha +
	// max(x̃_i, 0): each release carries posterior_alpha and its mean
	// α̃/Σα̃ as probabilities.
	Mechanism string `yaml:"mechanism"`
	// Calibration (dirichlet only): concentrated | diffuse | closed-form |
	// exact | optimal. Default: optimal when ExpectedEventsPerRelease is
	// given, concentrated otherwise.
	Calibration string `yaml:"calibration"`
	// ExpectedEventsPerRelease is a public planning figure: the events one
	// release (one histogram, one group, one window) typically counts. The
	// optimal calibration chooses the Dirichlet mechanism's (r, α) on 000
	// Corollary 3's privacy frontier to minimize the expected ℓ2 error of a
	// release at this many events (mechanism/optimal.go). It is public
	// configuration, never measured from the data. Default 0: not given.
	ExpectedEventsPerRelease float64 `yaml:"expected_events_per_release"`
	// PriorAlpha (laplace-posterior only) is the public Dirichlet prior α₀
	// given to every bin: finite, > 0 and at most 1e12. Default 1 (the
	// uniform prior). It must be left out (or 0) for the other mechanisms.
	PriorAlpha float64 `yaml:"prior_alpha"`
	// Neighbour relation between datasets: replace (default; one user's
	// events replaced by another's) | add_remove (one user added or removed).
	Neighbour string `yaml:"neighbour"`
	// Order is the RDP order λ > 1 used for calibration. Default 2.
	Order float64 `yaml:"order"`
	// RDPEpsilon, when set (> 0), calibrates every release to this (λ, ε)-RDP
	// at Order instead of spreading the budget evenly over every window of
	// the period. Releases then stop — with a budget_exhausted status
	// message per histogram and window — once the period's budget is spent,
	// and resume in the next period. Default 0: plan so the budget covers the
	// whole period.
	RDPEpsilon float64 `yaml:"rdp_epsilon"`
	// Budget is the total guarantee per user per period.
	Budget Budget `yaml:"budget"`
	// ExpectedUsers is a public estimate — an upper estimate is the safe
	// side — of how many distinct users one budget period's events come
	// from. It only checks privacy.budget.delta: a δ with δ·users ≥ 1 is
	// refused (a mechanism that publishes one user's events outright meets
	// such a guarantee) and δ·users > [DeltaUsersWarn] is flagged by `stage
	// validate`. Default 0: not given (then only [MaxDelta] applies).
	ExpectedUsers int `yaml:"expected_users"`

	// ExpectedWindowsPerUser is a public planning figure for returning
	// users (issue 23): the 90th percentile (ActivityPercentile), over the
	// users of one budget period, of how many windows of window.size of
	// that period a user has an event in — a high percentile, not the mean,
	// so that the plan's prediction holds for nine users in ten. `stage
	// validate` and `stage plan` read it with expected_events_per_release
	// to predict, through the period, the share of a window's users the
	// cross-window bound (contribution.max_windows_per_user) still counts
	// and the error of each window's releases (package plan, activity.go).
	// It is public configuration — the dashboard prints it — so it must be
	// a public figure or a differentially private estimate, never one
	// measured on the protected stream; it changes no release. Absent: not
	// given. Otherwise it must be finite, greater than 0 and at most the
	// windows of a period.
	ExpectedWindowsPerUser float64 `yaml:"expected_windows_per_user,omitempty"`
	// TotalShare is the share of the period's RDP budget (at privacy.order)
	// that the charged totals get: every dirichlet release and every
	// average release carries its window's total as a discrete Gaussian
	// count (plan.TotalPlan; additive mechanisms' totals are free). In
	// (0, 0.5]; default DefaultTotalShare.
	TotalShare float64 `yaml:"total_share"`
}

// ActivityPercentile is the percentile of users' active windows per period
// that privacy.expected_windows_per_user stands for.
const ActivityPercentile = 90

// MaxDelta is the largest privacy.budget.delta accepted, whatever
// privacy.expected_users says. δ is the probability with which the ε
// guarantee may fail outright: a mechanism that publishes each user's
// events in the clear with probability δ is (0, δ)-DP, and exposes δ·n of n
// users on average. δ must therefore be far below 1/n. At δ = 1e-4, δ·n stays
// at or under DeltaUsersWarn (0.01) only up to n = 100 users, a population
// whose histograms the noise would drown anyway; every larger δ is a typo or
// a misunderstanding (δ = 0.5 allows exposing half the users). Lowering δ is
// cheap: δ enters the RDP → (ε, δ) conversion (000 Lemma 1, eq. (2)) only as
// log(1/δ)/(λ−1), so going from 1e-4 to 1e-8 adds at most 9.2/(λ−1) to ε.
// The argument, with measured figures, is in docs/choosing.md.
const MaxDelta = 1e-4

// DeltaUsersWarn is the δ·privacy.expected_users above which `stage validate`
// warns: the chance that a mechanism meeting the guarantee exposes some user
// outright is then above 1%.
const DeltaUsersWarn = 0.01

// Budget is the total (ε, δ)-DP guarantee for one user over one period.
type Budget struct {
	Epsilon float64  `yaml:"epsilon"` // > 0. Required.
	Delta   float64  `yaml:"delta"`   // in (0, MaxDelta]. Default 1e-6.
	Period  Duration `yaml:"period"`  // Default 24h; a whole number of windows.
}

// State is where durable state (budget ledger, release log) lives.
type State struct {
	// Dir holds the state database. Default "./stage-state".
	Dir string `yaml:"dir"`
	// AllowFreshLedger lets the stage start with an empty state database
	// although the output topic already holds messages. Off by default:
	// that situation means the state was lost or is not shared with the
	// instance that made those releases, and releasing again could publish
	// a window twice with fresh noise and forget what was spent. Turn it on
	// only for a deliberate fresh start (e.g. a new budget on an old topic).
	AllowFreshLedger bool `yaml:"allow_fresh_ledger"`
	// Retain is how long (in event time, behind the last released window)
	// published releases stay in the ledger; older ones are pruned at
	// start-up, with the spends of periods that are over. Unpublished
	// releases and the last window are never pruned. 0 keeps everything.
	// Default 168h.
	Retain Duration `yaml:"retain"`
	// Ledger is where the release log lives: "bolt" (the default) a bbolt
	// file under Dir, guarded by its file lock (a standby shares Dir);
	// "kafka" the compacted topic LedgerTopic, written by a transactional
	// producer (ledger/kafkalog), so that an instance on another machine,
	// with an empty Dir, restores it from Kafka alone and takes over.
	Ledger string `yaml:"ledger"`
	// LedgerTopic is the release log's topic with ledger "kafka" (required
	// then; ignored with "bolt"). One partition is used (partition 0); the
	// topic must have cleanup.policy=compact (see ledger/kafkalog). It
	// belongs to one deployment: its transactional id is
	// LedgerTransactionalID.
	LedgerTopic string `yaml:"ledger_topic"`
}

// The values of state.ledger.
const (
	LedgerBolt  = "bolt"
	LedgerKafka = "kafka"
)

// KafkaLedger reports whether the release log lives on Kafka
// (state.ledger: kafka).
func (s State) KafkaLedger() bool { return s.Ledger == LedgerKafka }

// LedgerTransactionalID is the transactional id of the Kafka release log
// on topic: "dp-stage-ledger/<topic>/0". It is a function of the log's
// topic and partition only — never of the instance or of the consumer
// group — so that whoever opens the log fences every older writer of it,
// whichever machine it runs on and whatever group it joined
// (ledger/kafkalog, "fencing"). With the group in the id (an earlier
// version), a kafka.group_id change during a rolling redeploy gave the log
// a second, unfenced writer: both instances recorded and published the
// same window with different draws (review of issue #14). A ledger topic
// therefore belongs to one deployment: two stages given the same topic
// fence each other.
func LedgerTransactionalID(topic string) string {
	return "dp-stage-ledger/" + topic + "/0"
}

// Log configures logging.
type Log struct {
	// Format: json (default, for production) | console (for humans).
	Format string `yaml:"format"`
	// Level: debug | info (default) | warn | error.
	Level string `yaml:"level"`
}

// Generator is the built-in synthetic event producer used by the demo. Off by
// default; it only ever writes to the input topic.
type Generator struct {
	Enabled bool `yaml:"enabled"`
	// Users in the synthetic population. Default 300.
	Users int `yaml:"users"`
	// EventsPerSecond produced (wall clock). Default 200.
	EventsPerSecond int `yaml:"events_per_second"`
	// TimeScale: event time advances this many times faster than wall clock,
	// so windows close quickly in the demo. Default 1.
	TimeScale float64 `yaml:"time_scale"`
	// UserLifetime, when positive, makes the synthetic users come and go:
	// each user id is active for at most this long of event time (a few
	// windows), new users taking the places of old ones, as web traffic
	// does. Default 0: the same users all the time.
	UserLifetime Duration `yaml:"user_lifetime"`
	// Steady, when true, makes a steady population of returning users:
	// the events of each window.size of event time are distinct users
	// drawn uniformly from the population, countries uniform — with
	// users·p/60 events per second each user is active in a minute with
	// probability p, the population `stage eval steady` simulates. Default
	// false: Zipf-skewed users (a few very active, most rarely seen).
	Steady bool `yaml:"steady"`
}

// HTTP configures the stage's two HTTP listeners, kept apart: the public
// one (Address) serves the dashboard page at /, /api/releases, /api/budget
// and /api/layout — releases, the budget spent and public config only, for
// the people who read the dashboards; the operator one (OperatorAddress)
// serves /metrics — event totals and drop counts per reason, which are
// private (differencing a counter between two scrapes gives a window's
// exact count) — for operators and Prometheus. Both serve the probes
// /healthz and /readyz. Each has its own token.
type HTTP struct {
	// Address the public listener binds (host:port). Default
	// "127.0.0.1:8080" (loopback only). An explicit empty string turns it
	// off. Any other host (including an empty host, ":8080", which means
	// every interface) requires AllowRemote.
	Address string `yaml:"address"`
	// AllowRemote must be true to bind Address beyond loopback. Default
	// false.
	AllowRemote bool `yaml:"allow_remote"`
	// BearerToken, when set, is required on the public listener (as
	// "Authorization: Bearer TOKEN", or as the password of HTTP Basic
	// authentication for browsers) on every path but /healthz and /readyz.
	// It may only be given as a ${ENV_VAR} reference and is never printed.
	// Default empty: no authentication (an empty variable counts as absent,
	// so it also means none; the stage warns at start-up when it listens
	// beyond loopback without a token).
	BearerToken string `yaml:"bearer_token" secret:"true"`

	// OperatorAddress the operator listener binds (host:port): /metrics
	// and the probes. Default "127.0.0.1:8081" (loopback only). An explicit
	// empty string turns it off. It may not be Address's listener (the
	// same port on an overlapping host): the split is the point. Any host
	// beyond loopback requires OperatorAllowRemote.
	OperatorAddress string `yaml:"operator_address"`
	// OperatorAllowRemote must be true to bind OperatorAddress beyond
	// loopback: what it serves is private (exact event and drop counts),
	// so exposing it to the network is an explicit choice, separate from
	// exposing the dashboard. Default false.
	OperatorAllowRemote bool `yaml:"operator_allow_remote"`
	// OperatorToken, when set, is required on the operator listener on
	// every path but /healthz and /readyz, as BearerToken is on the public
	// one; only as a ${ENV_VAR} reference. It must differ from BearerToken
	// (the dashboard's readers would otherwise hold the operators' key).
	// Default empty: no authentication (the stage warns when the operator
	// listener is beyond loopback without a token).
	OperatorToken string `yaml:"operator_token" secret:"true"`
}

// Output configures extra, optional copies of the releases.
type Output struct {
	// ArrowDir, when set, also writes every published (histogram, window)
	// as an Arrow IPC file <arrow_dir>/<histogram>/<window start>.arrow:
	// the released probabilities (never counts), one row per (group, bin).
	// Default empty: off.
	ArrowDir string `yaml:"arrow_dir"`
	// IntervalLevel is the confidence level of every release's intervals
	// and total (package interval), in [0.5, 0.999]; default 0.95.
	IntervalLevel float64 `yaml:"interval_level"`
}

// Arrival reports whether windows close by record (arrival) time: the
// default, watermark arrival.
func (w Window) Arrival() bool { return w.Watermark != WatermarkEvent }

// Lateness is how long after a window's end its events may still arrive:
// close_after when set (its older name under watermark arrival), else
// allowed_lateness.
func (w Window) Lateness() Duration {
	if w.CloseAfter > 0 {
		return w.CloseAfter
	}
	return w.AllowedLateness
}
