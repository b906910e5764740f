package distributed

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/dpstage/stage/release"
)

// firstOffset is the input offset a fresh input partition p (no progress
// record) starts reading at, for first, the start of the first window it
// counts: countFrom, the start of the longest histogram window open at its
// first base window (an hour or day view counts that window whole), not the
// first base window itself. With window.watermark arrival it skips the
// records too old to count (node.Node.FirstOffset, which the
// single-process mode uses too when it follows the distributed mode).
func (s *stage) firstOffset(ctx context.Context, cl *kgo.Client, topic string, p int, first int64) (int64, error) {
	o, start, err := s.FirstOffset(ctx, cl, topic, p, first)
	if err != nil {
		return 0, err
	}
	if o > start {
		s.Stats.FirstStartSkipped.Add(o - start)
		s.Log.Info("bounder: a fresh input partition starts at its first window's records: the older ones could not count (late)",
			zap.Int("partition", p), zap.Int64("earliest_offset", start), zap.Int64("offset", o),
			zap.String("first_window", release.RFC3339(first)), zap.String("from_record_time", release.RFC3339(first-s.MaxFutureMs)))
	}
	return o, nil
}
