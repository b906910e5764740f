package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
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

	"github.com/dpstage/stage/internal/embedded"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/pipeline"
)

// The crash tests run the real stage (this test binary re-executes itself as
// `stage` when STAGE_BE_MAIN=1: main() → cli.Main, the same code path as the
// built binary) as a subprocess against a broker that lives in the test
// process, kill it with SIGKILL at random moments, restart it, and check the
// promises over the whole output topic.

var soakKills = flag.Int("soak-kills", 0, "crash soak: number of SIGKILLs (default: 20 in the normal run)")

func TestMain(m *testing.M) {
	if os.Getenv("STAGE_BE_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

var crashBase = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

var (
	cPages   = []string{"home", "search", "cart", "checkout", "other"}
	cGroups  = []string{"US", "DE", "FR"}
	cDevices = []string{"mobile", "desktop"}
)

type cEvent struct {
	user          string
	at            time.Time
	page, country string
	device        string
}

func (e cEvent) msg() kafka.Message {
	v, _ := json.Marshal(map[string]any{"ts": e.at.UnixMilli(), "user_id": e.user, "page": e.page, "country": e.country, "device": e.device})
	return kafka.Message{Key: []byte(e.user), Value: v}
}

// crashStream: window w has users u0..u(n-1) (rotating ids), some of them
// sending a second, bounded-away event with the same page, country and
// device (which of the two the bounder keeps depends on the process's hash
// seed, new at every restart; the counts do not); FR never appears.
func crashStream(window, n int) []cEvent {
	var evs []cEvent
	for u := 0; u < n; u++ {
		user := fmt.Sprintf("u%d", (u*7+window*11)%(2*n))
		at := crashBase.Add(time.Duration(window)*time.Minute + time.Duration(u)*50*time.Millisecond)
		evs = append(evs, cEvent{user, at, cPages[(u*u+window)%5], cGroups[(u+window)%2], cDevices[(u/3)%2]})
		if u%4 == 0 {
			e := evs[len(evs)-1]
			e.at = at.Add(time.Millisecond)
			evs = append(evs, e)
		}
	}
	return evs
}

// crashTruth: per user, window and histogram, one event counts (the first
// here: a user's events in a window count the same, see crashStream).
func crashTruth(evs []cEvent) map[string][]float64 {
	tr := map[string][]float64{}
	seen := map[string]bool{}
	idx := func(l []string, v string) int {
		for i, x := range l {
			if x == v {
				return i
			}
		}
		return -1
	}
	for _, e := range evs {
		w := e.at.Truncate(time.Minute).UnixMilli()
		if g := idx(cGroups, e.country); g >= 0 {
			k := fmt.Sprintf("%s/pages/%d", e.user, w)
			if !seen[k] {
				seen[k] = true
				kk := fmt.Sprintf("pages/%s/%d", e.country, w)
				if tr[kk] == nil {
					tr[kk] = make([]float64, 5)
				}
				tr[kk][idx(cPages, e.page)]++
			}
		}
		k := fmt.Sprintf("%s/devices/%d", e.user, w)
		if !seen[k] {
			seen[k] = true
			kk := fmt.Sprintf("devices/*/%d", w)
			if tr[kk] == nil {
				tr[kk] = make([]float64, 2)
			}
			tr[kk][idx(cDevices, e.device)]++
		}
	}
	return tr
}

func writeCrashConfig(t *testing.T, dir, addr string) string {
	t.Helper()
	y := fmt.Sprintf(`kafka:
  brokers: [%q]
  group_id: crash
  input_topic: events
  output_topic: out
  session_timeout: 1s
events:
  time_field: ts
  user_field: user_id
window:
  size: 1m
  watermark: event
  allowed_lateness: 0s
  idle_partition_timeout: 500ms
  start: 2026-03-01T00:00:00Z
histograms:
  - name: pages
    field: page
    bins: [home, search, cart, checkout, other]
    group_by: country
    groups: [US, DE, FR]
  - name: devices
    field: device
    bins: [mobile, desktop]
privacy:
  mechanism: gaussian
  neighbour: replace
  budget:
    epsilon: 1.0e+7
    delta: 1.0e-6
    period: 1h
state:
  dir: %q
log:
  level: info
`, addr, filepath.Join(dir, "state"))
	p := filepath.Join(dir, "stage.yaml")
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type proc struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func startStage(t *testing.T, cfgPath string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "run", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "STAGE_BE_MAIN=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &proc{cmd: cmd, out: &out}
}

// TestCrashRecovery kills the stage with SIGKILL at random moments while
// events stream in, restarts it each time, then checks over the whole output
// topic: every (histogram, group, window) present; all copies of one
// release_id identical; the ledger's spend equals the sum of the unique
// releases' charges; the budget never exceeded; no event counted twice (the
// near-noiseless Gaussian releases equal the true bounded histograms).
func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test: skipped in -short")
	}
	kills := 20
	if *soakKills > 0 {
		kills = *soakKills
	}
	windows := 12 + kills
	dir := t.TempDir()
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events": 4, "out": 1}, DataDir: filepath.Join(dir, "broker")})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfgPath := writeCrashConfig(t, dir, b.Addr())

	var all []cEvent
	for w := 0; w < windows; w++ {
		all = append(all, crashStream(w, 60)...)
	}
	truth := crashTruth(all)

	// Producer: one window of events at a time while the stage is killed
	// and restarted around it.
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Topic: "events", Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, MaxAttempts: 20}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	prodErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		for win := 0; win < windows; win++ {
			var msgs []kafka.Message
			for _, e := range crashStream(win, 60) {
				msgs = append(msgs, e.msg())
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				prodErr <- err
				return
			}
			time.Sleep(400 * time.Millisecond)
		}
		// Flush: closes the last window.
		if err := w.WriteMessages(ctx, cEvent{"flush", crashBase.Add(time.Duration(windows)*time.Minute + time.Second), "home", "US", "mobile"}.msg()); err != nil {
			prodErr <- err
		}
	}()

	rng := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < kills; k++ {
		p := startStage(t, cfgPath)
		time.Sleep(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = p.cmd.Wait()
		if strings.Contains(p.out.String(), "panic") {
			t.Fatalf("stage panicked:\n%s", p.out.String())
		}
	}
	wg.Wait()
	select {
	case err := <-prodErr:
		t.Fatalf("producer: %v", err)
	default:
	}

	// The kills must have hit a working stage: releases were published
	// between them (otherwise this test would only exercise the last run).
	before := countMessages(t, b.Addr())
	if before == 0 {
		t.Fatalf("no release was published during the %d kill cycles", kills)
	}

	// A last run completes the stream; then a soft stop (SIGTERM) must exit 0.
	final := startStage(t, cfgPath)
	want := windows * (len(cGroups) + 1)
	releases, raw := readAll(t, b.Addr(), want, 3*time.Minute)
	if err := final.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := final.cmd.Wait(); err != nil {
		t.Fatalf("stage after SIGTERM: %v\n%s", err, tail(final.out.String(), 3000))
	}

	// Every (histogram, group, window) present, exactly the truth.
	got := map[string]pipeline.Release{}
	for _, r := range releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		got[fmt.Sprintf("%s/%s/%d", r.Histogram, r.Group, ws.UnixMilli())] = r
	}
	for win := 0; win < windows; win++ {
		ws := crashBase.Add(time.Duration(win) * time.Minute).UnixMilli()
		for _, k := range append(append([]string{}, func() []string {
			var ks []string
			for _, g := range cGroups {
				ks = append(ks, fmt.Sprintf("pages/%s/%d", g, ws))
			}
			return ks
		}()...), fmt.Sprintf("devices/*/%d", ws)) {
			r, ok := got[k]
			if !ok {
				t.Errorf("missing release %s", k)
				continue
			}
			counts := truth[k]
			n := 0.0
			for _, c := range counts {
				n += c
			}
			for i, p := range r.Probabilities {
				want := 1 / float64(len(r.Probabilities))
				if n > 0 {
					want = counts[i] / n
				}
				if math.Abs(p-want) > 1e-12 {
					t.Errorf("%s bin %d: released %v, true bounded share %v: an event was lost or counted twice", k, i, p, want)
				}
			}
			if r.Privacy.SpentEpsilon > r.Privacy.BudgetEpsilon*(1+1e-9) {
				t.Errorf("%s: spent ε %v over budget %v", k, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon)
			}
		}
	}
	// All copies of one release_id identical.
	dups := 0
	for id, copies := range raw {
		for _, c := range copies[1:] {
			dups++
			if c != copies[0] {
				t.Errorf("release %s republished with different values:\n%s\n%s", id, copies[0], c)
			}
		}
	}
	t.Logf("%d kills, %d windows, %d releases (%d output messages before the final run), %d republished copies (all identical)", kills, windows, len(raw), before, dups)

	// The ledger: one unit per (histogram, window), its spend the sum of the
	// unique units' charges, never over the budget.
	l, err := ledger.Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sum := map[int64][]float64{}
	units := 0
	if err := l.Units(func(u *ledger.Unit) bool {
		units++
		s := sum[u.Period]
		if s == nil {
			s = make([]float64, len(u.Charge.Epsilons))
		}
		for i, e := range u.Charge.Epsilons {
			s[i] += e
		}
		sum[u.Period] = s
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if units != windows*2 {
		t.Errorf("ledger holds %d units, want %d", units, windows*2)
	}
	for p, s := range sum {
		spent, _, err := l.Spent(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := range s {
			if math.Abs(s[i]-spent.Epsilons[i]) > 1e-9*math.Max(1, s[i]) {
				t.Errorf("period %d order %g: ledger spend %v ≠ sum of unique charges %v", p, spent.Orders[i], spent.Epsilons[i], s[i])
			}
		}
	}
}

func readAll(t *testing.T, addr string, want int, timeout time.Duration) ([]pipeline.Release, map[string][]string) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: "out", Partition: 0, MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	raw := map[string][]string{}
	var rels []pipeline.Release
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(raw) < want {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("output: %d unique releases of %d: %v", len(raw), want, err)
		}
		var rel pipeline.Release
		if err := json.Unmarshal(m.Value, &rel); err != nil {
			t.Fatal(err)
		}
		if _, ok := raw[rel.ReleaseID]; !ok {
			rels = append(rels, rel)
		}
		raw[rel.ReleaseID] = append(raw[rel.ReleaseID], string(m.Value))
	}
	// Drain what else is there (republished copies).
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer dcancel()
	for {
		m, err := r.ReadMessage(dctx)
		if err != nil {
			break
		}
		var rel pipeline.Release
		_ = json.Unmarshal(m.Value, &rel)
		raw[rel.ReleaseID] = append(raw[rel.ReleaseID], string(m.Value))
	}
	return rels, raw
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// countMessages returns the number of messages in the output topic.
func countMessages(t *testing.T, addr string) int64 {
	t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", addr, "out", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	if err != nil {
		t.Fatal(err)
	}
	return last
}
