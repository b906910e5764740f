package generator

import (
	"math"
	"testing"
	"time"
)

// TestSteadyPopulation (issue 29 item 4): the returning-users demo's
// generator (30,000 users, 150 events a second, a steady population per
// minute) gives what examples/returning-users.yaml plans for: every
// minute 9,000 distinct users, about 3,000 per country (not Zipf-skewed
// 1,250 / 770 / 390), and over a simulated stretch each user active in a
// minute with probability 0.3. Deterministic (fixed seed); the tolerances
// are wide of the sampling spread (per country-minute the count is
// hypergeometric-like, sd ≈ 40; the activity rate over 60 minutes of
// 30,000 users has sd ≈ 0.0003).
func TestSteadyPopulation(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) // mid-minute: the first block is partial
	g, err := New(Config{Users: 30000, EventsPerSecond: 150, Seed: 7, Start: start, Steady: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		minute  int64
		country string
	}
	perCountry := map[key]int{}
	seen := map[int64]map[string]bool{}
	active := 0
	const minutes = 60
	n := int64(minutes*9000 + 4500)
	for i := int64(0); i < n; i++ {
		e := g.Event(i)
		m := e.Time.Unix() / 60
		if seen[m] == nil {
			seen[m] = map[string]bool{}
		}
		if seen[m][e.UserID] {
			t.Fatalf("minute %d: user %s twice", m, e.UserID)
		}
		seen[m][e.UserID] = true
		perCountry[key{m, e.Country}]++
	}
	first := start.Unix() / 60
	for m := first + 1; m <= first+minutes; m++ {
		// 9,000 events a minute, give or take one: the event-time step is
		// 1/150 s rounded to the nanosecond, and the last block is cut.
		if got := len(seen[m]); got < 8999 || got > 9001 {
			t.Errorf("minute %d: %d distinct users, want 9000", m-first, got)
		}
		for _, c := range Countries {
			if got := perCountry[key{m, c}]; math.Abs(float64(got)-3000) > 300 {
				t.Errorf("minute %d, %s: %d users, want about 3000", m-first, c, got)
			}
		}
		active += len(seen[m])
	}
	if p := float64(active) / (minutes * 30000); math.Abs(p-0.3) > 1e-4 {
		t.Errorf("activity %v per user-minute, want 0.3", p)
	}
	// Each user's active minutes over the hour: mean 18, spread like a
	// binomial (variance 60·0.3·0.7 = 12.6), not Zipf's.
	count := map[string]int{}
	for m := first + 1; m <= first+minutes; m++ {
		for u := range seen[m] {
			count[u]++
		}
	}
	var s, s2 float64
	for _, c := range count {
		s += float64(c)
		s2 += float64(c) * float64(c)
	}
	nu := 30000.0
	mean := s / nu
	if v := s2/nu - mean*mean; math.Abs(mean-18) > 0.02 || v < 9 || v > 16 {
		t.Errorf("active minutes per user: mean %v, variance %v; want 18 and about 12.6", mean, v)
	}
}
