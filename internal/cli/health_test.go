package cli

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/httpapi"
)

// freePort returns a port nothing listens on (at the time of the call).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestDemoPinnedBrokerAndHealth runs the quickstart demo with
// kafka.embedded_port set: the broker's address is printed on stdout, a
// Kafka client attaches there and sees the topics, and `stage health` finds
// the stage alive, then ready, then — once stopped — not alive.
func TestDemoPinnedBrokerAndHealth(t *testing.T) {
	cfg, err := config.Load(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cfg.Kafka.EmbeddedPort = port
	cfg.HTTP.Address = "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg.HTTP.OperatorAddress = "127.0.0.1:0" // the default 8081 may be taken
	cfg.State.Dir = t.TempDir()
	var stdout syncBuffer
	demo := e2e.Go(t, "the demo", func(ctx context.Context) error { return runStage(ctx, cfg, zap.NewNop(), &stdout, false) })
	stop := func() { demo.Stop(t) }

	addr := "127.0.0.1:" + strconv.Itoa(port)
	want := fmt.Sprintf("embedded Kafka broker at %s: input topic %q, output topic %q (e.g. kcat -b %s -t %s -C)\n",
		addr, cfg.Kafka.InputTopic, cfg.Kafka.OutputTopic, addr, cfg.Kafka.OutputTopic)
	waitUntil(t, 10*time.Second, "the broker's address on stdout", func() bool { return stdout.String() == want })

	conn, err := kafka.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial the pinned port: %v", err)
	}
	parts, err := conn.ReadPartitions(cfg.Kafka.InputTopic)
	conn.Close()
	if err != nil || len(parts) != cfg.Kafka.InputPartitions {
		t.Fatalf("input topic on %s: %d partitions, %v; want %d", addr, len(parts), err, cfg.Kafka.InputPartitions)
	}

	health := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Health(append([]string{"--address", cfg.HTTP.Address, "--timeout", "2s"}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	waitUntil(t, 10*time.Second, "stage health exit 0", func() bool { code, _ := health(); return code == 0 })
	waitUntil(t, 20*time.Second, "stage health --ready exit 0", func() bool { code, _ := health("--ready"); return code == 0 })
	if code, out := health("--ready"); code != 0 || !strings.HasPrefix(out, "healthy: GET http://"+cfg.HTTP.Address+"/readyz: 200 {") {
		t.Errorf("ready: exit %d, %q", code, out)
	}
	stop()
	if code, out := health(); code != 1 || !strings.Contains(out, "unhealthy: GET http://"+cfg.HTTP.Address+"/healthz") {
		t.Errorf("after stop: exit %d, %q", code, out)
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHealth checks `stage health` against the stage's own HTTP server
// before a stage is attached (alive, not ready), against silence, and with
// bad arguments: exit 0 only for a 200, 1 for everything else.
func TestHealth(t *testing.T) {
	cfg, err := config.Parse([]byte("histograms: [{name: p, field: f, bins: [a, b]}]\nprivacy: {budget: {epsilon: 1}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := startServe(t, srv, ln)
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	// A server that accepts connections and never answers.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() { // owner: this test; ends when mute is closed
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()

	dir := t.TempDir()
	writeConfig := func(name, http string) string {
		p := filepath.Join(dir, name)
		body := "histograms: [{name: p, field: f, bins: [a, b]}]\nprivacy: {budget: {epsilon: 1}}\nhttp: " + http + "\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	every := writeConfig("every.yaml", `{address: "0.0.0.0:`+port+`", allow_remote: true, operator_address: ""}`)
	operator := writeConfig("operator.yaml", `{address: "", operator_address: "127.0.0.1:`+port+`"}`)
	off := writeConfig("off.yaml", `{address: "", operator_address: ""}`)
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("privacy: {budget: {epsilon: 0}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string // prefix of stdout (exit 0) or fragment of stderr
		max  time.Duration
	}{
		{"alive", []string{"--address", ln.Addr().String()}, 0, "healthy: GET http://" + ln.Addr().String() + "/healthz: 200 {\"status\":\"alive\"}", 0},
		{"not ready without a stage", []string{"--address", ln.Addr().String(), "--ready"}, 1, "/readyz: 503 {\"ready\":false,", 0},
		{"config on every interface: asked on loopback", []string{"--config", every}, 0, "healthy: GET http://127.0.0.1:" + port + "/healthz: 200", 0},
		{"nothing listening", []string{"--address", "127.0.0.1:" + strconv.Itoa(freePort(t))}, 1, "unhealthy: GET", 0},
		{"no answer", []string{"--address", mute.Addr().String(), "--timeout", "300ms"}, 1, "no answer within the timeout", 3 * time.Second},
		{"public listener off: asks the operator one", []string{"--config", operator}, 0, "healthy: GET http://127.0.0.1:" + port + "/healthz: 200", 0},
		{"http off", []string{"--config", off}, 1, "http.address and http.operator_address are empty", 0},
		{"invalid config", []string{"--config", bad}, 1, "privacy.budget.epsilon", 0},
		{"no target", nil, 1, "--config or --address is required", 0},
		{"both targets", []string{"--config", every, "--address", ln.Addr().String()}, 1, "not both", 0},
		{"port 0", []string{"--address", "127.0.0.1:0"}, 1, "port 0", 0},
		{"timeout 0", []string{"--address", ln.Addr().String(), "--timeout", "0s"}, 1, "--timeout must be greater than 0", 0},
		{"timeout too long", []string{"--address", ln.Addr().String(), "--timeout", "2m"}, 1, "at most 1m0s", 0},
		{"unknown flag: 1, not 2", []string{"--adress", ln.Addr().String()}, 1, "flag provided but not defined", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			start := time.Now()
			code := Health(tc.args, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, out.String(), errb.String())
			}
			if tc.code == 0 && !strings.HasPrefix(out.String(), tc.out) {
				t.Errorf("stdout %q, want it to start with %q", out.String(), tc.out)
			}
			if tc.code != 0 && !strings.Contains(errb.String(), tc.out) {
				t.Errorf("stderr %q, want %q in it", errb.String(), tc.out)
			}
			if el := time.Since(start); tc.max > 0 && el > tc.max {
				t.Errorf("took %s, want at most %s", el, tc.max)
			}
		})
	}
	served()
}

// startServe serves srv on ln until the returned function is called.
func startServe(t *testing.T, srv *httpapi.Server, ln net.Listener) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }() // owner: this test; ends with cancel
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
}
