package consume

import (
	"slices"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/config"
)

// The one place where a loaded config becomes the parameters of the steps
// below pipeline (aggregate takes no config: its specs are built here).

// AggregateSpec builds the aggregator's Spec of a loaded (defaulted and
// validated) config: every histogram in config order, so that a
// histogram's index in the Spec is its config index.
func AggregateSpec(cfg *config.Config) aggregate.Spec {
	s := aggregate.Spec{
		MaxEventsPerUser: cfg.Contribution.MaxEventsPerUser,
		MaxGroupsPerUser: cfg.Contribution.MaxGroupsPerUser,
		MaxTrackedUsers:  cfg.Contribution.MaxTrackedUsers,
		WindowSize:       cfg.Window.Size.D(),
	}
	for _, h := range cfg.Histograms {
		s.Histograms = append(s.Histograms, aggregate.HistSpec{Name: h.Name, Bins: slices.Clone(h.Bins), Groups: h.GroupNames(), Selects: h.Selects()})
	}
	return s
}

// AverageHists returns the average histograms of a loaded config, in config
// order, each with its config index.
func AverageHists(cfg *config.Config) []aggregate.AverageHist {
	var out []aggregate.AverageHist
	for i, h := range cfg.Histograms {
		if h.IsAverage() {
			out = append(out, aggregate.AverageHist{Index: i, Name: h.Name, Bins: len(h.Bins), Users: h.Average.Users})
		}
	}
	return out
}
