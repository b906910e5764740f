package distributed

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dpstage/stage/partial"
)

// TestDistReleaserReadsJSONPartials (issue 28 item 4): during a rolling
// upgrade, partials an older replica wrote in JSON and partials a newer
// one wrote in Arrow merge into exact windows.
func TestDistReleaserReadsJSONPartials(t *testing.T) {
	e := newDistEnv(t, 2)
	r := e.start(t)
	tr := truth{}
	for w := range 2 {
		for p := range e.n {
			c := countsFor(w, p)
			tr.add(w, c)
			pt := e.partialOf(w, p, c)
			val := pt.Encode()
			if p == 0 {
				val = pt.EncodeJSON() // the older replica
			}
			e.produceRaw(t, &kgo.Record{Key: pt.Key(), Value: val})
		}
	}
	out := e.readOut(t, 2*unitsPerWindow, 30*time.Second, time.Second)
	for k, rl := range checkOnce(t, out, 2) {
		checkExact(t, rl, tr[k])
	}
	if n := r.s.Stats.Partials[partial.Added].Load(); n != 4 {
		t.Errorf("%d partials added, want 4", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(fmt.Errorf("releaser: %w", err))
	}
}

// TestDistReleaserRefusesOtherPeriodPartials (issue 28 item 4): a partial
// of this config but another privacy.budget.period — a bounder that
// resumed a progress record of an older version, which carries no period,
// after a period change — is foreign (its fingerprint covers the period):
// not merged, its window released without that partition, and the
// coverage says so. A partial stamped with the previous version's
// fingerprint (no period) of the same config is merged.
func TestDistReleaserRefusesOtherPeriodPartials(t *testing.T) {
	e := newDistEnv(t, 2)
	r := e.start(t)
	other := *e.cfg
	other.Privacy.Budget.Period *= 2
	tr := truth{}
	p0 := e.partialOf(0, 0, countsFor(0, 0))
	p0.Config = e.cfg.PreviousCountingFingerprint()
	tr.add(0, countsFor(0, 0))
	p1 := e.partialOf(0, 1, cells{0: {0: {50, 50, 50, 50, 50}}})
	p1.Config = other.CountingFingerprint()
	e.write(t, "test-bound/0", true, p0)
	e.write(t, "test-bound/1", true, p1)
	out := e.readOut(t, unitsPerWindow, 30*time.Second, time.Second)
	for k, rl := range checkOnce(t, out, 1) {
		checkExact(t, rl, tr[k])
		if c := rl.Coverage; c == nil || c.Included != 1 || c.Partitions != 2 {
			t.Errorf("%s coverage %+v, want 1 of 2 partitions included", k, c)
		}
	}
	if n := r.s.Stats.Partials[partial.Foreign].Load(); n != 1 {
		t.Errorf("%d partials foreign, want 1", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
