package main

import (
	"bytes"
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/lib/embedded"
)

var stormKills = flag.Int("storm-kills", 0, "kill storm: number of SIGKILLs before the final instance (default: 10 in the normal run)")

// stampedLog collects a subprocess's output and remembers when each line
// arrived, so a test can time log events from its own clock.
type stampedLog struct {
	mu      sync.Mutex // guards all fields: exec copies output from its own goroutine while the test reads
	buf     bytes.Buffer
	partial []byte
	lines   []stampedLine
}

type stampedLine struct {
	at   time.Time
	text string
}

func (l *stampedLog) Write(p []byte) (int, error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, stampedLine{now, string(l.partial[:i])})
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

// first returns when the first line containing s arrived.
func (l *stampedLog) first(s string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.lines {
		if strings.Contains(ln.text, s) {
			return ln.at, true
		}
	}
	return time.Time{}, false
}

func (l *stampedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type stampedProc struct {
	cmd     *exec.Cmd
	log     *stampedLog
	started time.Time
	exited  chan struct{} // closed when Wait returns
	err     error         // Wait's error, valid after exited
}

func startStamped(t *testing.T, cfgPath string) *stampedProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "run", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "STAGE_BE_MAIN=1")
	p := &stampedProc{cmd: cmd, log: &stampedLog{}, exited: make(chan struct{})}
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owner: the test; ends when the process exits (every test kills or stops it)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// waitLog waits up to d for a line containing s; it returns the time from
// the process start.
func (p *stampedProc) waitLog(s string, d time.Duration) (time.Duration, bool) {
	deadline := time.Now().Add(d)
	for {
		if at, ok := p.log.first(s); ok {
			return at.Sub(p.started), true
		}
		if time.Now().After(deadline) {
			return 0, false
		}
		select {
		case <-p.exited:
			if at, ok := p.log.first(s); ok {
				return at.Sub(p.started), true
			}
			return 0, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM and returns how long the process took to exit (at most
// limit; ok false when it did not exit in time).
func (p *stampedProc) stop(t *testing.T, limit time.Duration) (time.Duration, bool) {
	t.Helper()
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		return time.Since(t0), true
	case <-time.After(limit):
		return limit, false
	}
}

// TestShutdownAndTakeoverAfterKillStorm (issue #16, item 2): the real stage
// is started and stopped many times in a row at random moments — mostly
// SIGKILL, some before it even reached the group, leaving dead members in
// the consumer group; every fourth a SIGTERM, which must end the process
// promptly whatever it was doing (joining, standing by, consuming). Then a
// last instance must take over within the bound documented in
// source/group.go (2 × kafka.rebalance_timeout after its start-up; the
// state.dir lock is free here), release everything, and exit promptly on
// SIGTERM, as must a second instance waiting on state.dir's lock.
//
// --storm-kills=50 runs the long storm of the issue.
func TestShutdownAndTakeoverAfterKillStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("kill storm: skipped in -short")
	}
	kills := 10
	if *stormKills > 0 {
		kills = *stormKills
	}
	dir := t.TempDir()
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events-crash": 4, "out-crash": 1}, DataDir: filepath.Join(dir, "broker"),
		TopicConfigs: crashTopicConfigs})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfgPath := writeStormConfig(t, dir, b.Addr())
	// writeCrashConfig's kafka.session_timeout is 1s; rebalance_timeout is
	// left at its default, half of it.
	const rebalance = 500 * time.Millisecond
	// promptExit bounds SIGTERM to exit: nothing here has more than a
	// publish to a local broker in flight, far below the 30s drain timeout.
	const promptExit = 5 * time.Second

	// All events up front: a few windows and a flush, so the last instance
	// has (almost) nothing left to do.
	const windows = 4
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Topic: "events-crash", Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, MaxAttempts: 20}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var msgs []kafka.Message
	for win := 0; win < windows; win++ {
		for _, e := range crashStream(eventRun, win, 30) {
			msgs = append(msgs, e.msg(false))
		}
	}
	msgs = append(msgs, cEvent{"flush", crashBase.Add(windows*time.Minute + time.Second), "home", "US", "mobile"}.msg(false))
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}

	// The storm: bursts of quick stops (the process may die before, while
	// or just after joining the group) and slower ones (it may be active).
	rng := rand.New(rand.NewPCG(3, 4))
	var slowest time.Duration
	terms := 0
	for k := 0; k < kills; k++ {
		p := startStamped(t, cfgPath)
		life := time.Duration(300+rng.IntN(1700)) * time.Millisecond
		if k%5 < 3 {
			life = time.Duration(50+rng.IntN(400)) * time.Millisecond
		}
		time.Sleep(life)
		if k%4 == 3 {
			terms++
			took, ok := p.stop(t, 30*time.Second)
			slowest = max(slowest, took)
			if !ok || took > promptExit {
				t.Errorf("stop %d: SIGTERM %v after start: exit took %v (exited: %v), want at most %v\n%s", k, life, took, ok, promptExit, e2e.Tail(p.log.String(), 3000))
			}
		} else if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.exited
		if strings.Contains(p.log.String(), "panic") {
			t.Fatalf("stage panicked:\n%s", p.log.String())
		}
	}
	t.Logf("storm: %d stops, %d of them SIGTERM: slowest exit %v", kills, terms, slowest.Round(time.Millisecond))

	// The last instance takes over: the rebalance its join starts drops the
	// dead members that do not rejoin; a dead member kept in the generation
	// (it died mid-join) costs one more rebalance (the standby rejoin).
	final := startStamped(t, cfgPath)
	bound := 2*rebalance + 1500*time.Millisecond // + scheduling slack on a shared machine
	if _, ok := final.waitLog(`"privacy plan"`, 30*time.Second); !ok {
		t.Fatalf("the last instance did not start\n%s", e2e.Tail(final.log.String(), 3000))
	}
	planned, _ := final.log.first(`"privacy plan"`)
	if _, ok := final.waitLog(`"assigned partitions"`, 90*time.Second); !ok {
		t.Errorf("after %d stops the last instance was not assigned the partitions within 90s\n%s", kills, e2e.Tail(final.log.String(), 4000))
	} else {
		assigned, _ := final.log.first(`"assigned partitions"`)
		takeover := assigned.Sub(planned)
		t.Logf("after %d stops: takeover %v after start-up (%v after process start; bound %v); standby rejoins: %d", kills,
			takeover.Round(time.Millisecond), assigned.Sub(final.started).Round(time.Millisecond), bound, strings.Count(final.log.String(), "rejoining"))
		if takeover > bound {
			t.Errorf("takeover took %v after start-up, want at most %v\n%s", takeover, bound, e2e.Tail(final.log.String(), 4000))
		}
		// Nothing left to do: every window released.
		e2e.ReadUnique(t, b.Addr(), "out-crash", windows*(len(cGroups)+1), 60*time.Second, 0)
	}

	// A second instance waits on state.dir's lock; SIGTERM ends it.
	waiter := startStamped(t, cfgPath)
	if _, ok := waiter.waitLog("waiting as a standby", 30*time.Second); !ok {
		t.Errorf("the second instance did not wait on state.dir\n%s", e2e.Tail(waiter.log.String(), 3000))
	}
	if took, ok := waiter.stop(t, 30*time.Second); !ok || took > promptExit {
		t.Errorf("the instance waiting on state.dir took %v to exit after SIGTERM (exited: %v), want at most %v", took, ok, promptExit)
	} else {
		t.Logf("SIGTERM to exit, waiting on state.dir: %v", took.Round(time.Millisecond))
	}

	took, exited := final.stop(t, 30*time.Second)
	t.Logf("after %d stops: SIGTERM to exit, last instance: %v", kills, took.Round(time.Millisecond))
	if !exited || took > promptExit {
		t.Errorf("the last instance took %v to exit after SIGTERM (exited: %v), want at most %v\n%s", took, exited, promptExit, e2e.Tail(final.log.String(), 4000))
	} else if final.err != nil {
		t.Errorf("the last instance exited with %v after SIGTERM\n%s", final.err, e2e.Tail(final.log.String(), 3000))
	}
}

// writeStormConfig is writeCrashConfig (which has no HTTP server: two
// instances run at once, and the default address would collide).
func writeStormConfig(t *testing.T, dir, addr string) string {
	t.Helper()
	return writeCrashConfig(t, dir, addr, eventRun)
}
