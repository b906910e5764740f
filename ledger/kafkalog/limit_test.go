package kafkalog

import (
	"testing"

	"github.com/dpstage/stage/ledger"
)

// TestLimitOnlyLowered: a period's recorded budget (PeriodLimit) is set by
// its first released unit and lowered by any later unit recorded under a
// lower one — a budget_exhausted unit too (a cut that stopped every later
// release) — and never raised within the period, in the bbolt ledger and
// the Kafka log alike, also after a reopen (issue #21, item 2: a budget
// raised back after a cut takes effect from the next period only). A
// period whose units were all budget_exhausted records no budget.
func TestLimitOnlyLowered(t *testing.T) {
	c := newCluster(t)
	bb, err := ledger.Open(t.TempDir())
	must(t, err)
	defer bb.Close()
	kl := openLog(t, c)
	defer func() { must(t, kl.Close()) }()
	steps := []struct {
		name  string
		units []*ledger.Unit
		want  float64 // PeriodLimit(0).Epsilon; 0: none recorded
	}{
		{"exhausted first", []*ledger.Unit{withLimit(exhausted("a", 0), 0.2)}, 0},
		{"released", []*ledger.Unit{withLimit(released("a", minute, 0.1, "x"), 1)}, 1},
		{"cut, exhausted", []*ledger.Unit{withLimit(exhausted("a", 2*minute), 0.5)}, 0.5},
		{"reopen", nil, 0.5},
		{"raised back", []*ledger.Unit{withLimit(released("a", 3*minute, 0.1, "y"), 1)}, 0.5},
		{"cut further, released", []*ledger.Unit{withLimit(released("a", 4*minute, 0.1, "z"), 0.4)}, 0.4},
	}
	for _, s := range steps {
		ctx := ctxT(t)
		if s.units == nil {
			must(t, kl.Close())
			kl = openLog(t, c)
		} else {
			must(t, bb.RecordWindow(s.units, ledger.Curve{}))
			must(t, kl.RecordWindowAdmitted(ctx, s.units, ledger.Curve{}, nil))
		}
		for name, r := range map[string]reader{"bolt": bb, "kafka": kl} {
			lim, ok, err := r.PeriodLimit(0)
			must(t, err)
			if ok != (s.want > 0) || lim.Epsilon != s.want {
				t.Errorf("%s: %s limit %v %+v, want ε %v", s.name, name, ok, lim, s.want)
			}
		}
	}
}
