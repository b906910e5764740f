package pipeline

import (
	"context"
	"errors"
)

// runReleaser is the releaser role (dist.go). Placeholder until the
// releaser lands: the distributed mode is not usable yet.
func (s *Stage) runReleaser(ctx context.Context) error {
	return errors.New("pipeline: distributed releaser not built yet")
}

// ensureInternalTopics creates the internal topics (placeholder).
func (s *Stage) ensureInternalTopics(ctx context.Context) error { return nil }
