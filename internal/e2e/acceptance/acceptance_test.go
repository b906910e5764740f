package acceptance_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/internal/srtest"
)

// producer writes events with one of the clients under test.
type producer struct {
	name    string
	produce func(t *testing.T, brokers []string, registryURL, topic, format, framing string, evs []e2e.Event)
}

var (
	kafkajs = producer{"kafkajs", func(t *testing.T, brokers []string, registryURL, topic, format, framing string, evs []e2e.Event) {
		e2e.ProduceKafkaJS(t, brokers, registryURL, topic, format, framing, evs)
	}}
	serde = producer{"franz-go-sr", func(t *testing.T, brokers []string, registryURL, topic, format, _ string, evs []e2e.Event) {
		e2e.ProduceSerde(t, brokers, registryURL, topic, format, evs)
	}}
)

// params fill accYAML.
type params struct {
	format    string // avro or protobuf
	registry  string // the registry's URL
	user      string // events.user_field: $key or user.id
	device    string // the devices histogram's field: device or $header.device
	noIndexes bool   // events.protobuf.message_indexes: none (kafkajs's own Protobuf framing)
	dlq       bool   // kafka.dead_letter_topic dlq-NAME
	timeout   string // events.schema_registry.timeout ("" for the default)
	watermark string // window.watermark ("" for event)
}

// accYAML is the harness's config (internal/e2e: histograms pages by
// country and devices, near-noiseless Gaussian, one event per user and
// window) over the acceptance schemas' nested records
// (jsclients/pageview.avsc, .proto): the user from p.user, the country from
// context.geo.country, the device from p.device, the time from ts (an Avro
// timestamp-millis, a Protobuf int64 of epoch milliseconds).
func accYAML(h *e2e.Harness, p params) string {
	var kafka, events, win strings.Builder
	if p.dlq {
		fmt.Fprintf(&kafka, "  dead_letter_topic: dlq-%s\n", h.Name)
	}
	fmt.Fprintf(&events, "  format: %s\n  schema_registry:\n    url: %s\n", p.format, p.registry)
	if p.timeout != "" {
		fmt.Fprintf(&events, "    timeout: %s\n", p.timeout)
	}
	if p.noIndexes {
		events.WriteString("  protobuf:\n    message_indexes: none\n")
	}
	wm := p.watermark
	if wm == "" {
		wm = config.WatermarkEvent
	}
	fmt.Fprintf(&win, "  watermark: %s\n", wm)
	if wm == config.WatermarkEvent {
		win.WriteString("  start: 2026-01-01T00:00:00Z\n")
	}
	return fmt.Sprintf(`
kafka:
  brokers: [%q]
  group_id: g-%[2]s
  input_topic: events-%[2]s
  output_topic: out-%[2]s
%[3]sevents:
  user_field: %q
  time_field: ts
%[5]swindow:
  size: 1m
  allowed_lateness: 0s
  idle_partition_timeout: 500ms
  clock_skew_margin: 0s
%[6]shistograms:
  - name: pages
    field: page
    bins: [%[7]s]
    overflow_bin: other
    group_by: context.geo.country
    groups: [US, DE, FR]
  - name: devices
    field: %[8]q
    bins: [mobile, desktop]
contribution:
  max_events_per_user: 1
  max_groups_per_user: 1
privacy:
  mechanism: gaussian
  neighbour: replace
  order: 2
  budget:
    epsilon: 1e7
    delta: 1.0e-6
    period: 1h
state:
  dir: %[9]q
log:
  level: warn
`, h.Broker.Addr(), h.Name, kafka.String(), p.user, events.String(), win.String(), e2e.PagesBins, p.device, h.Dir)
}

// accConfig is accYAML parsed and validated.
func accConfig(t *testing.T, h *e2e.Harness, p params) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(accYAML(h, p)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, accYAML(h, p))
	}
	cfg.Window.RecordTimes = config.RecordTimesProducer // the harness's input topic is CreateTime
	return cfg
}

// startRegistry starts a Schema Registry test server, closed when the test
// ends.
func startRegistry(t *testing.T) *srtest.Server {
	t.Helper()
	s, err := srtest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// checkReleases reads the output topic until the releases of windows
// [0, n) of Base arrived (one per (histogram, group, window), nothing else)
// and checks each against the bounded truth of evs.
func checkReleases(t *testing.T, h *e2e.Harness, evs []e2e.Event, n int) {
	t.Helper()
	per := len(e2e.Groups) + 1
	out := h.ReadOutput(n*per, 60*time.Second, time.Second)
	if len(out.Releases) != n*per {
		t.Errorf("got %d releases, want exactly %d", len(out.Releases), n*per)
	}
	tr := e2e.ComputeTruth(evs)
	e2e.CheckWindowsExact(t, out.Releases, tr, e2e.WindowsFrom(e2e.Base, e2e.Base.Add(time.Duration(n-1)*time.Minute), time.Minute)...)
}

// truthTotals is what the bounded truth of evs counts, by histogram.
func truthTotals(evs []e2e.Event) (pages, devices int) {
	for k, counts := range e2e.ComputeTruth(evs) {
		n := 0
		for _, c := range counts {
			n += int(c)
		}
		if strings.HasPrefix(k, "pages/") {
			pages += n
		} else {
			devices += n
		}
	}
	return pages, devices
}

// flushEvent moves the event-time watermark past windows 0–2 of Base.
var flushEvent = e2e.Event{User: "flush", At: e2e.Base.Add(3*time.Minute + time.Second), Page: "home", Country: "US", Device: "mobile"}

// TestProducers: the single-process stage reads Avro and Protobuf written
// by kafkajs with @kafkajs/confluent-schema-registry and by franz-go's sr
// serde — nested records, the user as the record key or a nested field,
// the device as a field or a record header, kafkajs's index-less Protobuf
// framing under events.protobuf.message_indexes: none — and releases
// exactly the bounded truth of the produced events (three windows, FR
// declared and never seen); every produced record decodes, none is
// dropped but by the contribution bound.
func TestProducers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p               producer
		format, framing string
		user, device    string
	}{
		{kafkajs, "avro", "", "$key", "$header.device"},
		{kafkajs, "protobuf", "", "user.id", "device"},
		{kafkajs, "protobuf", "library", "$key", "device"},
		{serde, "avro", "", "user.id", "device"},
		{serde, "protobuf", "", "$key", "$header.device"},
	} {
		name := tc.p.name + "-" + tc.format
		if tc.framing != "" {
			name += "-" + tc.framing
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			reg := startRegistry(t)
			cfg := accConfig(t, h, params{format: tc.format, registry: reg.URL(), user: tc.user, device: tc.device, noIndexes: tc.framing == "library"})
			evs := e2e.Stream(3, 100)
			tc.p.produce(t, h.Broker.Addrs(), reg.URL(), h.Input(), tc.format, tc.framing, evs)
			run := h.Start(cfg)
			tc.p.produce(t, h.Broker.Addrs(), reg.URL(), h.Input(), tc.format, tc.framing, []e2e.Event{flushEvent})
			checkReleases(t, h, evs, 3)
			st := run.Stage.Stats()
			e2e.WaitFor(t, "every record decoded", 10*time.Second, func() bool { return st.Decoded.Load() >= int64(len(evs)+1) })
			if d := st.Decoded.Load(); d != int64(len(evs)+1) {
				t.Errorf("decoded %d records, produced %d", d, len(evs)+1)
			}
			for reason, n := range st.Dropped() {
				if !strings.HasPrefix(reason, "bound_") {
					t.Errorf("%d records dropped as %s", n, reason)
				}
			}
			pages, devices := truthTotals(evs)
			t.Logf("%s: produced %d events (+1 flush), decoded %d, dropped %v; the bounded truth counts %d pages and %d devices contributions in windows 0-2, released exactly",
				name, len(evs), st.Decoded.Load(), st.Dropped(), pages, devices)
		})
	}
}

// TestDistributedProducers: the distributed mode (two instances sharing the
// input's 4 partitions) reads kafkajs's Avro and the sr serde's Protobuf
// and releases exactly the bounded truth; no record is dropped as
// wrong_partition (both producers partition by murmur2 of the key, as
// kafka.distributed.partitioner murmur2 expects).
func TestDistributedProducers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p      producer
		format string
	}{
		{kafkajs, "avro"},
		{serde, "protobuf"},
	} {
		t.Run(tc.p.name+"-"+tc.format, func(t *testing.T) {
			t.Parallel()
			h := e2e.New(t)
			reg := startRegistry(t)
			cfg := distConfig(t, h, accConfig(t, h, params{format: tc.format, registry: reg.URL(), user: "$key", device: "$header.device"}))
			evs := e2e.Stream(3, 100)
			tc.p.produce(t, h.Broker.Addrs(), reg.URL(), h.Input(), tc.format, "", evs)
			runs := []*e2e.Running{h.Start(cfg), h.Start(cfg)}
			tc.p.produce(t, h.Broker.Addrs(), reg.URL(), h.Input(), tc.format, "", []e2e.Event{flushEvent})
			// The distributed mode releases the flush's window too: its
			// partitions turn idle and emit it (see package distributed).
			checkReleases(t, h, append(evs, flushEvent), 4)
			decoded := func() (n int64) {
				for _, r := range runs {
					n += r.Stage.Stats().Decoded.Load()
				}
				return n
			}
			e2e.WaitFor(t, "every record decoded", 10*time.Second, func() bool { return decoded() >= int64(len(evs)+1) })
			// Decoded may exceed what was produced: records read by one
			// instance before a rebalance are read again by the next owner
			// of their partition (the partials make the counting exact).
			for i, r := range runs {
				for reason, n := range r.Stage.Stats().Dropped() {
					if !strings.HasPrefix(reason, "bound_") {
						t.Errorf("instance %d: %d records dropped as %s", i, n, reason)
					}
				}
			}
			t.Logf("distributed %s %s: produced %d events (+1 flush), decoded %d times by two instances (re-reads after the rebalance included), released exactly", tc.p.name, tc.format, len(evs), decoded())
		})
	}
}
