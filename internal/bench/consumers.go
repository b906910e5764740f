package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/source/allone"
)

// The consumers' fetch settings, the stage's (source/fetch.go:
// fetchMaxBytes, fetchMaxWait, read_committed): every consumer under test
// uses the same, so the comparison is reader for reader.
const (
	readerMinBytes = 1
	readerMaxBytes = 1 << 20 // per partition and response
	readerMaxWait  = 500 * time.Millisecond
)

// consumerFlags are a consumer child's flags.
type consumerFlags struct {
	addr       string
	topic      string
	group      string
	total      int64
	partitions int
	cpuProfile string

	// Stage only.
	output       string
	stateDir     string
	lastWindow   int64
	allocProfile string
	// metricsScrapes > 0: after the pass, measure the CPU of that many
	// scrapes of the stage's /metrics (see measureMetrics).
	metricsScrapes    int
	metricsCPUProfile string
}

func (c *consumerFlags) flagSet(role string) *flag.FlagSet {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "", "broker address")
	fs.StringVar(&c.topic, "topic", inputTopic, "input topic")
	fs.StringVar(&c.group, "group", "", "consumer group")
	fs.Int64Var(&c.total, "total", 0, "records in the topic")
	fs.IntVar(&c.partitions, "partitions", 0, "partitions of the topic")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "CPU profile of the pass")
	fs.StringVar(&c.output, "output", "", "stage: output topic")
	fs.StringVar(&c.stateDir, "state-dir", "", "stage: state directory")
	fs.Int64Var(&c.lastWindow, "last-window", 0, "stage: start (Unix ms) of the last window")
	fs.StringVar(&c.allocProfile, "allocprofile", "", "stage: allocation profile after the pass (and FILE.base before)")
	fs.IntVar(&c.metricsScrapes, "metrics-scrapes", 0, "stage: /metrics scrapes to measure after the pass")
	fs.StringVar(&c.metricsCPUProfile, "metrics-cpuprofile", "", "stage: CPU profile of the /metrics scrapes")
	return fs
}

// args are the flags that reproduce c.
func (c consumerFlags) args() []string {
	a := []string{"--addr", c.addr, "--topic", c.topic, "--group", c.group,
		"--total", fmt.Sprint(c.total), "--partitions", fmt.Sprint(c.partitions)}
	add := func(name, v string) {
		if v != "" {
			a = append(a, "--"+name, v)
		}
	}
	add("cpuprofile", c.cpuProfile)
	add("output", c.output)
	add("state-dir", c.stateDir)
	if c.lastWindow != 0 {
		add("last-window", fmt.Sprint(c.lastWindow))
	}
	add("allocprofile", c.allocProfile)
	if c.metricsScrapes > 0 {
		add("metrics-scrapes", fmt.Sprint(c.metricsScrapes))
	}
	add("metrics-cpuprofile", c.metricsCPUProfile)
	return a
}

// passMeter marks the moments of a consumer pass: the child's start, its
// first record, (stage) its last record read, and the end. At each it takes
// the wall clock and the process's CPU time, and tells the parent.
type passMeter struct {
	out     *lineWriter
	started time.Time

	firstOnce sync.Once
	first     time.Time
	firstCPU  time.Duration
	firstMall uint64

	read    time.Time
	readCPU time.Duration

	profileFile *os.File // the CPU profile's file, until it starts
	profStop    func() error
}

func newPassMeter(out *lineWriter, cpuProfile string) (*passMeter, error) {
	m := &passMeter{out: out, started: time.Now(), profStop: func() error { return nil }}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return nil, err
		}
		m.profStop = func() error { pprof.StopCPUProfile(); return f.Close() }
		m.profileFile = f
	}
	return m, nil
}

// markFirst is called with every record until the first; only the first
// call counts. The CPU profile (if any) starts here: the join is not in it.
func (m *passMeter) markFirst() {
	m.firstOnce.Do(func() {
		m.first = time.Now()
		m.firstCPU = processCPU()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		m.firstMall = ms.Mallocs
		if m.profileFile != nil {
			if err := pprof.StartCPUProfile(m.profileFile); err != nil {
				m.profileFile.Close()
				m.profileFile = nil
				m.profStop = func() error { return err }
			}
		}
		_ = m.out.send(childLine{Ev: "first"})
	})
}

func (m *passMeter) markRead() {
	m.read, m.readCPU = time.Now(), processCPU()
	_ = m.out.send(childLine{Ev: "read"})
}

// done ends the pass: it returns the result's timing fields and stops the
// profile.
func (m *passMeter) done(records int64) (*childResult, error) {
	end, cpu := time.Now(), processCPU()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	_ = m.out.send(childLine{Ev: "done"})
	if err := m.profStop(); err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	r := &childResult{
		Records:     records,
		JoinSeconds: m.first.Sub(m.started).Seconds(),
		Seconds:     end.Sub(m.first).Seconds(),
		CPUSeconds:  (cpu - m.firstCPU).Seconds(),
		Allocs:      ms.Mallocs - m.firstMall,
	}
	if !m.read.IsZero() {
		r.ReadSeconds = m.read.Sub(m.first).Seconds()
		r.ReadCPUSeconds = (m.readCPU - m.firstCPU).Seconds()
	}
	return r, nil
}

// consumerChild runs one consumer pass and sends its result.
func consumerChild(ctx context.Context, role string, c consumerFlags, out *lineWriter) error {
	if c.addr == "" || c.group == "" || c.total <= 0 {
		return errors.New("--addr, --group and --total are required")
	}
	m, err := newPassMeter(out, c.cpuProfile)
	if err != nil {
		return err
	}
	var r *childResult
	switch role {
	case roleReader:
		r, err = readerPass(ctx, c, m)
	case roleKgo:
		r, err = kgoPass(ctx, c, m)
	case roleStage:
		r, err = stagePass(ctx, c, m)
	}
	if err != nil {
		return err
	}
	return out.send(childLine{Ev: "result", Result: r})
}

// readerPass is the bare kafka-go consumer: a kafka.ConsumerGroup (the
// stage's all-to-one balancer, the stage's session settings) and, per
// assigned partition, one kafka.Reader bound to that partition (no GroupID:
// the group only assigns) with the stage's fetch settings and
// read_committed; FetchMessage and discard, no commits. This is how the
// stage itself read before it fetched on its own (source/fetch.go), and
// how kafka-go's docs tell a group member to read assigned partitions.
func readerPass(ctx context.Context, c consumerFlags, m *passMeter) (*childResult, error) {
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                c.group,
		Brokers:           []string{c.addr},
		Topics:            []string{c.topic},
		GroupBalancers:    []kafka.GroupBalancer{allone.Balancer{}},
		StartOffset:       kafka.FirstOffset,
		HeartbeatInterval: time.Second,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer group: %w", err)
	}
	defer cg.Close()
	gen, err := cg.Next(ctx)
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	var (
		seen    atomic.Int64
		done    = make(chan struct{})
		errOnce sync.Once
		passErr error
	)
	finish := func(err error) { errOnce.Do(func() { passErr = err; close(done) }) }
	for _, a := range gen.Assignments[c.topic] {
		p, off := a.ID, a.Offset
		gen.Start(func(gctx context.Context) {
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:        []string{c.addr},
				Topic:          c.topic,
				Partition:      p,
				MinBytes:       readerMinBytes,
				MaxBytes:       readerMaxBytes,
				MaxWait:        readerMaxWait,
				IsolationLevel: kafka.ReadCommitted,
			})
			defer r.Close()
			if off < 0 {
				off = kafka.FirstOffset
			}
			if err := r.SetOffset(off); err != nil {
				finish(err)
				return
			}
			for {
				msg, err := r.FetchMessage(gctx)
				if err != nil {
					if ctx.Err() == nil && gctx.Err() == nil {
						finish(fmt.Errorf("partition %d: %w", p, err))
					}
					return
				}
				m.markFirst()
				_ = msg
				if seen.Add(1) == c.total {
					finish(nil)
					return
				}
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("%d of %d records before %w", seen.Load(), c.total, ctx.Err())
	}
	if passErr != nil {
		return nil, passErr
	}
	return m.done(seen.Load())
}

// kgoPass is franz-go's consumer: a kgo client in a consumer group (kgo's
// default balancer; one member gets every partition), from the start,
// read_committed, at most 1 MiB per partition per response, 500 ms max
// wait, no commits; PollFetches and discard.
func kgoPass(ctx context.Context, c consumerFlags, m *passMeter) (*childResult, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.addr),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxPartitionBytes(readerMaxBytes),
		kgo.FetchMinBytes(readerMinBytes),
		kgo.FetchMaxWait(readerMaxWait),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return nil, fmt.Errorf("kgo client: %w", err)
	}
	defer cl.Close()
	var n int64
	for n < c.total {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%d of %d records before %w", n, c.total, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("%s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return nil, ferr
		}
		k := int64(fs.NumRecords())
		if k > 0 {
			m.markFirst()
			n += k
		}
	}
	return m.done(n)
}
