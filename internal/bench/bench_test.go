package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestMain runs this test binary as one of the harness's child processes
// (the broker, a consumer) when the harness started it as one: Run's
// default ChildCommand is this executable with "bench child".
func TestMain(m *testing.M) {
	if IsChild() {
		args := os.Args[1:]
		if len(args) >= 2 && args[0] == "bench" && args[1] == "child" {
			args = args[2:]
		}
		os.Exit(ChildMain(args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestRunSmall runs every phase with a tiny workload and checks that each
// figure is present and sane. It sets no timing targets: those are the
// benchmark's to judge, on a quiet machine, at full size.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker process, consumer processes and a stage")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := Config{
		Events:          20_000,
		Windows:         20,
		Users:           2_000,
		Rounds:          2,
		MemoryUsers:     20_000,
		ReleaseMinTime:  20 * time.Millisecond,
		LiveDuration:    2 * time.Second,
		LiveWindowEvery: 100 * time.Millisecond,
		MetricsScrapes:  5,
	}
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	positive := []string{
		"produce_events_per_sec", "reader_events_per_sec", "kgo_events_per_sec", "stage_events_per_sec", "stage_read_events_per_sec",
		"reader_cpu_us_per_record", "kgo_cpu_us_per_record", "stage_cpu_us_per_record", "stage_read_cpu_us_per_record",
		"stage_vs_reader", "stage_vs_reader_pairs", "stage_vs_reader_cpu", "stage_read_vs_reader", "stage_read_vs_reader_cpu",
		"stage_vs_kgo", "stage_vs_kgo_cpu", "reader_vs_kgo", "reader_vs_kgo_cpu", "broker_cpu_share_max", "broker_cpu_seconds",
		"inprocess_events_per_sec", "release_per_sec_d10", "release_per_sec_d1000", "release_per_sec_d100000",
		"release_latency_p50_ms", "release_latency_p99_ms", "catchup_latency_p50_ms", "catchup_latency_p99_ms",
		"bytes_per_active_user", "avg_event_bytes",
	}
	for _, k := range positive {
		v, ok := m[k].(float64)
		if !ok {
			t.Errorf("%s missing from the JSON (%s)", k, raw)
			continue
		}
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a positive finite number", k, v)
		}
	}
	if res.Windows != 20 {
		t.Errorf("the events span %d windows, want 20", res.Windows)
	}
	if res.StageWindowsReleased != res.Windows || res.StageUnitsReleased != 2*res.Windows {
		t.Errorf("stage released %d windows (%d units), want every one of %d windows, 2 units each",
			res.StageWindowsReleased, res.StageUnitsReleased, res.Windows)
	}
	for kind, f := range map[string]*ConsumerFigures{"reader": res.Reader, "kgo": res.Kgo, "stage": res.Stage} {
		if f == nil || len(f.Passes) != 2 {
			t.Errorf("%s: %v, want 2 passes", kind, f)
			continue
		}
		for _, p := range f.Passes {
			// Each side's CPU is its own process's: a consumer spends some,
			// and less than all the machine's cores over its pass; the
			// broker served it.
			if cores := p.CPUMicrosPerRecord * p.EventsPerSec / 1e6; !(cores > 0.01 && cores <= float64(runtime.NumCPU())+0.1) {
				t.Errorf("%s pass %d: %.3f cores busy in the consumer process", kind, p.Order, cores)
			}
			if p.ProcessCPUMicrosPerRecord < p.CPUMicrosPerRecord {
				t.Errorf("%s pass %d: whole-process CPU %.3f µs/record below the pass's %.3f", kind, p.Order, p.ProcessCPUMicrosPerRecord, p.CPUMicrosPerRecord)
			}
			// The broker's CPU is sampled by a request to its process after
			// each mark, so on a pass of a few hundred milliseconds on a
			// loaded machine the sampling delay alone can exceed the cores'
			// share (seen in CI: 5.2 on 2 cores): the upper bound holds only
			// for passes long enough to dwarf it.
			limit := float64(runtime.NumCPU()) + 0.1
			if p.Seconds < 1 {
				limit = math.Inf(1)
			}
			if !(p.BrokerCPUShare > 0 && p.BrokerCPUShare <= limit) || !(p.BrokerCPUMicrosPerRecord > 0) {
				t.Errorf("%s pass %d: broker CPU share %.3f (%.3f µs/record)", kind, p.Order, p.BrokerCPUShare, p.BrokerCPUMicrosPerRecord)
			}
		}
	}
	if got := res.Reader.Passes[0].AllocsPerRecord; got < 1.5 { // kafka-go allocates each message's key and value
		t.Errorf("kafka-go Reader: %.2f allocations per record, implausibly few", got)
	}
	for _, p := range res.Stage.Passes {
		if !(p.ReadSeconds > 0 && p.ReadSeconds <= p.Seconds) {
			t.Errorf("stage pass %d: all read at %.3f s of %.3f s", p.Order, p.ReadSeconds, p.Seconds)
		}
	}
	if got, want := res.StageVsReader, res.StageEventsPerSec/res.ReaderEventsPerSec; math.Abs(got-want) > 1e-9*want {
		t.Errorf("stage_vs_reader %v is not stage/reader %v", got, want)
	}
	mf := res.Metrics
	if mf == nil {
		t.Fatal("no /metrics figures")
	}
	if mf.Scrapes != 5 || mf.Samples < 20 || mf.Bytes <= 0 || mf.GzipBytes <= 0 || mf.GzipBytes >= mf.Bytes {
		t.Errorf("/metrics figures: %+v", *mf)
	}
	if !(mf.CPUMs > 0) || !(mf.FirstCPUMs > 0) || !(mf.GatherCPUMs > 0) {
		t.Errorf("/metrics CPU figures not positive: %+v", *mf)
	}
	if res.ReleaseLatencyP99Ms < res.ReleaseLatencyP50Ms || res.ReleaseLatencyMaxMs < res.ReleaseLatencyP99Ms {
		t.Errorf("latency percentiles out of order: p50 %v p99 %v max %v", res.ReleaseLatencyP50Ms, res.ReleaseLatencyP99Ms, res.ReleaseLatencyMaxMs)
	}
	if res.LiveWindowsReleased < 5 {
		t.Errorf("live phase released %d windows in 2 s at one per 100 ms, want at least 5", res.LiveWindowsReleased)
	}
	// Nothing allocates per event; per window (new user tables, growth, the
	// Arrow record at Close) does, about 0.1 per event at this tiny size,
	// 0.005 at 2,000,000 events over 100 windows.
	if res.InProcessAllocsPerEvt > 0.5 {
		t.Errorf("in-process path allocates %.3f times per event", res.InProcessAllocsPerEvt)
	}
	// The Avro and Protobuf runs (same events, same counts: Run fails
	// otherwise) allocate no more than JSON's.
	for name, f := range map[string][2]float64{"avro": {res.InProcessAvroEventsPerSec, res.InProcessAvroAllocsPerEvt},
		"protobuf": {res.InProcessProtobufEventsPerSec, res.InProcessProtobufAllocsPerEvt}} {
		if f[0] <= 0 || f[1] > 0.5 {
			t.Errorf("in-process %s: %.0f events/s, %.3f allocs per event", name, f[0], f[1])
		}
	}
	if res.InProcessCountedPerEvt <= 0 || res.InProcessCountedPerEvt > 2 {
		t.Errorf("in-process counted %.3f histogram parts per event, want (0, 2]", res.InProcessCountedPerEvt)
	}
	// A (user, window) record is at least the 8-byte key; the table keeps
	// it at most 8/3 times over (load ≥ 3/8).
	if res.BytesPerActiveUser < 8 || res.BytesPerActiveUser > 1000 {
		t.Errorf("bytes_per_active_user %v out of any plausible range", res.BytesPerActiveUser)
	}
	if res.CapTrackedUsers != res.CapMaxTrackedUsers {
		t.Errorf("cap: %d users tracked, want the cap %d", res.CapTrackedUsers, res.CapMaxTrackedUsers)
	}
	// Beyond the cap a user is refused or evicts the largest tracked hash:
	// with the offered users' hashes in random order about n·ln(1.5) of
	// the n/2 newcomers get in (none would if arrival order decided).
	if res.CapDroppedCapacity+res.CapEvicted != res.CapUsersOffered-res.CapMaxTrackedUsers || res.CapEvicted <= 0 {
		t.Errorf("cap: %d events dropped for capacity and %d users evicted, want %d together, some evicted", res.CapDroppedCapacity, res.CapEvicted, res.CapUsersOffered-res.CapMaxTrackedUsers)
	}
	if limit := res.CapHeapAtCapBytes/10 + 64<<10; res.CapHeapGrowthBeyondCapB > limit {
		t.Errorf("cap: heap grew %d bytes beyond the cap (at the cap: %d)", res.CapHeapGrowthBeyondCapB, res.CapHeapAtCapBytes)
	}

	var table bytes.Buffer
	if err := WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kafka-go Reader", "franz-go kgo", "stage_vs_reader", "stage_vs_kgo_cpu", "metrics_scrape_cpu_ms",
		"inprocess_events_per_sec", "release_latency_p99_ms", "bytes_per_active_user", "release_per_sec_d100000"} {
		if !strings.Contains(table.String(), k) {
			t.Errorf("table lacks %s:\n%s", k, table.String())
		}
	}
}

// TestBrokerProcess starts the broker child, produces to it and reads its
// CPU time, then stops it: it must exit cleanly (status 0) within the stop's
// grace period and leave its port closed.
func TestBrokerProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := Config{}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	b, err := startBroker(ctx, cfg.ChildCommand, map[string]int{"t": 2, "u": 1})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			b.stop() //nolint:errcheck
		}
	}()
	if b.c.cmd.Process.Pid == os.Getpid() {
		t.Fatal("the broker runs in the test's process")
	}
	w := &kafka.Writer{Addr: kafka.TCP(b.addr), Transport: &kafka.Transport{}, Topic: "t", RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	var msgs []kafka.Message
	for i := range 2000 {
		msgs = append(msgs, kafka.Message{Value: []byte(strings.Repeat("x", 100+i%7))})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce to the broker process: %v", err)
	}
	conn, err := kafka.DialLeader(ctx, "tcp", b.addr, "u", 0)
	if err != nil {
		t.Fatalf("topic u: %v", err)
	}
	conn.Close()
	c1, err := b.cpu(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c1 <= 0 {
		t.Errorf("broker CPU after serving 2,000 messages: %v", c1)
	}
	t0 := time.Now()
	total, err := b.stop()
	stopped = true
	if err != nil {
		t.Fatalf("stop: %v", err)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("the broker took %v to stop", el)
	}
	if code := b.c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("broker exit code %d", code)
	}
	if total < c1 {
		t.Errorf("broker total CPU %v below the %v it reported while running", total, c1)
	}
	if c, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the broker stopped", b.addr)
	}
}

// TestChildMainUsage: the child entry point refuses what it cannot run.
func TestChildMainUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"nonsense"}, 2},
		{[]string{roleReader, "--no-such-flag"}, 2},
		{[]string{roleKgo}, 1},                                  // no --addr, --group, --total
		{[]string{roleStage, "--addr", "x", "--group", "g"}, 1}, // no --total
		{[]string{roleBroker, "--topics", "bad"}, 1},
	} {
		var out, errb bytes.Buffer
		if got := ChildMain(c.args, &out, &errb); got != c.code {
			t.Errorf("ChildMain(%q) = %d, want %d (stderr %q)", c.args, got, c.code, errb.String())
		}
	}
}

func TestTopicsFlag(t *testing.T) {
	in := map[string]int{"a": 4, "b-c": 1}
	got, err := parseTopics(formatTopics(in))
	if err != nil || len(got) != 2 || got["a"] != 4 || got["b-c"] != 1 {
		t.Errorf("round trip: %v, %v", got, err)
	}
	for _, bad := range []string{"a", "a:0", ":3", "a:x", "a:1,b"} {
		if _, err := parseTopics(bad); err == nil {
			t.Errorf("parseTopics(%q) accepted", bad)
		}
	}
}

// TestSummarize checks the medians and ratios against passes made up by
// hand.
func TestSummarize(t *testing.T) {
	pass := func(round int, rate, cpu float64) Pass {
		return Pass{Round: round, EventsPerSec: rate, CPUMicrosPerRecord: cpu, BrokerCPUShare: rate / 4e6}
	}
	r := &Results{
		Reader: &ConsumerFigures{Passes: []Pass{pass(0, 1000, 1.0), pass(1, 900, 1.2), pass(2, 1100, 0.8)}},
		Kgo:    &ConsumerFigures{Passes: []Pass{pass(0, 2000, 0.5), pass(1, 1800, 0.4), pass(2, 2200, 0.6)}},
		Stage: &ConsumerFigures{Passes: []Pass{
			{Round: 0, EventsPerSec: 500, CPUMicrosPerRecord: 2, ReadEventsPerSec: 800, ReadCPUMicrosPerRecord: 1.5},
			{Round: 1, EventsPerSec: 900, CPUMicrosPerRecord: 1, ReadEventsPerSec: 1000, ReadCPUMicrosPerRecord: 0.9},
			{Round: 2, EventsPerSec: 700, CPUMicrosPerRecord: 1.25, ReadEventsPerSec: 600, ReadCPUMicrosPerRecord: 1.0, BrokerCPUShare: 0.9}}},
	}
	r.summarize()
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"reader events/s", r.ReaderEventsPerSec, 1000},
		{"reader cpu", r.ReaderCPUMicrosPerRecord, 1.0},
		{"kgo events/s", r.KgoEventsPerSec, 2000},
		{"kgo cpu", r.KgoCPUMicrosPerRecord, 0.5},
		{"stage events/s", r.StageEventsPerSec, 700},
		{"stage cpu", r.StageCPUMicrosPerRecord, 1.25},
		{"stage read events/s", r.StageReadEventsPerSec, 800},
		{"stage read cpu", r.StageReadCPUMicrosPerRecord, 1.0},
		{"stage_vs_reader", r.StageVsReader, 0.7},
		{"stage_vs_reader_cpu", r.StageVsReaderCPU, 0.8},
		{"stage_read_vs_reader", r.StageReadVsReader, 0.8},
		{"stage_read_vs_reader_cpu", r.StageReadVsReaderCPU, 1.0},
		{"stage_vs_kgo", r.StageVsKgo, 0.35},
		{"stage_vs_kgo_cpu", r.StageVsKgoCPU, 0.4},
		{"reader_vs_kgo", r.ReaderVsKgo, 0.5},
		{"reader_vs_kgo_cpu", r.ReaderVsKgoCPU, 0.5},
		// Per round 0.5, 1.0, 700/1100: the median is 700/1100.
		{"stage_vs_reader_pairs", r.StageVsReaderPairs, 700.0 / 1100},
		{"broker share max", r.BrokerCPUShareMax, 0.9},
		{"kgo broker share (median)", r.Kgo.BrokerCPUShare, 2000 / 4e6},
	} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestPercentileAndMedian(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3}
	if got := median(xs); got != 3 {
		t.Errorf("median = %v, want 3", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of four = %v, want 2.5", got)
	}
	for _, c := range []struct{ p, want float64 }{{0, 1}, {50, 3}, {99, 5}, {100, 5}, {20, 1}, {21, 2}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if xs[0] != 5 {
		t.Error("percentile sorted its input in place")
	}
	if median(nil) != 0 || percentile(nil, 50) != 0 {
		t.Error("empty input should give 0")
	}
}
