package aggregate

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestReviewKeyedOneShardIDReuse (review of issue 30): every user in one
// shard, so that the users share one key dictionary — ids handed out in
// arrival order, freed when the last holder lets go (a displaced group, an
// evicted user under a small max_tracked_users) and reused by other keys —
// and many keys per user, so that the group bound displaces often. The
// keys, users and counts must be the definition's (a function of each
// user's own events: rule 7), whatever the arrival order.
func TestReviewKeyedOneShardIDReuse(t *testing.T) {
	r := rand.New(rand.NewPCG(300, 301))
	keys := []string{"", "a", "b", "c", "d", "e", "f", "g", "home", "checkout", "Ü", "zz"}
	for it := range 800 {
		s := keyedSpec(1+r.IntN(3), 1+r.IntN(4), r.IntN(6))
		nUsers := 2 + r.IntN(10)
		users := make([]uint64, nUsers)
		for i := range users {
			users[i] = (r.Uint64() &^ (numShards - 1)) | 5 // shard 5
		}
		evs := make([]kev, 20+r.IntN(100))
		for i := range evs {
			evs[i] = kev{user: users[r.IntN(nUsers)], t: int64(r.IntN(6)), bin: int32(r.IntN(3)), key: keys[r.IntN(len(keys))], device: -1}
		}
		want := fmt.Sprint(keyedReference(s, evs, nil))
		for trial := range 3 {
			r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			a := mustNew(t, s)
			feedKeyed(a, evs, 1+r.IntN(3), r)
			wc, err := a.Close(0)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprint(keyedOf(t, wc))
			wc.Release()
			if got != want {
				t.Fatalf("instance %d trial %d (m=%d G=%d cap=%d, %d users): keys %s, definition %s", it, trial, s.MaxEventsPerUser, s.MaxGroupsPerUser, s.MaxTrackedUsers, nUsers, got, want)
			}
		}
	}
}
