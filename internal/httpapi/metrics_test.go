package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// fakeSource is a Source with only Stats set.
type fakeSource struct{ st *pipeline.Stats }

func (f fakeSource) Stats() *pipeline.Stats          { return f.st }
func (f fakeSource) Readiness() pipeline.Readiness   { return pipeline.Readiness{} }
func (f fakeSource) Lag() map[int]int64              { return nil }
func (f fakeSource) Budget() []pipeline.BudgetStatus { return nil }
func (f fakeSource) Plan() *plan.Plan                { return nil }

// TestDistributedMetrics: the releaser's partials, late contributions and
// idle partitions are exported in the distributed mode only, every result
// from the start.
func TestDistributedMetrics(t *testing.T) {
	st := &pipeline.Stats{}
	st.Partials[partial.Added].Add(12)
	st.Partials[partial.Late].Add(2)
	st.LatePartialCounts.Add(7)
	st.PartitionsIdle.Store(3)
	st.IncompleteWindows.Add(5)
	src := func() Source { return fakeSource{st} }

	want := `
# HELP dpstage_late_partial_contributions_total Distributed mode, releasing instance: bounded contributions in late partials (window.watermark event: their window was released while their partition was idle), not released.
# TYPE dpstage_late_partial_contributions_total counter
dpstage_late_partial_contributions_total 7
# HELP dpstage_source_partitions_idle Distributed mode, releasing instance: source partitions idle now (window.watermark event), which do not hold windows back.
# TYPE dpstage_source_partitions_idle gauge
dpstage_source_partitions_idle 3
# HELP dpstage_windows_released_incomplete_total Distributed mode, releasing instance: windows released with "complete": false in their coverage (a rolling config change, or the input topic's partition count changed: docs/distributed.md, "Partitions added").
# TYPE dpstage_windows_released_incomplete_total counter
dpstage_windows_released_incomplete_total 5
`
	if err := testutil.CollectAndCompare(newStageCollector(src, true), strings.NewReader(want), MetricLatePartialCounts, MetricPartitionsIdle, MetricIncompleteWindows); err != nil {
		t.Error(err)
	}
	n, err := testutil.GatherAndCount(registryOf(src, true), MetricPartials)
	if err != nil || n != partial.NumAddResults {
		t.Errorf("%s: %d series (%v), want one per result, %d", MetricPartials, n, err, partial.NumAddResults)
	}
	for _, name := range []string{MetricPartials, MetricLatePartialCounts, MetricPartitionsIdle, MetricIncompleteWindows} {
		if n, err := testutil.GatherAndCount(registryOf(src, false), name); err != nil || n != 0 {
			t.Errorf("single-process mode exports %s (%d series, %v)", name, n, err)
		}
	}
}

func registryOf(src func() Source, distributed bool) *prometheus.Registry {
	reg, _ := newRegistry(src, distributed)
	return reg
}

// TestReleasedMetrics: the newest release of each declared (histogram,
// group) is exported as gauges — shares with their interval ends, the
// total with its interval — exactly as published; a (histogram, group)
// without a release exports nothing.
func TestReleasedMetrics(t *testing.T) {
	cfg := &config.Config{Histograms: []config.Histogram{
		{Name: "pages", Bins: []string{"home", "cart"}, GroupBy: "country", Groups: []string{"US", "DE"}},
	}}
	store := NewStore(4)
	for i, r := range []release.Release{
		{Histogram: "pages", Group: "US", WindowStart: "2026-01-01T00:00:00Z", Bins: []string{"home", "cart"}, Probabilities: []float64{0.5, 0.5}},
		{Histogram: "pages", Group: "US", WindowStart: "2026-01-01T00:01:00Z", Bins: []string{"home", "cart"}, Probabilities: []float64{0.7, 0.3},
			Intervals: &release.Intervals{Level: 0.95, Low: []float64{0.6, 0.2}, High: []float64{0.8, 0.4}},
			Total:     &release.Total{Estimate: 120, Low: 100, High: 140}},
	} {
		r.ReleaseID = release.ReleaseID(r.Histogram, r.Group, int64(i))
		v, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		store.Add(v)
	}
	want := `
# HELP dpstage_release_share The newest release's share of each bin (value="estimate") and its interval's ends (value="low", "high"; level in the release): public, as published.
# TYPE dpstage_release_share gauge
dpstage_release_share{bin="cart",group="US",histogram="pages",value="estimate"} 0.3
dpstage_release_share{bin="cart",group="US",histogram="pages",value="high"} 0.4
dpstage_release_share{bin="cart",group="US",histogram="pages",value="low"} 0.2
dpstage_release_share{bin="home",group="US",histogram="pages",value="estimate"} 0.7
dpstage_release_share{bin="home",group="US",histogram="pages",value="high"} 0.8
dpstage_release_share{bin="home",group="US",histogram="pages",value="low"} 0.6
# HELP dpstage_release_total The newest release's private total of counted events (users for an average histogram), value="estimate", "low", "high": public, as published.
# TYPE dpstage_release_total gauge
dpstage_release_total{group="US",histogram="pages",value="estimate"} 120
dpstage_release_total{group="US",histogram="pages",value="high"} 140
dpstage_release_total{group="US",histogram="pages",value="low"} 100
`
	if err := testutil.CollectAndCompare(newReleasedCollector(store, cfg), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
