package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// TestRunSmall runs every phase with a tiny workload and checks that each
// figure is present and sane. It sets no timing targets: those are the
// benchmark's to judge, on a quiet machine, at full size.
func TestRunSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker, two stages and a consumer group")
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
		"produce_events_per_sec", "ceiling_events_per_sec", "stage_events_per_sec", "stage_vs_ceiling",
		"stage_vs_ceiling_pairs", "stage_vs_ceiling_best", "stage_read_events_per_sec", "stage_read_vs_ceiling", "stage_vs_ceiling_cpu",
		"conn_batch_events_per_sec", "inprocess_events_per_sec",
		"release_per_sec_d10", "release_per_sec_d1000", "release_per_sec_d100000",
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
	if len(res.CeilingRounds) != 2 || len(res.StageRounds) != 2 {
		t.Errorf("%d ceiling and %d stage passes, want 2 each", len(res.CeilingRounds), len(res.StageRounds))
	}
	for _, p := range append(res.CeilingRounds, res.StageRounds...) {
		if p.AllocsPerEvent < 0.5 { // kafka-go allocates each message's key and value
			t.Errorf("pass %d: %.2f allocations per event, implausibly few", p.Order, p.AllocsPerEvent)
		}
	}
	if got, want := res.StageVsCeiling, res.StageEventsPerSec/res.CeilingEventsPerSec; math.Abs(got-want) > 1e-9*want {
		t.Errorf("stage_vs_ceiling %v is not stage/ceiling %v", got, want)
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
	for _, k := range []string{"stage_vs_ceiling", "inprocess_events_per_sec", "release_latency_p99_ms", "bytes_per_active_user", "release_per_sec_d100000"} {
		if !strings.Contains(table.String(), k) {
			t.Errorf("table lacks %s:\n%s", k, table.String())
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
