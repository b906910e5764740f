package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/embedded"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/pipeline"
)

// env is a stage running against the embedded broker over loopback (no mock
// of the Kafka client) with the HTTP server in front of it, as `stage run`
// wires them.
type env struct {
	t      *testing.T
	broker *embedded.Broker
	name   string
	cfg    *config.Config
	web    *httpapi.Server
	url    string // http://127.0.0.1:PORT/
	stage  *pipeline.Stage
	cancel context.CancelFunc
	done   chan error
	webCtx context.CancelFunc
	served chan struct{}
}

// newEnv starts the broker and the HTTP server (not yet the stage). extra
// is YAML appended to the config (e.g. an http section).
func newEnv(t *testing.T, window string, extra string, lookup map[string]string) *env {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events-" + name: 4, "out-" + name: 1}})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	y := fmt.Sprintf(`
kafka:
  brokers: [%q]
  group_id: g-%s
  input_topic: events-%s
  output_topic: out-%s
window:
  size: %s
  watermark: event
  allowed_lateness: 0s
  idle_partition_timeout: 300ms
  start: 2026-01-01T00:00:00Z
histograms:
  - name: pages
    field: page
    bins: [home, search, other]
    overflow_bin: other
    group_by: country
    groups: [US, DE]
  - name: devices
    field: device
    bins: [mobile, desktop]
contribution:
  max_events_per_user: 1
privacy:
  mechanism: dirichlet
  calibration: concentrated
  budget:
    epsilon: 10
    delta: 1.0e-6
    period: 1h
state:
  dir: %q
log:
  level: warn
http:
  address: 127.0.0.1:0
%s`, b.Addr(), name, name, name, window, t.TempDir(), extra)
	cfg, err := config.Parse([]byte(y), func(k string) (string, bool) { v, ok := lookup[k]; return v, ok })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	e := &env{t: t, broker: b, name: name, cfg: cfg, done: make(chan error, 1), served: make(chan struct{})}
	e.web, err = httpapi.New(httpapi.Options{Config: cfg, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := httpapi.Listen(cfg.HTTP.Address)
	if err != nil {
		t.Fatal(err)
	}
	e.url = httpapi.URL(ln)
	ctx, cancel := context.WithCancel(context.Background())
	e.webCtx = cancel
	go func() { // owner: the test; ends with webCtx
		defer close(e.served)
		if err := e.web.Serve(ctx, ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(e.close)
	return e
}

func testLog() *zap.Logger {
	if os.Getenv("STAGE_TEST_LOG") != "" {
		l, _ := zap.NewDevelopment()
		return l
	}
	return zap.NewNop()
}

// start builds and runs the stage, feeding the HTTP server.
func (e *env) start() {
	e.t.Helper()
	st, err := pipeline.New(pipeline.Options{Config: e.cfg, Log: testLog(), OnRelease: e.web.OnRelease, DrainTimeout: 5 * time.Second})
	if err != nil {
		e.t.Fatalf("new stage: %v", err)
	}
	e.stage = st
	e.web.Attach(st)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- st.Run(ctx) }() // owner: the test; ends with e.cancel
}

// stopStage soft-stops the stage and waits for Run to return.
func (e *env) stopStage() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("stage returned %v", err)
		}
	case <-time.After(30 * time.Second):
		e.t.Errorf("stage did not stop within 30s")
	}
}

func (e *env) close() {
	e.stopStage()
	e.webCtx()
	<-e.served
}

func (e *env) produce(msgs ...kafka.Message) {
	e.t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(e.broker.Addr()), Topic: "events-" + e.name, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

// readTopic reads every message of the output topic so far (want at least n).
func (e *env) readTopic(n int) [][]byte {
	e.t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{e.broker.Addr()}, Topic: "out-" + e.name, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	var out [][]byte
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			e.t.Fatalf("read output topic: %v (have %d of %d)", err, len(out), n)
		}
		out = append(out, m.Value)
	}
	return out
}

// get fetches path with an optional Authorization header.
func (e *env) get(path, authz string) (int, http.Header, []byte) {
	e.t.Helper()
	return get(e.t, e.url+strings.TrimPrefix(path, "/"), authz)
}

func get(t *testing.T, url, authz string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, body
}

// waitFor polls cond every 20ms until it holds or the timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

var _ = net.Listen
