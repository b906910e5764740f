// Package bench is the stage's benchmark harness (`stage bench`). In one
// process and one run it puts the full stage beside a bare kafka-go consumer
// reading the same events from the same embedded broker over loopback, so
// that the figures that matter are ratios measured side by side: on a shared,
// noisy machine an absolute events/s alone means little.
//
// Phases (each can be skipped):
//
//  1. produce: N synthetic events (internal/generator, ~120-byte JSON) into a
//     topic of P partitions, plus one flush event per partition whose event
//     time closes the last window;
//  2. ceiling: a kafka-go ConsumerGroup with one kafka.Reader per partition,
//     configured as the stage's readers are, fetching and discarding every
//     message;
//  3. stage: pipeline.New + Run over the same topic until the last window is
//     released (pipeline.Options.OnRelease);
//     ceiling and stage run Rounds times in ABBA order (ceiling, stage, stage,
//     ceiling, ...) so that a linear drift in machine load cancels out;
//  4. in-process: decode + bound + aggregate of the same N message values on
//     one goroutine, without Kafka;
//  5. release: Dirichlet releases per second for d = 10, 1,000, 100,000;
//  6. latency: close-to-publish p50/p99 over the stage run's windows;
//  7. memory: live heap per tracked (user, window) in the bounder at
//     1,000,000 users, and the cap of contribution.max_tracked_users.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
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
	// Rounds of the ceiling/stage pair, in ABBA order. Default 3.
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

	SkipCeiling   bool
	SkipStage     bool
	SkipConnBatch bool
	SkipLive      bool
	SkipInProcess bool
	SkipRelease   bool
	SkipMemory    bool

	// CPUProfile, when set, receives a CPU profile of the (first) stage run.
	CPUProfile string
	// AllocProfile, when set, receives the allocation profile after the
	// first stage run, and AllocProfile+".base" the one just before it:
	// `go tool pprof -sample_index=alloc_space -base FILE.base FILE` shows
	// what the stage run allocated.
	AllocProfile string
	// CeilingCPUProfile, when set, receives a CPU profile of the (first)
	// ceiling run.
	CeilingCPUProfile string
	// MutexProfile and BlockProfile, when set, receive the mutex contention
	// and blocking profiles of the first stage pass (sampling every event
	// slows the pass: use them for diagnosis, not for figures).
	MutexProfile, BlockProfile string

	// Progress, when set, receives one line per phase as it ends.
	Progress io.Writer
}

func (c *Config) defaults() {
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
		c.Rounds = 3
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
}

// Results are the figures of one run. Rates are per second of wall time;
// the ceiling and stage rates are measured from the first message fetched
// to the last message fetched (ceiling) or to the acknowledgement of the
// last window's release (stage), so the consumer-group join is left out of
// both (it is reported separately).
type Results struct {
	Events        int     `json:"events"`
	Partitions    int     `json:"partitions"`
	Windows       int     `json:"windows"`
	AvgEventBytes float64 `json:"avg_event_bytes"`
	GOMAXPROCS    int     `json:"gomaxprocs"`
	NumCPU        int     `json:"num_cpu"`
	GoVersion     string  `json:"go_version"`
	Rounds        int     `json:"rounds"`

	ProduceSeconds      float64 `json:"produce_seconds"`
	ProduceEventsPerSec float64 `json:"produce_events_per_sec"`

	// Medians over rounds; the per-round figures follow.
	CeilingEventsPerSec float64 `json:"ceiling_events_per_sec,omitempty"`
	StageEventsPerSec   float64 `json:"stage_events_per_sec,omitempty"`
	// StageVsCeiling is StageEventsPerSec / CeilingEventsPerSec.
	StageVsCeiling float64 `json:"stage_vs_ceiling,omitempty"`
	// StageVsCeilingPairs is the median over rounds of the ratio of the
	// stage pass to the ceiling pass next to it.
	StageVsCeilingPairs float64 `json:"stage_vs_ceiling_pairs,omitempty"`
	// StageVsCeilingBest is the fastest stage pass over the fastest ceiling
	// pass: other processes' load only ever slows a pass down, so the best
	// of several is the least disturbed.
	StageVsCeilingBest float64 `json:"stage_vs_ceiling_best,omitempty"`
	// StageReadEventsPerSec counts the stage's time only until it had read
	// the last message (the windows still open then are released after):
	// the hot path without the release tail.
	StageReadEventsPerSec float64 `json:"stage_read_events_per_sec,omitempty"`
	StageReadVsCeiling    float64 `json:"stage_read_vs_ceiling,omitempty"`
	// StageVsCeilingCPU is the ceiling's process CPU time per event over the
	// stage's (medians): the ratio the wall-clock one tends to on a machine
	// where the pass has every core to itself and is CPU-bound. Other
	// processes' load changes it much less than the wall-clock ratios.
	StageVsCeilingCPU float64 `json:"stage_vs_ceiling_cpu,omitempty"`
	CeilingRounds     []Pass  `json:"ceiling_rounds,omitempty"`
	StageRounds       []Pass  `json:"stage_rounds,omitempty"`

	// ConnBatch is a third reader: kafka.Conn.ReadBatch per partition
	// (no ConsumerGroup, no Reader goroutine and channel), message values
	// read into one reused buffer. It shows what kafka-go's Reader costs.
	ConnBatchEventsPerSec float64 `json:"conn_batch_events_per_sec,omitempty"`
	ConnBatchVsCeiling    float64 `json:"conn_batch_vs_ceiling,omitempty"`

	// From the first stage pass.
	StageWindowsReleased int   `json:"stage_windows_released,omitempty"`
	StageUnitsReleased   int   `json:"stage_units_released,omitempty"`
	StageCounted         int64 `json:"stage_counted,omitempty"`
	StageDropped         Drops `json:"stage_dropped,omitempty"`
	// Close-to-publish latency of the first stage pass, where the windows
	// of a backlog close much faster than they are released and queue.
	CatchupLatencyP50Ms float64 `json:"catchup_latency_p50_ms,omitempty"`
	CatchupLatencyP99Ms float64 `json:"catchup_latency_p99_ms,omitempty"`

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

// Pass is one timed pass of a reader over the topic.
type Pass struct {
	// Order is the pass's position in the run (0-based, over both kinds).
	Order int `json:"order"`
	// JoinSeconds: from creating the consumer group to the first message.
	JoinSeconds float64 `json:"join_seconds"`
	// Seconds: from the first message to the end (last message fetched, or
	// last window's release acknowledged).
	Seconds      float64 `json:"seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// AllocsPerEvent counts every heap allocation in the process during the
	// pass (the in-process broker's included) per event.
	AllocsPerEvent float64 `json:"allocs_per_event"`
	// CPUSecondsPerMillion is process CPU time (user+system, the broker's
	// included) per million events, where the platform reports it.
	CPUSecondsPerMillion float64 `json:"cpu_seconds_per_million,omitempty"`
	// ReadSeconds (stage only): from the first message to the last one
	// read (polled every 2 ms); Seconds − ReadSeconds is the release tail.
	ReadSeconds float64 `json:"read_seconds,omitempty"`
}

// Run runs the selected phases and returns their figures.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg.defaults()
	res := &Results{
		Events:     cfg.Events,
		Partitions: cfg.Partitions,
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		GoVersion:  runtime.Version(),
		Rounds:     cfg.Rounds,
	}
	w, err := newWorkload(cfg)
	if err != nil {
		return nil, err
	}
	res.Windows = w.windows
	res.AvgEventBytes = w.avgBytes()

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
		cfg.progress("in-process: %.0f events/s, %.3f allocs/event", res.InProcessEventsPerSec, res.InProcessAllocsPerEvt)
	}
	if !cfg.SkipRelease {
		if err := releases(cfg, res); err != nil {
			return res, err
		}
		cfg.progress("release: d=10 %.0f/s, d=1000 %.0f/s, d=100000 %.1f/s", res.ReleasePerSecD10, res.ReleasePerSecD1000, res.ReleasePerSecD100000)
	}
	if !cfg.SkipCeiling || !cfg.SkipStage || !cfg.SkipConnBatch || !cfg.SkipLive {
		if err := runKafkaPhases(ctx, cfg, w, res); err != nil {
			return res, err
		}
	}
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

// startCPUProfile starts a CPU profile into path; the returned stop ends it.
func startCPUProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func writeAllocProfile(path string) error { return writeProfile("allocs", path) }

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
