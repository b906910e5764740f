package pipeline

import (
	"context"
	"errors"
)

// runBounders is the bounder role (dist.go). Placeholder until the bounder
// lands: the distributed mode is not usable yet.
func (s *Stage) runBounders(ctx context.Context) error {
	return errors.New("pipeline: distributed bounder not built yet")
}
