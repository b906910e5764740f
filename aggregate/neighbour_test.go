package aggregate_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/decode"
	"github.com/dpstage/stage/plan"
)

// nUser is one user of a neighbour test: a hash and its events in the
// window (time, and per histogram a bin and a group).
type nUser struct {
	hash uint64
	evs  []nEvent
}

type nEvent struct {
	t      int64
	bins   []int32
	groups []int32
}

var nSpec = []aggregate.HistSpec{
	{Name: "a", Bins: []string{"0", "1", "2"}, Groups: []string{"x", "y", "z"}},
	{Name: "b", Bins: []string{"0", "1"}, Groups: []string{"*"}},
}

func randUser(r *rand.Rand) nUser {
	u := nUser{hash: r.Uint64() | 1}
	for range 1 + r.IntN(6) {
		e := nEvent{t: int64(r.IntN(3))}
		for _, hs := range nSpec {
			e.bins = append(e.bins, int32(r.IntN(len(hs.Bins))))
			e.groups = append(e.groups, int32(r.IntN(len(hs.Groups))))
		}
		u.evs = append(u.evs, e)
	}
	return u
}

// windowVectors counts users (events in a random order) and returns each
// histogram's count vector, all groups concatenated.
func windowVectors(t *testing.T, s aggregate.Spec, users []nUser, r *rand.Rand) [][]float64 {
	t.Helper()
	a, err := aggregate.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*decode.Event
	for _, u := range users {
		for _, e := range u.evs {
			evs = append(evs, &decode.Event{User: u.hash, TimeMs: e.t, Bins: e.bins, Groups: e.groups})
		}
	}
	r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	for _, ev := range evs {
		a.Add(0, ev)
	}
	wc, err := a.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Release()
	out := make([][]float64, len(nSpec))
	for h, hs := range nSpec {
		for g := range hs.Groups {
			out[h] = append(out[h], wc.Counts(h, g, nil)...)
		}
	}
	return out
}

// TestNeighbourSensitivity: for random small windows and every neighbour —
// one user added, one removed, one replaced by another user, one user's
// events replaced — each histogram's concatenated count vector changes by at
// most the sensitivities plan.DeriveSensitivity charges for the relation
// (ℓ1, ℓ2², ℓ∞), with and without the tracked-user cap. Add and remove are
// checked against add_remove, all four against replace.
func TestNeighbourSensitivity(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	worst := map[string][3]float64{}
	for it := range 400 {
		s := aggregate.Spec{
			Histograms:       nSpec,
			MaxEventsPerUser: 1 + r.IntN(3),
			MaxGroupsPerUser: 1 + r.IntN(3),
			MaxTrackedUsers:  r.IntN(5),
			WindowSize:       time.Minute,
		}
		users := make([]nUser, r.IntN(9))
		for i := range users {
			users[i] = randUser(r)
		}
		base := windowVectors(t, s, users, r)
		type neighbour struct {
			kind  string
			users []nUser
		}
		var ns []neighbour
		for range 4 {
			ns = append(ns, neighbour{"add", append(append([]nUser{}, users...), randUser(r))})
		}
		for i := range users {
			rm := append(append([]nUser{}, users[:i]...), users[i+1:]...)
			ns = append(ns, neighbour{"remove", rm})
			other := append(append([]nUser{}, rm...), randUser(r))
			ns = append(ns, neighbour{"replace user", other})
			same := randUser(r)
			same.hash = users[i].hash
			ns = append(ns, neighbour{"replace data", append(append([]nUser{}, rm...), same)})
		}
		for _, n := range ns {
			got := windowVectors(t, s, n.users, r)
			relations := []string{"replace"}
			if n.kind == "add" || n.kind == "remove" {
				relations = append(relations, "add_remove")
			}
			for _, rel := range relations {
				sens, err := plan.DeriveSensitivity(rel, s.MaxEventsPerUser, s.MaxTrackedUsers > 0)
				if err != nil {
					t.Fatal(err)
				}
				for h := range base {
					var l1, l2, linf float64
					for i := range base[h] {
						d := math.Abs(got[h][i] - base[h][i])
						l1 += d
						l2 += d * d
						linf = max(linf, d)
					}
					if l1 > sens.L1 || l2 > sens.L2Sq || linf > sens.LInf {
						t.Fatalf("instance %d, %s (%s, m=%d G=%d K=%d), histogram %d: change ℓ1 %v ℓ2² %v ℓ∞ %v exceeds %+v\nbase %v\nneighbour %v",
							it, n.kind, rel, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, h, l1, l2, linf, sens, base[h], got[h])
					}
					k := n.kind + "/" + rel
					if s.MaxTrackedUsers > 0 {
						k += "/capped"
					}
					w := worst[k]
					worst[k] = [3]float64{max(w[0], l1/sens.L1), max(w[1], l2/sens.L2Sq), max(w[2], linf/sens.LInf)}
				}
			}
		}
	}
	// The bounds are attained (not vacuous): the largest change seen, as a
	// fraction of each bound.
	for k, w := range worst {
		t.Logf("%-28s max ℓ1 %.2f  ℓ2² %.2f  ℓ∞ %.2f of the bound", k, w[0], w[1], w[2])
	}
	if w := worst["add/add_remove/capped"]; w[0] <= 0.5 {
		t.Errorf("no displacement seen under add_remove with a cap (ℓ1 at most %.2f of 2m)", w[0])
	}
}
