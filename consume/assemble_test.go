package consume_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/consume"
)

func TestAggregateSpec(t *testing.T) {
	cfg := &config.Config{
		Window: config.Window{Size: config.Duration(time.Minute)},
		Histograms: []config.Histogram{
			{Name: "pages", Field: "page", Bins: []string{"a", "b"}, GroupBy: "country", Groups: []string{"US", "DE"}},
			{Name: "devices", Field: "device", Bins: []string{"m", "d"}},
		},
		Contribution: config.Contribution{MaxEventsPerUser: 2, MaxGroupsPerUser: 1, MaxTrackedUsers: 10},
	}
	s := consume.AggregateSpec(cfg)
	if s.WindowSize != time.Minute || s.MaxEventsPerUser != 2 || s.MaxGroupsPerUser != 1 || s.MaxTrackedUsers != 10 {
		t.Fatalf("spec %+v", s)
	}
	if got := fmt.Sprint(s.Histograms); got != "[{pages [a b] [US DE] false} {devices [m d] [*] false}]" {
		t.Fatalf("histograms %s", got)
	}
	if _, err := aggregate.New(s); err != nil {
		t.Fatal(err)
	}
}

func TestAverageHists(t *testing.T) {
	cfg := &config.Config{Histograms: []config.Histogram{
		{Name: "pages", Bins: []string{"a", "b"}},
		{Name: "interests", Kind: config.KindAverage, Bins: []string{"x", "y", "z"}, Average: config.Average{Users: 7}},
	}}
	if got := fmt.Sprint(consume.AverageHists(cfg)); got != "[{1 interests 3 7}]" {
		t.Fatalf("average hists %s", got)
	}
}
