package bench

import (
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/generator"
)

// windowSize is the tumbling window of every phase.
const windowSize = time.Minute

// epoch is the event time of event 0: a window boundary, so that the N events
// fill whole windows.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// workload is the event stream every phase uses.
type workload struct {
	gen        *generator.Generator
	n          int
	partitions int
	// firstWindow and lastWindow are the starts (Unix ms) of the windows of
	// event 0 and event n-1; windows is how many windows that spans.
	firstWindow, lastWindow int64
	windows                 int
	sampleBytes             int // bytes of the first ≤10,000 event values
	sampleN                 int
}

func newWorkload(cfg Config) (*workload, error) {
	// Event time advances windows·size/N per event: the N events span
	// cfg.Windows windows. The generator's step is TimeScale/EventsPerSecond
	// seconds.
	const eps = 1000
	stepMs := float64(cfg.Windows) * float64(windowSize.Milliseconds()) / float64(cfg.Events)
	g, err := generator.New(generator.Config{
		Users:           cfg.Users,
		EventsPerSecond: eps,
		TimeScale:       stepMs, // step = TimeScale/1000 s = stepMs ms
		Start:           epoch,
		Seed:            20260101,
		Unpaced:         true,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	w := &workload{gen: g, n: cfg.Events, partitions: cfg.Partitions}
	size := windowSize.Milliseconds()
	first := g.Event(0).Time.UnixMilli()
	last := g.Event(int64(cfg.Events - 1)).Time.UnixMilli()
	w.firstWindow = first - first%size
	w.lastWindow = last - last%size
	w.windows = int((w.lastWindow-w.firstWindow)/size) + 1
	var buf []byte
	for i := range min(cfg.Events, 10_000) {
		buf = g.AppendJSON(buf[:0], g.Event(int64(i)))
		w.sampleBytes += len(buf)
		w.sampleN++
	}
	return w, nil
}

func (w *workload) avgBytes() float64 {
	if w.sampleN == 0 {
		return 0
	}
	return float64(w.sampleBytes) / float64(w.sampleN)
}

// total is the number of messages in the topic: the events and one flush
// event per partition.
func (w *workload) total() int { return w.n + w.partitions }

// flushMessages are one event per partition (Message.Partition set; see
// partitionBalancer) at the start of the window after the last: once every
// partition has delivered it the watermark passes the last window's end
// (allowed_lateness is 0), so the last window closes without waiting for the
// idle timeout. The flush events' own window is never closed.
func (w *workload) flushMessages() []kafka.Message {
	t := w.lastWindow + windowSize.Milliseconds()
	msgs := make([]kafka.Message, w.partitions)
	for p := range msgs {
		v := fmt.Appendf(nil, `{"ts":%d,"user_id":"flush-%d","page":"home","country":"US","device":"mobile","session":"0000000000000000","seq":-1}`, t, p)
		msgs[p] = kafka.Message{Key: []byte("flush-" + strconv.Itoa(p)), Value: v, Partition: p}
	}
	return msgs
}

// stageConfig is the configuration of the stage phase (and of the
// in-process and memory phases' decoder and aggregator): the quickstart's
// shape, pages by country and devices, one event per user per window.
func stageConfig(broker, topic, output, group, stateDir string, partitions int) (*config.Config, error) {
	y := fmt.Sprintf(`
kafka:
  brokers: [%q]
  group_id: %q
  input_topic: %q
  output_topic: %q
  input_partitions: %d
events:
  format: json
  time_field: ts
  user_field: user_id
window:
  size: %s
  watermark: event
  allowed_lateness: 0s
  idle_partition_timeout: 10s
  start: 2026-01-01T00:00:00Z # = epoch: the first window released
histograms:
  - name: pages
    field: page
    bins: [home, search, cart, checkout, other]
    overflow_bin: other
    group_by: country
    groups: [US, DE, FR]
  - name: devices
    field: device
    bins: [mobile, desktop, tablet]
contribution:
  max_events_per_user: 1
  max_groups_per_user: 1
  max_tracked_users: 2000000
privacy:
  mechanism: dirichlet
  calibration: concentrated
  neighbour: replace
  order: 2
  budget:
    epsilon: 10
    delta: 1.0e-6
    period: 24h
state:
  dir: %q
log:
  level: warn
`, broker, group, topic, output, partitions, windowSize, stateDir)
	cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("bench: stage config: %w", err)
	}
	return cfg, nil
}
