// Package retry is the stage's one back-off helper: exponential, capped,
// optionally jittered waits that end early when their context does. Every
// retry loop of the stage (joining the consumer group, the continuity check,
// publishing, failed fetches, waiting for the ledger's lock) and of the
// generator paces itself with it.
//
// Invariant: a wait never exceeds Max (Initial when Max is below it), and
// Sleep returns as soon as its context ends.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields the waits of one retry loop: Initial, then doubled after
// every wait up to Max. With Jitter each wait is drawn uniformly from
// [d/2, d] of the current step d (so that many clients retrying together
// spread out). The zero value waits nothing; a Backoff is used by one
// goroutine.
type Backoff struct {
	Initial, Max time.Duration
	Jitter       bool

	step time.Duration // the current step; 0 before the first wait
}

// Next returns the next wait and advances the step.
func (b *Backoff) Next() time.Duration {
	if b.step == 0 {
		b.step = b.Initial
	}
	d := b.step
	if b.Jitter {
		d = d/2 + rand.N(d/2+1)
	}
	if b.step *= 2; b.step > b.Max {
		b.step = max(b.Max, b.Initial)
	}
	return d
}

// Reset makes the next wait Initial again.
func (b *Backoff) Reset() { b.step = 0 }

// Sleep waits d or until ctx ends, whichever comes first; it returns
// ctx.Err() when ctx ended, nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Wait is Sleep(ctx, b.Next()).
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }
