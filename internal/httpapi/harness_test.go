package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/httpapi"
	"github.com/dpstage/stage/internal/lib/embedded"
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
	run    *e2e.Running
	stage  *pipeline.Stage
	webCtx context.CancelFunc
	served chan struct{}
}

// newEnv starts the broker and the HTTP server (not yet the stage). extra
// is YAML appended to the config (e.g. an http section).
func newEnv(t *testing.T, window string, extra string, lookup map[string]string) *env {
	t.Helper()
	name := e2e.Name(t)
	b := e2e.StartBroker(t, map[string]int{"events-" + name: 4, "out-" + name: 1})
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
	e := &env{t: t, broker: b, name: name, cfg: cfg, served: make(chan struct{})}
	e.web, err = httpapi.New(httpapi.Options{Config: cfg, Log: e2e.Log()})
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

// start builds and runs the stage, feeding the HTTP server.
func (e *env) start() {
	e.t.Helper()
	e.run = e2e.StartStage(e.t, &e2e.Running{}, pipeline.Options{Config: e.cfg, OnRelease: e.web.OnRelease},
		func(st *pipeline.Stage) { e.web.Attach(st) })
	e.stage = e.run.Stage
}

// stopStage soft-stops the stage and waits for Run to return.
func (e *env) stopStage() {
	if e.run != nil {
		e.run.Stop(e.t)
	}
}

func (e *env) close() {
	e.stopStage()
	e.webCtx()
	<-e.served
}

func (e *env) produce(msgs ...kafka.Message) {
	e.t.Helper()
	e2e.Produce(e.t, e.broker.Addr(), "events-"+e.name, msgs...)
}

// readTopic reads every message of the output topic so far (want at least n).
func (e *env) readTopic(n int) [][]byte {
	e.t.Helper()
	return e2e.ReadTopic(e.t, e.broker.Addr(), "out-"+e.name, n, 20*time.Second)
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
