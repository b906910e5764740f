package aggregate

// Counts returns a copy of closed_u per user of period (the users with at
// least one admitted window): what a checkpoint of the state holds
// (partial.Snapshot), and what Restore takes back.
func (a *Admissions) Counts(period int64) map[uint64]uint16 {
	out := map[uint64]uint16{}
	for i := range a.shards {
		s := &a.shards[i]
		s.mu.Lock()
		for u, n := range s.periods[period] {
			if n > 0 {
				out[u] = n
			}
		}
		s.mu.Unlock()
	}
	return out
}
