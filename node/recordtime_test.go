package node

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dpstage/stage/config"
)

// TestNoteBrokerTime (issue 21, item 4): every broker time earlier than
// the one before it on its partition is counted for that partition; one
// more than the clock-skew margin below the largest time read is also
// logged.
func TestNoteBrokerTime(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	cfg := &config.Config{}
	cfg.Window.ClockSkewMargin = config.Duration(time.Second)
	s := &Node{Cfg: cfg, Log: zap.New(core)}
	var c0, c1 BrokerClock
	for _, step := range []struct {
		p  int
		c  *BrokerClock
		ms int64
	}{
		{0, &c0, 10_000}, {0, &c0, 10_000}, {0, &c0, 12_000},
		{0, &c0, 11_500}, // back 500 ms: counted, within the margin
		{0, &c0, 11_800}, // forward, still below the largest: not a new regression
		{1, &c1, 50_000},
		{0, &c0, 10_900}, // back 1.1 s from the largest: counted and logged
		{1, &c1, 51_000},
	} {
		s.NoteBrokerTime(step.p, step.c, step.ms)
	}
	if got := s.BrokerTimeRegressions(); len(got) != 1 || got[0] != 2 {
		t.Errorf("regressions = %v, want map[0:2]", got)
	}
	if got := s.BrokerTimeRegressionsBeyondMargin(); len(got) != 1 || got[0] != 1 {
		t.Errorf("regressions beyond the margin = %v, want map[0:1]", got)
	}
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d warnings, want 1 (the regression past the margin)", n)
	}
	if f := logs.All()[0].ContextMap(); f["partition"] != int64(0) || f["back"] != 1100*time.Millisecond {
		t.Errorf("warning fields %v", f)
	}
}
