package pipeline_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/e2e"
	"github.com/dpstage/stage/pipeline"
)

// TestNeighbourWeakenedMidPeriodIsRefused: a budget period whose first
// charges were calibrated under neighbour replace is not charged under
// add_remove after a restart (each unit would be charged about half of
// what it costs under replace, the period's guarantee): the stage stops
// with ErrConfigChanged, saying when the change can take effect. The
// stricter change (add_remove → replace) is allowed. Found by the review of
// issue #13; the stage used to run on and charge the add_remove curves.
func TestNeighbourWeakenedMidPeriodIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after string
		refused       bool
	}{
		{"replace to add_remove", config.NeighbourReplace, config.NeighbourAddRemove, true},
		{"add_remove to replace", config.NeighbourAddRemove, config.NeighbourReplace, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := e2e.New(t)
			mk := func(n string) *config.Config {
				cfg := h.Config("gaussian", 1e7) // period 1h
				cfg.Privacy.Neighbour = n
				return cfg
			}
			h.ProduceEvents(e2e.Stream(2, 20))
			h.Produce(e2e.Flush(e2e.Base.Add(2*time.Minute + time.Second)))
			run := h.Start(mk(tc.before))
			h.ReadOutput(2*(len(e2e.Groups)+1), 60*time.Second, 0)
			run.Stop(t)

			run = h.Start(mk(tc.after))
			if !tc.refused {
				h.Produce(e2e.Flush(e2e.Base.Add(3*time.Minute + time.Second)))
				h.ReadOutput(3*(len(e2e.Groups)+1), 60*time.Second, 0)
				return // Stop at cleanup fails the test if Run returned an error
			}
			select {
			case err := <-run.Done():
				run.Cancel()
				if !errors.Is(err, pipeline.ErrConfigChanged) || !strings.Contains(err.Error(), "keep neighbour: replace until that period ends (2026-01-01T01:00:00Z)") {
					t.Fatalf("run returned %v, want ErrConfigChanged naming the period's end", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the stage runs on with add_remove in a period charged under replace")
			}
		})
	}
}
