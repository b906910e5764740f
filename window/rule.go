package window

import "github.com/dpstage/stage/decode"

// Rule is the counting rule of one stage: which window an event belongs to
// and whether its own times let it count (see the package doc).
type Rule struct {
	// Arrival: window.watermark arrival (the default); else event.
	Arrival bool
	// SizeMs is window.size, LatenessMs the allowed lateness
	// (config.Window.Lateness), MaxFutureMs events.max_future.
	SizeMs, LatenessMs, MaxFutureMs int64
}

// Decide returns the window of an event with event time eventMs whose
// record (arrival) time is recordMs, and why it does not count: ReasonNone
// when its own times let it count (it then counts if its window is still
// open: the caller's check against the first window not yet closed),
// ReasonTimeTooFarAhead or ReasonLate otherwise. futureLimitMs (watermark
// event only) is the wall clock + events.max_future, read by the caller at
// its last publication.
//
// With watermark arrival the decision depends on the event alone: it counts
// iff eventMs ≤ recordMs + max_future and recordMs < end(w) + lateness.
// With watermark event an event counts while its window is open, which the
// largest event times seen decide (the opt-in trust assumption), and
// max_future is measured against the wall clock, never against other
// events.
func (r Rule) Decide(eventMs, recordMs, futureLimitMs int64) (w int64, reason decode.Reason) {
	w = Start(eventMs, r.SizeMs)
	if r.Arrival {
		if eventMs > recordMs+r.MaxFutureMs {
			return w, decode.ReasonTimeTooFarAhead
		}
		if recordMs >= w+r.SizeMs+r.LatenessMs {
			return w, decode.ReasonLate // arrived after its window's cutoff
		}
		return w, decode.ReasonNone
	}
	if eventMs > futureLimitMs {
		return w, decode.ReasonTimeTooFarAhead
	}
	return w, decode.ReasonNone
}
