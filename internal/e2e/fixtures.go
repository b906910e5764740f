package e2e

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// Fixtures the end-to-end tests of several packages share.

// Interests are the bins of AverageHist.
var Interests = []string{"news", "sport", "music"}

// AverageHist is a histogram of kind average (users: 50, k: 10⁶, η:
// 0.001) over Interests, for Harness.ConfigExtra.
const AverageHist = `  - name: interests
    kind: average
    field: interests
    bins: [news, sport, music]
    average:
      users: 50
      k: 1000000
      eta: 0.001`

// VectorEvent is an event of user at with the average histogram's field
// interests set to vec.
func VectorEvent(user string, at time.Time, vec any) kafka.Message {
	b, _ := json.Marshal(map[string]any{"ts": at.UnixMilli(), "user_id": user, "interests": vec})
	return kafka.Message{Key: []byte(user), Value: b}
}

// AdmittedEvents keeps, per user and budget period, the events of the k
// earliest windows in which the user has an event: the definition of
// contribution.max_windows_per_user, worked out from the event set alone.
func AdmittedEvents(evs []Event, size, period time.Duration, k int) []Event {
	type up struct {
		user string
		p    time.Time
	}
	windows := map[up][]time.Time{}
	for _, e := range evs {
		key := up{e.User, e.At.Truncate(period)}
		if w := e.At.Truncate(size); !slices.ContainsFunc(windows[key], w.Equal) {
			windows[key] = append(windows[key], w)
		}
	}
	var out []Event
	for _, e := range evs {
		ws := windows[up{e.User, e.At.Truncate(period)}]
		slices.SortFunc(ws, func(a, b time.Time) int { return a.Compare(b) })
		if i := slices.IndexFunc(ws, e.At.Truncate(size).Equal); i < k {
			out = append(out, e)
		}
	}
	return out
}
