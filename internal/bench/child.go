package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dpstage/stage/internal/lib/embedded"
)

// The separate processes of a run. The parent (Run) starts each as a child
// process: the broker once for the whole run, and one process per consumer
// pass. A child is the same executable started with ChildCommand's arguments,
// then the role and its flags, and with ChildEnv=1 in its environment:
//
//	stage bench child broker --topics bench-events:4,...
//	stage bench child reader --addr 127.0.0.1:PORT --group G --total N ...
//
// A child speaks to its parent in JSON lines on its stdout (childLine); its
// stderr is kept for error messages. Because every side runs in its own
// process, each one's CPU time (getrusage in the child, and the exit status's
// user+system time) is its own: nothing of the broker is in a consumer's
// figures, and nothing of a consumer in the broker's.

// ChildEnv is set to "1" in the environment of every child process the
// harness starts. A test binary's TestMain uses it to run ChildMain instead
// of the tests.
const ChildEnv = "STAGE_BENCH_CHILD"

// IsChild reports whether this process was started by the harness as a
// child.
func IsChild() bool { return os.Getenv(ChildEnv) == "1" }

// Child roles.
const (
	roleBroker = "broker"
	roleReader = "reader"
	roleKgo    = "kgo"
	roleStage  = "stage"
)

// childLine is one line a child writes on its stdout.
type childLine struct {
	// Ev is "ready" (broker: listening at Addr), "cpu" (broker: its CPU so
	// far, CPUNanos), "first" (a consumer has its first record), "read"
	// (the stage has consumed every record), "done" (the pass is over: last
	// record, or last window's releases acknowledged) or "result".
	Ev       string       `json:"ev"`
	Addr     string       `json:"addr,omitempty"`
	CPUNanos int64        `json:"cpu_ns,omitempty"`
	Result   *childResult `json:"result,omitempty"`
}

// childResult is what a consumer child measured.
type childResult struct {
	Records int64 `json:"records"`
	// JoinSeconds: from the child's start to its first record.
	JoinSeconds float64 `json:"join_seconds"`
	// Seconds: from the first record to the end of the pass; CPUSeconds the
	// child's user+system time over the same span.
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// ReadSeconds and ReadCPUSeconds (stage): from the first record to the
	// last one consumed.
	ReadSeconds    float64 `json:"read_seconds,omitempty"`
	ReadCPUSeconds float64 `json:"read_cpu_seconds,omitempty"`
	// Allocs: heap allocations from the first record to the end.
	Allocs uint64 `json:"allocs"`
	// AsideCPUSeconds: CPU the child spent after its pass on measurements
	// of its own (the /metrics scrapes), not part of its whole-process
	// figure.
	AsideCPUSeconds float64 `json:"aside_cpu_seconds,omitempty"`

	// Stage only.
	Windows int             `json:"windows,omitempty"`
	Units   int             `json:"units,omitempty"`
	Counted int64           `json:"counted,omitempty"`
	Dropped Drops           `json:"dropped,omitempty"`
	LatMs   []float64       `json:"lat_ms,omitempty"`
	Metrics *MetricsFigures `json:"metrics,omitempty"`
}

// ChildMain runs a child role: args are the role and its flags. It returns
// the process's exit code.
func ChildMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "stage bench child: missing role")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out := &lineWriter{w: stdout}
	var err error
	switch role := args[0]; role {
	case roleBroker:
		err = brokerChild(ctx, args[1:], os.Stdin, out)
	case roleReader, roleKgo, roleStage:
		var c consumerFlags
		fs := c.flagSet(role)
		fs.SetOutput(stderr)
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		err = consumerChild(ctx, role, c, out)
	case roleDist:
		err = distChild(ctx, args[1:], stderr, out)
	default:
		fmt.Fprintf(stderr, "stage bench child: unknown role %q\n", role)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "stage bench child %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// lineWriter writes childLines, one JSON object a line.
type lineWriter struct {
	mu sync.Mutex // guards w: lines come from the pass and from pollers
	w  io.Writer
}

func (l *lineWriter) send(line childLine) error {
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.w.Write(append(b, '\n'))
	return err
}

// brokerChild runs the embedded broker with the given topics until its stdin
// ends (the parent closed it, or died) or it is signalled. Each "cpu" line
// read from stdin is answered with the process's CPU time so far.
func brokerChild(ctx context.Context, args []string, stdin io.Reader, out *lineWriter) error {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	topics := fs.String("topics", "", "name:partitions,... to create")
	port := fs.Int("port", 0, "port on 127.0.0.1 (0: a free one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	tm, err := parseTopics(*topics)
	if err != nil {
		return err
	}
	b, err := embedded.Start(embedded.Config{Port: *port, Topics: tm})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := out.send(childLine{Ev: "ready", Addr: b.Addr()}); err != nil {
		return err
	}
	lines := make(chan string)
	go func() { // owner: brokerChild; ends at stdin's end (the parent closes it)
		defer close(lines)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case l, ok := <-lines:
			if !ok {
				return b.Close()
			}
			if l == "cpu" {
				if err := out.send(childLine{Ev: "cpu", CPUNanos: int64(processCPU())}); err != nil {
					return err
				}
			}
		}
	}
}

// parseTopics parses "a:4,b:1".
func parseTopics(s string) (map[string]int, error) {
	m := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		name, n, ok := strings.Cut(part, ":")
		var p int
		if _, err := fmt.Sscan(n, &p); !ok || err != nil || name == "" || p < 1 {
			return nil, fmt.Errorf("bad topic %q (want name:partitions)", part)
		}
		m[name] = p
	}
	return m, nil
}

// formatTopics is parseTopics' inverse.
func formatTopics(m map[string]int) string {
	var parts []string
	for t, p := range m {
		parts = append(parts, fmt.Sprintf("%s:%d", t, p))
	}
	return strings.Join(parts, ",")
}

// child is a running child process, seen from the parent.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan childLine // closed when stdout ends
	stderr *bytes.Buffer  // written by exec's copier until Wait returns
	waited chan struct{}  // closed when Wait returned
	err    error          // Wait's error, once waited is closed
}

// startChild starts the executable as a child with the role and args. The
// child is killed when ctx ends.
func startChild(ctx context.Context, command []string, role string, args ...string) (*child, error) {
	if len(command) == 0 {
		return nil, errors.New("bench: no child command")
	}
	argv := append(append(append([]string{}, command[1:]...), role), args...)
	cmd := exec.CommandContext(ctx, command[0], argv...)
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	cmd.WaitDelay = 5 * time.Second
	c := &child{cmd: cmd, lines: make(chan childLine, 16), stderr: &bytes.Buffer{}, waited: make(chan struct{})}
	cmd.Stderr = c.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s child: %w", role, err)
	}
	go func() { // owner: the child; ends when its stdout does
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			var l childLine
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				c.lines <- l
			}
		}
	}()
	go func() { // owner: the child; ends when the process has exited
		c.err = cmd.Wait()
		close(c.waited)
	}()
	return c, nil
}

// next returns the child's next line, or an error when it ended first.
func (c *child) next(ctx context.Context) (childLine, error) {
	select {
	case l, ok := <-c.lines:
		if ok {
			return l, nil
		}
		<-c.waited
		return childLine{}, c.exitError()
	case <-ctx.Done():
		return childLine{}, ctx.Err()
	}
}

// exitError describes how the child ended, with the end of its stderr.
func (c *child) exitError() error {
	msg := strings.TrimSpace(c.stderr.String())
	if len(msg) > 2000 {
		msg = "…" + msg[len(msg)-2000:]
	}
	if c.err != nil {
		return fmt.Errorf("%s child: %w: %s", c.cmd.Args[len(c.cmd.Args)-1], c.err, msg)
	}
	return fmt.Errorf("child ended early: %s", msg)
}

// wait waits for the child's exit and returns its user+system CPU time.
func (c *child) wait(ctx context.Context) (time.Duration, error) {
	select {
	case <-c.waited:
	case <-ctx.Done():
		_ = c.cmd.Process.Kill()
		<-c.waited
		return 0, ctx.Err()
	}
	if c.err != nil {
		return 0, fmt.Errorf("bench: %w", c.exitError())
	}
	ps := c.cmd.ProcessState
	return ps.UserTime() + ps.SystemTime(), nil
}

// brokerProc is the broker child.
type brokerProc struct {
	c    *child
	addr string
	mu   sync.Mutex // guards the stdin/stdout exchange of cpu
}

// startBroker starts the broker child with the topics and waits until it
// listens.
func startBroker(ctx context.Context, command []string, topics map[string]int) (*brokerProc, error) {
	c, err := startChild(context.WithoutCancel(ctx), command, roleBroker, "--topics", formatTopics(topics))
	if err != nil {
		return nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := c.next(tctx)
	if err != nil || l.Ev != "ready" {
		_ = c.cmd.Process.Kill()
		<-c.waited
		if err == nil {
			err = fmt.Errorf("unexpected line %q", l.Ev)
		}
		return nil, fmt.Errorf("bench: broker: %w", err)
	}
	return &brokerProc{c: c, addr: l.Addr}, nil
}

// cpu asks the broker for its CPU time so far.
func (b *brokerProc) cpu(ctx context.Context) (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := io.WriteString(b.c.stdin, "cpu\n"); err != nil {
		return 0, fmt.Errorf("bench: broker: %w", err)
	}
	l, err := b.c.next(ctx)
	if err != nil {
		return 0, fmt.Errorf("bench: broker: %w", err)
	}
	if l.Ev != "cpu" {
		return 0, fmt.Errorf("bench: broker: unexpected line %q", l.Ev)
	}
	return time.Duration(l.CPUNanos), nil
}

// stop ends the broker (its stdin closes) and waits for it, killing it after
// 10 seconds. It returns the broker's total CPU time.
func (b *brokerProc) stop() (time.Duration, error) {
	b.c.stdin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return b.c.wait(ctx)
}
