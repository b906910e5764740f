package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Targets of issue 5; the table marks each measured figure against its
// target.
const (
	TargetStageVsCeiling     = 0.7
	TargetInProcessPerSec    = 1_000_000
	TargetLatencyP99Ms       = 100
	TargetBytesPerActiveUser = 100
)

// WriteTable prints the results as a human-readable table.
func WriteTable(out io.Writer, r *Results) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	row := func(name, value, note string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", name, value, note) }
	check := func(ok bool, target string) string {
		if ok {
			return "target " + target + ": met"
		}
		return "target " + target + ": NOT met"
	}
	fmt.Fprintf(tw, "stage bench: %d events (%.0f bytes avg), %d partitions, %d windows, GOMAXPROCS %d (%d CPUs), %s\n",
		r.Events, r.AvgEventBytes, r.Partitions, r.Windows, r.GOMAXPROCS, r.NumCPU, r.GoVersion)
	fmt.Fprintf(tw, "figure\tvalue\tnote\n")
	if r.ProduceSeconds > 0 {
		row("produce", rate(r.ProduceEventsPerSec), fmt.Sprintf("%.2f s (kafka-go Writer → embedded broker)", r.ProduceSeconds))
	}
	for _, p := range r.CeilingRounds {
		row(fmt.Sprintf("ceiling (pass %d)", p.Order), rate(p.EventsPerSec), passNote(p))
	}
	for _, p := range r.StageRounds {
		row(fmt.Sprintf("stage (pass %d)", p.Order), rate(p.EventsPerSec), passNote(p))
	}
	if r.CeilingEventsPerSec > 0 {
		row("ceiling_events_per_sec", rate(r.CeilingEventsPerSec), medianNote(len(r.CeilingRounds)))
	}
	if r.StageEventsPerSec > 0 {
		row("stage_events_per_sec", rate(r.StageEventsPerSec), medianNote(len(r.StageRounds)))
	}
	if r.StageVsCeiling > 0 {
		row("stage_vs_ceiling", fmt.Sprintf("%.3f", r.StageVsCeiling), check(r.StageVsCeiling >= TargetStageVsCeiling, "≥ 0.7")+"; ratio of the medians")
		row("stage_vs_ceiling_pairs", fmt.Sprintf("%.3f", r.StageVsCeilingPairs), "median over rounds of stage pass / ceiling pass next to it")
		row("stage_vs_ceiling_best", fmt.Sprintf("%.3f", r.StageVsCeilingBest), "fastest stage pass / fastest ceiling pass")
		row("stage_read_events_per_sec", rate(r.StageReadEventsPerSec), fmt.Sprintf("stage until the last message was read (release tail left out): %.3f × ceiling", r.StageReadVsCeiling))
		row("stage_vs_ceiling_cpu", fmt.Sprintf("%.3f", r.StageVsCeilingCPU), "ceiling CPU per event / stage CPU per event (broker included)")
	}
	if r.ConnBatchEventsPerSec > 0 {
		row("conn_batch_events_per_sec", rate(r.ConnBatchEventsPerSec), fmt.Sprintf("kafka.Conn.ReadBatch, no Reader: %.2f × ceiling", r.ConnBatchVsCeiling))
	}
	if r.StageWindowsReleased > 0 {
		row("stage windows released", fmt.Sprint(r.StageWindowsReleased), fmt.Sprintf("%d units; %d contributions counted; dropped %s", r.StageUnitsReleased, r.StageCounted, dropsNote(r.StageDropped)))
		row("catchup_latency_p50/p99_ms", fmt.Sprintf("%.1f / %.1f", r.CatchupLatencyP50Ms, r.CatchupLatencyP99Ms), "close-to-publish in the first stage pass (a backlog: windows queue for the releaser)")
	}
	if r.ReleaseLatencyUnits > 0 {
		row("release_latency_p50_ms", fmt.Sprintf("%.1f", r.ReleaseLatencyP50Ms), fmt.Sprintf("live: %d events/s, a window closing every %.0f ms; %d units of %d windows",
			r.LiveEventsPerSec, r.LiveWindowEverySecs*1000, r.ReleaseLatencyUnits, r.LiveWindowsReleased))
		row("release_latency_p99_ms", fmt.Sprintf("%.1f", r.ReleaseLatencyP99Ms), check(r.ReleaseLatencyP99Ms <= TargetLatencyP99Ms, "≤ 100 ms")+fmt.Sprintf("; max %.1f ms", r.ReleaseLatencyMaxMs))
	}
	if r.InProcessEventsPerSec > 0 {
		row("inprocess_events_per_sec", rate(r.InProcessEventsPerSec),
			check(r.InProcessEventsPerSec >= TargetInProcessPerSec, "≥ 1,000,000/s")+fmt.Sprintf("; one goroutine; %.4f allocs/event", r.InProcessAllocsPerEvt))
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
	s := fmt.Sprintf("%.2f s after a %.2f s join", p.Seconds, p.JoinSeconds)
	if p.ReadSeconds > 0 {
		s += fmt.Sprintf(" (all read at %.2f s)", p.ReadSeconds)
	}
	return s + fmt.Sprintf("; %.2f allocs/event; %.2f CPU-s per 1M events", p.AllocsPerEvent, p.CPUSecondsPerMillion)
}

func medianNote(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf("median of %d passes", n)
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
