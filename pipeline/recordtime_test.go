package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestRecordTimesChecked (issue 21, item 3): under watermark arrival the
// stage reads the input topic's message.timestamp.type at start and
// refuses a CreateTime topic unless window.record_times: producer opts in,
// with a message that says what to set on the topic; a LogAppendTime topic
// (the embedded broker's default) starts, and so does any topic under
// watermark event, where record times play no part. Brokers that refuse to
// describe the topic's config get a refusal naming the ACL. Against the
// embedded broker, in single-process mode.
func TestRecordTimesChecked(t *testing.T) {
	h := e2e.New(t) // its input topic is CreateTime
	lat, denied := "lat-"+h.Name, "denied-"+h.Name
	for _, topic := range []string{lat, denied} {
		if err := h.Broker.CreateTopic(topic, 2); err != nil { // LogAppendTime
			t.Fatal(err)
		}
	}
	// The brokers refuse to describe denied's config, as they do without
	// the DESCRIBE_CONFIGS ACL (kfake answers a fault where it checks ACLs).
	h.Broker.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: denied, Err: kerr.TopicAuthorizationFailed, Count: -1})
	for i, tc := range []struct {
		name        string
		topic       string
		watermark   string
		recordTimes string
		refused     []string // what the refusal must say; nil: runs
	}{
		{"CreateTime, no opt-in: refused", h.Input(), config.WatermarkArrival, config.RecordTimesBroker, []string{
			"message.timestamp.type=CreateTime", "--entity-name " + h.Input(), "--add-config message.timestamp.type=LogAppendTime",
			"window.record_times: producer", "other users' load"}},
		{"CreateTime, record_times producer: runs", h.Input(), config.WatermarkArrival, config.RecordTimesProducer, nil},
		{"LogAppendTime: runs", lat, config.WatermarkArrival, config.RecordTimesBroker, nil},
		{"CreateTime, watermark event: runs", h.Input(), config.WatermarkEvent, config.RecordTimesBroker, nil},
		{"DescribeConfigs denied: refused", denied, config.WatermarkArrival, config.RecordTimesBroker, []string{
			"DESCRIBE_CONFIGS on topic " + denied, "--operation DescribeConfigs --topic " + denied, "window.record_times: producer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := h.ArrivalConfig(time.Second, 300*time.Millisecond)
			cfg.Window.Watermark = tc.watermark
			cfg.Window.RecordTimes = tc.recordTimes
			cfg.Kafka.InputTopic = tc.topic
			cfg.Kafka.GroupID += "-" + string(rune('a'+i))
			cfg.State.Dir = t.TempDir()
			cfg.State.AllowFreshLedger = true // the cases share one output topic
			st, err := pipeline.New(pipeline.Options{Config: cfg, HashKey: &e2e.TestKey, Log: e2e.Log(), DrainTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- st.Run(ctx) }() // owner: this test; ends with cancel
			defer func() {
				cancel()
				<-done
			}()
			if tc.refused != nil {
				select {
				case err := <-done:
					done <- err // for the deferred wait
					if err == nil {
						t.Fatal("Run ended without an error")
					}
					for _, want := range tc.refused {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("the refusal does not say %q: %v", want, err)
						}
					}
				case <-time.After(10 * time.Second):
					t.Fatal("not refused within 10s")
				}
				return
			}
			deadline := time.Now().Add(15 * time.Second)
			for !st.Readiness().Assigned {
				select {
				case err := <-done:
					done <- err
					t.Fatalf("Run ended: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatal("not assigned the input partitions within 15s")
				}
			}
		})
	}
}
