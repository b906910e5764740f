// Package window decides which window an event counts in and when a
// window closes: the tumbling windows (Start), the counting rule (Rule: an
// event's fate from its own times) and the watermarks that close windows
// (Watermarks). Unit-tested without a broker.
//
// Invariant: whether an event counts depends only on that event — its own
// event time and record (arrival) time — never on other users' events
// (ground rule 7).
//
// # Which events count: the arrival watermark
//
// The guarantee needs every released count to change by at most one user's
// bounded contribution between neighbouring inputs, so whether an event is
// counted must depend on that event alone. An event-time watermark (the
// largest user-supplied event time seen) breaks this: one event stamped an
// hour ahead moves its partition's watermark, closes every window up to an
// hour ahead, and turns every other user's events for those windows into
// late drops — released values then differ by an hour of other users'
// events. Closing by the wall clock alone (wall > window end + lateness)
// breaks it differently: whether an event is read before the close depends
// on consumer lag, which other users' volume drives, and a restart after
// downtime would close every elapsed window before re-reading its backlog.
//
// So by default (window.watermark: arrival) an event's fate is decided by
// two of its own times: its event time t (the time field: which window w
// it belongs to) and its record time b (the Kafka record timestamp, set by
// the broker with message.timestamp.type=LogAppendTime, else by the
// producer). It counts if and only if t ≤ b + events.max_future and
// b < end(w) + lateness (Rule.Decide). Windows close only once every
// partition has been read up to record time end(w) + lateness (plus the
// clock-skew margin below; see Watermarks). A partition's frontier moves
// by broker-set record times (LogAppendTime: they do not run backwards
// along the log, up to that margin) and, whatever the
// timestamp type, by reading the partition to its end (a fetch sent at T
// that came back at the high watermark: everything appended before T has
// been read); a producer-set record time never moves it, since producers'
// clocks and retries make such times run backwards and one record ahead
// would close windows before the records behind it are read. A partition
// with unread records or failing fetches holds every window open. So every
// event that satisfies the rule and was appended within the lateness of
// its own record time has been counted when its window is released,
// however far behind the consumer is and across restarts (the uncommitted
// offsets are re-read and the same rule gives the same answer). One user's
// timestamps move only their own events; consumer lag delays releases but
// changes nothing in them.
//
// # The assumptions, and what checks them
//
// Record times come from the broker. With message.timestamp.type
// LogAppendTime the record time is the append time, so the rule above
// depends on the record alone. The stage (pipeline, window.record_times:
// broker, the default) reads the input topic's message.timestamp.type with
// DescribeConfigs at every start and rebalance and refuses to start on a
// CreateTime topic, or when it may not describe the topic's config (the
// DESCRIBE_CONFIGS ACL): it does not assume what it cannot see.
//
// window.record_times: producer is the explicit opt-in to producer-set
// times (CreateTime), for producers whose clocks users cannot set (never
// copied from an event's own time field). Its exact meaning: the rule is
// applied to the producer's time b as is, and b never moves the frontier,
// so a window closes only once every partition has been read to its end
// by a fetch sent at end + 2·lateness (+ the margin below) or later. A
// record with b < end + lateness that is appended later than that fetch —
// a producer retry (Java keeps the original CreateTime up to
// delivery.timeout.ms, 2 minutes by default), a stalled producer, a
// producer clock behind the stage's — is counted if the partition was not
// read to its end between end + 2·lateness and its append, which other
// users' backlog decides, and dropped as late otherwise
// (TestProbeCreateTimeDependsOnLoad). So with the opt-in, whether such a record counts depends on
// other users' load; records appended within the lateness of their own time
// are unaffected.
//
// Clocks agree within window.clock_skew_margin M (default 2 s). A broker
// time is the partition leader's clock, and the caught-up clause reads the
// stage host's clock; after a leader change to a broker whose clock is
// behind, or an NTP step back, a later record carries an earlier broker
// time, and a stage clock ahead of the brokers' overstates what a caught-up
// fetch has seen. Both frontier clauses are lowered by M (see Watermarks),
// so a window closes only once every partition is read up to record time
// end + lateness + M; the rule itself stays "record time < end + lateness"
// for each event, and M only delays releases. This holds while every
// broker-time regression is at most M and the stage's clock leads the
// brokers' by at most lateness + M. Why 2 s: NTP (chrony, ntpd) keeps
// clocks on one network within milliseconds and steps a clock only past
// 128 ms of offset, so brokers and stage hosts on NTP disagree by far less;
// 2 s of release delay on minute windows is cheap. Regressions are counted
// per partition and logged past M (pipeline), since records behind one may
// be dropped as late (TestProbeBrokerTimeRegression: with M = 0 a 1 s
// regression after a leader change drops an event the rule counts).
//
// Every writer of the input topic is trusted with its record times.
// window.watermark: event keeps the event-time watermark as an explicit
// opt-in for replaying trusted historical data (`stage validate` flags
// it).
package window
