package partial

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Snapshot is one part of a checkpoint of the cross-window bound's state
// of one input partition (contribution.max_windows_per_user): closed_u per
// user of one budget period (aggregate.Admissions), after every window of
// the period before Next. It lives in the progress topic, partition p,
// under [SnapshotKey] (one key per part, so each checkpoint replaces the
// previous one's parts in a compacted topic), written in the transaction
// of the window before Next together with the Progress that points at it
// (Progress.Snap) and tombstones of every Admitted record it folds in.
//
// A bounder taking p over reads the progress partition from Progress.Snap
// on, not from its start: the Admitted records before the checkpoint are
// folded into it (package partial/kafkapartial, Restore). The restored
// closed_u of a user is its count in the checkpoint plus its Admitted
// records of the period after it.
//
// Size: a user takes 8 bytes (its keyed hash) and a uvarint count (1 byte
// for counts up to 127), base64 in the JSON value: 12 bytes for K < 128,
// at most 14.7. A part holds at most [MaxSnapshotPartUsers] users, so its
// record stays under 512 KiB (Kafka's default limit is 1 MB): 10⁴ users
// per partition and period make one part of about 120 kB, 10⁵ four parts
// (1.2 MB in all), 10⁶ 31 parts (12 MB).
type Snapshot struct {
	V int `json:"v"`
	// Period is the budget period (its start, Unix ms) the counts are of.
	Period int64 `json:"period"`
	// Next is the first window not folded in: the Next of the Progress
	// written with the checkpoint. It names the checkpoint: every part of
	// one has the same Next.
	Next int64 `json:"next"`
	// Part is this part's index, Parts the checkpoint's number of parts
	// (≥ 1), Users the checkpoint's number of users over every part.
	Part  int `json:"part"`
	Parts int `json:"parts"`
	Users int `json:"users"`
	// Data is, per user in increasing hash order, the 8-byte big-endian
	// user hash (aggregate.UserKey of the partition's key) and closed_u
	// as a uvarint (≥ 1).
	Data []byte `json:"data"`
}

// MaxSnapshotPartUsers is the most users in one Snapshot part: at most
// 11 bytes each (K ≤ 65535), 360,448 bytes, 480,600 in base64, under 512
// KiB with the JSON around them.
const MaxSnapshotPartUsers = 32768

// SnapshotKey is the progress topic key of part i of a partition's
// checkpoint: "snap/<i>". No other key of the progress topic starts with
// "snap/".
func SnapshotKey(part int) []byte { return []byte("snap/" + strconv.Itoa(part)) }

// IsSnapshotKey reports whether a progress topic key is a Snapshot part's.
func IsSnapshotKey(key []byte) bool { return strings.HasPrefix(string(key), "snap/") }

// SplitSnapshot encodes counts (closed_u per user hash of period, every
// count ≥ 1) as the parts of a checkpoint named next. Users with a zero
// count are left out. It always returns at least one part (an empty
// checkpoint is one part without users).
func SplitSnapshot(period, next int64, counts map[uint64]uint16) []*Snapshot {
	users := make([]uint64, 0, len(counts))
	for u, n := range counts {
		if n > 0 {
			users = append(users, u)
		}
	}
	slices.Sort(users)
	parts := max(1, (len(users)+MaxSnapshotPartUsers-1)/MaxSnapshotPartUsers)
	out := make([]*Snapshot, parts)
	for i := range out {
		chunk := users[min(i*MaxSnapshotPartUsers, len(users)):min((i+1)*MaxSnapshotPartUsers, len(users))]
		data := make([]byte, 0, len(chunk)*9)
		for _, u := range chunk {
			data = binary.BigEndian.AppendUint64(data, u)
			data = binary.AppendUvarint(data, uint64(counts[u]))
		}
		out[i] = &Snapshot{Period: period, Next: next, Part: i, Parts: parts, Users: len(users), Data: data}
	}
	return out
}

// Encode returns the record value.
func (s *Snapshot) Encode() []byte {
	q := *s
	q.V = Version
	b, _ := json.Marshal(&q)
	return b
}

// Each calls fn for every (user, count) of the part, in its order.
func (s *Snapshot) Each(fn func(user uint64, n uint16)) error {
	b := s.Data
	for len(b) > 0 {
		if len(b) < 9 {
			return fmt.Errorf("%w: snapshot part %d: truncated user", ErrFormat, s.Part)
		}
		u := binary.BigEndian.Uint64(b)
		n, k := binary.Uvarint(b[8:])
		if k <= 0 || n == 0 || n > 1<<16-1 {
			return fmt.Errorf("%w: snapshot part %d: bad count", ErrFormat, s.Part)
		}
		fn(u, uint16(n))
		b = b[8+k:]
	}
	return nil
}

// DecodeSnapshot decodes a Snapshot part's record value and checks it.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrFormat, err)
	}
	if s.V != Version || s.Parts < 1 || s.Part < 0 || s.Part >= s.Parts || s.Users < 0 || s.Period > s.Next {
		return nil, fmt.Errorf("%w: snapshot part %d of %d (version %d, period %d, next %d)", ErrFormat, s.Part, s.Parts, s.V, s.Period, s.Next)
	}
	if err := s.Each(func(uint64, uint16) {}); err != nil {
		return nil, err
	}
	return &s, nil
}
