package httpapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/buildinfo"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/pipeline"
)

// Metric names. Counters and gauges that mirror the stage's own state are
// read from it at scrape time by stageCollector (the stage's atomic Stats,
// Lag, Budget, Readiness and Plan): nothing is counted twice. Only the
// latency histogram is observed here, from the stage's OnRelease callback.
//
// /metrics is an operator surface: event counts and lag are not private
// (they are not in the output topic), which is why binding the server beyond
// loopback is an explicit choice (http.allow_remote) and why the dashboard
// page never reads /metrics.
const (
	MetricEventsConsumed      = "dpstage_events_consumed_total"
	MetricEventsDecoded       = "dpstage_events_decoded_total"
	MetricEventsDropped       = "dpstage_events_dropped_total"
	MetricContribCounted      = "dpstage_contributions_counted_total"
	MetricContribBounded      = "dpstage_contributions_dropped_by_bounding_total"
	MetricLateEvents          = "dpstage_late_events_total"
	MetricRetentionSkipped    = "dpstage_input_retention_skipped_total"
	MetricReleases            = "dpstage_releases_published_total"
	MetricBudgetExhausted     = "dpstage_budget_exhausted_total"
	MetricPublishRetries      = "dpstage_publish_retries_total"
	MetricOffsetCommits       = "dpstage_offset_commits_total"
	MetricBudgetSpent         = "dpstage_budget_spent_epsilon"
	MetricBudgetRemaining     = "dpstage_budget_remaining_epsilon"
	MetricBudgetTotal         = "dpstage_budget_epsilon"
	MetricBudgetDelta         = "dpstage_budget_delta"
	MetricConsumerLag         = "dpstage_consumer_lag"
	MetricCloseToPublish      = "dpstage_window_close_to_publish_seconds"
	MetricReady               = "dpstage_ready"
	MetricReadinessCondition  = "dpstage_readiness_condition"
	MetricMechanismInfo       = "dpstage_mechanism_info"
	MetricMechanismAlpha      = "dpstage_mechanism_alpha"
	MetricMechanismR          = "dpstage_mechanism_r"
	MetricMechanismSigma      = "dpstage_mechanism_sigma"
	MetricMechanismScale      = "dpstage_mechanism_scale"
	MetricReleaseRDPEpsilon   = "dpstage_release_rdp_epsilon"
	MetricChargesPerPeriod    = "dpstage_budget_charges_per_period"
	MetricPartials            = "dpstage_partials_total"
	MetricPartialsMalformed   = "dpstage_partials_malformed_total"
	MetricLatePartialCounts   = "dpstage_late_partial_contributions_total"
	MetricPartitionsIdle      = "dpstage_source_partitions_idle"
	MetricPartialsLSOHeld     = "dpstage_partials_lso_held_seconds"
	MetricPartialsLSOHolds    = "dpstage_partials_lso_held_too_long_total"
	MetricFirstStartSkipped   = "dpstage_first_start_skipped_records_total"
	MetricRegistryHeld        = "dpstage_schema_registry_held_partitions"
	MetricRegistryRetries     = "dpstage_schema_registry_retries_total"
	MetricBuildInfo           = "dpstage_build_info"
	latencyBucketsDescription = "0.01s to 60s"
)

// Distributed mode, releasing instance: missing partials (a window held
// for a gap, data loss on the partials topic).
const (
	MetricPartialGaps     = "dpstage_partial_gaps"
	MetricPartialDataLoss = "dpstage_partials_data_loss_total"
	// MetricIncompleteWindows: windows released with "complete": false in
	// their coverage (public: it follows the releases' own marker).
	MetricIncompleteWindows = "dpstage_windows_released_incomplete_total"
)

// The cross-window bound's drop share (issue 23 item 3), per histogram,
// with contribution.max_windows_per_user: private (a window's exact
// counts), so on the operator listener only.
const (
	MetricWindowBoundShare   = "dpstage_window_bound_dropped_share"
	MetricWindowBoundCounted = "dpstage_window_bound_counted_total"
	MetricWindowBoundDropped = "dpstage_window_bound_dropped_total"
	MetricWindowBoundBlind   = "dpstage_window_bound_blind"
)

// windowBoundSource is a Source that follows the cross-window bound's drop
// share (the stage, with contribution.max_windows_per_user); nil shares
// without the bound.
type windowBoundSource interface {
	WindowBound() []aggregate.WindowShare
}

var (
	windowBoundShareDesc = prometheus.NewDesc(MetricWindowBoundShare, "With contribution.max_windows_per_user: the share of the histogram's last closed window's contributions "+
		"the bound dropped (dropped / (counted + dropped); on arrival and at the close). Near 1, the window counted almost none of its users and its release is noise "+
		"(choose the view's window and K with stage plan from privacy.expected_windows_per_user, never from this private share; see docs/choosing.md). Private: never in a release or on the public listener.", []string{"histogram"}, nil)
	windowBoundCountedDesc = prometheus.NewDesc(MetricWindowBoundCounted, "With contribution.max_windows_per_user: contributions counted in the histogram's closed windows.", []string{"histogram"}, nil)
	windowBoundDroppedDesc = prometheus.NewDesc(MetricWindowBoundDropped, "With contribution.max_windows_per_user: contributions to the histogram's closed windows dropped by the bound (its part of "+
		MetricContribBounded+"{bound=\"windows\"}).", []string{"histogram"}, nil)
	windowBoundBlindDesc = prometheus.NewDesc(MetricWindowBoundBlind, "With contribution.max_windows_per_user: 1 when the histogram's last closed window's drop share is above contribution.blind_warning_share "+
		"(listed under window_bound_blind on the operator's /readyz; a warning is logged).", []string{"histogram"}, nil)
)

// newRegistry returns the server's own registry (never the global one): the
// stage's collector, the latency histogram, and the Go and process
// collectors. distributed adds the distributed mode's releaser metrics.
func newRegistry(src func() Source, distributed bool) (*prometheus.Registry, prometheus.Histogram) {
	reg := prometheus.NewRegistry()
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    MetricCloseToPublish,
		Help:    "Time from the watermark passing a window's end to the output topic acknowledging its releases (" + latencyBucketsDescription + " buckets; republished units are not observed).",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
	bi := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        MetricBuildInfo,
		Help:        "The running build (value 1): version, source revision and Go version, as `stage version` prints them.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "go_version": bi.GoVersion},
	})
	build.Set(1)
	reg.MustRegister(newStageCollector(src, distributed), latency, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg, latency
}

// stageCollector reads the stage's state at scrape time.
type stageCollector struct {
	src         func() Source // nil Source until the stage is attached
	distributed bool          // kafka.distributed.enabled: the releaser's metrics too

	consumed, decoded, dropped, counted, bounded, late, retention *prometheus.Desc
	releases, exhausted, retries, commits                         *prometheus.Desc
	spent, remaining, total, delta, charges, lag                  *prometheus.Desc
	ready, condition                                              *prometheus.Desc
	info, alpha, r, sigma, scale, rdp                             *prometheus.Desc
	partials, malformed, latePart, idleParts                      *prometheus.Desc
	gaps, dataLoss, incomplete                                    *prometheus.Desc
	lsoHeld, lsoHolds, firstSkip, regHeld, regRetries             *prometheus.Desc
}

// MetricBrokerTimeRegressions counts broker-time regressions per input
// partition (pipeline.Stage.BrokerTimeRegressions).
const MetricBrokerTimeRegressions = "dpstage_source_broker_time_regressions_total"

var brokerRegressionsDesc = prometheus.NewDesc(MetricBrokerTimeRegressions, "Times a broker-set record time (LogAppendTime) was earlier "+
	"than the one before it, per input partition (a leader change to a broker whose clock is behind, a clock stepped back); "+
	"one larger than window.clock_skew_margin is also logged.", []string{"partition"}, nil)

// MetricBrokerTimeRegressionsBeyond counts the regressions larger than
// window.clock_skew_margin (pipeline.Stage.BrokerTimeRegressionsBeyondMargin).
const MetricBrokerTimeRegressionsBeyond = "dpstage_source_broker_time_regressions_beyond_margin_total"

var brokerRegressionsBeyondDesc = prometheus.NewDesc(MetricBrokerTimeRegressionsBeyond, "Broker-time regressions (see "+MetricBrokerTimeRegressions+
	") that went back more than window.clock_skew_margin below the largest broker time read, per input partition: records behind them may have been dropped as late "+
	"(each also logged; check NTP on the brokers, or raise the margin).", []string{"partition"}, nil)

// brokerTimeSource is a Source that counts broker-time regressions
// (pipeline.Stage).
type brokerTimeSource interface {
	BrokerTimeRegressions() map[int]int64
}

// brokerTimeBeyondSource is a Source that counts the regressions past the
// clock-skew margin (pipeline.Stage).
type brokerTimeBeyondSource interface {
	BrokerTimeRegressionsBeyondMargin() map[int]int64
}

// perPartition exports a counter per partition of n, and 0 for every
// assigned partition (lag) n does not have yet, so that a rate or increase
// exists before the first event.
func perPartition(ch chan<- prometheus.Metric, d *prometheus.Desc, n, lag map[int]int64) {
	for p, v := range n {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), strconv.Itoa(p))
	}
	for p := range lag {
		if _, ok := n[p]; !ok {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, 0, strconv.Itoa(p))
		}
	}
}

func newStageCollector(src func() Source, distributed bool) *stageCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	period := []string{"scope", "period_start", "period_end"}
	return &stageCollector{
		src:         src,
		distributed: distributed,
		consumed:    d(MetricEventsConsumed, "Messages read from the input topic."),
		decoded:     d(MetricEventsDecoded, "Messages that decoded into a usable event."),
		dropped:     d(MetricEventsDropped, "Events (or, for missing_field, out_of_domain, unknown_group, unsampled_key, key_too_long, bad_vector and a histogram's wrong_type, one histogram's part of an event) dropped, by reason.", "reason"),
		counted:     d(MetricContribCounted, "(event, histogram) contributions counted (or, for an average histogram, averaged) into a window on arrival; those later displaced are also counted in "+MetricContribBounded+"{bound=\"displaced\"}."),
		bounded:     d(MetricContribBounded, "Contributions dropped by per-user contribution bounding, by bound (on arrival: user_events: max_events_per_user; user_groups: max_groups_per_user; capacity: max_tracked_users; average_users: an average histogram's vector from a user not among the window's average.users kept users at arrival; later: displaced: counted on arrival, then pushed out by a smaller-hash event or group of the same user, or by the user's eviction from a full window, net of contributions let back in; windows: max_windows_per_user, on arrival or at the window's close).", "bound"),
		late:        d(MetricLateEvents, "Events for windows already closed (also counted in "+MetricEventsDropped+"{reason=\"late\"})."),
		retention:   d(MetricRetentionSkipped, "Input records deleted by the broker's retention before the stage read them (never counted; the stage was too far behind)."),
		releases:    d(MetricReleases, "Release messages published to the output topic (one per histogram, group and window)."),
		exhausted:   d(MetricBudgetExhausted, "(histogram, window) units refused by the privacy budget (a budget_exhausted status message was published instead)."),
		retries:     d(MetricPublishRetries, "Failed publish attempts that were retried."),
		commits:     d(MetricOffsetCommits, "Consumer offset commits."),
		spent:       d(MetricBudgetSpent, "Privacy budget spent in the period, as ε of (ε, δ)-DP at the configured δ, per user.", period...),
		remaining:   d(MetricBudgetRemaining, "Privacy budget left in the period, as ε at the configured δ.", period...),
		total:       d(MetricBudgetTotal, "The period's total privacy budget ε (privacy.budget.epsilon)."),
		delta:       d(MetricBudgetDelta, "The δ of the period's (ε, δ) guarantee (privacy.budget.delta)."),
		charges:     d(MetricChargesPerPeriod, "charges the plan makes per period: one per (histogram, window), or with max_windows_per_user one period reservation per histogram."),
		lag:         d(MetricConsumerLag, "Messages behind the high-water mark, per assigned input partition, as of the last fetch.", "partition"),
		ready:       d(MetricReady, "1 when the stage is ready (as /readyz), else 0."),
		condition:   d(MetricReadinessCondition, "Each readiness condition (state_loaded, connected, assigned, draining, standby: a distributed replica with no input partition, ready; schema_registry_unreachable: an input partition held by the Schema Registry, not ready; distributed mode: partials_gap, partials_lost) and whether this instance releases (releasing): 1 when true.", "condition"),
		info:        d(MetricMechanismInfo, "The mechanism and calibration in use (value 1).", "mechanism", "calibration", "neighbour", "order"),
		alpha:       d(MetricMechanismAlpha, "Dirichlet prior α of every bin (public: in every release message)."),
		r:           d(MetricMechanismR, "Dirichlet concentration r (public: in every release message)."),
		sigma:       d(MetricMechanismSigma, "Discrete Gaussian σ added to each count (public: in every release message)."),
		scale:       d(MetricMechanismScale, "Discrete Laplace scale b added to each count (public: in every release message)."),
		malformed:   d(MetricPartialsMalformed, "Distributed mode, releasing instance: partials-topic records skipped as malformed (also counted as foreign in "+MetricPartials+"), by reason: decode (does not decode, another version, an inconsistent header); shape (cells or average vectors that do not fit the config's histograms); grid (a window start off the window grid); count (a count not a whole number in [0, 2^53], or above what its users allow); average (an average vector that is not a probability vector); keys (a selecting histogram's keyed cells out of order, with fewer users than 1 or more than its bounds allow, or counts a bounder cannot make). Each is logged as an error; its window waits for that partition's partial of it.", "reason"),
		partials:    d(MetricPartials, "Distributed mode, releasing instance: partials read from the partials topic, by what the merge did with them (added; skipped: of a window released already; duplicate; late: came after its window was released while its partition was idle; foreign: made under another counting config, window size or input partition count — or an idle record of another window size or partition count — skipped, not merged; conflict: a second partial of a (window, partition) with other counts).", "result"),
		latePart:    d(MetricLatePartialCounts, "Distributed mode, releasing instance: bounded contributions in late partials (window.watermark event: their window was released while their partition was idle), not released."),
		idleParts:   d(MetricPartitionsIdle, "Distributed mode, releasing instance: source partitions idle now (window.watermark event), which do not hold windows back."),
		gaps:        d(MetricPartialGaps, "Distributed mode, releasing instance: source partitions whose partial of the held window is missing for good (lost on the partials topic, or the partition was counted from a later window): the window is not released; see the releaser's error log."),
		incomplete:  d(MetricIncompleteWindows, "Distributed mode, releasing instance: windows released with \"complete\": false in their coverage (a rolling config change, or the input topic's partition count changed: docs/distributed.md, \"Partitions added\")."),
		dataLoss:    d(MetricPartialDataLoss, "Distributed mode, releasing instance: data losses detected on the partials topic (records deleted or the topic recreated past the release group's committed offset)."),
		lsoHeld:     d(MetricPartialsLSOHeld, "Distributed mode, releasing instance: how long an open transaction has held the partials topic's last stable offset (and every release) below its high watermark."),
		firstSkip:   d(MetricFirstStartSkipped, "window.watermark arrival: input records not read because they are older than the first window counted minus events.max_future (they could not count): by a fresh input partition of the distributed mode, and by the single-process mode when it follows the distributed mode."),
		lsoHolds:    d(MetricPartialsLSOHolds, "Distributed mode, releasing instance: holds of the partials topic's last stable offset longer than kafka.distributed.transaction_timeout (a hanging bounder transaction)."),
		regHeld:     d(MetricRegistryHeld, "Input partitions held now because the schema of their next record could not be fetched from the Schema Registry (unreachable or failing): nothing is counted, dropped or committed past that record until the fetch, retried with back-off, succeeds."),
		regRetries:  d(MetricRegistryRetries, "Schema fetches retried by held input partitions (see "+MetricRegistryHeld+")."),
		rdp:         d(MetricReleaseRDPEpsilon, "RDP ε of one release (one histogram's releases of one window) at the calibration order.", "order"),
	}
}

func (c *stageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.consumed, c.decoded, c.dropped, c.counted, c.bounded, c.late, c.retention,
		c.releases, c.exhausted, c.retries, c.commits, c.spent, c.remaining, c.total, c.delta, c.charges,
		c.lag, c.ready, c.condition, c.info, c.alpha, c.r, c.sigma, c.scale, c.rdp, c.partials, c.malformed, c.latePart, c.idleParts, c.gaps, c.dataLoss, c.incomplete, c.lsoHeld, c.lsoHolds, c.firstSkip, c.regHeld, c.regRetries} {
		ch <- d
	}
	ch <- brokerRegressionsDesc
	ch <- brokerRegressionsBeyondDesc
	for _, d := range []*prometheus.Desc{windowBoundShareDesc, windowBoundCountedDesc, windowBoundDroppedDesc, windowBoundBlindDesc} {
		ch <- d
	}
}

func (c *stageCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.src()
	var rd pipeline.Readiness
	if src != nil {
		rd = src.Readiness()
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.ready, b2f(rd.Ready()))
	gauge(c.condition, b2f(rd.StateLoaded), "state_loaded")
	gauge(c.condition, b2f(rd.Connected), "connected")
	gauge(c.condition, b2f(rd.Assigned), "assigned")
	gauge(c.condition, b2f(rd.Draining), "draining")
	gauge(c.condition, b2f(rd.Standby), "standby")
	gauge(c.condition, b2f(rd.Releasing), "releasing")
	gauge(c.condition, b2f(rd.SchemaRegistryUnreachable), "schema_registry_unreachable")
	if c.distributed {
		gauge(c.condition, b2f(rd.PartialsGap), "partials_gap")
		gauge(c.condition, b2f(rd.PartialsLost), "partials_lost")
	}
	if src == nil {
		return
	}

	st := src.Stats()
	counter(c.consumed, st.Consumed.Load())
	counter(c.decoded, st.Decoded.Load())
	counter(c.counted, st.Counted.Load()+st.Averaged.Load())
	counter(c.late, st.Late.Load())
	counter(c.retention, st.RetentionSkipped.Load())
	counter(c.releases, st.Releases.Load())
	counter(c.exhausted, st.Exhausted.Load())
	counter(c.retries, st.PublishRetries.Load())
	counter(c.commits, st.Commits.Load())
	gauge(c.regHeld, float64(st.SchemaRegistryHeld.Load()))
	counter(c.regRetries, st.SchemaRegistryRetries.Load())
	if c.distributed {
		for r := range partial.NumAddResults {
			counter(c.partials, st.Partials[r].Load(), partial.AddResult(r).String())
		}
		for r := range partial.NumReasons {
			counter(c.malformed, st.PartialsMalformed[r].Load(), partial.Reason(r).String())
		}
		counter(c.latePart, st.LatePartialCounts.Load())
		gauge(c.idleParts, float64(st.PartitionsIdle.Load()))
		gauge(c.gaps, float64(st.PartialGaps.Load()))
		counter(c.dataLoss, st.PartialsDataLoss.Load())
		counter(c.incomplete, st.IncompleteWindows.Load())
		gauge(c.lsoHeld, float64(st.PartialsLSOHeldMs.Load())/1000)
		counter(c.lsoHolds, st.PartialsLSOHolds.Load())
		counter(c.firstSkip, st.FirstStartSkipped.Load())
	}
	// Every reason is exported from the start (at 0), so that rates exist
	// before the first drop: bounding outcomes under the bounded metric,
	// the others (the decoder's and the window rule's) under dropped.
	for r := decode.Reason(1); r < decode.NumReasons; r++ {
		if r == decode.ReasonBoundAverageUsers || r.Hold() {
			continue // counted apart: st.AverageNotSelected; a hold is not a drop
		}
		if label, ok := r.Bound(); ok {
			counter(c.bounded, st.DroppedBy(r), label)
		} else {
			counter(c.dropped, st.DroppedBy(r), r.String())
		}
	}
	avgUsers, _ := decode.ReasonBoundAverageUsers.Bound()
	counter(c.bounded, st.AverageNotSelected.Load(), avgUsers)

	lag := src.Lag()
	for p, l := range lag {
		gauge(c.lag, float64(l), strconv.Itoa(p))
	}
	if bt, ok := src.(brokerTimeSource); ok {
		perPartition(ch, brokerRegressionsDesc, bt.BrokerTimeRegressions(), lag)
	}
	if bt, ok := src.(brokerTimeBeyondSource); ok {
		perPartition(ch, brokerRegressionsBeyondDesc, bt.BrokerTimeRegressionsBeyondMargin(), lag)
	}

	if wb, ok := src.(windowBoundSource); ok {
		if shares := wb.WindowBound(); shares != nil {
			for _, sh := range shares {
				counter(windowBoundCountedDesc, sh.TotalCounted, sh.Histogram)
				counter(windowBoundDroppedDesc, sh.TotalDropped, sh.Histogram)
				gauge(windowBoundBlindDesc, b2f(sh.Blind), sh.Histogram)
				if sh.Closed {
					gauge(windowBoundShareDesc, sh.Share, sh.Histogram)
				}
			}
		}
	}

	plan := src.Plan()
	if plan != nil {
		gauge(c.total, plan.Epsilon)
		gauge(c.delta, plan.Delta)
		gauge(c.charges, float64(plan.Charges()))
	}
	for _, b := range src.Budget() {
		ps, pe := b.PeriodStart.UTC().Format(time.RFC3339), b.PeriodEnd.UTC().Format(time.RFC3339)
		gauge(c.spent, b.SpentEpsilon, "period", ps, pe)
		gauge(c.remaining, b.Remaining, "period", ps, pe)
	}
	if plan == nil || plan.Count == nil {
		return
	}
	m := plan.Count.Mechanism
	spec := m.Spec()
	order := strconv.FormatFloat(spec.Order, 'g', -1, 64)
	gauge(c.info, 1, string(spec.Kind), string(spec.Calibration), plan.Neighbour, order)
	p := m.Params()
	for d, v := range map[*prometheus.Desc]float64{c.alpha: p.Alpha, c.r: p.R, c.sigma: p.Sigma, c.scale: p.Scale} {
		if v != 0 {
			gauge(d, v)
		}
	}
	gauge(c.rdp, m.RDP(spec.Order), order)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
