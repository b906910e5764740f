package embedded

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// crashChildEnv names the data directory when this test binary runs as the
// child process of TestDataDirSurvivesSIGKILL.
const crashChildEnv = "STAGE_EMBEDDED_CRASH_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		if err := crashChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		return
	}
	os.Exit(m.Run())
}

// crashChild starts a broker on dir, produces 100 acknowledged messages,
// commits 60 of them for group "g", prints "ready" and waits to be killed.
func crashChild(dir string) error {
	b, err := Start(Config{DataDir: dir, Topics: map[string]int{"events": 2}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := newWriter(b, "events")
	for i := range 100 {
		if err := w.WriteMessages(ctx, kafka.Message{Key: []byte(fmt.Sprintf("k%d", i%7)), Value: []byte(fmt.Sprintf("c-%d", i))}); err != nil {
			return err
		}
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: b.Addrs(), GroupID: "g", Topic: "events", StartOffset: kafka.FirstOffset,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: readerMaxWait,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second,
		RebalanceTimeout: 2 * time.Second,
	})
	for range 60 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return err
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			return err
		}
	}
	fmt.Println("ready")
	select {} // until SIGKILL
}

// kfake's DataDir is written as the broker runs (segments per produce,
// the group log per commit), so a broker killed with SIGKILL — never
// Closed — comes back with every acknowledged message and every committed
// offset. (Page-cache durability: this is a process crash, not a power cut;
// kfake.SyncWrites would cover the latter and is not used here.)
func TestDataDirSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "ready" {
			ready = true
			break
		}
	}
	if !ready {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not get ready: %v", sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()

	b, err := Start(Config{DataDir: dir, Topics: map[string]int{"events": 2}})
	if err != nil {
		t.Fatalf("restart on the killed broker's data: %v", err)
	}
	defer b.Close()
	var want []string
	for i := range 100 {
		want = append(want, fmt.Sprintf("c-%d", i))
	}
	readAll(t, ctx, b, "events", 2).check(t, want)

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: b.Addrs(), GroupID: "g", Topic: "events", StartOffset: kafka.FirstOffset,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: readerMaxWait,
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 2 * time.Second,
		RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond,
	})
	defer r.Close()
	rest := newCollector()
	for range 40 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("after %d messages: %v", rest.total(), err)
		}
		rest.add(m)
	}
	qctx, qcancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer qcancel()
	if m, err := r.FetchMessage(qctx); err == nil {
		t.Errorf("group re-read %q: its commits were lost", m.Value)
	}
	// The 40 uncommitted messages are exactly the ones not in the 60 the
	// child committed; all 100 are accounted for once.
	rest.mu.Lock()
	n := len(rest.seen)
	rest.mu.Unlock()
	if n != 40 {
		t.Errorf("group resumed with %d distinct messages, want 40", n)
	}
}
