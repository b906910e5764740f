package generator

import (
	"fmt"
	"slices"
	"time"
)

// WindowCounts are the true, unbounded counts of one tumbling event-time
// window of the stream.
type WindowCounts struct {
	Start, End time.Time
	// Events in the window.
	Events int
	// Pages: page -> events.
	Pages map[string]int
	// Countries: country -> events.
	Countries map[string]int
	// PageByCountry: country -> page -> events.
	PageByCountry map[string]map[string]int
	// Users: user -> events in the window.
	Users map[string]int
	// UsersByCountry: country -> distinct users with events in the window.
	UsersByCountry map[string]int
}

// Truth recomputes the counts of events 0..n-1 per tumbling window of the
// given size, windows aligned to the Unix epoch (a window is
// [k·size, (k+1)·size) in Unix time), sorted by start. Windows without events
// are left out. With contribution bounding, recompute from Events instead:
// one user's events reach the stage in stream order.
func (g *Generator) Truth(n int64, window time.Duration) ([]WindowCounts, error) {
	if window < time.Millisecond || window%time.Millisecond != 0 {
		return nil, fmt.Errorf("generator: window %v must be a positive whole number of milliseconds", window)
	}
	byStart := map[int64]*WindowCounts{}
	for e := range g.Events(0, n) {
		ms := e.Time.UnixMilli()
		wms := window.Milliseconds()
		k := ms / wms
		if ms < 0 && ms%wms != 0 {
			k--
		}
		w := byStart[k]
		if w == nil {
			start := time.UnixMilli(k * wms).UTC()
			w = &WindowCounts{
				Start: start, End: start.Add(window),
				Pages: map[string]int{}, Countries: map[string]int{},
				PageByCountry: map[string]map[string]int{}, Users: map[string]int{},
				UsersByCountry: map[string]int{},
			}
			byStart[k] = w
		}
		w.Events++
		w.Pages[e.Page]++
		w.Countries[e.Country]++
		if w.PageByCountry[e.Country] == nil {
			w.PageByCountry[e.Country] = map[string]int{}
		}
		w.PageByCountry[e.Country][e.Page]++
		if w.Users[e.UserID] == 0 {
			w.UsersByCountry[e.Country]++
		}
		w.Users[e.UserID]++
	}
	keys := make([]int64, 0, len(byStart))
	for k := range byStart {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]WindowCounts, len(keys))
	for i, k := range keys {
		out[i] = *byStart[k]
	}
	return out, nil
}
