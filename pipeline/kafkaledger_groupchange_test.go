package pipeline_test

import (
	"testing"
	"time"

	"github.com/dpstage/stage/internal/e2e"
)

// TestKafkaLedgerGroupIDChangeFences (found by the review of issue #14):
// the release log's transactional id was derived from kafka.group_id as
// well as the topic, so an instance of the same deployment started with
// another group_id — a rolling redeploy that changes kafka.group_id, the
// old instance still running — opened the SAME release log under ANOTHER
// transactional id: it fenced nothing, and the old instance was not fenced
// by it. Both are active (each is the only
// member of its own group), both restore the log, both record window 1
// (each Log's memory lacks the other's unit, so neither sees
// ErrAlreadyRecorded) and both publish it with independent draws: one
// release_id, two different values (rule 4), and the period's recorded
// spend (an absolute value, last writer wins) counts one of the two
// releases (the budget). With bbolt the state.dir lock makes the second
// instance wait. The id is now the topic's (config.LedgerTransactionalID):
// the new instance fences the old, and every window is published once in
// values.
func TestKafkaLedgerGroupIDChangeFences(t *testing.T) {
	t.Parallel()
	h := e2e.New(t)
	cfg := kafkaLedgerConfig(t, h, 1) // noisy: two draws differ
	per := len(e2e.Groups) + 1
	evs := e2e.Stream(2, 50)
	h.ProduceEvents(evs[:50])
	h.Produce(e2e.Flush(e2e.Base.Add(time.Minute + time.Second)))
	old := h.Start(cfg)
	e2e.WaitFor(t, "window 0 released by the old instance", 60*time.Second, func() bool {
		return old.Units.Load() >= int64(len(cfg.Histograms))
	})

	// The redeploy: same ledger topic, same output, new group_id.
	next := *cfg
	next.Kafka.GroupID = cfg.Kafka.GroupID + "-v2"
	next.State.Dir = t.TempDir()
	newer := h.Start(&next)
	e2e.WaitFor(t, "the new instance restored the log", 60*time.Second, func() bool {
		return newer.Stage.Readiness().StateLoaded
	})
	time.Sleep(2 * time.Second) // its session is assigned and running

	h.ProduceEvents(evs[50:])
	h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
	// Each window once (2·per release_ids), then a settle to catch the
	// second instance's copies. Either instance may stop with ErrFenced
	// (that is the correct outcome for one of them): their errors are not
	// checked.
	out := h.ReadOutput(2*per, 60*time.Second, 5*time.Second)
	old.Cancel()
	newer.Cancel()
	if len(out.Raw) != 2*per {
		t.Fatalf("%d release_ids, want %d (windows 0 and 1): the probe tested nothing", len(out.Raw), 2*per)
	}

	distinct := 0
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			if c != copies[0] {
				distinct++
				t.Errorf("release %s published with different values:\n%s\n%s", id, copies[0], c)
				break
			}
		}
	}
	t.Logf("%d releases read, %d release_ids, %d with different values", len(out.Releases), len(out.Raw), distinct)
}
