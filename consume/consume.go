package consume

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/internal/lib/retry"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/node"
	"github.com/dpstage/stage/source"
	"github.com/dpstage/stage/window"
	"go.uber.org/zap"
)

// Consume reads partition p of sess from offset, in offset order, and
// counts what the window rule lets count into sess's open windows, until
// ctx ends. Both modes run it: the single-process stage for every input
// partition, the distributed bounder for each partition it owns.
func Consume(ctx context.Context, s *node.Node, sess *Session, p int, offset int64) {
	// A fetch loop on a kafka.Conn to the leader, not kafka-go's Reader
	// (see connFetcher): same offsets, same order, less per-message cost.
	r := source.NewFetcher(s.Dialer, s.Brokers, sess.Topic, p, offset)
	r.Now = s.Now
	r.OnReset = func(from, to int64) {
		if to > from {
			s.Stats.RetentionSkipped.Add(to - from)
		}
		s.Log.Warn("committed offset no longer retained by the broker; reading from the first retained offset (the records between were deleted unread and are not counted)",
			zap.Int("partition", p), zap.Int64("from", from), zap.Int64("to", to))
	}
	defer r.Close()
	// The stage's key is not read when the Session has its own: in the
	// distributed mode the releaser's attach sets it concurrently.
	var key siphash.Key
	if sess.UserKey != nil {
		key = *sess.UserKey
	} else {
		key = s.UserKey
	}
	dec, err := decode.New(s.Cfg, key)
	if err == nil && sess.Partitioner != decode.PartitionerNone {
		dec, err = dec.WithPartitionCheck(sess.Partitioner, p, sess.Partitions)
	}
	if err != nil {
		s.Fail(fmt.Errorf("build decoder: %w", err))
		return
	}
	watchSchemas(s, dec)
	ev := dec.NewEvent()
	var rec decode.Record
	tracker := sess.Trackers[p]
	maxMsg := s.Cfg.Events.MaxMessageBytes
	loc := &partitionLocal{lateness: s.LatenessMs, caughtUp: math.MinInt64, pubCaughtUp: math.MinInt64}
	if sess.Adm != nil { // the window bound's drops on arrival, for the operator's drop share
		loc.drops, loc.dropU = &sess.Drops, map[userDrop]int64{}
		for _, h := range s.Cfg.Histograms {
			loc.sizes = append(loc.sizes, h.WindowSize(s.Cfg.Window.Size).D().Milliseconds())
		}
	}
	maxFuture := s.Cfg.Events.MaxFuture.D().Milliseconds()
	loc.wall = s.Now().UnixMilli()
	loc.futureLimit = loc.wall + maxFuture
	// publishRead publishes what was read since the last publication: at
	// the end of a response the last records may not have looked like the
	// partition's end (a commit marker followed them).
	publishRead := func() {
		if loc.consumed > loc.published || loc.urgent {
			loc.publish(sess.WM, p, s.Stats, s.SizeMs)
			loc.wall = s.Now().UnixMilli()
			loc.futureLimit = loc.wall + s.Cfg.Events.MaxFuture.D().Milliseconds()
		}
	}
	r.OnCaughtUp = func(sent time.Time) {
		// A fetch read to the high watermark: fetching works again, the
		// partition is read to its end, and with watermark arrival its
		// frontier advances by the wall clock (see window.Watermarks).
		if loc.failing {
			loc.failing = false
			sess.WM.SetFailing(p, false)
		}
		publishRead()
		s.SetLag(p, 0)
		sess.WM.CaughtUpAt(p, sent.UnixMilli())
	}
	r.OnBehind = func(left int64) {
		// A fetch read to its end below the high watermark: records are
		// left, or held back by an open transaction (the last stable
		// offset). The partition is not caught up, and not idle.
		if loc.failing {
			loc.failing = false
			sess.WM.SetFailing(p, false)
		}
		publishRead()
		s.SetLag(p, left)
		sess.WM.SetUnread(p)
	}
	r.OnSkipped = func(next int64) {
		// Offsets the fetcher passed over — commit and abort markers,
		// records of aborted transactions — need nothing more: offsets
		// may be committed past them.
		tracker.Processed(next - 1)
	}
	defer loc.flushStats(s.Stats)
	for {
		m, err := r.Fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.Ready.Connected.Store(false)
			if !loc.failing {
				loc.failing = true
				sess.WM.SetFailing(p, true)
			}
			s.Log.Warn("fetch failed; retrying", zap.Int("partition", p), zap.Error(err))
			if retry.Sleep(ctx, source.FetchRetryBackoff) != nil {
				return
			}
			continue
		}
		if !s.Ready.Connected.Load() {
			s.Ready.Connected.Store(true)
		}
		if loc.failing {
			loc.failing = false
			sess.WM.SetFailing(p, false)
		}
		loc.consumed++
		caughtUp := m.HighWaterMark-m.Offset <= 1
		if loc.consumed%256 == 0 || caughtUp {
			s.SetLag(p, m.HighWaterMark-m.Offset-1)
		}
		recMs := m.Time.UnixMilli()
		if s.Arrival {
			// A record time set by the broker (LogAppendTime) moves the
			// partition's frontier (window.Watermarks), never past the wall clock;
			// a producer-set one (CreateTime) does not: producers' clocks
			// and retries make it run backwards, and one record ahead would
			// close windows before the records behind it are read. Without
			// broker times a partition advances only when it is read to its
			// end.
			if r.BrokerTime() {
				s.NoteBrokerTime(p, &loc.brokerClock, recMs) // regressions: counted, logged past the margin
				loc.observe(min(recMs, loc.wall), s.SizeMs)
			} else if !loc.warnedCreateTime {
				loc.warnedCreateTime = true
				if s.Cfg.Window.RecordTimes == config.RecordTimesProducer {
					s.Log.Info("input partition has producer-set record times (CreateTime, accepted by window.record_times: producer): windows close only when the partition is read to its end, so a backlog holds releases back",
						zap.String("topic", sess.Topic), zap.Int("partition", p))
				} else {
					s.Log.Warn("input partition has producer-set record times (CreateTime) although the topic was checked for LogAppendTime: records written before the topic's switch keep their producer times, or the topic was altered since (the next rebalance or restart checks it again); windows close only when the partition is read to its end",
						zap.String("topic", sess.Topic), zap.Int("partition", p))
				}
			}
			if caughtUp {
				loc.caughtUp = r.Sent().UnixMilli()
			}
		}
		reason := decode.ReasonNone
		if maxMsg > 0 && len(m.Value) > maxMsg {
			reason = decode.ReasonOversized
		} else {
			recordOf(&rec, &m)
			r, ok := decodeHeld(ctx, s, sess, p, m.Offset, dec, &rec, ev)
			switch {
			case !ok:
				return // ctx ended while the schema registry held the record: not processed
			case r != decode.ReasonNone:
				reason = r
			default:
				loc.decoded++
				reason = handle(s, sess, p, m.Offset, recMs, ev, tracker, loc)
			}
		}
		if reason != decode.ReasonNone {
			s.Stats.Drop(reason)
			if err := s.DeadLetter(ctx, m, reason); err != nil {
				return // ctx ended: the message is not marked processed
			}
			tracker.Processed(m.Offset)
		}
		if loc.urgent || caughtUp || loc.consumed-loc.published >= publishEvery {
			loc.publish(sess.WM, p, s.Stats, s.SizeMs)
			loc.wall = s.Now().UnixMilli()
			loc.futureLimit = loc.wall + maxFuture
		}
	}
}

// publishEvery is the most messages a partition's consumer reads between two
// publications of its event time and counters (see partitionLocal).
const publishEvery = 64

// partitionLocal is what one partition's consumer accumulates between
// publications to the watermarks and the stats, so that the per-message path
// takes no shared lock, reads no clock and writes no shared counter. It
// publishes after every publishEvery messages, whenever it has read all the
// partition held (the last message of a fetch at the high watermark), and
// at once after a message that can change a decision of the releaser (the
// times are record times with watermark arrival, event times with
// watermark event): the
// partition's first event, a new smallest event time (watermark
// bookkeeping only: the first window comes from the ledger, not the data), or a new largest event time whose watermark lies in a later
// window than the one published (only window.Start(max − lateness) decides
// which windows close). The releaser therefore closes the same windows at
// the same messages as with per-message updates; only idle detection and
// the counters lag, by fewer than publishEvery messages.
type partitionLocal struct {
	lateness int64 // ms

	have               bool
	maxEvent, minEvent int64 // event time range seen on this partition
	pubMax, pubMin     int64 // the range published
	pubClose           int64 // window.Start(pubMax − lateness)
	urgent             bool  // publish after this message
	live               bool  // an event was counted since the last publication

	consumed, published int64 // messages read; messages read at the last publication

	// futureLimit: events after this time (Unix ms; wall clock +
	// events.max_future at the last publication) are dropped (watermark
	// event; with watermark arrival the limit is the record time +
	// events.max_future). wall is the wall clock at the last publication.
	futureLimit, wall int64
	// failing: the last fetch failed (published at once, see
	// watermarks.setFailing).
	failing bool
	// warnedCreateTime: the partition's producer-set record times were
	// logged once (arrival mode).
	warnedCreateTime bool
	// brokerClock follows the partition's broker-set record times
	// (arrival mode; node.Node.NoteBrokerTime).
	brokerClock node.BrokerClock
	// caughtUp (watermark arrival): the send time (Unix ms) of the last
	// fetch that reached the high watermark; pubCaughtUp the one published.
	caughtUp, pubCaughtUp int64

	// Counters not yet added to Stats.
	decoded, counted, boundEvents, boundGroups, boundCapacity int64
	boundDisplaced, boundWindows, flushedConsumed             int64

	// The window bound's drops on arrival not yet handed to the Session
	// (drops, nil without the bound; flushDrops): dropU per (config
	// histogram, user), of base window dropW; sizes is each histogram's
	// window size (ms); dropBuf is flushDrops' batch.
	drops   *aggregate.WindowDrops
	sizes   []int64
	dropU   map[userDrop]int64
	dropW   int64
	dropBuf []aggregate.Drop
}

// noteDrops counts ev's parts, of base window w, in the histograms of the
// window sizes whose bound dropped them on arrival (dropped: bit i for
// sets[i], Session.add).
func (l *partitionLocal) noteDrops(w int64, ev *decode.Event, sets []*WindowSet, dropped uint64) {
	if l.drops == nil || dropped == 0 {
		return
	}
	if len(l.dropU) > 0 && w != l.dropW {
		l.flushDrops()
	}
	l.dropW = w
	for i, set := range sets {
		if i >= 64 || dropped&(1<<i) == 0 {
			continue
		}
		for _, h := range set.hists {
			if h < len(ev.Drops) && ev.Drops[h] == decode.ReasonNone {
				l.dropU[userDrop{h, ev.User}]++
			}
		}
	}
}

// userDrop keys partitionLocal's drops on arrival: a config histogram and
// a user (the share counts a user's bounded contributions, not its events:
// aggregate.WindowDrops).
type userDrop struct {
	h    int
	user uint64
}

// flushDrops hands the drops noted to the Session's, where CloseWindow
// takes them. publish calls it before the watermark moves, so a window
// closes with its partition's drops.
func (l *partitionLocal) flushDrops() {
	if len(l.dropU) == 0 {
		return
	}
	l.dropBuf = l.dropBuf[:0]
	for k, n := range l.dropU {
		l.dropBuf = append(l.dropBuf, aggregate.Drop{H: k.h, Start: window.Start(l.dropW, l.sizes[k.h]), User: k.user, N: n})
	}
	l.drops.AddAll(l.dropBuf)
	clear(l.dropU)
}

// observe records a counted event's time; sizeMs is the window size.
func (l *partitionLocal) observe(t, sizeMs int64) {
	l.live = true
	if !l.have {
		l.have, l.maxEvent, l.minEvent, l.urgent = true, t, t, true
		return
	}
	if t > l.maxEvent {
		l.maxEvent = t
		if window.Start(t-l.lateness, sizeMs) != l.pubClose {
			l.urgent = true
		}
	}
	if t < l.minEvent {
		l.minEvent, l.urgent = t, true
	}
}

// publish hands the event-time range and the counters on.
func (l *partitionLocal) publish(wm *window.Watermarks, p int, st *node.Stats, sizeMs int64) {
	l.flushDrops() // before the watermark may close their window
	// Only counted events keep a partition live: one that delivers nothing
	// but malformed, late or too-far-ahead messages goes idle and stops
	// holding the watermark back (garbage cannot stall every release).
	if l.caughtUp > l.pubCaughtUp {
		wm.CaughtUpAt(p, l.caughtUp)
		l.pubCaughtUp = l.caughtUp
	}
	switch {
	case !l.live:
	case l.maxEvent != l.pubMax || l.minEvent != l.pubMin:
		wm.Observe(p, l.minEvent) // lowers the minimum; cannot raise the maximum
		wm.Observe(p, l.maxEvent)
		l.pubMax, l.pubMin = l.maxEvent, l.minEvent
		l.pubClose = window.Start(l.maxEvent-l.lateness, sizeMs)
	default:
		wm.Touch(p)
	}
	l.live = false
	l.urgent = false
	l.published = l.consumed
	l.flushStats(st)
}

// flushStats adds the accumulated counters to st.
func (l *partitionLocal) flushStats(st *node.Stats) {
	l.flushDrops()
	st.Consumed.Add(l.consumed - l.flushedConsumed)
	l.flushedConsumed = l.consumed
	st.Decoded.Add(l.decoded)
	st.Counted.Add(l.counted)
	if l.boundEvents > 0 {
		st.DropN(decode.ReasonBoundUserEvents, l.boundEvents)
	}
	if l.boundGroups > 0 {
		st.DropN(decode.ReasonBoundUserGroups, l.boundGroups)
	}
	if l.boundCapacity > 0 {
		st.DropN(decode.ReasonBoundCapacity, l.boundCapacity)
	}
	if l.boundDisplaced > 0 {
		st.DropN(decode.ReasonBoundDisplaced, l.boundDisplaced)
	}
	if l.boundWindows > 0 {
		st.DropN(decode.ReasonBoundWindows, l.boundWindows)
	}
	l.decoded, l.counted, l.boundEvents, l.boundGroups, l.boundCapacity, l.boundDisplaced = 0, 0, 0, 0, 0, 0
	l.boundWindows = 0
}

// handle bounds and counts a decoded event whose record (arrival) time is
// recMs. It returns a drop reason for an event that must go to the
// dead-letter topic, decode.ReasonNone otherwise.
//
// With watermark arrival (the default) whether the event counts depends on
// the event alone: it belongs to the window w of its own event time and
// counts if its event time is at most events.max_future after its record
// time and its record time is before w's end + lateness; the window stays
// open until every partition has been read up to that record time
// (window.Watermarks), so neither other users' timestamps nor consumer lag decide
// it. With watermark event it also counts only while its window is open,
// which the largest event times seen decide (the opt-in trust assumption).
func handle(s *node.Node, sess *Session, p int, offset, recMs int64, ev *decode.Event, tracker *source.OffsetTracker, loc *partitionLocal) decode.Reason {
	w, reason := s.Rule.Decide(ev.TimeMs, recMs, loc.futureLimit)
	switch reason {
	case decode.ReasonNone:
	case decode.ReasonLate:
		late(s, offset, tracker) // arrived after its window's cutoff
		return decode.ReasonNone
	default:
		return reason
	}
	sess.closeMu.RLock()
	// Into the window of every size still open whose cross-window bound
	// may still admit the user (windows.go).
	out, ao, track, ok, bound, dropped := sess.add(w, s.SizeMs, s.PeriodOf(w), ev)
	if !ok && (bound > 0 || dropped != 0) {
		// Admitted to max_windows_per_user closed windows of the period
		// already, in every size still open: never admitted to them
		// (aggregate.Admissions). Nothing of the event counts, but its
		// offset is held like a counted event's until the windows it was
		// dropped from are released (track: the longest), so a restart
		// that changes a bound re-reads it whatever other users' events
		// hold (windows.go, "Offsets"). Also when none of its parts in
		// those sizes was valid (bound 0, dropped bits set): its windows
		// are open, so it is not late, and its parts' own drop reasons
		// are counted (countOutcome).
		tracker.Counted(track, offset)
		sess.closeMu.RUnlock()
		if !s.Arrival {
			loc.observe(ev.TimeMs, s.SizeMs)
		}
		countOutcome(s, ev, aggregate.Outcome{}, loc)
		loc.boundWindows += int64(bound)
		loc.noteDrops(w, ev, sess.Sets, dropped)
		return decode.ReasonNone
	}
	if !ok {
		sess.closeMu.RUnlock()
		late(s, offset, tracker)
		return decode.ReasonNone
	}
	tracker.Counted(track, offset)
	sess.closeMu.RUnlock()
	if !s.Arrival {
		loc.observe(ev.TimeMs, s.SizeMs) // event time moves the watermark only in event mode
	}
	countOutcome(s, ev, out, loc)
	loc.boundWindows += int64(bound) // the parts of the sizes whose bound dropped them
	loc.noteDrops(w, ev, sess.Sets, dropped)
	if ao.Added > 0 {
		s.Stats.Averaged.Add(int64(ao.Added))
	}
	if ao.NotSelected > 0 {
		s.Stats.AverageNotSelected.Add(int64(ao.NotSelected))
	}
	return decode.ReasonNone
}

// late counts an event dropped as late and marks its offset processed.
func late(s *node.Node, offset int64, tracker *source.OffsetTracker) {
	s.Stats.Late.Add(1)
	s.Stats.Drop(decode.ReasonLate)
	tracker.Processed(offset)
}

func countOutcome(s *node.Node, ev *decode.Event, out aggregate.Outcome, loc *partitionLocal) {
	for _, r := range ev.Drops {
		if r != decode.ReasonNone {
			s.Stats.Drop(r)
		}
	}
	loc.counted += int64(out.Counted)
	loc.boundEvents += int64(out.DroppedUserEvents)
	loc.boundGroups += int64(out.DroppedUserGroups)
	loc.boundCapacity += int64(out.DroppedCapacity)
	loc.boundDisplaced += int64(out.Displaced)
}
