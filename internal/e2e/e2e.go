// Package e2e is the shared end-to-end test harness: it starts the embedded
// Kafka-protocol broker (internal/lib/embedded) over loopback, builds stage
// configs, produces events, runs stages in the background, reads the output
// topic and computes the true bounded histograms independently of the
// stage's code. The end-to-end tests of pipeline, internal/httpapi,
// internal/cli and cmd/stage use it; none keeps a copy of its own.
//
// Invariant: nothing here mocks the Kafka client; every test talks to a real
// broker over loopback, and the truth helpers never call the code under test
// (only the hashes that define which events the bounder selects).
package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/dpstage/stage/internal/lib/embedded"
)

// Name turns a test's name into a string usable in topic and group names.
func Name(t testing.TB) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-", " ", "-").Replace(t.Name()))
}

// StartBroker starts the embedded broker with the given topics (name →
// partitions), closed when the test ends.
func StartBroker(t testing.TB, topics map[string]int) *embedded.Broker {
	t.Helper()
	return StartBrokerConfig(t, embedded.Config{Topics: topics})
}

// StartBrokerConfig starts the embedded broker configured by cfg, closed
// when the test ends.
func StartBrokerConfig(t testing.TB, cfg embedded.Config) *embedded.Broker {
	t.Helper()
	b, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// Log is a no-op logger, or a development logger when STAGE_TEST_LOG is set.
func Log() *zap.Logger {
	if os.Getenv("STAGE_TEST_LOG") != "" {
		l, _ := zap.NewDevelopment()
		return l
	}
	return zap.NewNop()
}

// Produce writes msgs to topic, hashing on the key, acknowledged by all
// in-sync replicas.
func Produce(t testing.TB, addr, topic string, msgs ...kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(addr), Transport: NewTransport(t), Topic: topic, Balancer: &kafka.Hash{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 10000}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// ReadTopic reads partition 0 of topic from its start until n messages were
// read, failing the test after timeout.
func ReadTopic(t testing.TB, addr, topic string, n int, timeout time.Duration) [][]byte {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, MaxWait: 200 * time.Millisecond})
	defer r.Close()
	var out [][]byte
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(out) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read topic %s: %v (have %d of %d)", topic, err, len(out), n)
		}
		out = append(out, m.Value)
	}
	return out
}

// WaitFor polls cond every 20ms until it holds, failing the test after
// timeout.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitPast sleeps until the wall clock is past at.
func WaitPast(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}

// DecodeJSON unmarshals b into v, failing the test on an error.
func DecodeJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Background is a function running in the background until its context is
// cancelled (a stage, a demo).
type Background struct {
	what   string
	cancel context.CancelFunc
	done   chan error
}

// Go runs run in the background; Stop (also at the end of the test)
// cancels its context and waits for it.
func Go(t testing.TB, what string, run func(context.Context) error) *Background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{what: what, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- run(ctx) }() // owner: the test; ends with b.cancel
	t.Cleanup(func() { b.Stop(t) })
	return b
}

// Cancel cancels the context without waiting; Done then yields what run
// returned. Stop does nothing after Cancel.
func (b *Background) Cancel() {
	if b.cancel != nil {
		b.cancel()
		b.cancel = nil
	}
}

// Done yields what run returned.
func (b *Background) Done() <-chan error { return b.done }

// Stop cancels the context and waits for run to return (30s at most),
// failing the test on an error.
func (b *Background) Stop(t testing.TB) {
	if b.cancel == nil {
		return
	}
	b.Cancel()
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("%s returned %v", b.what, err)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not stop within 30s of a soft stop", b.what)
	}
}

// SyncBuffer collects output (a log) from several goroutines.
type SyncBuffer struct {
	mu sync.Mutex // guards b
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ConsoleLog logs at info level, without times, to w.
func ConsoleLog(w io.Writer) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.TimeKey = ""
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), zapcore.InfoLevel))
}

// NewTransport returns a kafka-go transport of the test's own, its idle
// connections closed when the test ends. Writers must not share
// kafka.DefaultTransport across tests: it caches each address's metadata,
// and a broker started later on a reused loopback port would be answered
// from the earlier broker's cache ("Unknown Topic Or Partition" for a
// topic the new broker has).
func NewTransport(t testing.TB) *kafka.Transport {
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}
