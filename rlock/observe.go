package rlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// observer is a Client's one dispatcher of events: every Observer given with WithObserver
// (and WithLogger), in order. A Client without one has a nil *observer, and every emission
// site checks that pointer before it builds an event or reads the clock: a Client that
// nobody observes pays one nil check per site.
type observer struct {
	hooks []Observer // copies of the Observers given, in order: later edits of the caller's do not count
	// born is the origin of the Client's observation clock (now): a tenure's grant time is
	// kept as a monotonic offset from it, 8 bytes, taken only when an observer is set.
	born time.Time
	// shut: the Client's Close has returned (set just before it does). The hooks that are
	// not a call's own (HoldEnd, RenewalRound, Replay, Subscription, GiveBack) are then
	// dropped: a call under way when Close began may still replay a request or give a
	// grant back on its own goroutine, and Observer's Guarantees allow only its
	// AcquireDone or ReleaseDone after Close (TestCloseHunt_replayHookAfterCloseReturned).
	shut atomic.Bool
	// busy counts those hooks being called (enter, leave): Close, once it set shut, waits
	// for them (settle), so that none is still being called when it returns, however late
	// the caller's goroutine that called it was.
	busy atomic.Int64
}

// enter reports whether a hook that is not a call's own may be called now (the Client's
// Close has not set shut), counting it as being called until leave.
func (o *observer) enter() bool {
	o.busy.Add(1)
	if o.shut.Load() {
		o.busy.Add(-1)
		return false
	}
	return true
}

func (o *observer) leave() { o.busy.Add(-1) }

// settle sets shut and waits, until by at most, for the hooks being called to return: a
// hook that calls Close itself (the first Close) makes it wait until by.
func (o *observer) settle(by time.Time) {
	o.shut.Store(true)
	for o.busy.Load() > 0 && time.Now().Before(by) {
		time.Sleep(time.Millisecond)
	}
}

// newObserver returns the dispatcher of list, or nil when list is empty.
func newObserver(list []*Observer) *observer {
	if len(list) == 0 {
		return nil
	}
	o := &observer{born: time.Now(), hooks: make([]Observer, 0, len(list))}
	for _, x := range list {
		o.hooks = append(o.hooks, *x)
	}
	return o
}

// now is the time on the observation clock (monotonic).
func (o *observer) now() time.Duration { return time.Since(o.born) }

func (o *observer) acquireStart(ctx context.Context, e AcquireStartInfo) context.Context {
	for i := range o.hooks {
		if f := o.hooks[i].AcquireStart; f != nil {
			if c := f(ctx, e); c != nil {
				ctx = c
			}
		}
	}
	return ctx
}

func (o *observer) acquireDone(ctx context.Context, e AcquireDoneInfo) {
	for i := range o.hooks {
		if f := o.hooks[i].AcquireDone; f != nil {
			f(ctx, e)
		}
	}
}

func (o *observer) releaseStart(ctx context.Context, e ReleaseStartInfo) context.Context {
	for i := range o.hooks {
		if f := o.hooks[i].ReleaseStart; f != nil {
			if c := f(ctx, e); c != nil {
				ctx = c
			}
		}
	}
	return ctx
}

func (o *observer) releaseDone(ctx context.Context, e ReleaseDoneInfo) {
	for i := range o.hooks {
		if f := o.hooks[i].ReleaseDone; f != nil {
			f(ctx, e)
		}
	}
}

func (o *observer) holdEnd(e HoldEndInfo) {
	if !o.enter() {
		return
	}
	defer o.leave()
	o.holdEndOfCall(e)
}

// holdEndOfCall is holdEnd told as part of a call's own report, after its AcquireDone,
// even once Close has returned (a RedLock's tenure begun after its observer's Client closed:
// redObs.watchClose).
func (o *observer) holdEndOfCall(e HoldEndInfo) {
	for i := range o.hooks {
		if f := o.hooks[i].HoldEnd; f != nil {
			f(e)
		}
	}
}

func (o *observer) renewalRound(e RenewalRoundInfo) {
	if !o.enter() {
		return
	}
	defer o.leave()
	for i := range o.hooks {
		if f := o.hooks[i].RenewalRound; f != nil {
			f(e)
		}
	}
}

func (o *observer) replay(e ReplayInfo) {
	if !o.enter() {
		return
	}
	defer o.leave()
	for i := range o.hooks {
		if f := o.hooks[i].Replay; f != nil {
			f(e)
		}
	}
}

func (o *observer) subscription(e SubscriptionInfo) {
	if !o.enter() {
		return
	}
	defer o.leave()
	for i := range o.hooks {
		if f := o.hooks[i].Subscription; f != nil {
			f(e)
		}
	}
}

func (o *observer) giveBack(e GiveBackInfo) {
	if !o.enter() {
		return
	}
	defer o.leave()
	for i := range o.hooks {
		if f := o.hooks[i].GiveBack; f != nil {
			f(e)
		}
	}
}

// outcome classifies how an acquisition on ctx ended.
func outcome(ctx context.Context, ok bool, err error) Outcome {
	switch {
	case ok:
		return OutcomeAcquired
	case err == nil:
		return OutcomeBusy
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return OutcomeCanceled
	}
	return OutcomeError
}

// endCause maps a tenure's cause (what Done and HoldContext report) to its EndCause.
func endCause(cause error) EndCause {
	switch {
	case errors.Is(cause, ErrLockLost):
		return EndLost
	case errors.Is(cause, ErrLeaseExpired):
		return EndLeaseExpired
	case errors.Is(cause, ErrClosed):
		return EndClosed
	}
	return EndUnlocked
}

// acqTrace is what an observed acquisition learns on its way, for its AcquireDone. It is
// made only when the Client has an observer.
type acqTrace struct {
	attempts  int
	waited    bool
	handedOff bool
	reentered bool
	token     int64
}

// granted records a grant: fresh starts a tenure with token; otherwise it re-entered one.
func (tr *acqTrace) granted(fresh bool, token int64) {
	if tr != nil {
		tr.reentered, tr.token = !fresh, token
	}
}

// done tells AcquireDone of an acquisition on ctx that started at start (observation
// clock) and whose AcquireStart returned octx; tr is its trace (nil: none).
func (o *observer) done(ctx, octx context.Context, si AcquireStartInfo, start time.Duration, ok bool, err error, tr *acqTrace) {
	e := AcquireDoneInfo{AcquireStartInfo: si, Outcome: outcome(ctx, ok, err), Took: o.now() - start}
	if e.Outcome != OutcomeAcquired && e.Outcome != OutcomeBusy {
		e.Err = err
	}
	if tr != nil {
		e.Attempts, e.Waited = tr.attempts, tr.waited
		if ok { // a grant that came as the call failed is given back: it is not the caller's
			e.HandedOff, e.Reentered, e.Token = tr.handedOff, tr.reentered, tr.token
		}
	}
	o.acquireDone(octx, e)
}

// waitBound is a wait as AcquireStartInfo.Wait reports it: negative for no bound.
func waitBound(wait time.Duration) time.Duration {
	if wait < 0 {
		return -1
	}
	return wait
}

// gaveBack reports a give-back the Client made on its own.
func (c *Client) gaveBack(kind Kind, name, owner string, n int, reason GiveBackReason, err error) {
	if o := c.obs; o != nil {
		o.giveBack(GiveBackInfo{Kind: kind, Name: name, Owner: owner, Holds: n, Reason: reason, Err: err})
	}
}

// replayOp is the Op of a Replay event for the op of a semaphore's or latch's request (as
// its errors name it).
func replayOp(op string) string {
	switch op {
	case "set permits of", "set count of latch":
		return "set"
	case "add permits to":
		return "add"
	case "count down latch":
		return "count_down"
	case "delete latch":
		return "delete"
	}
	return op // acquire, release, drain, delete, extend
}

// replaySite names what a replay is for, for its Replay event.
type replaySite struct {
	kind        Kind
	name, owner string
	op          string // "acquire", "release", ...
}
