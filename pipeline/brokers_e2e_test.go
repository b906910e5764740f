package pipeline_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestStartWithWrongBrokersOrNoInput (issue 28 item 6): what a new user's
// first mistakes print. Brokers that do not answer — a closed loopback
// port, an unresolvable host — are named in the log with their own dial
// error and a pointer at kafka.brokers (it said "cannot check the input
// topic's message.timestamp.type … Broker Not Available", forever), and
// /readyz says connected: false with that reason; the stage keeps waiting
// for them until stopped. An input topic the brokers say does not exist
// gets the output topic's treatment: connected: true meanwhile, then one
// ErrNoInputTopic error saying to create it after the (short, here)
// missing-topic wait — it was retried forever. Against the embedded broker
// over loopback.
func TestStartWithWrongBrokersOrNoInput(t *testing.T) {
	h := e2e.New(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	for _, tc := range []struct {
		name    string
		brokers []string
		input   string
		want    []string // in the log and the readiness reason (unreachable) or the error (missing)
	}{
		{"closed port", []string{closed}, h.Input(), []string{closed, "connection refused", "kafka.brokers"}},
		{"unresolvable host", []string{"nohost.invalid:9092"}, h.Input(), []string{"nohost.invalid:9092", "no such host", "kafka.brokers"}},
		{"missing input topic", h.Broker.Addrs(), "missing-" + h.Name, []string{`"missing-` + h.Name + `" (kafka.input_topic)`, "create it", "--create --topic missing-" + h.Name}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := h.ArrivalConfig(time.Second, 300*time.Millisecond)
			cfg.Kafka.InputTopic = tc.input
			cfg.Window.RecordTimes = config.RecordTimesBroker // a new user's default
			cfg.State.Dir = t.TempDir()
			var logs e2e.SyncBuffer
			st, err := pipeline.New(pipeline.Options{Config: cfg, Brokers: tc.brokers, HashKey: &e2e.TestKey, Log: e2e.ConsoleLog(&logs),
				DrainTimeout: 2 * time.Second, MissingTopicWait: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- st.Run(ctx) }() // owner: this test; ends with cancel
			if tc.input != h.Input() {
				select {
				case err := <-done:
					t.Logf("Run: %v", err)
					if !errors.Is(err, pipeline.ErrNoInputTopic) {
						t.Errorf("Run = %v; want ErrNoInputTopic", err)
					}
					for _, w := range tc.want {
						if err != nil && !strings.Contains(err.Error(), w) {
							t.Errorf("the error does not say %q", w)
						}
					}
				case <-time.After(10 * time.Second):
					cancel()
					<-done
					t.Fatalf("still running 10s after the start with a missing input topic (wait 500ms):\n%s", logs.String())
				}
				if rd := st.Readiness(); !rd.Connected || rd.ConnectError != "" {
					t.Errorf("readiness %+v; want connected (the brokers answer)", rd)
				}
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for st.Readiness().ConnectError == "" && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			rd := st.Readiness()
			t.Logf("readiness: connected %v, reason %q", rd.Connected, rd.ConnectError)
			t.Logf("log:\n%s", logs.String())
			if rd.Connected || rd.Ready() {
				t.Errorf("readiness %+v; want not connected", rd)
			}
			for _, w := range tc.want {
				if !strings.Contains(rd.ConnectError, w) {
					t.Errorf("the readiness reason %q does not say %q", rd.ConnectError, w)
				}
				if !strings.Contains(logs.String(), w) {
					t.Errorf("the log does not say %q", w)
				}
			}
			if strings.Contains(logs.String(), "Broker Not Available") {
				t.Errorf("the log still blames only %q", "Broker Not Available")
			}
			select {
			case err := <-done:
				t.Fatalf("Run returned while the brokers are unreachable: %v", err)
			default:
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run after a stop = %v; want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of the stop")
			}
		})
	}
}
