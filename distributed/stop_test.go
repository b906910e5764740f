package distributed_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestDistStopWithJoinInFlight (issue 22 item 2, "SIGTERM ignored after a
// kill storm"): a distributed stage whose JoinGroups the coordinator holds
// — both groups, as after a kill storm while it waits out the killed
// members' sessions — returns from a soft stop within its drain timeout.
// Before, kgo's Close waited for the held JoinGroup (here: for ever).
func TestDistStopWithJoinInFlight(t *testing.T) {
	const drain = time.Second
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	cfg := distRunConfig(t, h, 2*time.Second, 300*time.Millisecond)
	c := h.Broker.Cluster()
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	held := make(chan string, 16)
	c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case held <- req.(*kmsg.JoinGroupRequest).Group:
		default:
		}
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	r := e2e.StartStage(t, &e2e.Running{}, pipeline.Options{Config: cfg, HashKey: &e2e.TestKey, DrainTimeout: drain})
	groups := map[string]bool{}
	for deadline := time.After(15 * time.Second); len(groups) < 2; {
		select {
		case g := <-held:
			groups[g] = true
		case <-deadline:
			t.Fatalf("JoinGroups held: %v, want both groups'", groups)
		}
	}
	start := time.Now()
	r.Cancel()
	select {
	case err := <-r.Done():
		t.Logf("stopped %v after the stop, with both groups' JoinGroups held (drain timeout %v): %v", time.Since(start).Round(time.Millisecond), drain, err)
		if took := time.Since(start); took > drain+2*time.Second {
			t.Errorf("took %v, drain timeout %v", took, drain)
		}
	case <-time.After(drain + 4*time.Second):
		free()
		<-r.Done()
		t.Fatalf("still running %v after the stop with its JoinGroups held (drain timeout %v)", drain+4*time.Second, drain)
	}
}
