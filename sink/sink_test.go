package sink

import (
	"context"
	"errors"
	"testing"

	"github.com/segmentio/kafka-go"
)

// TestPermanentPublishErrors: what the sink gives up on at once (and the
// stage then stops, loudly) versus what it retries.
func TestPermanentPublishErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{kafka.MessageTooLargeError{}, true},
		{kafka.TopicAuthorizationFailed, true},
		{kafka.InvalidTopic, true},
		{kafka.WriteErrors{nil, kafka.MessageSizeTooLarge}, true},
		{kafka.NotEnoughReplicas, false},
		{kafka.LeaderNotAvailable, false},
		{kafka.WriteErrors{kafka.NotLeaderForPartition, nil}, false},
		{errors.New("dial tcp 127.0.0.1:9: connection refused"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := Permanent(c.err); got != c.want {
			t.Errorf("Permanent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
