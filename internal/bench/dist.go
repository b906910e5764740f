package bench

// The distributed mode's bench (`stage bench --instances N`, issue #14):
// the stage with kafka.distributed on, as 1 process and as N processes side
// by side, in alternating order over Rounds, each pass a new consumer
// group (so new internal topics) over the same pre-produced topic keyed by
// user with murmur2 (the partitioner the distributed mode checks). A pass
// runs from the first record any process reads to the moment the releasing
// process has the last window's releases acknowledged; its CPU is the sum
// of the processes' whole CPU time (start-up and group joins included, so
// an upper bound of the per-event cost). On one machine the N processes
// share its cores: the ratios measure the distributed path's overhead
// (partials, progress and release-log transactions, N group members), not
// a speed-up.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
)

const (
	roleDist       = "dist"
	distInputTopic = "bench-dist-events"
)

// DistFigures are the distributed bench's results.
type DistFigures struct {
	Instances int        `json:"instances"`
	Events    int        `json:"events"`
	Passes    []DistPass `json:"passes"`
	// One and Many are the medians over the rounds with 1 and with
	// Instances processes.
	One  DistSide `json:"one"`
	Many DistSide `json:"many"`
	// EventsPerSecRatio is Many/One events/s (the aim on one machine:
	// ≥ 0.7); CPURatio Many/One CPU-seconds per million events (≤ 1.5).
	EventsPerSecRatio float64 `json:"events_per_sec_ratio"`
	CPURatio          float64 `json:"cpu_ratio"`
}

// DistSide is one side's median figures.
type DistSide struct {
	Processes             int     `json:"processes"`
	EventsPerSec          float64 `json:"events_per_sec"`
	CPUSecondsPerMillion  float64 `json:"cpu_seconds_per_million"`
	ReleasingProcessShare float64 `json:"releasing_process_cpu_share"` // of the pass's CPU, median
}

// DistPass is one pass.
type DistPass struct {
	Round                int     `json:"round"`
	Processes            int     `json:"processes"`
	Seconds              float64 `json:"seconds"`
	EventsPerSec         float64 `json:"events_per_sec"`
	CPUSeconds           float64 `json:"cpu_seconds"`
	CPUSecondsPerMillion float64 `json:"cpu_seconds_per_million"`
	ReleasingCPUShare    float64 `json:"releasing_cpu_share"`
}

// summarize fills the medians and ratios from the passes.
func (d *DistFigures) summarize() {
	side := func(n int) DistSide {
		var eps, cpu, share []float64
		for _, p := range d.Passes {
			if p.Processes == n {
				eps = append(eps, p.EventsPerSec)
				cpu = append(cpu, p.CPUSecondsPerMillion)
				share = append(share, p.ReleasingCPUShare)
			}
		}
		return DistSide{Processes: n, EventsPerSec: median(eps), CPUSecondsPerMillion: median(cpu), ReleasingProcessShare: median(share)}
	}
	d.One, d.Many = side(1), side(d.Instances)
	if d.One.EventsPerSec > 0 {
		d.EventsPerSecRatio = d.Many.EventsPerSec / d.One.EventsPerSec
	}
	if d.One.CPUSecondsPerMillion > 0 {
		d.CPURatio = d.Many.CPUSecondsPerMillion / d.One.CPUSecondsPerMillion
	}
}

// WriteDistTable prints the distributed bench's figures side by side and
// the closing note.
func WriteDistTable(out io.Writer, d *DistFigures) error {
	var err error
	pf := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(out, format, args...)
		}
	}
	pf("distributed mode (kafka.distributed): %d events, median of %d round(s)\n", d.Events, len(d.Passes)/2)
	pf("%-12s %14s %22s %26s\n", "processes", "events/s", "CPU-s per 1M events", "releasing process's CPU")
	for _, s := range []DistSide{d.One, d.Many} {
		pf("%-12d %14s %22.2f %25.0f%%\n", s.Processes, rate(s.EventsPerSec), s.CPUSecondsPerMillion, 100*s.ReleasingProcessShare)
	}
	pf("%-12s %13.2f× %21.2f×\n", fmt.Sprintf("ratio %d/1", d.Instances), d.EventsPerSecRatio, d.CPURatio)
	pf("aim on one machine: ≥ 0.70× events/s and ≤ 1.50× CPU per event (%s)\n", verdict(d))
	pf("note: the %d processes share this machine's cores, so the ratios are the distributed path's overhead, not a speed-up.\n", d.Instances)
	if d.CPURatio > 0 && d.One.EventsPerSec > 0 {
		pf("      Prediction for N machines like this one, the input's partitions spread evenly: each bounds 1/N of the events at\n")
		pf("      %.2f CPU-s per 1M events, so about N × %s (the 1-process rate %s divided by the CPU ratio %.2f),\n",
			d.Many.CPUSecondsPerMillion, rate(d.One.EventsPerSec/d.CPURatio), rate(d.One.EventsPerSec), d.CPURatio)
		pf("      until the one releasing process (%.0f%% of the CPU here; its work grows with windows × partitions, not with events) saturates.\n", 100*d.Many.ReleasingProcessShare)
	}
	return err
}

func verdict(d *DistFigures) string {
	if d.EventsPerSecRatio >= 0.7 && d.CPURatio > 0 && d.CPURatio <= 1.5 {
		return "met"
	}
	return "not met"
}

// runDist is Run with Config.Instances > 0: the distributed bench alone.
func runDist(ctx context.Context, cfg Config, w *workload, res *Results) error {
	dir, err := os.MkdirTemp("", "stage-bench-dist-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	defer os.RemoveAll(dir)
	// The input and every pass's output topic (the stage creates only its
	// internal topics; it waits for an output topic that does not exist).
	topics := map[string]int{distInputTopic: cfg.Partitions}
	for r := range cfg.Rounds {
		for _, n := range []int{1, cfg.Instances} {
			topics[distGroup(n, r)+"-out"] = 1
		}
	}
	b, err := startBroker(ctx, cfg.ChildCommand, topics)
	if err != nil {
		return err
	}
	defer func() { _, _ = b.stop() }()
	if err := produceMurmur2(ctx, b.addr, w); err != nil {
		return err
	}
	d := &DistFigures{Instances: cfg.Instances, Events: w.n}
	for round := range cfg.Rounds {
		order := []int{1, cfg.Instances}
		if round%2 == 1 {
			order = []int{cfg.Instances, 1}
		}
		for _, n := range order {
			p, err := distPass(ctx, cfg, b, w, dir, n, round)
			if err != nil {
				return err
			}
			d.Passes = append(d.Passes, p)
			cfg.progress("dist[%d] %d process(es): %.0f events/s, %.2f CPU-s per 1M events", round, n, p.EventsPerSec, p.CPUSecondsPerMillion)
		}
	}
	d.summarize()
	res.Dist = d
	return nil
}

// distPass runs n distributed stage processes over the topic until the
// last window is released, then stops them and sums their CPU.
func distPass(ctx context.Context, cfg Config, b *brokerProc, w *workload, dir string, n, round int) (DistPass, error) {
	pctx, cancel := context.WithTimeout(ctx, passTimeout(w.n)+time.Minute)
	defer cancel()
	group := distGroup(n, round)
	var kids []*child
	stopAll := func() {
		for _, k := range kids {
			_ = k.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	defer func() {
		for _, k := range kids {
			_ = k.cmd.Process.Kill()
			<-k.waited
		}
	}()
	type ev struct {
		kid int
		ev  string
	}
	evs := make(chan ev, 16*n)
	var wg sync.WaitGroup
	for i := range n {
		f := consumerFlags{addr: b.addr, topic: distInputTopic, group: group, total: int64(w.total()), partitions: w.partitions,
			output: group + "-out", stateDir: filepath.Join(dir, fmt.Sprintf("%s-%d", group, i)), lastWindow: w.lastWindow}
		k, err := startChild(pctx, cfg.ChildCommand, roleDist, f.args()...)
		if err != nil {
			return DistPass{}, err
		}
		kids = append(kids, k)
		wg.Add(1)
		go func() { // owner: distPass; ends with the child's stdout
			defer wg.Done()
			for {
				l, err := k.next(pctx)
				if err != nil {
					evs <- ev{i, "exit"}
					return
				}
				evs <- ev{i, l.Ev}
			}
		}()
	}
	var tFirst, tDone time.Time
	releaser := -1
	for tDone.IsZero() {
		select {
		case e := <-evs:
			switch e.ev {
			case "first":
				if tFirst.IsZero() {
					tFirst = time.Now()
				}
			case "done":
				tDone, releaser = time.Now(), e.kid
			case "exit":
				<-kids[e.kid].waited
				return DistPass{}, fmt.Errorf("bench: dist pass %d (%d processes): process %d ended before the last release: %w", round, n, e.kid, kids[e.kid].exitError())
			}
		case <-pctx.Done():
			return DistPass{}, fmt.Errorf("bench: dist pass %d (%d processes): last window not released: %w", round, n, pctx.Err())
		}
	}
	stopAll()
	var total, rel time.Duration
	var errs []error
	for i, k := range kids {
		cpu, err := k.wait(pctx)
		if err != nil {
			errs = append(errs, err)
		}
		total += cpu
		if i == releaser {
			rel = cpu
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return DistPass{}, fmt.Errorf("bench: dist pass %d (%d processes): %w", round, n, err)
	}
	secs := tDone.Sub(tFirst).Seconds()
	p := DistPass{Round: round, Processes: n, Seconds: secs, CPUSeconds: total.Seconds()}
	if secs > 0 {
		p.EventsPerSec = float64(w.n) / secs
	}
	p.CPUSecondsPerMillion = total.Seconds() / float64(w.n) * 1e6
	if total > 0 {
		p.ReleasingCPUShare = float64(rel) / float64(total)
	}
	return p, nil
}

// produceMurmur2 writes the workload's events to the distributed input
// topic keyed by user with murmur2 (kafka-go's Murmur2Balancer, Kafka's
// default), then one flush event per partition, of a user that hashes to
// it, at the window after the last.
func produceMurmur2(ctx context.Context, addr string, w *workload) error {
	wr := &kafka.Writer{Addr: kafka.TCP(addr), Topic: distInputTopic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchSize: 10_000, BatchTimeout: time.Millisecond}
	defer wr.Close()
	const chunk = 40_000
	msgs := make([]kafka.Message, 0, chunk)
	for i := 0; i < w.n; {
		msgs = msgs[:0]
		for ; i < w.n && len(msgs) < chunk; i++ {
			msgs = append(msgs, w.gen.Message(int64(i)))
		}
		if err := wr.WriteMessages(ctx, msgs...); err != nil {
			return fmt.Errorf("bench: produce: %s", shortError(err))
		}
	}
	t := w.lastWindow + windowSize.Milliseconds()
	var flush []kafka.Message
	parts := make([]int, w.partitions)
	for i := range parts {
		parts[i] = i
	}
	for p := range w.partitions {
		for j := 0; ; j++ {
			u := "flush-" + strconv.Itoa(p) + "-" + strconv.Itoa(j)
			m := kafka.Message{Key: []byte(u)}
			if (&kafka.Murmur2Balancer{}).Balance(m, parts...) != p {
				continue
			}
			m.Value = fmt.Appendf(nil, `{"ts":%d,"user_id":%q,"page":"home","country":"US","device":"mobile","session":"0000000000000000","seq":-1}`, t, u)
			flush = append(flush, m)
			break
		}
	}
	if err := wr.WriteMessages(ctx, flush...); err != nil {
		return fmt.Errorf("bench: produce flush events: %w", err)
	}
	return nil
}

// distStageConfig is stageConfig with kafka.distributed on (murmur2,
// internal topics created by the stage, the Kafka release log, 2s
// sessions), without contribution.max_tracked_users (a distributed
// config without it has no cap; with it the cap holds per partition).
func distStageConfig(broker, topic, output, group, stateDir string, partitions int) (*config.Config, error) {
	cfg, err := stageConfig(broker, topic, output, group, stateDir, partitions)
	if err != nil {
		return nil, err
	}
	cfg.Kafka.SessionTimeout = config.Duration(2 * time.Second)
	cfg.Kafka.Distributed = config.Distributed{Enabled: true, Partitioner: config.PartitionerMurmur2, CreateTopics: true}
	cfg.State.Ledger = config.LedgerKafka
	cfg.Contribution.MaxTrackedUsers = 0
	cfg.ApplyDefaults() // the internal topic prefix and the ledger topic
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: distributed stage config: %w", err)
	}
	return cfg, nil
}

// distChild is the "dist" child role: one distributed stage process. It
// prints "first" when it has read its first record and "done" when it has
// released the last window (only the releasing process does), and runs
// until SIGTERM.
func distChild(ctx context.Context, args []string, stderr io.Writer, out *lineWriter) error {
	var c consumerFlags
	fs := c.flagSet(roleDist)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.output == "" || c.stateDir == "" || c.partitions < 1 {
		return errors.New("dist: --output, --state-dir and --partitions are required")
	}
	scfg, err := distStageConfig(c.addr, c.topic, c.output, c.group, c.stateDir, c.partitions)
	if err != nil {
		return err
	}
	nHist := len(scfg.Histograms)
	var (
		mu      sync.Mutex // guards windows
		windows = map[int64]int{}
	)
	onRelease := func(u *ledger.Unit, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		windows[u.WindowStart]++
		if u.WindowStart == c.lastWindow && windows[u.WindowStart] == nHist {
			_ = out.send(childLine{Ev: "done"})
		}
	}
	st, err := newStage(scfg, onRelease)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { // owner: distChild; ends at the first record or with runCtx
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			if st.Stats().Consumed.Load() > 0 {
				_ = out.send(childLine{Ev: "first"})
				return
			}
		}
	}()
	return st.Run(runCtx)
}

// ParseInstances checks --instances: 0 (off) or at least 2.
func ParseInstances(n int) error {
	if n != 0 && n < 2 {
		return fmt.Errorf("--instances must be 0 (off) or at least 2, got %d", n)
	}
	return nil
}

// distGroup is the consumer group (and the prefix of the internal and output
// topics) of the pass of round with n processes.
func distGroup(n, round int) string { return fmt.Sprintf("bench-dist-%d-%d", n, round) }
