package httpapi

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dpstage/stage/pipeline"
)

// regressionSource is a fakeSource that counts broker-time regressions.
type regressionSource struct {
	fakeSource
	n map[int]int64
}

func (r regressionSource) BrokerTimeRegressions() map[int]int64 { return r.n }

// TestBrokerTimeRegressionsMetric: the broker-time regressions the stage
// counts per input partition are exported as a counter per partition.
func TestBrokerTimeRegressionsMetric(t *testing.T) {
	src := func() Source { return regressionSource{fakeSource{&pipeline.Stats{}}, map[int]int64{0: 2, 3: 1}} }
	want := `
# HELP dpstage_source_broker_time_regressions_total Times a broker-set record time (LogAppendTime) was earlier than the one before it, per input partition (a leader change to a broker whose clock is behind, a clock stepped back); one larger than window.clock_skew_margin is also logged.
# TYPE dpstage_source_broker_time_regressions_total counter
dpstage_source_broker_time_regressions_total{partition="0"} 2
dpstage_source_broker_time_regressions_total{partition="3"} 1
`
	if err := testutil.CollectAndCompare(newStageCollector(src, false), strings.NewReader(want), MetricBrokerTimeRegressions); err != nil {
		t.Error(err)
	}
}
