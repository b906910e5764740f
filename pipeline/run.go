package pipeline

import (
	"context"
	"errors"

	"github.com/dpstage/stage/distributed"
	"github.com/dpstage/stage/single"
	"go.uber.org/zap"
)

// ErrRunTwice: Run was called on a Stage that has run already.
var ErrRunTwice = errors.New("pipeline: a Stage runs once (build another with New)")

// Run consumes until ctx is cancelled (soft stop): it then stops reading,
// finishes the release in flight (bounded by DrainTimeout), commits what is
// released, leaves the group(s) and returns nil. A failure of any role
// (node.Node.Fail) ends the run with that error.
//
// A Stage is single-use: Run closes its output writers and the ledger when
// it returns, and a second call returns ErrRunTwice at once.
func (s *Stage) Run(parent context.Context) (runErr error) {
	if s.ran.Swap(true) {
		return ErrRunTwice
	}
	n := s.n
	// Fail ends the run with an error; a cancelled parent is a soft stop
	// and returns nil.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	n.SetFail(func(err error) {
		if err == nil {
			err = errors.New("pipeline: stopped by a failure that gave no error")
		}
		n.Log.Error("stopping the stage", zap.Error(err))
		cancel(&fatalError{err})
	})
	defer func() { runErr = runResult(runErr, context.Cause(ctx)) }()
	defer n.Sink.Close()
	if n.DLQ != nil {
		defer n.DLQ.Close()
	}
	// The brokers, the input topic and its record times, before anything
	// is read (both modes; node/inputcheck.go).
	if err := n.CheckInput(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if n.Cfg.Kafka.Distributed.Enabled {
		return distributed.Run(ctx, n)
	}
	return single.Run(ctx, n)
}

// fatalError is the cancel cause Run's fail function sets: it tells a failure from a
// requested stop whatever the failure's chain holds (a fenced releaser's
// error may wrap context.Canceled).
type fatalError struct{ err error }

func (f *fatalError) Error() string { return f.err.Error() }

func (f *fatalError) Unwrap() error { return f.err }

// runResult is what Run returns, given what its body returned and the
// cause of its context's cancellation (nil if not cancelled): only a
// requested stop — the parent cancelled before any failure — returns nil,
// so the process exits 0 only then. The cause is the first cancellation's,
// so a failure after the stop (a drain cut short) does not turn the stop
// into an error, and a stop after a failure does not hide it. A failure is
// recognised by its fatalError wrapper, never by what its chain contains.
func runResult(body, cause error) error {
	if body != nil {
		return body
	}
	if f, ok := cause.(*fatalError); ok {
		return f.err
	}
	return nil
}
