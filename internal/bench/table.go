package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Targets (issues 5 and 16); the table marks each measured figure against
// its target.
const (
	TargetStageVsReader   = 0.9
	TargetInProcessPerSec = 1_000_000
	// TargetFormatCPURatio: Avro's and Protobuf's in-process CPU per event
	// over JSON's (issue 24).
	TargetFormatCPURatio     = 1.5
	TargetLatencyP99Ms       = 100
	TargetBytesPerActiveUser = 100
)

// consumerNames are the table's names of the consumers.
var consumerNames = map[string]string{roleReader: "kafka-go Reader", roleKgo: "franz-go kgo", roleStage: "stage"}

// WriteTable prints the results as a human-readable table.
func WriteTable(out io.Writer, r *Results) error {
	fmt.Fprintf(out, "stage bench: %d events (%.0f bytes avg), %d partitions, %d windows, %d rounds, GOMAXPROCS %d (%d CPUs), %s%s\n",
		r.Events, r.AvgEventBytes, r.Partitions, r.Windows, r.Rounds, r.GOMAXPROCS, r.NumCPU, r.GoVersion, loadNote(r))
	check := func(ok bool, target string) string {
		if ok {
			return "target " + target + ": met"
		}
		return "target " + target + ": NOT met"
	}
	if r.Reader != nil || r.Kgo != nil || r.Stage != nil {
		fmt.Fprintf(out, "\nEach consumer and the broker in a process of its own; medians of %d passes each (CPU: the consumer's process only).\n", r.Rounds)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "consumer\tevents/s\tCPU µs/record\tprocess CPU µs/record\tallocs/record\tbroker CPU (share of a core)\tbroker CPU µs/record\t\n")
		for _, k := range passKinds {
			f := r.figures(k)
			if f == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%.2f\t%.2f\t%.3f\t\n", consumerNames[k], rate(f.EventsPerSec), f.CPUMicrosPerRecord,
				f.ProcessCPUMicrosPerRecord, f.AllocsPerRecord, f.BrokerCPUShare, f.BrokerCPUMicrosPerRecord)
			if k == roleStage {
				fmt.Fprintf(tw, "stage, until all read\t%s\t%.3f\t\t\t\t\t\n", rate(f.ReadEventsPerSec), f.ReadCPUMicrosPerRecord)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(out)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(name, value, note string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", name, value, note) }
	fmt.Fprintf(tw, "figure\tvalue\tnote\n")
	if r.ProduceSeconds > 0 {
		row("produce", rate(r.ProduceEventsPerSec), fmt.Sprintf("%.2f s (kafka-go Writer → broker process)", r.ProduceSeconds))
	}
	var passes []struct {
		kind string
		p    Pass
	}
	for _, k := range passKinds {
		if f := r.figures(k); f != nil {
			for _, p := range f.Passes {
				passes = append(passes, struct {
					kind string
					p    Pass
				}{k, p})
			}
		}
	}
	slices.SortFunc(passes, func(a, b struct {
		kind string
		p    Pass
	}) int {
		return a.p.Order - b.p.Order
	})
	for _, x := range passes {
		row(fmt.Sprintf("%s (pass %d)", consumerNames[x.kind], x.p.Order), rate(x.p.EventsPerSec), passNote(x.p))
	}
	if r.StageVsReader > 0 {
		row("stage_vs_reader", fmt.Sprintf("%.3f", r.StageVsReader), check(r.StageVsReader >= TargetStageVsReader, "≥ 0.9")+
			fmt.Sprintf("; events/s, to the last release; pairs %.3f; until all read %.3f", r.StageVsReaderPairs, r.StageReadVsReader))
		row("stage_vs_reader_cpu", fmt.Sprintf("%.3f", r.StageVsReaderCPU), check(r.StageVsReaderCPU >= TargetStageVsReader, "≥ 0.9")+
			fmt.Sprintf("; Reader CPU per record / stage's; until all read %.3f", r.StageReadVsReaderCPU))
	}
	if r.StageVsKgo > 0 {
		row("stage_vs_kgo", fmt.Sprintf("%.3f", r.StageVsKgo), fmt.Sprintf("until all read %.3f", r.StageReadVsKgo))
		row("stage_vs_kgo_cpu", fmt.Sprintf("%.3f", r.StageVsKgoCPU), fmt.Sprintf("kgo CPU per record / stage's; until all read %.3f", r.StageReadVsKgoCPU))
	}
	if r.ReaderVsKgo > 0 {
		row("reader_vs_kgo", fmt.Sprintf("%.3f", r.ReaderVsKgo), fmt.Sprintf("CPU: %.3f", r.ReaderVsKgoCPU))
	}
	if r.BrokerCPUShareMax > 0 {
		row("broker_cpu_share_max", fmt.Sprintf("%.2f", r.BrokerCPUShareMax), "the broker process's busiest pass, in cores: below 1, it is not the bound")
	}
	if r.StageWindowsReleased > 0 {
		row("stage windows released", fmt.Sprint(r.StageWindowsReleased), fmt.Sprintf("%d units; %d contributions counted; dropped %s", r.StageUnitsReleased, r.StageCounted, dropsNote(r.StageDropped)))
		row("catchup_latency_p50/p99_ms", fmt.Sprintf("%.1f / %.1f", r.CatchupLatencyP50Ms, r.CatchupLatencyP99Ms), "close-to-publish in the first stage pass (a backlog: windows queue for the releaser)")
	}
	if m := r.Metrics; m != nil {
		row("metrics_scrape_cpu_ms", fmt.Sprintf("%.3f", m.CPUMs), fmt.Sprintf("one /metrics scrape (gzip, %d samples, %d bytes, %d gzipped); first scrape %.3f ms; uncompressed %.3f ms; wall %.3f ms",
			m.Samples, m.Bytes, m.GzipBytes, m.FirstCPUMs, m.PlainCPUMs, m.WallMs))
		row("metrics_gather_cpu_ms", fmt.Sprintf("%.3f", m.GatherCPUMs), fmt.Sprintf("Registry.Gather alone; of it Go collector %.3f, process collector %.3f (each alone)",
			m.GoCollectorCPUMs, m.ProcessCollectorCPUMs))
	}
	if r.ReleaseLatencyUnits > 0 {
		row("release_latency_p50_ms", fmt.Sprintf("%.1f", r.ReleaseLatencyP50Ms), fmt.Sprintf("live: %d events/s, a window closing every %.0f ms; %d units of %d windows",
			r.LiveEventsPerSec, r.LiveWindowEverySecs*1000, r.ReleaseLatencyUnits, r.LiveWindowsReleased))
		row("release_latency_p99_ms", fmt.Sprintf("%.1f", r.ReleaseLatencyP99Ms), check(r.ReleaseLatencyP99Ms <= TargetLatencyP99Ms, "≤ 100 ms")+fmt.Sprintf("; max %.1f ms", r.ReleaseLatencyMaxMs))
	}
	if r.InProcessEventsPerSec > 0 {
		row("inprocess_events_per_sec", rate(r.InProcessEventsPerSec),
			check(r.InProcessEventsPerSec >= TargetInProcessPerSec, "≥ 1,000,000/s")+fmt.Sprintf("; one goroutine; %.4f allocs/event", r.InProcessAllocsPerEvt))
		for _, f := range []struct {
			name         string
			rate, allocs float64
		}{{"avro", r.InProcessAvroEventsPerSec, r.InProcessAvroAllocsPerEvt}, {"protobuf", r.InProcessProtobufEventsPerSec, r.InProcessProtobufAllocsPerEvt}} {
			if f.rate > 0 {
				ratio := r.InProcessEventsPerSec / f.rate
				row("inprocess_"+f.name+"_events_per_sec", rate(f.rate),
					check(ratio <= TargetFormatCPURatio, "≤ 1.5× JSON's CPU per event")+fmt.Sprintf("; %.2f× JSON's; same events, Confluent wire format; %.4f allocs/event", ratio, f.allocs))
			}
		}
	}
	if r.ReleasePerSecD10 > 0 {
		row("release_per_sec_d10", rate(r.ReleasePerSecD10), "Dirichlet, one goroutine")
		row("release_per_sec_d1000", rate(r.ReleasePerSecD1000), "")
		row("release_per_sec_d100000", rate(r.ReleasePerSecD100000), "")
	}
	if r.BytesPerActiveUser > 0 {
		row("bytes_per_active_user", fmt.Sprintf("%.1f", r.BytesPerActiveUser),
			check(r.BytesPerActiveUser <= TargetBytesPerActiveUser, "≤ 100")+fmt.Sprintf("; live heap at %d users in one window", r.MemoryUsers))
		row("cap (max_tracked_users)", fmt.Sprint(r.CapMaxTrackedUsers),
			fmt.Sprintf("offered %d users: %d tracked (the smallest hashes), %d dropped (capacity), %d evicted by smaller hashes; heap %.1f MB at the cap, %+.1f KB beyond it",
				r.CapUsersOffered, r.CapTrackedUsers, r.CapDroppedCapacity, r.CapEvicted, float64(r.CapHeapAtCapBytes)/1e6, float64(r.CapHeapGrowthBeyondCapB)/1e3))
	}
	return tw.Flush()
}

func passNote(p Pass) string {
	s := fmt.Sprintf("%.2f s after %.2f s to the first record", p.Seconds, p.JoinSeconds)
	if p.ReadSeconds > 0 {
		s += fmt.Sprintf(" (all read at %.2f s, %.3f µs CPU/record)", p.ReadSeconds, p.ReadCPUMicrosPerRecord)
	}
	return s + fmt.Sprintf("; %.3f µs CPU/record; broker %.2f of a core", p.CPUMicrosPerRecord, p.BrokerCPUShare)
}

func (r *Results) figures(kind string) *ConsumerFigures {
	switch kind {
	case roleReader:
		return r.Reader
	case roleKgo:
		return r.Kgo
	default:
		return r.Stage
	}
}

func loadNote(r *Results) string {
	if len(r.LoadAvgStart) < 3 {
		return ""
	}
	s := fmt.Sprintf(", load average %.2f %.2f %.2f", r.LoadAvgStart[0], r.LoadAvgStart[1], r.LoadAvgStart[2])
	if len(r.LoadAvgEnd) >= 3 {
		s += fmt.Sprintf(" → %.2f %.2f %.2f", r.LoadAvgEnd[0], r.LoadAvgEnd[1], r.LoadAvgEnd[2])
	}
	return s
}

func dropsNote(d Drops) string {
	if len(d) == 0 {
		return "nothing"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, d[k]))
	}
	return strings.Join(parts, ", ")
}

// rate formats events (or releases) per second with thousands separators.
func rate(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f/s", v)
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String() + "/s"
}
