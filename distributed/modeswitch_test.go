package distributed_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
)

// TestModeSwitchToDistributedIsComplete (issue 28's review, item 1): a
// deployment switches from the single-process mode to the distributed
// mode over one Kafka release log, the input topic's partition count
// unchanged. The single-process mode records the count it counted with in
// the release log (input_partitions), so the distributed mode finds no
// change and releases its windows complete. Before, the single-process
// mode recorded none, the distributed mode took its log for an older
// version's with a new progress topic and recorded a change "from 0":
// every window within the grace of the switch was released with
// "complete": false, "partitions_changed" — counted whole all the same.
func TestModeSwitchToDistributedIsComplete(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	dist, single := modeConfigs(t, h, size, lateness, 0)
	per := 1 + len(e2e.Groups)
	window := func(user string) time.Time {
		w := time.Now().Truncate(size).Add(size)
		e2e.WaitPast(w.Add(50 * time.Millisecond))
		produceKeyed(t, h, []e2e.Event{{User: user, At: w.Add(100 * time.Millisecond), Page: e2e.Pages[0], Country: e2e.Groups[0], Device: e2e.Devices[0]}})
		return w
	}

	a := h.Start(single)
	time.Sleep(2 * time.Second) // the group settles
	w1 := window("u")
	waitReleased(t, h, w1, per, 30*time.Second)
	a.Stop(t)
	rec := ledgerPartitions(t, h, dist.State.LedgerTopic)
	if rec.Count != 4 || rec.Changed != nil {
		t.Errorf("after the single-process mode the release log records %+v (change %+v); want the 4 partitions it counted with, no change", rec, rec.Changed)
	}

	b := h.Start(dist)
	defer b.Stop(t)
	time.Sleep(3 * time.Second) // the groups settle
	w2 := window("v")
	out := waitReleased(t, h, w2, per, 40*time.Second)
	rec = ledgerPartitions(t, h, dist.State.LedgerTopic)
	if rec.Count != 4 || rec.Changed != nil {
		t.Errorf("after the switch the release log records %+v (change %+v); want 4 partitions, no change", rec, rec.Changed)
	}
	n := 0
	for _, r := range out.Releases {
		if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); !ws.Before(w2) {
			n++
			if cov := rawCoverage(t, out, r); cov.Complete == nil || !*cov.Complete || len(cov.Incomplete) > 0 {
				t.Errorf("%s: coverage %s after the switch; want complete", e2e.ReleaseKey(r), cov.raw)
			}
		}
	}
	if n < per {
		t.Fatalf("%d releases from window %s, want %d", n, w2.Format(time.RFC3339Nano), per)
	}
}
