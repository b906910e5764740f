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
// partition has been read up to record time end(w) + lateness (see
// Watermarks). A partition's frontier moves by broker-set record times
// (LogAppendTime: they never run backwards along the log) and, whatever the
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
// The trust assumption: record timestamps are not user data, and every
// writer of the input topic is trusted with them. They must come from the
// broker (LogAppendTime, recommended: the record time is then the append
// time, and the rule above depends on the record alone) or from producers
// whose clocks users cannot set — never copied from an event's own time
// field. With producer-set times one case remains where timing matters: a
// record appended more than the lateness after its own record time (a
// stalled producer, a retry) may be read before or after its window closes
// depending on when the stage next reads the partition to its end; it is
// then counted or dropped as late (counted in the late metric). Only that
// record's own delay puts it in this case. window.watermark: event
// keeps the event-time watermark as an explicit opt-in for replaying trusted
// historical data (`stage validate` flags it).
package window
