package aggregate_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dpstage/stage/aggregate"
	"github.com/dpstage/stage/plan"
)

// partitionedVectors is windowVectors of the distributed mode: users are
// spread over n input partitions by their hash (a function of the user
// alone, as the producers' key partitioner is), each partition bounded by
// an aggregator of its own (its own tracked-user cap), and the partitions'
// vectors summed, as the releaser merges the partials.
func partitionedVectors(t *testing.T, s aggregate.Spec, users []nUser, n int, r *rand.Rand) [][]float64 {
	t.Helper()
	parts := make([][]nUser, n)
	for _, u := range users {
		p := int((u.hash >> 33) % uint64(n))
		parts[p] = append(parts[p], u)
	}
	var sum [][]float64
	for _, us := range parts {
		v := windowVectors(t, s, us, r)
		if sum == nil {
			sum = v
			continue
		}
		for h := range v {
			for i := range v[h] {
				sum[h][i] += v[h][i]
			}
		}
	}
	return sum
}

// TestNeighbourSensitivityPartitionedCap: the distributed mode's
// tracked-user cap holds per input partition (plan/distcap.go). On random
// windows over 2–3 partitions and every neighbour (a user added, removed,
// replaced by another user — possibly of another partition — or its
// events replaced), the summed count vectors change by at most the
// sensitivities plan.DeriveSensitivity gives with the events the plan
// charges: m under add_remove, 2m under replace with a cap. And the
// doubling is needed: some replacement moves a vector by more than the
// single-process replace bound (two users out and two in).
func TestNeighbourSensitivityPartitionedCap(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	beyondSingle := 0.0
	for it := range 400 {
		s := aggregate.Spec{
			Histograms:       nSpec,
			MaxEventsPerUser: 1 + r.IntN(3),
			MaxGroupsPerUser: 1 + r.IntN(3),
			MaxTrackedUsers:  1 + r.IntN(3),
			WindowSize:       time.Minute,
		}
		n := 2 + r.IntN(2)
		users := make([]nUser, r.IntN(12))
		for i := range users {
			users[i] = randUser(r)
		}
		base := partitionedVectors(t, s, users, n, r)
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
			for range 3 {
				ns = append(ns, neighbour{"replace user", append(append([]nUser{}, rm...), randUser(r))})
			}
			same := randUser(r)
			same.hash = users[i].hash
			ns = append(ns, neighbour{"replace data", append(append([]nUser{}, rm...), same)})
		}
		for _, nb := range ns {
			got := partitionedVectors(t, s, nb.users, n, r)
			relations := []string{"replace"}
			if nb.kind == "add" || nb.kind == "remove" {
				relations = append(relations, "add_remove")
			}
			for _, rel := range relations {
				m := s.MaxEventsPerUser
				if rel == "replace" {
					m *= 2 // plan/distcap.go
				}
				sens, err := plan.DeriveSensitivity(rel, m, true)
				if err != nil {
					t.Fatal(err)
				}
				single, _ := plan.DeriveSensitivity(rel, s.MaxEventsPerUser, true)
				for h := range base {
					var l1, l2, linf float64
					for i := range base[h] {
						d := math.Abs(got[h][i] - base[h][i])
						l1 += d
						l2 += d * d
						linf = max(linf, d)
					}
					if l1 > sens.L1 || l2 > sens.L2Sq || linf > sens.LInf {
						t.Fatalf("instance %d, %s (%s, m=%d G=%d K=%d, %d partitions), histogram %d: change ℓ1 %v ℓ2² %v ℓ∞ %v exceeds %+v\nbase %v\nneighbour %v",
							it, nb.kind, rel, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, n, h, l1, l2, linf, sens, base[h], got[h])
					}
					if rel == "replace" {
						beyondSingle = max(beyondSingle, l1/single.L1, l2/single.L2Sq, linf/single.LInf)
					}
				}
			}
		}
	}
	t.Logf("largest replace change: %.2f of the single-process replace bound", beyondSingle)
	if beyondSingle <= 1 {
		t.Errorf("no replacement beyond the single-process bound (%.2f of it): the doubled charge would not be shown necessary", beyondSingle)
	}
}
