package kafkatxn

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestNewerOwner: the coordinator states a broker's timeout abort leaves
// (CompleteAbort or Empty at the once-bumped epoch, or the epoch
// unchanged) are not a newer owner; another producer id, a twice-bumped
// epoch, and a transaction at the bumped epoch are.
func TestNewerOwner(t *testing.T) {
	const id, epoch = 7, 3
	cases := []struct {
		name string
		dt   kadm.DescribedTransaction
		want bool
	}{
		{"timeout abort", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch + 1, State: "CompleteAbort"}, false},
		{"timeout abort in progress", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch + 1, State: "PrepareAbort"}, false},
		{"unchanged", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch, State: "Ongoing"}, false},
		// Ambiguous (NewerOwner's doc): read as the timeout's abort.
		{"timeout abort (kfake) or a new owner whose InitProducerID found no transaction", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch + 1, State: "Empty"}, false},
		{"new owner's transaction", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch + 1, State: "Ongoing"}, true},
		{"new owner committed", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch + 1, State: "CompleteCommit"}, true},
		{"epoch bumped twice", kadm.DescribedTransaction{ProducerID: id, ProducerEpoch: epoch + 2, State: "CompleteAbort"}, true},
		{"another producer id", kadm.DescribedTransaction{ProducerID: id + 1, ProducerEpoch: 0, State: "Empty"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := NewerOwner(id, epoch, c.dt); got != c.want {
				t.Fatalf("NewerOwner = %v, want %v", got, c.want)
			}
		})
	}
}
