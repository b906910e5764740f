package httpapi

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/dpstage/stage/internal/lib/buildinfo"
)

// TestBuildInfoMetric: dpstage_build_info{version,revision,go_version} is 1
// with the labels `stage version` prints, in both modes and before a stage
// is attached.
func TestBuildInfoMetric(t *testing.T) {
	want := buildinfo.Get()
	for _, distributed := range []bool{false, true} {
		mfs, err := registryOf(func() Source { return nil }, distributed).Gather()
		if err != nil {
			t.Fatal(err)
		}
		var found *dto.Metric
		for _, mf := range mfs {
			if mf.GetName() == MetricBuildInfo {
				if mf.GetType() != dto.MetricType_GAUGE || len(mf.Metric) != 1 {
					t.Fatalf("%s: type %v, %d series; want one gauge", MetricBuildInfo, mf.GetType(), len(mf.Metric))
				}
				found = mf.Metric[0]
			}
		}
		if found == nil {
			t.Fatalf("distributed=%v: %s not served", distributed, MetricBuildInfo)
		}
		labels := map[string]string{}
		for _, l := range found.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != want.Version || labels["revision"] != want.Revision || labels["go_version"] != want.GoVersion || len(labels) != 3 {
			t.Errorf("labels %v, want %+v", labels, want)
		}
		if v := found.GetGauge().GetValue(); v != 1 {
			t.Errorf("value %v, want 1", v)
		}
	}
}
