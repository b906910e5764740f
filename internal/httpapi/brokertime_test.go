package httpapi

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dpstage/stage/pipeline"
)

// regressionSource is a fakeSource that counts broker-time regressions
// (n; beyond: those past the clock-skew margin) on the assigned partitions
// lag.
type regressionSource struct {
	fakeSource
	n, beyond, lag map[int]int64
}

func (r regressionSource) BrokerTimeRegressions() map[int]int64             { return r.n }
func (r regressionSource) BrokerTimeRegressionsBeyondMargin() map[int]int64 { return r.beyond }
func (r regressionSource) Lag() map[int]int64                               { return r.lag }

// TestBrokerTimeRegressionsMetric: the broker-time regressions the stage
// counts per input partition, and those past the clock-skew margin, are
// exported as a counter per partition, at 0 for every assigned partition
// without one (so that an alert's increase() exists before the first).
func TestBrokerTimeRegressionsMetric(t *testing.T) {
	src := func() Source {
		return regressionSource{fakeSource{&pipeline.Stats{}}, map[int]int64{0: 2, 3: 1}, map[int]int64{0: 1}, map[int]int64{0: 5, 1: 0}}
	}
	want := `
# HELP dpstage_source_broker_time_regressions_total Times a broker-set record time (LogAppendTime) was earlier than the one before it, per input partition (a leader change to a broker whose clock is behind, a clock stepped back); one larger than window.clock_skew_margin is also logged.
# TYPE dpstage_source_broker_time_regressions_total counter
dpstage_source_broker_time_regressions_total{partition="0"} 2
dpstage_source_broker_time_regressions_total{partition="1"} 0
dpstage_source_broker_time_regressions_total{partition="3"} 1
# HELP dpstage_source_broker_time_regressions_beyond_margin_total Broker-time regressions (see dpstage_source_broker_time_regressions_total) that went back more than window.clock_skew_margin below the largest broker time read, per input partition: records behind them may have been dropped as late (each also logged; check NTP on the brokers, or raise the margin).
# TYPE dpstage_source_broker_time_regressions_beyond_margin_total counter
dpstage_source_broker_time_regressions_beyond_margin_total{partition="0"} 1
dpstage_source_broker_time_regressions_beyond_margin_total{partition="1"} 0
`
	if err := testutil.CollectAndCompare(newStageCollector(src, false), strings.NewReader(want), MetricBrokerTimeRegressions, MetricBrokerTimeRegressionsBeyond); err != nil {
		t.Error(err)
	}
}
