package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// TestDistSummaryAndTable: the medians per side, the ratios and the table
// of the distributed bench, from made-up passes (no Kafka).
func TestDistSummaryAndTable(t *testing.T) {
	d := &DistFigures{Instances: 3, Events: 1_000_000, Passes: []DistPass{
		{Round: 0, Processes: 1, EventsPerSec: 100_000, CPUSecondsPerMillion: 10, ReleasingCPUShare: 1},
		{Round: 0, Processes: 3, EventsPerSec: 80_000, CPUSecondsPerMillion: 13, ReleasingCPUShare: 0.4},
		{Round: 1, Processes: 3, EventsPerSec: 60_000, CPUSecondsPerMillion: 14, ReleasingCPUShare: 0.5},
		{Round: 1, Processes: 1, EventsPerSec: 120_000, CPUSecondsPerMillion: 12, ReleasingCPUShare: 1},
		{Round: 2, Processes: 1, EventsPerSec: 90_000, CPUSecondsPerMillion: 11, ReleasingCPUShare: 1},
		{Round: 2, Processes: 3, EventsPerSec: 70_000, CPUSecondsPerMillion: 16, ReleasingCPUShare: 0.3},
	}}
	d.summarize()
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(d.One.EventsPerSec, 100_000) || !near(d.Many.EventsPerSec, 70_000) || !near(d.One.CPUSecondsPerMillion, 11) || !near(d.Many.CPUSecondsPerMillion, 14) {
		t.Fatalf("medians: one %+v, many %+v", d.One, d.Many)
	}
	if !near(d.EventsPerSecRatio, 0.7) || !near(d.CPURatio, 14.0/11) || d.Many.Processes != 3 || !near(d.Many.ReleasingProcessShare, 0.4) {
		t.Fatalf("ratios %v %v, many %+v", d.EventsPerSecRatio, d.CPURatio, d.Many)
	}
	var b bytes.Buffer
	if err := WriteDistTable(&b, d); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"median of 3 round(s)", "ratio 3/1", "0.70×", "1.27×", "(met)", "Prediction for N machines"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	d.Passes[3].EventsPerSec, d.Passes[0].EventsPerSec, d.Passes[4].EventsPerSec = 200_000, 200_000, 200_000
	d.summarize()
	b.Reset()
	_ = WriteDistTable(&b, d)
	if !strings.Contains(b.String(), "(not met)") {
		t.Errorf("0.35× events/s reported as met:\n%s", b.String())
	}
	t.Logf("\n%s", out)
}
