package httpapi

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dpstage/stage/ledger"
)

// Store keeps the most recent output messages of the stage in memory: a
// bounded series per Kafka message key (histogram/group for a release,
// histogram for a status message), newest window first. It holds the exact
// bytes published to the output topic and nothing else, so whatever the API
// serves from it is already public. Safe for concurrent use.
type Store struct {
	perSeries int

	mu sync.Mutex // guards series, capped, held and version
	// series maps a message key to its messages, sorted by window start,
	// newest first, at most perSeries long.
	series map[string][]stored
	// capped bounds the release messages kept of a histogram whose groups
	// are selected (limitReleases): its keys are open-ended, so perSeries
	// alone would not bound the store. held counts them.
	capped, held map[string]int
	// version counts changes; it is the ETag of /api/releases.
	version uint64
}

// stored is one published message and the fields the store sorts and
// filters by (all of them in the message itself).
type stored struct {
	raw         json.RawMessage
	releaseID   string
	histogram   string
	group       string // "" for a status message
	release     bool   // a release (it has a group), not a status message
	windowStart time.Time
}

// header is the part of a release or status message the store reads.
type header struct {
	ReleaseID   string  `json:"release_id"`
	Histogram   string  `json:"histogram"`
	Group       *string `json:"group"`
	WindowStart string  `json:"window_start"`
}

// NewStore returns a store keeping perSeries messages per key.
func NewStore(perSeries int) *Store {
	if perSeries < 1 {
		perSeries = 1
	}
	return &Store{perSeries: perSeries, series: make(map[string][]stored), capped: map[string]int{}, held: map[string]int{}}
}

// limitReleases bounds the release messages kept of histogram, over all
// its groups, to n (at least perSeries): a histogram that selects its
// groups (group_by without groups) has a series per group ever selected,
// which nothing else bounds. Past n the oldest window's releases go first
// (within a window, the last group in byte order): the store keeps whole
// recent windows. Which releases are kept depends on the released
// messages only (public).
func (s *Store) limitReleases(histogram string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capped[histogram] = max(n, s.perSeries)
}

// Observe records the messages of a published unit (Options.OnRelease of the
// stage). A message republished after a restart replaces its copy.
func (s *Store) Observe(u *ledger.Unit) {
	for _, m := range u.Messages {
		s.Add(m.Value)
	}
}

// Add records one output message (its exact JSON). Messages that are not a
// release or status message are ignored.
func (s *Store) Add(value []byte) {
	var h header
	if err := json.Unmarshal(value, &h); err != nil || h.Histogram == "" || h.ReleaseID == "" {
		return
	}
	ws, err := time.Parse(time.RFC3339Nano, h.WindowStart)
	if err != nil {
		return
	}
	e := stored{raw: slices.Clone(value), releaseID: h.ReleaseID, histogram: h.Histogram, windowStart: ws}
	key := h.Histogram
	if h.Group != nil {
		e.group, e.release = *h.Group, true
		key += "/" + e.group
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.series[key]
	before := len(list)
	if i := slices.IndexFunc(list, func(o stored) bool { return o.releaseID == e.releaseID }); i >= 0 {
		list[i] = e
	} else {
		i := slices.IndexFunc(list, func(o stored) bool { return o.windowStart.Before(e.windowStart) })
		if i < 0 {
			i = len(list)
		}
		list = slices.Insert(list, i, e)
		if len(list) > s.perSeries {
			list = list[:s.perSeries]
		}
	}
	s.series[key] = list
	if n, ok := s.capped[e.histogram]; ok && e.release {
		s.held[e.histogram] += len(list) - before
		for s.held[e.histogram] > n {
			s.evictOldest(e.histogram)
		}
	}
	s.version++
}

// evictOldest drops the oldest release of histogram: the earliest window,
// and in it the group last in byte order. s.mu is held.
func (s *Store) evictOldest(histogram string) {
	var key string
	var old stored
	for k, list := range s.series {
		if len(list) == 0 {
			continue
		}
		last := list[len(list)-1]
		if last.histogram != histogram || !last.release {
			continue // another histogram's, or a status series
		}
		if key == "" || last.windowStart.Before(old.windowStart) || last.windowStart.Equal(old.windowStart) && last.group > old.group {
			key, old = k, last
		}
	}
	if key == "" {
		s.held[histogram] = 0
		return
	}
	if list := s.series[key][:len(s.series[key])-1]; len(list) > 0 {
		s.series[key] = list
	} else {
		delete(s.series, key)
	}
	s.held[histogram]--
}

// Query returns up to limit messages, newest window first (ties by
// histogram, then group, alphabetically), of histogram (all when "") and
// group (all when ""). A status message concerns every group of its
// histogram and matches any group. It also returns the store's version.
func (s *Store) Query(histogram, group string, limit int) ([]json.RawMessage, uint64) {
	s.mu.Lock()
	var all []stored
	for _, list := range s.series {
		for _, e := range list {
			if histogram != "" && e.histogram != histogram {
				continue
			}
			if group != "" && e.group != "" && e.group != group {
				continue
			}
			all = append(all, e)
		}
	}
	v := s.version
	s.mu.Unlock()
	slices.SortFunc(all, func(a, b stored) int {
		if c := b.windowStart.Compare(a.windowStart); c != 0 {
			return c
		}
		if c := strings.Compare(a.histogram, b.histogram); c != 0 {
			return c
		}
		return strings.Compare(a.group, b.group)
	})
	if len(all) > limit {
		all = all[:limit]
	}
	out := make([]json.RawMessage, len(all))
	for i, e := range all {
		out[i] = e.raw
	}
	return out, v
}

// Statuses returns up to limit status messages of histogram (not its
// releases), newest window first.
func (s *Store) Statuses(histogram string, limit int) []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []json.RawMessage
	for _, e := range s.series[histogram] {
		if len(out) == limit {
			break
		}
		if e.histogram == histogram && !e.release {
			out = append(out, e.raw)
		}
	}
	return out
}

// Version counts the changes so far.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}
