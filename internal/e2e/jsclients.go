package e2e

// The kafkajs producer of issue 24's acceptance tests: events produced by
// clients nobody in this project wrote — kafkajs 2 and
// @kafkajs/confluent-schema-registry 3 (npm, pinned in
// jsclients/package.json and package-lock.json), run by Node. The Node
// project is jsclients/ next to this file; .ci/run installs it with
// `npm ci`, and KafkaJS does so itself (once per test process) when
// node_modules is missing. node_modules is never committed.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
)

// JSDir is the Node project's directory (internal/e2e/jsclients).
func JSDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "jsclients")
}

var (
	jsInstall    sync.Once // guards jsInstallErr: one npm ci per test process
	jsInstallErr string
)

// KafkaJS makes sure the Node project is installed and returns its
// directory. It skips the test, saying why, when node or npm is not on
// PATH; it runs `npm ci` (once per process) when node_modules is missing
// and fails the test when that fails.
func KafkaJS(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not on PATH: the kafkajs acceptance test needs Node 18+ and npm (.ci/run installs the packages with npm ci in %s)", tool, JSDir())
		}
	}
	dir := JSDir()
	jsInstall.Do(func() {
		// npm ci writes node_modules/.package-lock.json last: without it the
		// install is missing or was cut short.
		if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil {
			return
		}
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			jsInstallErr = "npm ci in " + dir + ": " + err.Error() + "\n" + Tail(string(out), 2000)
		}
	})
	if jsInstallErr != "" {
		t.Fatal(jsInstallErr)
	}
	return dir
}

// JSRequest is what produce.js reads (see its header).
type JSRequest struct {
	Brokers  []string  `json:"brokers"`
	Registry string    `json:"registry"`
	Topic    string    `json:"topic"`
	Format   string    `json:"format"`            // avro or protobuf
	Framing  string    `json:"framing,omitempty"` // protobuf: confluent (default) or library
	Events   []JSEvent `json:"events"`
}

// JSEvent is one event as produce.js reads it.
type JSEvent struct {
	User    string `json:"user"`
	TS      int64  `json:"ts"`
	Page    string `json:"page"`
	Country string `json:"country"`
	Device  string `json:"device"`
}

// JSEvents turns harness events into produce.js's.
func JSEvents(evs []Event) []JSEvent {
	out := make([]JSEvent, len(evs))
	for i, e := range evs {
		out[i] = JSEvent{User: e.User, TS: e.At.UnixMilli(), Page: e.Page, Country: e.Country, Device: e.Device}
	}
	return out
}

// ProduceKafkaJS produces evs to topic with kafkajs (jsclients/produce.js):
// the schema of format (jsclients/pageview.avsc or .proto) registered in the registry at registryURL under
// subject <topic>-value, every event encoded by
// @kafkajs/confluent-schema-registry, keyed by its user, its record time
// its event time, headers source=kafkajs and device. framing is produce.js's
// (protobuf only; "" is confluent). It returns the registered schema id.
func ProduceKafkaJS(t testing.TB, brokers []string, registryURL, topic, format, framing string, evs []Event) int {
	t.Helper()
	dir := KafkaJS(t)
	req, err := json.Marshal(JSRequest{Brokers: brokers, Registry: registryURL, Topic: topic, Format: format, Framing: framing, Events: JSEvents(evs)})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(dir, "produce.js"))
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("kafkajs producer (%s, %d events): %v\n%s", format, len(evs), err, Tail(stderr.String(), 4000))
	}
	var res struct {
		SchemaID int `json:"schema_id"`
		Produced int `json:"produced"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("kafkajs producer: %v: stdout %q, stderr %s", err, stdout.String(), Tail(stderr.String(), 2000))
	}
	if res.Produced != len(evs) {
		t.Fatalf("kafkajs producer: produced %d of %d events", res.Produced, len(evs))
	}
	t.Logf("kafkajs produced %d %s events (schema id %d) in %s", res.Produced, format, res.SchemaID, time.Since(start).Round(time.Millisecond))
	return res.SchemaID
}
