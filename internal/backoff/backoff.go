// Package backoff spaces the retries of relock's loops: a pause that doubles from a floor
// to a ceiling, each one drawn with jitter, so that callers that failed together (every
// waiter, release and subscription of a Redis that went away for a moment) do not come
// back together, in lockstep, each time.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter returns a duration drawn uniformly from [d/2, d] ("equal jitter": a pause is never
// shorter than half its step, and callers that drew the same step spread over the other
// half). A d under 2 ns is returned as it is.
func Jitter(d time.Duration) time.Duration {
	if d < 2 {
		return d
	}
	return d/2 + rand.N(d-d/2+1)
}

// Exp is an exponential backoff: Next's pauses are drawn (Jitter) from a step that starts
// at the floor and doubles after each pause up to the ceiling. The zero Exp pauses 0; make
// one with New. Not safe for concurrent use: each loop keeps its own.
type Exp struct {
	floor, ceil, step time.Duration
}

// New returns an Exp whose step starts at floor and doubles up to ceil (floor when ceil
// is below it).
func New(floor, ceil time.Duration) Exp {
	return Exp{floor: floor, ceil: max(floor, ceil), step: floor}
}

// Next returns the next pause, drawn from [step/2, step], and doubles the step up to the
// ceiling.
func (b *Exp) Next() time.Duration {
	d := Jitter(b.step)
	b.step = min(2*b.step, b.ceil)
	return d
}

// Reset starts the steps again from the floor (the failure is over).
func (b *Exp) Reset() { b.step = b.floor }
