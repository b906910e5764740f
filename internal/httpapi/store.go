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

	mu sync.Mutex // guards series and version
	// series maps a message key to its messages, sorted by window start,
	// newest first, at most perSeries long.
	series map[string][]stored
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
	return &Store{perSeries: perSeries, series: make(map[string][]stored)}
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
		e.group = *h.Group
		key += "/" + e.group
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.series[key]
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
	s.version++
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

// Version counts the changes so far.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}
