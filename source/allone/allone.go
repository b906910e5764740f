// Package allone is a kafka-go GroupBalancer for hot standby: one member of
// the consumer group gets every partition, the others get none and wait.
// When the active member leaves (or its session expires) the next rebalance
// hands everything to a standby, which resumes from the committed offsets.
//
// The active member is the oldest: each member advertises, in its JoinGroup
// user data, its start time (Balancer.Started; by default the start of its
// process). A restarted process is young again. A member joining later does
// not take the partitions away from the incumbent, so adding a standby never
// moves work. Ties (and members whose user data cannot be read, e.g. another
// client) are broken by member ID, which is stable for one group generation.
// The times come from each member's own clock: with members on different
// hosts, skew larger than the gap between their start times can make the
// younger one active, which is harmless (still exactly one owner).
package allone

import (
	"cmp"
	"encoding/binary"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
)

// ProtocolName is the name advertised to the group coordinator. Every member
// of a group must offer it.
const ProtocolName = "all-to-one"

// Balancer assigns all partitions of each topic to the oldest member that
// subscribes to the topic. The zero value is ready to use: the member counts
// as started when its process started, which is right for one member per
// process. Several members in one process (tests) need distinct start times:
// use New for each.
type Balancer struct {
	// Started is when this member started. Zero: when this process started.
	Started time.Time
}

// processStart stands in for a zero Balancer.Started.
var processStart = time.Now()

var (
	_ kafka.GroupBalancer = Balancer{}
	_ kafka.GroupBalancer = (*Balancer)(nil)
)

// New returns a Balancer whose member counts as started now.
func New() Balancer { return Balancer{Started: time.Now()} }

// NewAt returns a Balancer whose member counts as started at t.
func NewAt(t time.Time) Balancer { return Balancer{Started: t} }

// ProtocolName implements kafka.GroupBalancer.
func (Balancer) ProtocolName() string { return ProtocolName }

// UserData implements kafka.GroupBalancer: the member's start time, 8 bytes
// big-endian Unix nanoseconds.
func (b Balancer) UserData() ([]byte, error) {
	t := b.Started
	if t.IsZero() {
		t = processStart
	}
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())), nil
}

// AssignGroups implements kafka.GroupBalancer. Every member appears in the
// result (with no partitions if it is a standby).
func (Balancer) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := make(kafka.GroupMemberAssignments, len(members))
	for _, m := range members {
		out[m.ID] = map[string][]int{}
	}
	byTopic := map[string][]int{}
	for _, p := range partitions {
		byTopic[p.Topic] = append(byTopic[p.Topic], p.ID)
	}
	ordered := slices.Clone(members)
	slices.SortStableFunc(ordered, func(a, b kafka.GroupMember) int {
		return cmp.Or(cmp.Compare(startedOf(a), startedOf(b)), cmp.Compare(a.ID, b.ID))
	})
	for topic, ids := range byTopic {
		for _, m := range ordered {
			if slices.Contains(m.Topics, topic) {
				slices.Sort(ids)
				out[m.ID][topic] = ids
				break
			}
		}
	}
	return out
}

// startedOf reads a member's start time; members without a readable one sort
// last.
func startedOf(m kafka.GroupMember) int64 {
	if len(m.UserData) != 8 {
		return 1<<63 - 1
	}
	return int64(binary.BigEndian.Uint64(m.UserData))
}
