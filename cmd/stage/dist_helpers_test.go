package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/ledger/kafkalog"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/release"
)

// distProc is one stage process of the distributed test.
type distProc struct {
	*proc
	stateDir string
	done     chan struct{} // closed when the process has exited
	err      error         // its exit status (after done)
}

func (p *distProc) pid() int { return p.cmd.Process.Pid }

func (p *distProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// distDeployment is the test's 3 process slots; a slot's process is
// replaced when it is killed and started again.
type distDeployment struct {
	t         *testing.T
	c         *e2e.DistCluster
	dir, name string
	procs     [distProcs]*distProc
	all       []*distProc // every process started, for the panic check
	stateDirs []string
	// edit, when set, rewrites each process's config YAML before it starts.
	edit func(yaml string) string
}

// start starts slot i's process with a new, empty state.dir.
func (d *distDeployment) start(i int) *distProc {
	d.t.Helper()
	sd := filepath.Join(d.dir, fmt.Sprintf("state-%d", len(d.stateDirs)))
	d.stateDirs = append(d.stateDirs, sd)
	cfg := distConfig(d.t, d.dir, d.c.Addrs, d.name, sd)
	if d.edit != nil {
		b, err := os.ReadFile(cfg)
		if err == nil {
			err = os.WriteFile(cfg, []byte(d.edit(string(b))), 0o600)
		}
		if err != nil {
			d.t.Fatal(err)
		}
	}
	p := &distProc{proc: startStage(d.t, cfg), stateDir: sd, done: make(chan struct{})}
	go func() { // owner: the test; ends when the process exits
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	d.procs[i] = p
	d.all = append(d.all, p)
	return p
}

// mustRun fails the test at once if a process has exited.
func (d *distDeployment) mustRun() {
	d.t.Helper()
	for i, p := range d.procs {
		if p.exited() {
			d.t.Fatalf("process %d exited: %v", i, p.err)
		}
	}
}

// ownerOf returns the slot of the running process whose client id is id
// (e2e.MemberPID), or -1.
func (d *distDeployment) ownerOf(id string) int {
	var pids []int
	for _, p := range d.procs {
		if !p.exited() {
			pids = append(pids, p.pid())
		}
	}
	pid, err := e2e.MemberPID(id, pids)
	if err != nil {
		d.t.Logf("%v", err)
		return -1
	}
	for i, p := range d.procs {
		if p.pid() == pid {
			return i
		}
	}
	return -1
}

// owner returns the slot of the process whose member of group is assigned
// partition of topic, waiting up to 20 s for one.
func (d *distDeployment) owner(group, topic string, partition int32) int {
	d.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if id := e2e.MemberOf(d.c.Cluster, group, topic, partition); id != "" {
			if i := d.ownerOf(id); i >= 0 {
				return i
			}
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("no process found as the member of %s assigned %s/%d", group, topic, partition)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killAndRestart SIGKILLs slot i's process, waits for the next release
// (logging the gaps, see watchReleases), then starts the slot again with
// an empty state.dir; it returns the gap from the kill to the next output
// message.
func (d *distDeployment) killAndRestart(i int, output string) time.Duration {
	d.t.Helper()
	p := d.procs[i]
	from := countMessages(d.t, d.c.Addrs[0], output)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		d.t.Fatal(err)
	}
	t0 := time.Now()
	<-p.done
	first, fresh := watchReleases(d.t, d.c.Addrs[0], output, from, t0, distGapLimit+2*time.Second, nil)
	d.t.Logf("SIGKILL of process %d: next release after %v, first release of a window not released before the kill after %v (limit %v)",
		i, first.Round(10*time.Millisecond), fresh.Round(10*time.Millisecond), distGapLimit)
	d.start(i)
	return first
}

// pauseAndResume SIGSTOPs slot i's process for at least three session
// timeouts and until a release was made without it (at most the gap
// limit), then SIGCONTs it. The zombie must exit fenced within
// distZombieExit of the SIGCONT; its slot is then started again empty. It
// returns the gap from the SIGSTOP to the next output message.
func (d *distDeployment) pauseAndResume(i int, output string) time.Duration {
	d.t.Helper()
	p := d.procs[i]
	from := countMessages(d.t, d.c.Addrs[0], output)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		d.t.Fatal(err)
	}
	t0 := time.Now()
	resumed := make(chan struct{})
	// contAt is when the SIGCONT was sent (set before resumed is closed).
	var contAt time.Time
	go func() { // owner: pauseAndResume; ends after the SIGCONT
		defer close(resumed)
		time.Sleep(3 * distSession)
		for countMessages(d.t, d.c.Addrs[0], output) == from && time.Since(t0) < distGapLimit+time.Second {
			time.Sleep(50 * time.Millisecond)
		}
		contAt = time.Now()
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
	}()
	first, fresh := watchReleases(d.t, d.c.Addrs[0], output, from, t0, distGapLimit+2*time.Second, resumed)
	<-resumed
	d.t.Logf("SIGSTOP of process %d for %v: next release after %v, first release of a window not released before the pause after %v (limit %v)",
		i, time.Since(t0).Round(10*time.Millisecond), first.Round(10*time.Millisecond), fresh.Round(10*time.Millisecond), distGapLimit)
	select {
	case <-p.done:
		exited := time.Since(contAt)
		if !strings.Contains(p.out.String(), "fenced by a newer owner") {
			d.t.Errorf("the resumed zombie exited (%v), not with the fenced error:\n%s", p.err, e2e.Tail(p.out.String(), 3000))
		} else if p.err == nil {
			// Issue 22: only a requested stop exits 0; a restart-on-failure
			// policy must see the fenced exit as a failure.
			d.t.Errorf("the resumed zombie exited fenced with status 0")
		} else {
			d.t.Logf("the resumed zombie exited fenced %v after SIGCONT (%v); starting its slot again with an empty state.dir", exited.Round(time.Millisecond), p.err)
		}
		d.start(i)
	case <-time.After(distZombieExit - time.Since(contAt)):
		// Issue #14: the zombie must exit fenced (a lost session makes it
		// ask its release log, distributed stage.fencedProbe); issue 28
		// item 7: whatever it was doing when paused, within the bound.
		d.t.Errorf("the resumed zombie is still running %v after SIGCONT: it did not exit fenced (its output, tail:\n%s)",
			distZombieExit, e2e.Tail(p.out.String(), 3000))
	}
	return first
}

// watchReleases reads the output topic from its start and returns, from
// t0, how long until the first message at or after offset from arrived,
// and until the first release of a window later than every window of the
// messages before from. Either is the limit when it did not come within
// it. Arrivals before `after` is closed (nil: none) are read but do not
// stop the watch early.
func watchReleases(t *testing.T, addr, topic string, from int64, t0 time.Time, limit time.Duration, after <-chan struct{}) (first, fresh time.Duration) {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	first, fresh = limit, limit
	var last time.Time // the latest window start before from
	for {
		if first < limit && fresh < limit {
			if after == nil {
				return first, fresh
			}
			select {
			case <-after:
				return first, fresh
			default:
			}
		}
		if time.Since(t0) > limit {
			if after != nil {
				<-after
			}
			return first, fresh
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		m, err := r.ReadMessage(ctx)
		cancel()
		if err != nil {
			continue
		}
		var probe struct {
			Status      string `json:"status"`
			WindowStart string `json:"window_start"`
		}
		_ = json.Unmarshal(m.Value, &probe)
		ws, _ := time.Parse(time.RFC3339Nano, probe.WindowStart)
		if m.Offset < from {
			if probe.Status == "" && ws.After(last) {
				last = ws
			}
			continue
		}
		since := time.Since(t0)
		first = min(first, since)
		if probe.Status == "" && ws.After(last) {
			fresh = min(fresh, since)
		}
	}
}

// stopAll stops every running process with SIGTERM: each must exit 0,
// except the zombie of the pause fault (slot zombie's process if it is
// still the paused one), which may exit with the fenced error. No process
// ever started may have panicked.
func (d *distDeployment) stopAll(pause bool, zombie int) {
	d.t.Helper()
	var z *distProc
	if pause && len(d.all) > zombie {
		z = d.all[zombie] // the first process of slot zombie: the paused one
	}
	for i, p := range d.procs {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
			d.t.Errorf("process %d did not stop within 30 s of SIGTERM:\n%s", i, e2e.Tail(p.out.String(), 3000))
			continue
		}
		switch {
		case p.err == nil:
		case p == z && strings.Contains(p.out.String(), "fenced by a newer owner"):
			d.t.Logf("process %d (the zombie) stopped fenced (%v)", i, p.err)
		default:
			d.t.Errorf("process %d: %v\n%s", i, p.err, e2e.Tail(p.out.String(), 3000))
		}
	}
	for i, p := range d.all {
		if strings.Contains(p.out.String(), "panic") {
			d.t.Errorf("process %d of %d panicked:\n%s", i, len(d.all), e2e.Tail(p.out.String(), 3000))
		}
	}
}

// killAll kills whatever still runs (test cleanup) and, if the test
// failed, logs the tails of the processes' outputs.
func (d *distDeployment) killAll() {
	for _, p := range d.all {
		if !p.exited() {
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
	if d.t.Failed() {
		for i, p := range d.all {
			d.t.Logf("process %d of %d (state.dir %s), exit %v, output tail:\n%s", i, len(d.all), p.stateDir, p.err, e2e.Tail(p.out.String(), 4000))
		}
	}
}

// distKeys are the truth keys of window w: every declared (histogram,
// group).
func distKeys(w int) []string {
	ws := crashBase.Add(time.Duration(w) * time.Minute)
	keys := []string{e2e.Key("devices", "*", ws)}
	for _, g := range e2e.Groups {
		keys = append(keys, e2e.Key("pages", g, ws))
	}
	return keys
}

// checkDistReleases: every (histogram, group, window) of the stream
// released, equal to the truth, within the budget; every copy of a
// release_id identical.
func checkDistReleases(t *testing.T, out e2e.Output, truth e2e.Truth) {
	t.Helper()
	got := map[string]release.Release{}
	for _, r := range out.Releases {
		got[e2e.ReleaseKey(r)] = r
	}
	for w := 0; w < distWindows; w++ {
		for _, k := range distKeys(w) {
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
	dups := 0
	for id, copies := range out.Raw {
		for _, c := range copies[1:] {
			dups++
			if c != copies[0] {
				t.Errorf("release %s published with different values:\n%s\n%s", id, copies[0], c)
			}
		}
	}
	t.Logf("%d windows, %d releases, %d republished copies (all identical)", distWindows, len(out.Raw), dups)
}

// checkDistLedger opens the release log (every process has exited, so
// this fences nobody) and checks one unit per (histogram, window) of the
// stream and each period's spend equal to the sum of its units' charges.
func checkDistLedger(t *testing.T, c *e2e.DistCluster, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := kafkalog.Open(ctx, kafkalog.Config{Brokers: c.Addrs, Topic: topic, TransactionalID: config.LedgerTransactionalID(topic)})
	if err != nil {
		t.Fatalf("open the release log %s: %v", topic, err)
	}
	defer l.Close()
	units, periods := checkSpendIsSumOfCharges(t, l, crashBase.Add(distWindows*time.Minute).UnixMilli())
	if units != distWindows*2 {
		t.Errorf("the release log holds %d units of the stream's windows, want %d (one per histogram and window)", units, distWindows*2)
	}
	t.Logf("release log: %d units of the stream, spend = sum of unique charges in %d period(s)", units, periods)
}

// checkDistPartials reads the partials topic read_committed: exactly one
// partial per (window, source partition) of the stream, none twice
// anywhere (a second copy would be a fenced or repeated emission made
// visible), each equal to the bounded truth of its partition's events.
func checkDistPartials(t *testing.T, c *e2e.DistCluster, topic string, all []e2e.Event) {
	t.Helper()
	byPart := make([][]e2e.Event, distPartitions)
	for _, e := range all {
		p := e2e.Murmur2Partition(e.User, distPartitions)
		byPart[p] = append(byPart[p], e)
	}
	truth := make([]e2e.Truth, distPartitions)
	for p := range truth {
		truth[p] = e2e.ComputeTruthIn(byPart[p], time.Minute, 1, 1, 0)
	}
	recs := e2e.ReadCommitted(t, c, topic, time.Minute)
	seen := map[string]int{}
	got := map[[2]int64]*partial.Partial{} // (window start, partition)
	idle := 0
	for _, r := range recs {
		if partial.IsIdleKey(r.Key) { // window.watermark event: a partition's idle state, written again at every worker start
			if d, err := partial.DecodeIdle(r.Value); err != nil || string(partial.IdleKey(d.Partition)) != string(r.Key) {
				t.Errorf("partials offset %d: idle record %s: %v", r.Offset, r.Key, err)
			}
			idle++
			continue
		}
		seen[string(r.Key)]++
		pp, err := partial.DecodePartial(r.Value)
		if err != nil {
			t.Errorf("partials offset %d: %v", r.Offset, err)
			continue
		}
		if string(pp.Key()) != string(r.Key) || pp.Partitions != distPartitions {
			t.Errorf("partials offset %d: key %s, partial of window %d partition %d of %d", r.Offset, r.Key, pp.WindowStart, pp.Partition, pp.Partitions)
		}
		got[[2]int64{pp.WindowStart, int64(pp.Partition)}] = pp
	}
	t.Logf("partials topic: %d partials, %d idle records", len(seen), idle)
	for k, n := range seen {
		if n > 1 {
			t.Errorf("partial %s committed %d times: a window of a source partition emitted twice", k, n)
		}
	}
	hists := []struct {
		name   string
		groups []string
		bins   int
	}{{"pages", e2e.Groups, len(e2e.Pages)}, {"devices", []string{"*"}, len(e2e.Devices)}}
	for w := 0; w < distWindows; w++ {
		ws := crashBase.Add(time.Duration(w) * time.Minute)
		for p := 0; p < distPartitions; p++ {
			pp := got[[2]int64{ws.UnixMilli(), int64(p)}]
			if pp == nil {
				t.Errorf("no committed partial of window %d (%v), partition %d", w, ws, p)
				continue
			}
			cells := map[[2]int][]float64{}
			for _, cell := range pp.Counts {
				cells[[2]int{cell.H, cell.G}] = cell.Counts
			}
			for h, hist := range hists {
				for g, group := range hist.groups {
					want := truth[p][e2e.Key(hist.name, group, ws)]
					if want == nil {
						want = make([]float64, hist.bins)
					}
					have := cells[[2]int{h, g}]
					if have == nil {
						have = make([]float64, hist.bins)
					}
					if !slices.Equal(have, want) {
						t.Errorf("partial of window %d partition %d, %s/%s: counts %v, the partition's bounded truth %v", w, p, hist.name, group, have, want)
					}
				}
			}
		}
	}
	t.Logf("partials: %d committed records, one per (window, partition) of the %d×%d", len(recs), distWindows, distPartitions)
}

// checkDistProgress reads the progress topic read_committed: per source
// partition, the progress records' input offset and next window never go
// back (a fenced bounder's stale progress made visible would), and the
// last one has passed the stream's last window.
func checkDistProgress(t *testing.T, c *e2e.DistCluster, topic string) {
	t.Helper()
	recs := e2e.ReadCommitted(t, c, topic, time.Minute)
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	last := map[int32]*partial.Progress{}
	n := 0
	for _, r := range recs {
		if string(r.Key) != partial.ProgressKey {
			continue
		}
		n++
		pg, err := partial.DecodeProgress(r.Value)
		if err != nil {
			t.Errorf("progress %d/%d: %v", r.Partition, r.Offset, err)
			continue
		}
		if pg.Partition != int(r.Partition) || pg.Partitions != distPartitions {
			t.Errorf("progress %d/%d: of partition %d of %d", r.Partition, r.Offset, pg.Partition, pg.Partitions)
		}
		if prev := last[r.Partition]; prev != nil && (pg.Next < prev.Next || pg.Offset < prev.Offset) {
			t.Errorf("progress of partition %d went back at offset %d: next %d → %d, input offset %d → %d", r.Partition, r.Offset, prev.Next, pg.Next, prev.Offset, pg.Offset)
		}
		last[r.Partition] = pg
	}
	streamEnd := crashBase.Add(distWindows * time.Minute).UnixMilli()
	for p := int32(0); p < distPartitions; p++ {
		if pg := last[p]; pg == nil || pg.Next < streamEnd {
			t.Errorf("progress of partition %d: %+v, want next ≥ the stream's end %d", p, pg, streamEnd)
		}
	}
	t.Logf("progress: %d committed progress records, never going back", n)
}
