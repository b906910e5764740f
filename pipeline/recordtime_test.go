package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestRecordTimesChecked (issue 21, item 3): under watermark arrival the
// stage reads the input topic's message.timestamp.type at start and
// refuses a CreateTime topic unless window.record_times: producer opts in,
// with a message that says what to set on the topic; a LogAppendTime topic
// (the embedded broker's default) starts, and so does any topic under
// watermark event, where record times play no part. Against the embedded
// broker, in single-process mode.
func TestRecordTimesChecked(t *testing.T) {
	h := e2e.New(t) // its input topic is CreateTime
	lat := "lat-" + h.Name
	if err := h.Broker.CreateTopic(lat, 2); err != nil { // LogAppendTime
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name        string
		topic       string
		watermark   string
		recordTimes string
		refused     bool
	}{
		{"CreateTime, no opt-in: refused", h.Input(), config.WatermarkArrival, config.RecordTimesBroker, true},
		{"CreateTime, record_times producer: runs", h.Input(), config.WatermarkArrival, config.RecordTimesProducer, false},
		{"LogAppendTime: runs", lat, config.WatermarkArrival, config.RecordTimesBroker, false},
		{"CreateTime, watermark event: runs", h.Input(), config.WatermarkEvent, config.RecordTimesBroker, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := h.ArrivalConfig(time.Second, 300*time.Millisecond)
			cfg.Window.Watermark = tc.watermark
			cfg.Window.RecordTimes = tc.recordTimes
			cfg.Kafka.InputTopic = tc.topic
			cfg.Kafka.GroupID += "-" + string(rune('a'+i))
			cfg.State.Dir = t.TempDir()
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
			if tc.refused {
				select {
				case err := <-done:
					done <- err // for the deferred wait
					if err == nil {
						t.Fatal("Run ended without an error")
					}
					for _, want := range []string{"message.timestamp.type=CreateTime", "--entity-name " + tc.topic,
						"--add-config message.timestamp.type=LogAppendTime", "window.record_times: producer", "other users' load"} {
						if !strings.Contains(err.Error(), want) {
							t.Errorf("the refusal does not say %q: %v", want, err)
						}
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a CreateTime input topic without the opt-in was not refused within 10s")
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
