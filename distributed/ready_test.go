package distributed_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestDistStandbyReady (issue 22 item 2, readiness vs. the documented
// PodDisruptionBudget): with one input partition and two replicas, the
// replica the bounders' group gives no partition is a standby, and ready
// (/readyz's conditions: standby, not assigned), so that a
// PodDisruptionBudget of maxUnavailable 1 can drain its node. Before, it
// was never ready.
func TestDistStandbyReady(t *testing.T) {
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	input := "one-" + h.Name
	if err := h.Broker.CreateTopic(input, 1); err != nil {
		t.Fatal(err)
	}
	cfg := distRunConfig(t, h, 2*time.Second, 300*time.Millisecond)
	cfg.Kafka.InputTopic = input
	a, b := h.Start(cfg), h.Start(cfg)
	var owner, standby *e2e.Running
	e2e.WaitFor(t, "one replica assigned the input partition, the other a standby", 30*time.Second, func() bool {
		ra, rb := a.Stage.Readiness(), b.Stage.Readiness()
		switch {
		case ra.Assigned && rb.Standby:
			owner, standby = a, b
		case rb.Assigned && ra.Standby:
			owner, standby = b, a
		}
		return owner != nil
	})
	for name, r := range map[string]*e2e.Running{"owner": owner, "standby": standby} {
		if rd := r.Stage.Readiness(); !rd.Ready() {
			t.Errorf("%s not ready: %+v", name, rd)
		}
	}
	if rd := standby.Stage.Readiness(); rd.Assigned {
		t.Errorf("standby assigned: %+v", rd)
	}
	// The owner stops: the standby takes the partition over and is ready
	// as its owner.
	owner.Stop(t)
	e2e.WaitFor(t, "the standby to take the partition over", 30*time.Second, func() bool {
		rd := standby.Stage.Readiness()
		return rd.Assigned && !rd.Standby && rd.Ready()
	})
	if r := (pipeline.Readiness{StateLoaded: true, Connected: true}); r.Ready() {
		t.Errorf("neither assigned nor standby, yet ready: %+v", r)
	}
}
