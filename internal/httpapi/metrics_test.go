package httpapi

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dpstage/stage/partial"
	"github.com/dpstage/stage/pipeline"
	"github.com/dpstage/stage/plan"
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
