package pipeline

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dpstage/stage/ledger/kafkalog"
)

// TestRunResult: Run returns nil (the process exits 0) only for a
// requested stop. A failure whose chain holds context.Canceled — a fenced
// releaser's error wrapped around a cancelled call — is still a failure
// (issue 22: such a zombie exited 0, defeating restart-on-failure).
func TestRunResult(t *testing.T) {
	fenced := fmt.Errorf("pipeline: release up to window x failed: %w", errors.Join(kafkalog.ErrFenced, context.Canceled))
	plain := errors.New("pipeline: read ledger: broken")
	body := errors.New("pipeline: admin client: no brokers")
	for _, tc := range []struct {
		name        string
		body, cause error
		want        error // nil: exit 0
	}{
		{"still running (no cancel)", nil, nil, nil},
		{"requested stop", nil, context.Canceled, nil},
		{"requested stop with a cause", nil, fmt.Errorf("signal: %w", context.Canceled), nil},
		{"failure", nil, &fatalError{plain}, plain},
		{"failure wrapping context.Canceled", nil, &fatalError{fenced}, fenced},
		{"bare context.Canceled as a failure", nil, &fatalError{context.Canceled}, context.Canceled},
		{"failure wrapping DeadlineExceeded", nil, &fatalError{fmt.Errorf("x: %w", context.DeadlineExceeded)}, context.DeadlineExceeded},
		{"body error after a stop", body, context.Canceled, body},
		{"body error and a failure", body, &fatalError{plain}, body},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runResult(tc.body, tc.cause)
			if (got == nil) != (tc.want == nil) || (got != nil && !errors.Is(got, tc.want)) {
				t.Fatalf("runResult(%v, %v) = %v, want %v", tc.body, tc.cause, got, tc.want)
			}
		})
	}
}
