// Package releasetest builds the release step for tests of several
// packages: a Releaser over a bolt ledger in the test's state directory,
// drawing from a seeded source (tests only: ground rule 5).
package releasetest

import (
	"testing"

	"github.com/dpstage/stage/config"
	"github.com/dpstage/stage/ledger"
	"github.com/dpstage/stage/mechanism"
	"github.com/dpstage/stage/plan"
	"github.com/dpstage/stage/release"
)

// Config parses a YAML config with no environment, failing the test on
// an error.
func Config(t testing.TB, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// Releaser is the Releaser of cfg's plan over led (nil: the bolt ledger at
// cfg.State.Dir, opened here and closed at the test's end), its budget
// book restored from led, drawing from the seeded source of seed. It
// returns the Releaser, the plan and the ledger.
func Releaser(t testing.TB, cfg *config.Config, led ledger.Store, seed [32]byte) (*release.Releaser, *plan.Plan, ledger.Store) {
	t.Helper()
	p, err := plan.DerivePlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if led == nil {
		l, err := ledger.Open(cfg.State.Dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		led = l
	}
	book, err := release.NewBook(p, led)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := release.New(release.Options{Config: cfg, Plan: p, Ledger: led, Book: book, Rand: mechanism.NewSeededRand(seed)})
	if err != nil {
		t.Fatal(err)
	}
	return rel, p, led
}
