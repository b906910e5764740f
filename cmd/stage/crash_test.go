package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/lib/embedded"
	"github.com/dpstage/stage/internal/lib/siphash"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
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

// eventRun is the crash test's stream with the event-time watermark: one
// minute windows from crashBase, closed by the events' own times.
var eventRun = crashRun{watermark: "event", size: time.Minute, base: crashBase}

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

// msg is the event as a record; with stamp its record time is its event
// time (else the producer's clock at the write).
func (e cEvent) msg(stamp bool) kafka.Message {
	return e2e.Event{User: e.user, At: e.at, Page: e.page, Country: e.country, Device: e.device}.Message(stamp)
}

// crashStream: window w has users u0..u(n-1) (rotating ids), some of them
// sending a second, bounded-away event with the same page, country and
// device (which of the two the bounder keeps depends on the process's hash
// key; the counts do not); FR never appears.
func crashStream(run crashRun, window, n int) []cEvent {
	var evs []cEvent
	step := run.size / time.Duration(n) / 2 // 500 ms with 1m windows of 60 users: well inside the window
	step = min(step, 50*time.Millisecond)
	for u := 0; u < n; u++ {
		user := fmt.Sprintf("u%d", (u*7+window*11)%(2*n))
		at := run.base.Add(time.Duration(window)*run.size + time.Duration(u)*step)
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
func crashTruth(evs []cEvent, size time.Duration) map[string][]float64 {
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
		w := e.at.Truncate(size).UnixMilli()
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

// crashRun is one variant of the crash test: the watermark, the window size
// and the first window (the stream's base).
type crashRun struct {
	watermark string
	size      time.Duration
	base      time.Time
	// k is contribution.max_windows_per_user (0: off).
	k int
	// ledgerTopic, when set, runs the stage with state.ledger: kafka on
	// this topic, and every start with a new, empty state.dir: nothing
	// but Kafka carries the state from one process to the next.
	ledgerTopic string
	// kills overrides the number of SIGKILLs (0: 20, or -soak-kills).
	kills int
	// pause replaces the SIGKILLs (with ledgerTopic): the active process
	// is paused (SIGSTOP) past its session while a standby runs, then
	// resumed (SIGCONT) as a zombie; both then run to the end.
	pause bool
}

// crashPeriod is privacy.budget.period of the crash config (e2e.ConfigYAML).
const crashPeriod = time.Hour

// admittedCrash keeps, per user and budget period, the events of the k
// earliest windows in which the user has an event (the definition of
// contribution.max_windows_per_user, from the event set alone), and
// returns them with each user's number of admitted windows per period.
func admittedCrash(evs []cEvent, size time.Duration, k int) ([]cEvent, map[string]map[int64]int) {
	type up struct {
		user string
		p    int64
	}
	windows := map[up][]int64{}
	for _, e := range evs {
		key := up{e.user, e.at.Truncate(crashPeriod).UnixMilli()}
		if w := e.at.Truncate(size).UnixMilli(); !slices.Contains(windows[key], w) {
			windows[key] = append(windows[key], w)
		}
	}
	n := map[string]map[int64]int{}
	for key, ws := range windows {
		slices.Sort(ws)
		if n[key.user] == nil {
			n[key.user] = map[int64]int{}
		}
		n[key.user][key.p] = min(k, len(ws))
	}
	var out []cEvent
	for _, e := range evs {
		ws := windows[up{e.user, e.at.Truncate(crashPeriod).UnixMilli()}]
		if slices.Index(ws, e.at.Truncate(size).UnixMilli()) < k {
			out = append(out, e)
		}
	}
	return out, n
}

// crashTopicConfigs: the crash tests' input topic keeps the producer's
// record times (CreateTime): under watermark arrival the producer stamps
// each record with its event time (window.record_times: producer).
var crashTopicConfigs = map[string]map[string]string{"events-crash": {"message.timestamp.type": "CreateTime"}}

func writeCrashConfig(t *testing.T, dir, addr string, run crashRun) string {
	t.Helper()
	return writeCrashConfigState(t, dir, addr, run, filepath.Join(dir, "state"))
}

// writeCrashConfigState is writeCrashConfig with state.dir stateDir.
func writeCrashConfigState(t *testing.T, dir, addr string, run crashRun, stateDir string) string {
	t.Helper()
	y := e2e.ConfigYAML(e2e.ConfigParams{
		Brokers: addr, Name: "crash", Kafka: "  session_timeout: 1s\n",
		Watermark: run.watermark, Size: run.size.String(), Lateness: "0s", Idle: "500ms",
		Start: run.base.Format(time.RFC3339), Privacy: "mechanism: gaussian", Epsilon: 1e7,
		StateDir: stateDir, LogLevel: "info",
	})
	if run.ledgerTopic != "" {
		y = strings.Replace(y, "state:\n", fmt.Sprintf("state:\n  ledger: kafka\n  ledger_topic: %s\n", run.ledgerTopic), 1)
	}
	// No HTTP server: the pause variant runs two processes at once, and a
	// port 8080 taken by anything else on the machine (another test
	// package's process included) would make a start fail.
	y += "http:\n  address: \"\"\n  operator_address: \"\"\n"
	if run.k > 0 {
		y = strings.Replace(y, "contribution:\n", fmt.Sprintf("contribution:\n  max_windows_per_user: %d\n", run.k), 1)
	}
	if run.watermark == "arrival" {
		// A record counts when appended before its window's end (+ the
		// lateness); the producer writes each window at its start. It
		// stamps the record times itself (crashTopicConfigs).
		y = strings.Replace(y, "allowed_lateness: 0s", "allowed_lateness: 300ms\n  record_times: producer", 1)
	}
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
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test: skipped in -short")
	}
	t.Run("event", func(t *testing.T) { crashRecovery(t, eventRun) })
	// Watermark arrival (the default): windows of one second on the wall
	// clock, closed when every partition is read to its end (the producer
	// stamps each record with its event time, as a CreateTime producer
	// does); the producer writes each window's events at its start.
	t.Run("arrival", func(t *testing.T) {
		size := time.Second
		crashRecovery(t, crashRun{watermark: "arrival", size: size, base: time.Now().Truncate(size).Add(2 * size).UTC()})
	})
}

func crashRecovery(t *testing.T, run crashRun) {
	kills := 20
	if run.kills > 0 {
		kills = run.kills
	}
	if *soakKills > 0 {
		kills = *soakKills
	}
	windows := 12 + kills
	dir := t.TempDir()
	b, err := embedded.Start(embedded.Config{Topics: map[string]int{"events-crash": 4, "out-crash": 1}, DataDir: filepath.Join(dir, "broker"),
		TopicConfigs: crashTopicConfigs})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cfgPath := writeCrashConfig(t, dir, b.Addr(), run)
	var stateDirs []string // with a Kafka ledger: one new state.dir per start
	if run.ledgerTopic != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := kafkalog.EnsureTopic(ctx, []string{b.Addr()}, run.ledgerTopic, 1, -1)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	newStart := func() *proc {
		if run.ledgerTopic != "" {
			sd := filepath.Join(dir, fmt.Sprintf("state-%d", len(stateDirs)))
			stateDirs = append(stateDirs, sd)
			cfgPath = writeCrashConfigState(t, dir, b.Addr(), run, sd)
		}
		return startStage(t, cfgPath)
	}

	var all []cEvent
	for w := 0; w < windows; w++ {
		all = append(all, crashStream(run, w, 60)...)
	}
	counted, admitted := all, map[string]map[int64]int(nil)
	if run.k > 0 {
		counted, admitted = admittedCrash(all, run.size, run.k)
	}
	truth := crashTruth(counted, run.size)

	// Producer: one window of events at a time while the stage is killed
	// and restarted around it.
	w := &kafka.Writer{Addr: kafka.TCP(b.Addr()), Transport: &kafka.Transport{}, Topic: "events-crash", Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
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
			if run.watermark == "arrival" {
				e2e.WaitPast(run.base.Add(time.Duration(win) * run.size))
			}
			var msgs []kafka.Message
			for _, e := range crashStream(run, win, 60) {
				msgs = append(msgs, e.msg(run.watermark == "arrival"))
			}
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				prodErr <- err
				return
			}
			if run.watermark == "event" {
				time.Sleep(400 * time.Millisecond)
			}
		}
		if run.watermark == "event" {
			// Flush: closes the last window.
			if err := w.WriteMessages(ctx, cEvent{"flush", run.base.Add(time.Duration(windows)*run.size + time.Second), "home", "US", "mobile"}.msg(false)); err != nil {
				prodErr <- err
			}
		}
	}()

	var zombie, standby *proc
	if run.pause {
		zombie, standby = pauseActive(t, b.Addr(), newStart)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < kills && !run.pause; k++ {
		p := newStart()
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
	before := countMessages(t, b.Addr(), "out-crash")
	if before == 0 {
		t.Fatalf("no release was published during the %d kill cycles", kills)
	}

	// A last run completes the stream; then a soft stop (SIGTERM) must exit 0.
	// With watermark arrival windows after the stream keep closing (empty):
	// releases come in window order, so the first want unique ones are the
	// stream's.
	want := windows * (len(cGroups) + 1)
	var out e2e.Output
	if run.pause {
		out = e2e.ReadUnique(t, b.Addr(), "out-crash", want, 3*time.Minute, 2*time.Second)
		stopPaused(t, zombie, standby)
	} else {
		final := newStart()
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the last process's output:\n%s", e2e.Tail(final.out.String(), 6000))
			}
		})
		out = e2e.ReadUnique(t, b.Addr(), "out-crash", want, 3*time.Minute, 2*time.Second)
		if err := final.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := final.cmd.Wait(); err != nil {
			t.Fatalf("stage after SIGTERM: %v\n%s", err, e2e.Tail(final.out.String(), 3000))
		}
	}

	// Every (histogram, group, window) present, exactly the truth.
	got := map[string]release.Release{}
	for _, r := range out.Releases {
		ws, _ := time.Parse(time.RFC3339Nano, r.WindowStart)
		got[fmt.Sprintf("%s/%s/%d", r.Histogram, r.Group, ws.UnixMilli())] = r
	}
	for win := 0; win < windows; win++ {
		ws := run.base.Add(time.Duration(win) * run.size).UnixMilli()
		keys := []string{fmt.Sprintf("devices/*/%d", ws)}
		for _, g := range cGroups {
			keys = append(keys, fmt.Sprintf("pages/%s/%d", g, ws))
		}
		for _, k := range keys {
			r, ok := got[k]
			if !ok {
				t.Errorf("missing release %s", k)
				continue
			}
			e2e.CheckExact(t, k, r, truth[k])
			if r.Privacy.SpentEpsilon > r.Privacy.BudgetEpsilon*(1+1e-9) {
				t.Errorf("%s: spent ε %v over budget %v", k, r.Privacy.SpentEpsilon, r.Privacy.BudgetEpsilon)
			}
		}
	}
	// All copies of one release_id identical.
	dups := 0
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			dups++
			if c != copies[0] {
				t.Errorf("release %s republished with different values:\n%s\n%s", id, copies[0], c)
			}
		}
	}
	if run.pause {
		kills = 0 // one pause instead
	}
	t.Logf("%d kills, %d windows, %d releases (%d output messages before the final run), %d republished copies (all identical)", kills, windows, len(out.Raw), before, dups)

	// The ledger: one unit per (histogram, window), its spend the sum of the
	// unique units' charges, never over the budget.
	l := openCrashLedger(t, dir, b.Addr(), run)
	defer l.Close()
	for _, sd := range stateDirs {
		// The Kafka ledger never touches state.dir's bbolt file: the
		// takeovers above had nothing on disk to share.
		if _, err := os.Stat(filepath.Join(sd, "stage.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("state.ledger kafka: %s holds a bbolt ledger (stat: %v)", sd, err)
		}
	}
	units, _ := checkSpendIsSumOfCharges(t, l, run.base.Add(time.Duration(windows)*run.size).UnixMilli())
	if units != windows*2 {
		t.Errorf("ledger holds %d units of the stream's windows, want %d", units, windows*2)
	}
	if run.k > 0 {
		checkAdmissions(t, l, run, admitted)
	}
}

// checkSpendIsSumOfCharges checks that each period's spend in l equals
// the sum of its (unique) units' charges, and returns the units of windows
// before streamEnd and the periods seen.
func checkSpendIsSumOfCharges(t *testing.T, l ledger.Store, streamEnd int64) (units, periods int) {
	t.Helper()
	sum := map[int64][]float64{}
	if err := l.Units(func(u *ledger.Unit) bool {
		if u.WindowStart < streamEnd {
			units++
		}
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
	return units, len(sum)
}

// countMessages returns the number of messages in the output topic.
func countMessages(t *testing.T, addr, topic string) int64 {
	t.Helper()
	conn, err := kafka.DialLeader(context.Background(), "tcp", addr, topic, 0)
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

// TestCrashWindowBound is the crash test with contribution.max_windows_per_user
// = 10 (event watermark): after SIGKILLs at random moments and restarts,
// every release still equals the truth in which each user counts in exactly
// its 10 earliest windows of the period, and the ledger's admissions (under
// the user hash key it keeps) are exactly each user's admitted windows —
// never more than 10, none lost or doubled by a crash between a window's
// close and its record. Each of the 120 user ids is in about half of the 32
// windows, so admissions are still being made through two thirds of the
// stream, and the last windows count only the users with fewer windows.
func TestCrashWindowBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test: skipped in -short")
	}
	run := eventRun
	run.k = 10
	dir := t.TempDir()
	cfg, err := config.Load(writeCrashConfig(t, dir, "127.0.0.1:9", run))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plan.DerivePlan(cfg); err != nil {
		t.Skipf("plan.DerivePlan refuses contribution.max_windows_per_user (%v): enable with the K-window accounting", err)
	}
	crashRecovery(t, run)
}

// checkAdmissions compares the ledger's admissions with want (per user and
// period start, the number of windows admitted), hashing the user ids with
// the key the stage stored in the ledger.
func checkAdmissions(t *testing.T, l ledger.Store, run crashRun, want map[string]map[int64]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kb, err := l.UserHashKey(ctx, func() ([]byte, error) { return nil, errors.New("the stage recorded no user hash key") })
	if err != nil {
		t.Fatal(err)
	}
	key := siphash.KeyFromBytes(kb)
	p := run.base.Truncate(crashPeriod).UnixMilli()
	got, err := l.Admissions(p)
	if err != nil {
		t.Fatal(err)
	}
	wantH := map[uint64]uint16{}
	for u, per := range want {
		if n := per[p]; n > 0 {
			wantH[key.String(u)] = uint16(n)
		}
	}
	over := 0
	for _, n := range got {
		if int(n) > run.k {
			over++
		}
	}
	if over > 0 || !maps.Equal(got, wantH) {
		t.Errorf("ledger admissions of period %d: %d users (%d over k=%d), want %d users with their k earliest windows", p, len(got), over, run.k, len(wantH))
		for h, n := range wantH {
			if got[h] != n {
				t.Errorf("user hash %x: %d admitted windows recorded, want %d", h, got[h], n)
			}
		}
		return
	}
	t.Logf("ledger admissions: %d users of period %d, as the truth", len(got), p)
}

// openCrashLedger opens the ledger the crash run's stages wrote: the bbolt
// file under state.dir, or, with run.ledgerTopic, the Kafka release log
// under the group's transactional id (after the last stage exited, so
// opening it fences nobody).
func openCrashLedger(t *testing.T, dir, addr string, run crashRun) ledger.Store {
	t.Helper()
	if run.ledgerTopic == "" {
		l, err := ledger.Open(filepath.Join(dir, "state"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := kafkalog.Open(ctx, kafkalog.Config{Brokers: []string{addr}, Topic: run.ledgerTopic,
		TransactionalID: config.LedgerTransactionalID(run.ledgerTopic)})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestKafkaLedgerFailover is the crash test with state.ledger: kafka and a
// new, empty state.dir at every start (issue #14: fail over without a
// shared disk): each process is killed with SIGKILL at a random moment and
// the next one, which has nothing on disk, restores the release log from
// its compacted topic, fencing the killed process's transactional
// producer. Over the whole output topic every (histogram, group, window)
// is released, exactly the truth under the near-noiseless Gaussian; all
// copies of a release_id are identical (a window recorded by a killed
// process is republished from the log, never drawn again); the log's
// period spend equals the sum of its unique units' charges (the spend
// restored by each new process, then added to); with the cross-window
// bound, the admissions in the log are each user's admitted windows (the
// user hash key and the admissions restored from Kafka).
func TestKafkaLedgerFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("crash test: skipped in -short")
	}
	t.Run("event", func(t *testing.T) {
		run := eventRun
		run.ledgerTopic, run.kills = "ledger-crash", 10
		crashRecovery(t, run)
	})
	t.Run("window bound", func(t *testing.T) {
		run := eventRun
		run.ledgerTopic, run.kills, run.k = "ledger-crash", 10, 10
		crashRecovery(t, run)
	})
	// The active process paused (SIGSTOP) past its session while a
	// standby with its own empty state.dir runs: the standby takes over
	// and fences it; resumed, the zombie publishes nothing that differs
	// (it either stops fenced or rejoins the group), and the output and
	// the log are as after the kills.
	t.Run("paused zombie", func(t *testing.T) {
		run := eventRun
		run.ledgerTopic, run.kills, run.pause = "ledger-crash", 8, true
		crashRecovery(t, run)
	})
}

// pauseActive starts the active process and, once it has published, a
// standby; then pauses the active one for three 1s sessions (SIGSTOP) and
// resumes it (SIGCONT).
func pauseActive(t *testing.T, addr string, start func() *proc) (zombie, standby *proc) {
	t.Helper()
	zombie = start()
	e2e.WaitFor(t, "the first process to publish", 60*time.Second, func() bool { return countMessages(t, addr, "out-crash") > 0 })
	standby = start()
	time.Sleep(time.Second)
	if err := zombie.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt, pausedAt := countMessages(t, addr, "out-crash"), time.Now()
	var gap time.Duration // from SIGSTOP to the first message published after it
	for time.Since(pausedAt) < 3*time.Second {
		if gap == 0 && countMessages(t, addr, "out-crash") > stoppedAt {
			gap = time.Since(pausedAt)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if gap == 0 {
		t.Errorf("no release while the active process was paused for 3 sessions (%d messages): the standby did not take over", stoppedAt)
	} else {
		t.Logf("first release %v after the active process was paused (session timeout 1s; windows close every 400ms)", gap.Round(10*time.Millisecond))
	}
	if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return zombie, standby
}

// stopPaused stops the processes of pauseActive (SIGTERM). Each must exit
// 0, or with the fenced error (a record refused after a newer owner
// opened the log); at least one must have run to the end.
func stopPaused(t *testing.T, procs ...*proc) {
	t.Helper()
	clean := 0
	for i, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		err := p.cmd.Wait()
		out := p.out.String()
		if strings.Contains(out, "panic") {
			t.Fatalf("process %d panicked:\n%s", i, e2e.Tail(out, 3000))
		}
		switch {
		case err == nil:
			clean++
		case strings.Contains(out, "fenced by a newer owner"):
			t.Logf("process %d stopped fenced (%v)", i, err)
		default:
			t.Errorf("process %d: %v\n%s", i, err, e2e.Tail(out, 3000))
		}
	}
	if clean == 0 {
		t.Error("no process ran to the end")
	}
}
