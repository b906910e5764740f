// Package bench is the stage's benchmark harness (`stage bench`). It puts
// the full stage beside two bare consumers — kafka-go's Reader, the client
// the stage's group membership and output use, and franz-go's kgo, the
// fastest Go client — reading the same pre-produced topic from the same
// broker, each consumer in an OS process of its own and the broker (the
// embedded kfake broker, internal/lib/embedded) in another, so that each side's
// CPU time is its own (see child.go). On a shared, noisy machine an absolute
// events/s alone means little: the figures that matter are ratios measured
// side by side in one run, in alternating passes, as medians.
//
// Phases (each can be skipped):
//
//  1. memory: live heap per tracked (user, window) in the bounder at
//     1,000,000 users, and the cap of contribution.max_tracked_users;
//  2. in-process: decode + bound + aggregate of N message values on one
//     goroutine, without Kafka;
//  3. release: Dirichlet releases per second for d = 10, 1,000, 100,000;
//  4. produce: N synthetic events (internal/generator, ~125-byte JSON) into
//     a topic of P partitions of the broker process, plus one flush event
//     per partition whose event time closes the last window;
//  5. passes: Rounds times, in alternating order (reader, kgo, stage; then
//     stage, kgo, reader; ...), a child process per pass reads every record
//     of the topic: the kafka-go Reader, the kgo consumer, or the full stage
//     (pipeline.New + Run until the last window's releases are
//     acknowledged); the first stage pass then measures scrapes of its
//     /metrics;
//  6. live: close-to-publish latency of a stage (in this process) while
//     events are produced at a steady rate.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config selects what Run measures. Zero values mean the defaults.
type Config struct {
	// Events is N, the number of synthetic events. Default 2,000,000.
	Events int
	// Partitions of the input topic. Default 4.
	Partitions int
	// Windows is about how many one-minute event-time windows the N events
	// span. Default 100.
	Windows int
	// Users is the generator's user population (Zipf-skewed). Default
	// 100,000.
	Users int
	// Rounds of the consumer passes, in alternating order. Default 5.
	Rounds int
	// LiveDuration is how long the live latency phase produces. Default 20s.
	LiveDuration time.Duration
	// LiveEventsPerSec is the live phase's production rate. Default 20,000.
	LiveEventsPerSec int
	// LiveWindowEvery is the wall time between two window closes in the
	// live phase (event time runs 1m/LiveWindowEvery times faster than the
	// wall clock). Default 200ms.
	LiveWindowEvery time.Duration
	// MemoryUsers is the number of distinct users of the memory phase.
	// Default 1,000,000.
	MemoryUsers int
	// ReleaseMinTime is how long each release dimension is timed at least.
	// Default 500ms.
	ReleaseMinTime time.Duration
	// MetricsScrapes is how many /metrics scrapes the first stage pass
	// times (per variant, see MetricsFigures). Default 200.
	MetricsScrapes int

	// Instances > 0 runs the distributed mode's bench instead of the
	// phases above (dist.go): the stage with kafka.distributed as 1
	// process and as Instances processes, side by side. 0: off.
	Instances int

	// ChildCommand is the command line that starts a child process (the
	// broker, a consumer), to which the role and its flags are appended;
	// the executable must hand them to ChildMain (`stage bench child`
	// does). Default: this executable with "bench child".
	ChildCommand []string

	SkipReader    bool
	SkipKgo       bool
	SkipStage     bool
	SkipMetrics   bool
	SkipLive      bool
	SkipInProcess bool
	SkipRelease   bool
	SkipMemory    bool

	// CPUProfile, when set, receives a CPU profile of the first stage pass
	// (the stage child, from its first record to the last release), and
	// AllocProfile its allocation profile after that pass (AllocProfile +
	// ".base": before it; `go tool pprof -sample_index=alloc_space -base
	// FILE.base FILE`).
	CPUProfile, AllocProfile string
	// ReaderCPUProfile and KgoCPUProfile, when set, receive CPU profiles of
	// the first kafka-go Reader and kgo passes (first record to last).
	ReaderCPUProfile, KgoCPUProfile string
	// MetricsCPUProfile, when set, receives a CPU profile of the timed
	// /metrics scrapes.
	MetricsCPUProfile string

	// Progress, when set, receives one line per phase as it ends.
	Progress io.Writer
}

func (c *Config) defaults() error {
	if c.Events <= 0 {
		c.Events = 2_000_000
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.Windows <= 0 {
		c.Windows = 100
	}
	if c.Users <= 0 {
		c.Users = 100_000
	}
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.LiveDuration <= 0 {
		c.LiveDuration = 20 * time.Second
	}
	if c.LiveEventsPerSec <= 0 {
		c.LiveEventsPerSec = 20_000
	}
	if c.LiveWindowEvery <= 0 {
		c.LiveWindowEvery = 200 * time.Millisecond
	}
	if c.MemoryUsers <= 0 {
		c.MemoryUsers = 1_000_000
	}
	if c.ReleaseMinTime <= 0 {
		c.ReleaseMinTime = 500 * time.Millisecond
	}
	if c.MetricsScrapes <= 0 {
		c.MetricsScrapes = 200
	}
	if len(c.ChildCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: this executable, to start the child processes: %w", err)
		}
		c.ChildCommand = []string{exe, "bench", "child"}
	}
	return nil
}

// Results are the figures of one run. Rates are per second of wall time,
// from a consumer's first record to its last (the stage: to the
// acknowledgement of the last window's releases), so the group join and
// the process's start are left out (JoinSeconds). CPU figures are user +
// system time of the consumer's own process over the same span, per record
// (µs); ratios X_vs_Y of rates are X's over Y's, ratios X_vs_Y_cpu are Y's
// CPU per record over X's, so that for both a value ≥ 1 means X is at least
// as good.
type Results struct {
	// Dist holds the distributed bench's figures (Config.Instances > 0).
	Dist          *DistFigures `json:"dist,omitempty"`
	Events        int          `json:"events"`
	Partitions    int          `json:"partitions"`
	Windows       int          `json:"windows"`
	AvgEventBytes float64      `json:"avg_event_bytes"`
	GOMAXPROCS    int          `json:"gomaxprocs"`
	NumCPU        int          `json:"num_cpu"`
	GoVersion     string       `json:"go_version"`
	Rounds        int          `json:"rounds"`
	// LoadAvgStart and LoadAvgEnd: the machine's 1, 5 and 15 minute load
	// averages at the start and the end of the run (Linux; absent
	// elsewhere).
	LoadAvgStart []float64 `json:"load_avg_start,omitempty"`
	LoadAvgEnd   []float64 `json:"load_avg_end,omitempty"`

	ProduceSeconds      float64 `json:"produce_seconds"`
	ProduceEventsPerSec float64 `json:"produce_events_per_sec"`

	// The headline, medians over the rounds (details in Reader, Kgo, Stage).
	ReaderEventsPerSec       float64 `json:"reader_events_per_sec,omitempty"`
	KgoEventsPerSec          float64 `json:"kgo_events_per_sec,omitempty"`
	StageEventsPerSec        float64 `json:"stage_events_per_sec,omitempty"`
	StageReadEventsPerSec    float64 `json:"stage_read_events_per_sec,omitempty"`
	ReaderCPUMicrosPerRecord float64 `json:"reader_cpu_us_per_record,omitempty"`
	KgoCPUMicrosPerRecord    float64 `json:"kgo_cpu_us_per_record,omitempty"`
	StageCPUMicrosPerRecord  float64 `json:"stage_cpu_us_per_record,omitempty"`
	// StageReadCPUMicrosPerRecord: the stage's CPU until it had read the
	// last record (the windows still open then are released after).
	StageReadCPUMicrosPerRecord float64 `json:"stage_read_cpu_us_per_record,omitempty"`

	// StageVsReader: stage events/s over the kafka-go Reader's (target
	// ≥ 0.9); _pairs: the median over rounds of the stage pass over the
	// Reader pass of the same round; _cpu: Reader CPU per record over the
	// stage's (target ≥ 0.9). StageRead*: the stage until it had read the
	// last record.
	StageVsReader        float64          `json:"stage_vs_reader,omitempty"`
	StageVsReaderPairs   float64          `json:"stage_vs_reader_pairs,omitempty"`
	StageVsReaderCPU     float64          `json:"stage_vs_reader_cpu,omitempty"`
	StageReadVsReader    float64          `json:"stage_read_vs_reader,omitempty"`
	StageReadVsReaderCPU float64          `json:"stage_read_vs_reader_cpu,omitempty"`
	StageVsKgo           float64          `json:"stage_vs_kgo,omitempty"`
	StageVsKgoCPU        float64          `json:"stage_vs_kgo_cpu,omitempty"`
	StageReadVsKgo       float64          `json:"stage_read_vs_kgo,omitempty"`
	StageReadVsKgoCPU    float64          `json:"stage_read_vs_kgo_cpu,omitempty"`
	ReaderVsKgo          float64          `json:"reader_vs_kgo,omitempty"`
	ReaderVsKgoCPU       float64          `json:"reader_vs_kgo_cpu,omitempty"`
	BrokerCPUShareMax    float64          `json:"broker_cpu_share_max,omitempty"`
	BrokerCPUSeconds     float64          `json:"broker_cpu_seconds,omitempty"`
	Reader               *ConsumerFigures `json:"reader,omitempty"`
	Kgo                  *ConsumerFigures `json:"kgo,omitempty"`
	Stage                *ConsumerFigures `json:"stage,omitempty"`

	// From the first stage pass.
	StageWindowsReleased int   `json:"stage_windows_released,omitempty"`
	StageUnitsReleased   int   `json:"stage_units_released,omitempty"`
	StageCounted         int64 `json:"stage_counted,omitempty"`
	StageDropped         Drops `json:"stage_dropped,omitempty"`
	// Close-to-publish latency of the first stage pass, where the windows
	// of a backlog close much faster than they are released and queue.
	CatchupLatencyP50Ms float64 `json:"catchup_latency_p50_ms,omitempty"`
	CatchupLatencyP99Ms float64 `json:"catchup_latency_p99_ms,omitempty"`
	// Metrics: /metrics scrapes in the first stage pass's process.
	Metrics *MetricsFigures `json:"metrics,omitempty"`

	// Close-to-publish latency (pipeline.Options.OnRelease) of the live
	// phase: events produced at a steady rate while the stage runs, a
	// window closing every LiveWindowEvery.
	ReleaseLatencyP50Ms  float64 `json:"release_latency_p50_ms,omitempty"`
	ReleaseLatencyP99Ms  float64 `json:"release_latency_p99_ms,omitempty"`
	ReleaseLatencyMaxMs  float64 `json:"release_latency_max_ms,omitempty"`
	ReleaseLatencyUnits  int     `json:"release_latency_units,omitempty"`
	LiveWindowsReleased  int     `json:"live_windows_released,omitempty"`
	LiveEventsPerSec     int     `json:"live_events_per_sec,omitempty"`
	LiveWindowEverySecs  float64 `json:"live_window_every_seconds,omitempty"`
	LiveEventsProduced   int64   `json:"live_events_produced,omitempty"`
	LiveEventsConsumed   int64   `json:"live_events_consumed,omitempty"`
	LiveEventsPerWindows float64 `json:"live_events_per_window,omitempty"`

	InProcessEventsPerSec  float64 `json:"inprocess_events_per_sec,omitempty"`
	InProcessAllocsPerEvt  float64 `json:"inprocess_allocs_per_event"`
	InProcessCountedPerEvt float64 `json:"inprocess_counted_per_event,omitempty"`
	// The same events as Avro and Protobuf in the Confluent wire format
	// (issue 24); the CPU per event relative to JSON's is
	// InProcessEventsPerSec / InProcess<Format>EventsPerSec.
	InProcessAvroEventsPerSec     float64 `json:"inprocess_avro_events_per_sec,omitempty"`
	InProcessAvroAllocsPerEvt     float64 `json:"inprocess_avro_allocs_per_event,omitempty"`
	InProcessProtobufEventsPerSec float64 `json:"inprocess_protobuf_events_per_sec,omitempty"`
	InProcessProtobufAllocsPerEvt float64 `json:"inprocess_protobuf_allocs_per_event,omitempty"`

	ReleasePerSecD10     float64 `json:"release_per_sec_d10,omitempty"`
	ReleasePerSecD1000   float64 `json:"release_per_sec_d1000,omitempty"`
	ReleasePerSecD100000 float64 `json:"release_per_sec_d100000,omitempty"`

	MemoryUsers             int     `json:"memory_users,omitempty"`
	BytesPerActiveUser      float64 `json:"bytes_per_active_user,omitempty"`
	CapMaxTrackedUsers      int     `json:"cap_max_tracked_users,omitempty"`
	CapUsersOffered         int     `json:"cap_users_offered,omitempty"`
	CapTrackedUsers         int     `json:"cap_tracked_users,omitempty"`
	CapDroppedCapacity      int     `json:"cap_dropped_capacity,omitempty"`
	CapEvicted              int     `json:"cap_evicted,omitempty"` // admitted beyond the cap, each in place of the largest tracked hash
	CapHeapGrowthBeyondCapB int64   `json:"cap_heap_growth_beyond_cap_bytes"`
	CapHeapAtCapBytes       int64   `json:"cap_heap_at_cap_bytes,omitempty"`
}

// Drops maps a drop reason to its count.
type Drops map[string]int64

// ConsumerFigures are one consumer's passes and their medians.
type ConsumerFigures struct {
	EventsPerSec              float64 `json:"events_per_sec"`
	CPUMicrosPerRecord        float64 `json:"cpu_us_per_record"`
	ReadEventsPerSec          float64 `json:"read_events_per_sec,omitempty"`
	ReadCPUMicrosPerRecord    float64 `json:"read_cpu_us_per_record,omitempty"`
	ProcessCPUMicrosPerRecord float64 `json:"process_cpu_us_per_record"`
	AllocsPerRecord           float64 `json:"allocs_per_record"`
	BrokerCPUShare            float64 `json:"broker_cpu_share"`
	BrokerCPUMicrosPerRecord  float64 `json:"broker_cpu_us_per_record"`
	Passes                    []Pass  `json:"passes"`
}

// Pass is one consumer process's pass over the topic.
type Pass struct {
	// Order is the pass's position in the run (0-based, over all kinds);
	// Round its round.
	Order int `json:"order"`
	Round int `json:"round"`
	// JoinSeconds: from the child process's start to its first record
	// (the group join, and the stage's state and output setup).
	JoinSeconds float64 `json:"join_seconds"`
	// Seconds: from the first record to the end (last record fetched, or
	// last window's releases acknowledged).
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// CPUMicrosPerRecord: the consumer process's user+system CPU over
	// Seconds, per record.
	CPUMicrosPerRecord float64 `json:"cpu_us_per_record"`
	// ProcessCPUMicrosPerRecord: the consumer process's whole CPU time
	// (start, join and exit included), per record.
	ProcessCPUMicrosPerRecord float64 `json:"process_cpu_us_per_record"`
	// AllocsPerRecord: heap allocations of the consumer process over
	// Seconds, per record.
	AllocsPerRecord float64 `json:"allocs_per_record"`
	// BrokerCPUShare: the broker process's CPU time over the pass's wall
	// time (1 = one core busy); BrokerCPUMicrosPerRecord the same CPU per
	// record.
	BrokerCPUShare           float64 `json:"broker_cpu_share"`
	BrokerCPUMicrosPerRecord float64 `json:"broker_cpu_us_per_record"`
	// Stage only: from the first record to the last one read (polled every
	// 2 ms); Seconds − ReadSeconds is the release tail.
	ReadSeconds            float64 `json:"read_seconds,omitempty"`
	ReadEventsPerSec       float64 `json:"read_events_per_sec,omitempty"`
	ReadCPUMicrosPerRecord float64 `json:"read_cpu_us_per_record,omitempty"`
	BrokerReadCPUShare     float64 `json:"broker_read_cpu_share,omitempty"`
}

// summarize fills the medians and ratios from the passes.
func (r *Results) summarize() {
	for _, f := range []*ConsumerFigures{r.Reader, r.Kgo, r.Stage} {
		if f == nil {
			continue
		}
		col := func(get func(Pass) float64) float64 {
			var xs []float64
			for _, p := range f.Passes {
				xs = append(xs, get(p))
			}
			return median(xs)
		}
		f.EventsPerSec = col(func(p Pass) float64 { return p.EventsPerSec })
		f.CPUMicrosPerRecord = col(func(p Pass) float64 { return p.CPUMicrosPerRecord })
		f.ReadEventsPerSec = col(func(p Pass) float64 { return p.ReadEventsPerSec })
		f.ReadCPUMicrosPerRecord = col(func(p Pass) float64 { return p.ReadCPUMicrosPerRecord })
		f.ProcessCPUMicrosPerRecord = col(func(p Pass) float64 { return p.ProcessCPUMicrosPerRecord })
		f.AllocsPerRecord = col(func(p Pass) float64 { return p.AllocsPerRecord })
		f.BrokerCPUShare = col(func(p Pass) float64 { return p.BrokerCPUShare })
		f.BrokerCPUMicrosPerRecord = col(func(p Pass) float64 { return p.BrokerCPUMicrosPerRecord })
		for _, p := range f.Passes {
			r.BrokerCPUShareMax = max(r.BrokerCPUShareMax, p.BrokerCPUShare)
		}
	}
	ratio := func(a, b float64) float64 {
		if a <= 0 || b <= 0 {
			return 0
		}
		return a / b
	}
	if f := r.Reader; f != nil {
		r.ReaderEventsPerSec, r.ReaderCPUMicrosPerRecord = f.EventsPerSec, f.CPUMicrosPerRecord
	}
	if f := r.Kgo; f != nil {
		r.KgoEventsPerSec, r.KgoCPUMicrosPerRecord = f.EventsPerSec, f.CPUMicrosPerRecord
	}
	if f := r.Stage; f != nil {
		r.StageEventsPerSec, r.StageCPUMicrosPerRecord = f.EventsPerSec, f.CPUMicrosPerRecord
		r.StageReadEventsPerSec, r.StageReadCPUMicrosPerRecord = f.ReadEventsPerSec, f.ReadCPUMicrosPerRecord
	}
	r.StageVsReader = ratio(r.StageEventsPerSec, r.ReaderEventsPerSec)
	r.StageVsReaderCPU = ratio(r.ReaderCPUMicrosPerRecord, r.StageCPUMicrosPerRecord)
	r.StageReadVsReader = ratio(r.StageReadEventsPerSec, r.ReaderEventsPerSec)
	r.StageReadVsReaderCPU = ratio(r.ReaderCPUMicrosPerRecord, r.StageReadCPUMicrosPerRecord)
	r.StageVsKgo = ratio(r.StageEventsPerSec, r.KgoEventsPerSec)
	r.StageVsKgoCPU = ratio(r.KgoCPUMicrosPerRecord, r.StageCPUMicrosPerRecord)
	r.StageReadVsKgo = ratio(r.StageReadEventsPerSec, r.KgoEventsPerSec)
	r.StageReadVsKgoCPU = ratio(r.KgoCPUMicrosPerRecord, r.StageReadCPUMicrosPerRecord)
	r.ReaderVsKgo = ratio(r.ReaderEventsPerSec, r.KgoEventsPerSec)
	r.ReaderVsKgoCPU = ratio(r.KgoCPUMicrosPerRecord, r.ReaderCPUMicrosPerRecord)
	if r.Reader != nil && r.Stage != nil {
		var pairs []float64
		for _, s := range r.Stage.Passes {
			for _, c := range r.Reader.Passes {
				if c.Round == s.Round {
					pairs = append(pairs, s.EventsPerSec/c.EventsPerSec)
				}
			}
		}
		r.StageVsReaderPairs = median(pairs)
	}
}

// Run runs the selected phases and returns their figures.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &Results{
		LoadAvgStart: loadAvg(),
		Events:       cfg.Events,
		Partitions:   cfg.Partitions,
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
		NumCPU:       runtime.NumCPU(),
		GoVersion:    runtime.Version(),
		Rounds:       cfg.Rounds,
	}
	w, err := newWorkload(cfg)
	if err != nil {
		return nil, err
	}
	res.Windows = w.windows
	res.AvgEventBytes = w.avgBytes()
	if cfg.Instances > 0 {
		err := runDist(ctx, cfg, w, res)
		res.LoadAvgEnd = loadAvg()
		return res, err
	}

	// The phases without Kafka first: the memory phase's heap figures are
	// cleanest in a process that has not yet run clients and a broker.
	if !cfg.SkipMemory {
		if err := memory(cfg, w, res); err != nil {
			return res, err
		}
		cfg.progress("memory: %.1f bytes per active (user, window)", res.BytesPerActiveUser)
	}
	if !cfg.SkipInProcess {
		if err := inProcess(cfg, w, res); err != nil {
			return res, err
		}
		cfg.progress("in-process: %.0f events/s, %.3f allocs/event; avro %.0f/s (%.2f× JSON's CPU per event), protobuf %.0f/s (%.2f×)",
			res.InProcessEventsPerSec, res.InProcessAllocsPerEvt,
			res.InProcessAvroEventsPerSec, res.InProcessEventsPerSec/res.InProcessAvroEventsPerSec,
			res.InProcessProtobufEventsPerSec, res.InProcessEventsPerSec/res.InProcessProtobufEventsPerSec)
	}
	if !cfg.SkipRelease {
		if err := releases(cfg, res); err != nil {
			return res, err
		}
		cfg.progress("release: d=10 %.0f/s, d=1000 %.0f/s, d=100000 %.1f/s", res.ReleasePerSecD10, res.ReleasePerSecD1000, res.ReleasePerSecD100000)
	}
	if cfg.anyPass() || !cfg.SkipLive {
		if err := runKafkaPhases(ctx, cfg, w, res); err != nil {
			return res, err
		}
	}
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "bench: "+format+"\n", args...)
	}
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile returns the p-th percentile (0..100) of xs by the nearest-rank
// method, 0 for none.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	k := int(p/100*float64(len(s))+0.999999999) - 1
	return s[min(max(k, 0), len(s)-1)]
}

// loadAvg returns the 1, 5 and 15 minute load averages (Linux), nil where
// they cannot be read.
func loadAvg() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return nil
	}
	out := make([]float64, 3)
	for i := range out {
		if out[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return nil
		}
	}
	return out
}

// writeProfile writes the named runtime profile to path (nothing for "").
func writeProfile(name, path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
