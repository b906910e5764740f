// Package partial is the wire format of the distributed mode
// (kafka.distributed): what one bounding instance tells the releasing one
// about one source partition, and what it keeps in Kafka to hand a source
// partition to another instance. It holds no Kafka client (the kgo readers
// and writers are in package partial/kafkapartial, wired by pipeline).
//
// Four record kinds:
//
//   - [Partial] (partials topic, one partition): the exact bounded counts
//     one input partition contributes to one window, with the partition's
//     marker (Next: the first window it has not emitted; its watermark;
//     the input topic's partition count; its first window and the window
//     it emitted before). Every (window, source partition) from the
//     partition's first window on has exactly one Partial, empty when the
//     partition had no event in the window: a window is complete when
//     every source partition's Partial of it was read (presence, not only
//     Next: see [Merger]), and only then merged and released.
//
//   - [Progress] (progress topic, partition p, key [ProgressKey]): where
//     the bounder of input partition p resumes — the input offset before
//     which every record belongs to an emitted window or was dropped, the
//     next window to emit, and the partition's user-hash key.
//
//   - [Admitted] (progress topic, partition p, key [AdmittedKey]): the
//     users of partition p the cross-window bound admitted to one window.
//
//   - [Snapshot] (progress topic, partition p, keys [SnapshotKey]): a
//     checkpoint of the cross-window bound's admissions of partition p,
//     which the Admitted records before it are folded into.
//
//   - [Idle] (partials topic, key [IdleKey]): with window.watermark: event,
//     that input partition p is idle (read to its end and silent for
//     window.idle_partition_timeout) or active again. While p is idle it
//     does not hold windows back (see [Merger]).
//
// A Partial's value is an Arrow IPC stream (arrow.go gives the schema: a
// header in the schema's metadata, one row per count cell or average
// user, a version to extend it by); older versions wrote JSON, which
// DecodePartial still reads. The other kinds are JSON. DecodePartial also
// refuses values no bounder makes (check.go: negative or fractional
// counts, windows off the grid, average vectors off the simplex), which
// the releaser skips like any malformed record.
//
// A Partial and the Progress and Admitted records of the same window are
// written in one Kafka transaction together, so a reader (read_committed)
// sees all of them or none.
//
// Invariant: a Partial's counts are bounded per user already
// (contribution.*, per window and across windows): users are
// partition-local (the bounder drops events whose user does not hash to
// the partition they came from), so the sum over source partitions of
// their Partials is the single-process stage's bounded count.
//
// # Fencing: each (window, source partition) is emitted at most once
//
// Every record about input partition p (its Partials, Progress and
// Admitted records) is written in a transaction under one transactional id,
// T_p = config.Kafka.BoundTransactionalID(p), a function of p alone — never
// of the instance. The transaction coordinator lets at most one producer
// epoch of T_p write: InitProducerID (kgo's ProducerID) bumps the epoch and
// aborts the open transaction of the previous one, and a produce or commit
// from an older epoch is refused (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED).
// A bounder taking p over (epoch e):
//
//  1. calls InitProducerID: from then on no transaction of an epoch < e can
//     commit, and none of them is open;
//  2. restores p's Progress reading the progress topic's partition p
//     read_committed up to its last stable offset taken after step 1, so
//     it sees every committed transaction of T_p (only T_p writes that
//     partition): the last committed Progress, whose Next is n;
//  3. emits only windows w ≥ n, each in one transaction with the Progress
//     whose Next is w + size, in increasing w.
//
// So the committed transactions of T_p, in commit order, are blocks of one
// epoch each; each block starts at the Next the previous block committed
// last, and within a block the windows increase: no window is emitted by
// two committed transactions. A fenced (older) bounder can commit nothing
// after step 1 of the newer one, and what it had open is aborted — a
// read_committed reader never sees it. (A reader that is not read_committed
// would: kafka-go must never read these topics, see package
// partial/kafkapartial.)
//
// Counts are exact across a takeover: Progress.Offset is the first offset
// of a record that may count in a window ≥ Next (the offset tracker's commit
// point after the emitted windows), so the new owner re-reads every such
// record; records of emitted windows are late for it (its first window is
// Next). With the cross-window bound, the Admitted records restored at step
// 2 are exactly those of the committed windows < Next of the period, so a
// window is admitted as an uninterrupted bounder would have admitted it
// (aggregate.Admissions decides from a user's own earlier windows only).
package partial

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is the wire format's version, carried in every value.
const Version = 1

// ErrFormat: a record of an internal topic could not be decoded. The topic
// was written by something else, or by an incompatible version; the stage
// stops rather than guess.
var ErrFormat = errors.New("partial: malformed record")

// Cell is the count vector of one (histogram, group) of a window.
type Cell struct {
	// H is the histogram's index in the config's histograms list.
	H int `json:"h"`
	// G is the group's index in the histogram's groups (0 without group_by).
	G int `json:"g"`
	// Counts has one bounded count per bin.
	Counts []float64 `json:"counts"`
}

// Partial is one source partition's contribution to one window.
type Partial struct {
	V int `json:"v"`
	// WindowStart (Unix ms) and WindowMs (window.size) name the window.
	WindowStart int64 `json:"window_start"`
	WindowMs    int64 `json:"window_ms"`
	// Partition is the source (input) partition; Partitions the input
	// topic's partition count the bounder checked users against.
	Partition  int `json:"partition"`
	Partitions int `json:"partitions"`
	// Next is the start of the first window of this partition not yet
	// emitted: WindowStart + WindowMs.
	Next int64 `json:"next"`
	// Watermark is the partition's watermark (Unix ms) when the window was
	// closed; informational.
	Watermark int64 `json:"watermark"`
	// Config is the bounder's config.Config.CountingFingerprint: the
	// releaser merges only partials made under its own counting config.
	Config string `json:"config"`
	// First is the partition's first window (Progress.First: where its
	// bounder started counting it, recorded before anything was counted);
	// Prev the window the partition emitted before this one, nil when this
	// is its first window. With them the releaser tells a partition that
	// started after a window (its events of that window were never
	// counted) from one whose Partial of the window is missing (lost on
	// the partials topic), after a restart too (see Merger, "Gaps").
	// Both are absent from the Partials of older bounders (First 0, Prev
	// nil): such a Partial is taken as the next one of its partition's
	// sequence, which is what an older bounder always emitted, except at a
	// partition's first start.
	First int64  `json:"first,omitempty"`
	Prev  *int64 `json:"prev,omitempty"`
	// Counts lists the (histogram, group) cells with a non-zero count
	// (nil in a Partial DecodeForMerge read from the Arrow encoding: Cells
	// returns its cells).
	Counts []Cell `json:"counts,omitempty"`
	// Averages lists, per average histogram whose window ends with this
	// one, the partition's kept users (averages.go). Absent from the
	// Partials of older bounders (which had no average histograms).
	Averages []AverageCell `json:"averages,omitempty"`
	// Dropped lists, per histogram with any, the contributions of the
	// window the cross-window bound (contribution.max_windows_per_user)
	// dropped on this partition, on arrival and at the close: what the
	// releaser needs for the window's drop share (aggregate.BlindWatch),
	// which goes to the operator only, never into a release. Internal to
	// the stage like Counts. Absent without the bound, and from the
	// Partials of older bounders (the share then counts their
	// partitions' drops as 0).
	Dropped []DropCell `json:"dropped,omitempty"`
	// Keyed lists, per selecting histogram (group_by without groups) whose
	// window ends with this one, the group keys the partition tracked
	// with their distinct users and counts (keyed.go). Only the Arrow
	// encoding carries them; absent from the Partials of older bounders.
	Keyed []KeyedCell `json:"-"`
	// Part and Parts: the Partial is written as Parts records, this one
	// its Part-th (parts.go); 0 and 0 (or 1) for a Partial of one record,
	// as every older bounder wrote.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
	// cols holds the count cells instead of Counts in a Partial
	// DecodeForMerge read from the Arrow encoding (cells.go).
	cols *countColumns
}

// DropCell is one histogram's contributions dropped by the cross-window
// bound in a Partial's window.
type DropCell struct {
	// H is the histogram's index in the config's histograms list.
	H int   `json:"h"`
	N int64 `json:"n"`
}

// Total is the sum of the Partial's counts (bounded contributions), its
// keyed cells' included.
func (p *Partial) Total() float64 {
	var n float64
	cs := p.cells()
	for i := range cs.len() {
		_, _, counts := cs.at(i)
		for _, v := range counts {
			n += v
		}
	}
	for j := range p.Keyed {
		for _, v := range p.Keyed[j].counts {
			n += v
		}
	}
	return n
}

// Key is the partials topic record key: "w/<window start>/p/<partition>".
func (p *Partial) Key() []byte {
	return []byte("w/" + strconv.FormatInt(p.WindowStart, 10) + "/p/" + strconv.Itoa(p.Partition) + partSuffix(p.Part, p.Parts))
}

// DecodePartial decodes a partials topic record value — the Arrow
// encoding (arrow.go), or the JSON one of older versions (a value that
// starts with '{') — and checks it.
func DecodePartial(b []byte) (*Partial, error) { return decodePartial(b, false) }

// decodePartial is DecodePartial; with columns, an Arrow-encoded
// Partial's count cells stay in the record's columns (DecodeForMerge).
func decodePartial(b []byte, columns bool) (*Partial, error) {
	var p Partial
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, Refuse(ReasonDecode, "partial: %v", err)
		}
	} else if err := decodeArrow(b, &p, columns); err != nil {
		return nil, err
	}
	switch {
	case p.V != Version:
		return nil, Refuse(ReasonDecode, "partial version %d, this stage reads %d", p.V, Version)
	case p.WindowMs <= 0, p.Partition < 0, p.Partitions <= p.Partition, p.Next != p.WindowStart+p.WindowMs:
		return nil, Refuse(ReasonDecode, "partial of window %d (%d ms) partition %d of %d, next %d", p.WindowStart, p.WindowMs, p.Partition, p.Partitions, p.Next)
	case p.Prev != nil && *p.Prev >= p.WindowStart, p.First != 0 && p.First > p.WindowStart:
		return nil, Refuse(ReasonDecode, "partial of window %d partition %d: previous window %s, first window %d", p.WindowStart, p.Partition, fmtPrev(p.Prev), p.First)
	}
	if err := checkValues(&p); err != nil {
		return nil, err
	}
	if err := checkParts(&p); err != nil {
		return nil, err
	}
	if err := checkKeyed(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

func fmtPrev(p *int64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatInt(*p, 10)
}

// Idle says whether one input partition holds windows back, under
// window.watermark: event (the single-process stage's idle partitions,
// window.Watermarks, carried across instances as Flink carries idleness
// per channel). Its bounder writes one when the partition turns idle (read
// to its end, no fetch failing, silent for window.idle_partition_timeout),
// again every half idle timeout while it stays idle (the releaser counts
// one for an idle timeout: Merger.SetIdleClock), one with Idle false when
// it is active again, and one at every start of its worker. Under window.watermark: arrival no Idle is written: a
// partition read to its end advances with the wall clock and emits empty
// Partials.
type Idle struct {
	V int `json:"v"`
	// Partition is the source (input) partition; Partitions the input
	// topic's partition count its bounder checked users against.
	Partition  int `json:"partition"`
	Partitions int `json:"partitions"`
	// WindowMs is window.size.
	WindowMs int64 `json:"window_ms"`
	// Next is the start of the first window of the partition not yet
	// emitted.
	Next int64 `json:"next"`
	// Idle: the partition is idle (true) or active again (false).
	Idle bool `json:"idle"`
	// Config is the bounder's config.Config.CountingFingerprint
	// (informational: idleness is honoured whatever the config, as a
	// foreign Partial's Next is).
	Config string `json:"config"`
}

// IdleKey is the partials topic key of partition p's Idle records:
// "idle/p/<partition>". No Partial key starts with "idle/".
func IdleKey(p int) []byte { return []byte("idle/p/" + strconv.Itoa(p)) }

// IsIdleKey reports whether a partials topic key is an Idle record's.
func IsIdleKey(key []byte) bool { return strings.HasPrefix(string(key), "idle/") }

// Encode returns the record value.
func (d *Idle) Encode() []byte {
	q := *d
	q.V = Version
	b, _ := json.Marshal(&q)
	return b
}

// DecodeIdle decodes an Idle record value and checks it.
func DecodeIdle(b []byte) (*Idle, error) {
	var d Idle
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: idle: %v", ErrFormat, err)
	}
	if d.V != Version || d.WindowMs <= 0 || d.Partition < 0 || d.Partitions <= d.Partition || d.Next%d.WindowMs != 0 {
		return nil, fmt.Errorf("%w: idle of partition %d of %d (version %d, next %d, %d ms windows)", ErrFormat, d.Partition, d.Partitions, d.V, d.Next, d.WindowMs)
	}
	return &d, nil
}

// ProgressKey is the progress topic key of a partition's Progress.
const ProgressKey = "progress"

// Progress is where the bounder of one input partition resumes.
type Progress struct {
	V         int `json:"v"`
	Partition int `json:"partition"`
	// Partitions is the input topic's partition count it checked users
	// against.
	Partitions int `json:"partitions"`
	// WindowMs is the window.size it counted under: a bounder of another
	// size refuses to resume the partition (0 in the Progress of older
	// bounders: unknown).
	WindowMs int64 `json:"window_ms,omitempty"`
	// PeriodMs is the privacy.budget.period it counted under: the
	// cross-window bound's admissions are kept per period start, so a
	// bounder of another period would find none and admit every user
	// again; it refuses to resume the partition (0 in the Progress of
	// older bounders: unknown).
	PeriodMs int64 `json:"period_ms,omitempty"`
	// Offset is the input offset to read from: every record before it
	// belongs to an emitted window or was dropped.
	Offset int64 `json:"offset"`
	// Next is the start of the first window not yet emitted.
	Next int64 `json:"next"`
	// First is the partition's first window: Next of its first Progress
	// (Writer.Start), kept in every later one and carried by its Partials
	// (Partial.First). 0 in the Progress of older bounders: unknown.
	First int64 `json:"first,omitempty"`
	// UserKey is the partition's 16-byte user-hash key (SipHash-2-4),
	// made at the partition's first start; the Admitted records are keyed
	// by it.
	UserKey []byte `json:"user_key"`
	// Snap is the offset, in this progress partition, of the first part
	// of the partition's latest checkpoint of the cross-window bound
	// ([Snapshot]); nil when there is none (older bounders too): a
	// takeover then reads the partition from its start.
	Snap *int64 `json:"snap,omitempty"`
}

// Encode returns the record value.
func (p *Progress) Encode() []byte {
	q := *p
	q.V = Version
	b, _ := json.Marshal(&q)
	return b
}

// DecodeProgress decodes a Progress record value and checks it.
func DecodeProgress(b []byte) (*Progress, error) {
	var p Progress
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%w: progress: %v", ErrFormat, err)
	}
	if p.V != Version || p.Partition < 0 || p.Offset < 0 || len(p.UserKey) != 16 {
		return nil, fmt.Errorf("%w: progress of partition %d (version %d, offset %d, %d-byte key)", ErrFormat, p.Partition, p.V, p.Offset, len(p.UserKey))
	}
	return &p, nil
}

// MaxAdmittedChunk is the most users in one Admitted record (400 KB of
// JSON numbers at most, under Kafka's default 1 MB record limit).
const MaxAdmittedChunk = 20000

// Admitted lists users of one partition admitted to one window by the
// cross-window bound (contribution.max_windows_per_user), as keyed user
// hashes (aggregate.UserKey of the partition's key).
type Admitted struct {
	V      int   `json:"v"`
	Period int64 `json:"period"`
	Window int64 `json:"window"`
	Chunk  int   `json:"chunk"`
	// View is, for the histograms with their own, longer window
	// (histograms[].window), that window's length in ms: the users admitted
	// to the window of that size starting at Window (one admission state per
	// window size); 0 for the base window's state.
	View  int64    `json:"view,omitempty"`
	Users []uint64 `json:"users"`
}

// Key is a's progress topic key: AdmittedKey, with "/v<view ms>" appended
// for a view's admissions (the "adm/" prefix and the period stay where
// ParseAdmittedKey reads them, so a period's records of every view are
// tombstoned alike).
func (a *Admitted) Key() []byte {
	k := AdmittedKey(a.Period, a.Window, a.Chunk)
	if a.View > 0 {
		k = fmt.Appendf(k, "/v%d", a.View)
	}
	return k
}

// AdmittedKey is the progress topic key of one chunk of a window's
// admissions: "adm/<period>/<window>/<chunk>".
func AdmittedKey(period, window int64, chunk int) []byte {
	return []byte(fmt.Sprintf("adm/%d/%d/%d", period, window, chunk))
}

// ParseAdmittedKey returns the period of an admissions key; ok is false for
// any other key.
func ParseAdmittedKey(key []byte) (period int64, ok bool) {
	rest, found := strings.CutPrefix(string(key), "adm/")
	if !found {
		return 0, false
	}
	ps, _, found := strings.Cut(rest, "/")
	if !found {
		return 0, false
	}
	period, err := strconv.ParseInt(ps, 10, 64)
	return period, err == nil
}

// IsViewAdmittedKey reports whether key is a view's admissions key
// (Admitted.Key with Admitted.View > 0).
func IsViewAdmittedKey(key []byte) bool {
	rest, ok := strings.CutPrefix(string(key), "adm/")
	return ok && strings.Count(rest, "/") == 3 && strings.Contains(rest, "/v")
}

// ChunkAdmitted splits one window's admitted users into records of at most
// MaxAdmittedChunk users; none when users is empty.
func ChunkAdmitted(period, window int64, users []uint64) []*Admitted {
	return ChunkViewAdmitted(0, period, window, users)
}

// ChunkViewAdmitted is ChunkAdmitted for the admission state of the
// windows of view ms (Admitted.View; 0: the base window).
func ChunkViewAdmitted(view, period, window int64, users []uint64) []*Admitted {
	var out []*Admitted
	for i := 0; i < len(users); i += MaxAdmittedChunk {
		j := min(i+MaxAdmittedChunk, len(users))
		out = append(out, &Admitted{Period: period, Window: window, Chunk: len(out), View: view, Users: users[i:j]})
	}
	return out
}

// Encode returns the record value.
func (a *Admitted) Encode() []byte {
	q := *a
	q.V = Version
	b, _ := json.Marshal(&q)
	return b
}

// DecodeAdmitted decodes an Admitted record value.
func DecodeAdmitted(b []byte) (*Admitted, error) {
	var a Admitted
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: admissions: %v", ErrFormat, err)
	}
	if a.V != Version {
		return nil, fmt.Errorf("%w: admissions version %d, this stage reads %d", ErrFormat, a.V, Version)
	}
	return &a, nil
}
