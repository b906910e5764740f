package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/internal/generator"
)

// TestDemoRunsHaveTheirOwnUsers: two runs of the quickstart's generator
// (as `stage run` and `stage generate` make it) share no user id. Before,
// both numbered their users u0, u1, … from their own start, so a second
// run the same day found its users already through the window bound's
// max_windows_per_user windows in the ledger and lost most events
// (bound_windows).
func TestDemoRunsHaveTheirOwnUsers(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../examples/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := func() map[string]bool {
		g, err := newGenerator(cfg, generator.Config{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for i := int64(0); i < 5000; i++ {
			m[g.Event(i).UserID] = true
		}
		return m
	}
	first, second := ids(), ids()
	common := 0
	for id := range second {
		if first[id] {
			common++
		}
	}
	if common > 0 {
		t.Errorf("%d of %d user ids of the second run were the first run's", common, len(second))
	}
	for id := range first {
		if !strings.HasPrefix(id, "r") || !strings.Contains(id, "-u") {
			t.Errorf("user id %q has no run prefix", id)
		}
		break
	}
}
