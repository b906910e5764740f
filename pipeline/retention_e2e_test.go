package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/internal/e2e"
)

// TestRetentionSkippedIsCounted: records the broker deleted (retention,
// here DeleteRecords) before the stage read them are skipped — never
// counted — and the skip is visible: Stats.RetentionSkipped (the metric
// dpstage_input_retention_skipped_total), not only a log line.
func TestRetentionSkippedIsCounted(t *testing.T) {
	h := e2e.New(t)
	cfg := h.Config("gaussian", 1e7)
	// A first run reads and commits window 0 (48 records on partition 0).
	produceToParts(h, e2e.Stream(1, 40), 0)
	produceToParts(h, []e2e.Event{{User: "flush", At: e2e.Base.Add(time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}}, 0, 1, 2, 3)
	first := h.Start(cfg)
	waitRecorded(t, first, unitsOf(cfg, 1))
	first.Stop(t)
	// While it is down, 20 more records arrive and the log is cut at 59:
	// offsets 48 (the flush, in the unreleased window 1: the committed
	// offset) to 58 are deleted unread — 11 records.
	evs := e2e.Stream(2, 10)
	produceToParts(h, evs[len(evs)-20:], 0)
	cl := txnClient(h, "")
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = "events-" + h.Name
	rp := kmsg.NewDeleteRecordsRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 59
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if ec := resp.Topics[0].Partitions[0].ErrorCode; ec != 0 {
		t.Fatalf("delete records: error code %d", ec)
	}
	run := h.Start(cfg)
	deadline := time.Now().Add(20 * time.Second)
	for run.Stage.Stats().RetentionSkipped.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no retention skip counted (consumed %d)", run.Stage.Stats().Consumed.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := run.Stage.Stats().RetentionSkipped.Load(); got != 11 {
		t.Errorf("retention skipped %d records, want 11", got)
	}
}
