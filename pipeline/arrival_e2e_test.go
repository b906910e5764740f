package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/release"
)

// deviceTruth counts, per window of the given size, the devices of evs
// (distinct users, one event each: nothing is bounded away).
func deviceTruth(evs []e2e.Event, size time.Duration) map[int64][]float64 {
	tr := map[int64][]float64{}
	for _, e := range evs {
		w := e.At.Truncate(size).UnixMilli()
		if tr[w] == nil {
			tr[w] = make([]float64, len(e2e.Devices))
		}
		for i, d := range e2e.Devices {
			if d == e.Device {
				tr[w][i]++
			}
		}
	}
	return tr
}

// checkDevices checks that every window of tr was released for the devices
// histogram with exactly its true shares.
func checkDevices(t *testing.T, out e2e.Output, tr map[int64][]float64) {
	t.Helper()
	got := map[int64]release.Release{}
	for _, r := range out.Releases {
		if r.Histogram != "devices" {
			continue
		}
		ws, err := time.Parse(time.RFC3339Nano, r.WindowStart)
		if err != nil {
			t.Fatalf("window_start %q: %v", r.WindowStart, err)
		}
		got[ws.UnixMilli()] = r
	}
	for w, counts := range tr {
		r, ok := got[w]
		if !ok {
			t.Errorf("window %s: no devices release", time.UnixMilli(w).UTC().Format(time.RFC3339Nano))
			continue
		}
		e2e.CheckExact(t, fmt.Sprintf("devices@%d", w), r, counts)
	}
}

// TestForgedTimestampCannotDropOthers is the attack of issue 15: one event
// stamped ahead (here 2 minutes, well within events.max_future) on one
// partition, then ordinary events of the open windows. By default (watermark
// arrival) the forged event only lands in its own future window and every
// ordinary event counts, exactly. With the opt-in event-time watermark the
// same input closes the open windows early and the ordinary events are
// dropped as late — the trust assumption `stage validate` flags — which also
// shows this test detects the attack.
func TestForgedTimestampCannotDropOthers(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	for _, mode := range []string{config.WatermarkArrival, config.WatermarkEvent} {
		t.Run(mode, func(t *testing.T) {
			h := e2e.New(t)
			cfg := h.ArrivalConfig(2*time.Second, 300*time.Millisecond)
			cfg.Window.Watermark = mode
			cfg.Window.IdlePartitionTimeout = config.Duration(500 * time.Millisecond)
			run := h.Start(cfg)
			forged := e2e.Event{User: "forger", At: time.Now().Add(2 * time.Minute), Page: "home", Country: "US", Device: "mobile"}
			h.Produce(kafka.Message{Key: []byte("forger"), Value: forged.JSON()})
			e2e.WaitFor(t, "the condition", 10*time.Second, func() bool { return run.Stage.Stats().Counted.Load() >= 1 })
			time.Sleep(time.Second) // event mode: the other partitions go idle
			evs := h.ProduceLive("user", 40, 3*time.Second)
			last := evs[len(evs)-1].At
			// Past the last event's window end + 2·lateness (the caught-up
			// frontier trails the wall clock by the lateness) and a margin.
			e2e.WaitPast(last.Truncate(2 * time.Second).Add(2*time.Second + 600*time.Millisecond + 2*time.Second))
			st := run.Stage.Stats()
			late := st.Late.Load()
			if mode == config.WatermarkEvent {
				if late == 0 {
					t.Fatalf("event-time watermark: no ordinary event was late after a forged future event; the attack no longer reproduces, so this test cannot tell the modes apart")
				}
				t.Logf("event-time watermark (opt-in): %d of %d ordinary events dropped as late", late, len(evs))
				return
			}
			if late != 0 {
				t.Errorf("%d events dropped as late after one forged future event; want 0", late)
			}
			if n := st.Dropped()["time_too_far_ahead"]; n != 0 {
				t.Errorf("time_too_far_ahead = %d, want 0 (2 minutes ahead is within events.max_future)", n)
			}
			out := h.ReadOutput(0, 10*time.Second, 2*time.Second)
			checkDevices(t, out, deviceTruth(evs, 2*time.Second))
		})
	}
}

// TestRestartRecountsBacklog: events produced while the stage is down (a
// trickle, then 50,000 in one burst), for
// windows whose time has passed by the restart, are counted after it
// (exactly), not dropped as late: the windows stay open until the
// partitions have been re-read up to their arrival cutoff. Uses close_after,
// the older name of the arrival lateness, whose wall-clock closing used to
// drop the whole backlog at a restart.
func TestRestartRecountsBacklog(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.ArrivalConfig(time.Second, 0)
	cfg.Window.CloseAfter = config.Duration(300 * time.Millisecond)
	run := h.Start(cfg)
	first := h.ProduceLive("before", 10, time.Second)
	e2e.WaitPast(first[len(first)-1].At.Truncate(time.Second).Add(time.Second + 600*time.Millisecond + time.Second))
	run.Stop(t)

	backlog := h.ProduceLive("down", 30, 2*time.Second)
	backlog = append(backlog, h.ProduceBulk("bulk", 50000)...)
	e2e.WaitPast(time.Now().Add(2 * time.Second)) // every backlog window's cutoff is past
	run = h.Start(cfg)
	e2e.WaitPast(time.Now().Add(3 * time.Second))
	if late := run.Stage.Stats().Late.Load(); late != 0 {
		t.Errorf("%d backlog events dropped as late after the restart; want 0", late)
	}
	out := h.ReadOutput(0, 10*time.Second, 2*time.Second)
	checkDevices(t, out, deviceTruth(append(first, backlog...), time.Second))
	for id, copies := range out.Raw {
		if len(copies) > 1 {
			for _, c := range copies[1:] {
				if c != copies[0] {
					t.Errorf("release %s published twice with different values", id)
				}
			}
		}
	}
}

// TestRestartLastReleasedWindowIsLate: after a restart, an event for the
// last window released before it is dropped as late (counted), not counted
// into a window that is never released again (issue 16, 1b).
func TestRestartLastReleasedWindowIsLate(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	h.ProduceEvents(e2e.Stream(2, 20))
	run := h.Start(cfg)
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, 0)
	run.Stop(t)

	run = h.Start(cfg)
	h.Produce(kafka.Message{Key: []byte("late"), Value: e2e.Event{User: "late", At: e2e.Base.Add(time.Minute + 30*time.Second), Page: "home", Country: "US", Device: "mobile"}.JSON()})
	e2e.WaitFor(t, "the condition", 20*time.Second, func() bool { return run.Stage.Stats().Late.Load() >= 1 })
}

// TestArrivalCutoffIsTheEventsOwn: with watermark arrival an event counts
// iff its own record time is before its window's end + lateness — decided
// by the event, not by whether the window happens to be open when it is
// read. Record timestamps are set explicitly here (as a producer may).
func TestArrivalCutoffIsTheEventsOwn(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.ArrivalConfig(2*time.Second, 300*time.Millisecond)
	run := h.Start(cfg)
	at := time.Now().Truncate(time.Millisecond)
	ev := func(user, device string) []byte {
		return e2e.Event{User: user, At: at, Page: "home", Country: "US", Device: device}.JSON()
	}
	h.Produce(
		// Record time 10 s after its event: past the cutoff, though its
		// window is still open when it is read.
		kafka.Message{Key: []byte("a"), Value: ev("a", "desktop"), Time: at.Add(10 * time.Second)},
		// Record time 10 s before its event (within events.max_future):
		// counts.
		kafka.Message{Key: []byte("b"), Value: ev("b", "mobile"), Time: at.Add(-10 * time.Second)},
		// Event time 2 h after its record time: beyond events.max_future.
		kafka.Message{Key: []byte("c"), Value: e2e.Event{User: "c", At: at.Add(2 * time.Hour), Page: "home", Country: "US", Device: "mobile"}.JSON(), Time: at},
	)
	e2e.WaitFor(t, "the condition", 10*time.Second, func() bool {
		st := run.Stage.Stats()
		return st.Late.Load()+st.Dropped()["time_too_far_ahead"] >= 2 && st.Counted.Load() >= 1
	})
	st := run.Stage.Stats()
	if late := st.Late.Load(); late != 1 {
		t.Errorf("late = %d, want 1 (the event recorded after its window's cutoff)", late)
	}
	if far := st.Dropped()["time_too_far_ahead"]; far != 1 {
		t.Errorf("time_too_far_ahead = %d, want 1", far)
	}
	e2e.WaitPast(at.Truncate(2 * time.Second).Add(2*time.Second + 600*time.Millisecond + 2*time.Second))
	out := h.ReadOutput(0, 10*time.Second, time.Second)
	checkDevices(t, out, map[int64][]float64{at.Truncate(2 * time.Second).UnixMilli(): {1, 0}})
}

// TestCreateTimeAheadCannotCloseWindows (from the review of issue #15): a
// few records whose producer-set record time (CreateTime) runs an hour
// ahead, written into a backlog between ordinary events, must not close the
// backlog's windows before the ordinary events behind them are read: record
// times set by producers never move the arrival frontier (only broker times
// do, and reading a partition to its end). Before, the forged records moved
// their partition's frontier to the wall clock and 50,000 events were late.
func TestCreateTimeAheadCannotCloseWindows(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := h.ArrivalConfig(time.Second, 300*time.Millisecond)
	run := h.Start(cfg)
	first := h.ProduceLive("before", 5, 500*time.Millisecond)
	e2e.WaitPast(first[len(first)-1].At.Truncate(time.Second).Add(time.Second + 600*time.Millisecond + time.Second))
	run.Stop(t)

	a := h.ProduceBulk("a", 1000)
	// Not even valid events: the frontier used to move before decoding.
	w := &kafka.Writer{Addr: kafka.TCP(h.Broker.Addr()), Transport: e2e.NewTransport(t), Topic: "events-" + h.Name, Balancer: &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	var msgs []kafka.Message
	for i := 0; i < 8; i++ {
		msgs = append(msgs, kafka.Message{Value: []byte("x"), Time: time.Now().Add(time.Hour)})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b := h.ProduceBulk("b", 50000)
	e2e.WaitPast(time.Now().Add(2 * time.Second)) // down a while: the backlog's windows have ended
	run = h.Start(cfg)
	want := int64(len(a) + len(msgs) + len(b))
	deadline := time.Now().Add(60 * time.Second)
	for run.Stage.Stats().Consumed.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("consumed %d of the %d backlog messages within 60s", run.Stage.Stats().Consumed.Load(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if late := run.Stage.Stats().Late.Load(); late != 0 {
		t.Errorf("%d backlog events dropped as late behind records with a producer time ahead", late)
	}
}
