package distributed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/pipeline"
)

// TestDistPrefixChangeKeepsWindowBound: contribution.max_windows_per_user
// 1; user u counts in window W1. The deployment is restarted with another
// kafka.distributed.internal_topic_prefix (the release log, state.
// ledger_topic, is kept: the same budget book): u's event in W3 of the
// same budget period must not count (u was admitted to K = 1 window of the
// period already), or the stage must refuse to go on. Counting it would
// let u contribute to two windows of a period whose charges assume one
// (ground rule 7: no config change lets a period's spend exceed its
// budget).
//
// Found by the review of issue 14 (the admissions lived in the progress
// topic only, so a bounder finding no progress started the period's
// admissions from nothing while the release log and its spend went on: W3
// was released with u counted again). The release log now records where
// the admissions were kept (checkAdmissionsHome), and the releaser under
// the new prefix refuses with ErrConfigChanged.
func TestDistPrefixChangeKeepsWindowBound(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	h := e2e.New(t)
	h.Watermark = config.WatermarkArrival
	mk := func(prefix string) *config.Config {
		cfg := distRunConfig(t, h, size, lateness)
		cfg.Contribution.MaxWindowsPerUser = 1
		cfg.Kafka.Distributed.InternalTopicPrefix = prefix
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfgA, cfgB := mk("a."), mk("b.")
	if cfgA.State.LedgerTopic != cfgB.State.LedgerTopic {
		t.Fatalf("ledger topics differ: %q, %q", cfgA.State.LedgerTopic, cfgB.State.LedgerTopic)
	}
	admissionsSwitch(t, h, cfgA, cfgB)
}

// TestModeSwitchKeepsWindowBound: the same as
// TestDistPrefixChangeKeepsWindowBound across a switch between the
// single-process mode (admissions in the release log) and the distributed
// mode (admissions in the progress topic) over one Kafka release log, in
// both directions: the second session refuses with ErrConfigChanged (or u
// is not counted again).
func TestModeSwitchKeepsWindowBound(t *testing.T) {
	t.Parallel() // its own broker and state; waits on the clock (CI time)
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	for _, toDist := range []bool{true, false} {
		name := map[bool]string{true: "single to distributed", false: "distributed to single"}[toDist]
		t.Run(name, func(t *testing.T) {
			h := e2e.New(t)
			h.Watermark = config.WatermarkArrival
			dist, single := modeConfigs(t, h, size, lateness, 1)
			if toDist {
				admissionsSwitch(t, h, single, dist)
			} else {
				admissionsSwitch(t, h, dist, single)
			}
		})
	}
}

// modeConfigs returns a distributed and a single-process config of h over
// one Kafka release log (created here), with max_windows_per_user k.
func modeConfigs(t *testing.T, h *e2e.Harness, size, lateness time.Duration, k int) (dist, single *config.Config) {
	t.Helper()
	dist = distRunConfig(t, h, size, lateness)
	dist.Contribution.MaxWindowsPerUser = k
	s := *dist
	s.Kafka.Distributed = config.Distributed{}
	for _, c := range []*config.Config{dist, &s} {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kafkalog.EnsureTopic(ctx, []string{h.Broker.Addr()}, dist.State.LedgerTopic, 1, -1); err != nil {
		t.Fatal(err)
	}
	return dist, &s
}

// admissionsSwitch runs cfgA, where user u counts in window W1 under
// max_windows_per_user 1, then cfgB (over the same release log) with u's
// event in W3 of the same budget period: the second stage must refuse
// (ErrConfigChanged, ErrStateLost) or not count u again.
func admissionsSwitch(t *testing.T, h *e2e.Harness, cfgA, cfgB *config.Config) {
	t.Helper()
	const size, lateness = 2 * time.Second, 300 * time.Millisecond
	// Stay inside one budget period (1h).
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 45*time.Second {
		time.Sleep(left + time.Second)
	}
	per := int64(1 + len(e2e.Groups))
	ev := func(user, page string, at time.Time) e2e.Event {
		return e2e.Event{User: user, At: at, Page: page, Country: e2e.Groups[0], Device: e2e.Devices[0]}
	}
	nextWindow := func() time.Time {
		w := time.Now().Truncate(size).Add(size)
		e2e.WaitPast(w.Add(50 * time.Millisecond))
		return w
	}

	a := h.Start(cfgA)
	time.Sleep(2 * time.Second) // the groups settle
	w1 := nextWindow()
	produceKeyed(t, h, []e2e.Event{ev("u", e2e.Pages[0], w1.Add(100*time.Millisecond))})
	e2e.WaitPast(w1.Add(size + lateness + 3*time.Second))
	released := func(w time.Time, timeout time.Duration) []float64 {
		out := h.ReadOutput(int(per), timeout, 2*time.Second)
		for _, r := range out.Releases {
			if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); ws.Equal(w) && r.Histogram == "pages" && r.Group == e2e.Groups[0] {
				return r.Probabilities
			}
		}
		return nil
	}
	if got := released(w1, 20*time.Second); len(got) == 0 || got[0] != 1 {
		t.Fatalf("W1 released %v, want u's page", got)
	}
	a.Stop(t)

	b := h.Start(cfgB)
	time.Sleep(3 * time.Second)
	w3 := nextWindow()
	produceKeyed(t, h, []e2e.Event{ev("u", e2e.Pages[0], w3.Add(100*time.Millisecond)), ev("v", e2e.Pages[1], w3.Add(100*time.Millisecond))})
	e2e.WaitPast(w3.Add(size + lateness + 5*time.Second))
	var bErr error
	select {
	case bErr = <-b.Done():
		b.Cancel()
	default:
	}
	if bErr != nil {
		if !errors.Is(bErr, pipeline.ErrConfigChanged) && !errors.Is(bErr, pipeline.ErrStateLost) {
			t.Fatalf("the stage under the new prefix stopped with %v", bErr)
		}
		t.Logf("refused: %v", bErr)
		return
	}
	out := h.ReadOutput(int(2*per), 20*time.Second, 2*time.Second)
	seen := false
	for _, r := range out.Releases {
		if ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart); !ws.Equal(w3) || r.Histogram != "pages" || r.Group != e2e.Groups[0] {
			continue
		}
		seen = true
		// u is bounded away (K = 1, admitted to W1): v alone, page search.
		e2e.CheckExact(t, e2e.ReleaseKey(r), r, []float64{0, 1, 0, 0, 0})
	}
	if !seen {
		t.Fatal("W3 not released")
	}
}
