package rlock

import (
	"context"
	"errors"
	"time"

	"github.com/relock-go/relock/internal/backoff"
)

// waitSpec says how a blocking acquisition waits between attempts.
type waitSpec struct {
	op, name string // for errors: "lock", the primitive's name
	channel  string // pub/sub channel that announces a chance (unused when spin)
	tag      string // non-empty: also woken by a WakeTag(tag) message (a fair queue's head)
	// queue: a caller that finds waiters of this Client on the channel joins behind them
	// instead of trying first (local FIFO).
	queue bool
	// spin: wait without pub/sub, sleeping with jittered exponential backoff (bounded by
	// the remaining lease the last attempt reported).
	spin bool
	// leave, when set, runs when a wait that made at least one attempt gives up without
	// success (wait bound, ctx, error): it undoes what the attempts registered in Redis
	// (a fair queue's slot, a writer's claim).
	leave func()
	// parker, when set, is a waiter that a release may pass the lock to directly (handoff.go).
	parker parker
	// passOnGrant: a wait that ends with a grant hands a wake-up to the next waiter of this
	// Client on the channel (a fixed lease's grant, with local FIFO): that waiter may have
	// queued behind without an attempt, or have been told an older lease, and would sleep
	// past this lease's end if it ran out (an expiry publishes nothing); woken, it tries,
	// is refused, and learns the new end (TestMutex_queuedJoinerWakesAtExpiry).
	passOnGrant bool
	// waited, when set, is set to true once the call waits: its first attempt was refused
	// (or it queued behind this Client's waiters without one), and it watches for a release
	// (for the observer).
	waited *bool
}

// parker is told around each sleep of a wait: park before it (it returns a channel that
// ends the sleep), unpark after it, before the next attempt; unpark's done reports that the
// wait ends with (ok, err) without an attempt; an err without done is a passing failure (a
// hand-off granted too late for its lease): the wait goes on, and returns it if it ends so.
// claimed reports that unpark awaited the outcome of a release that had claimed the waiter,
// which may have come after the wait bound.
type parker interface {
	park() <-chan struct{}
	unpark() (ok, done, claimed bool, err error)
}

// attemptFunc makes one attempt. It reports success, or else how long the obstacle lasts
// at most (a holder's remaining lease; -1 when unknown), or an error. waiting says that the
// caller already watches the channel: the attempt follows a wait (or a queue of this
// Client's waiters behind which the caller joined), so that others may still be waiting
// when it succeeds.
type attemptFunc func(waiting bool) (ok bool, ttl time.Duration, err error)

func (f attemptFunc) attempt(waiting bool) (bool, time.Duration, error) { return f(waiting) }

// attempter makes the attempts of a wait (see attemptFunc).
type attempter interface {
	attempt(waiting bool) (ok bool, ttl time.Duration, err error)
}

// confirmWait bounds a waiter's first sleep on a channel whose subscription was not
// confirmed when it watched it: the confirmation wakes it (and it attempts then), or, when
// none comes meanwhile, it attempts at this bound. A Subscriber that works confirms within a
// dial and a round trip; one that cannot (its connection hangs, or cannot be made while
// commands are answered) would otherwise leave a release published between the waiter's
// first attempt and its Watch unseen until the holder's lease end.
const confirmWait = time.Second

// Spin backoff bounds (SpinMutex and every spin wait).
const (
	spinMin = 2 * time.Millisecond
	spinMax = 128 * time.Millisecond
)

// waitLoop runs the wait protocol around attempt: try; on failure watch the channel; try
// again unless a release is sure to wake this Client's waiters; sleep until a wake-up, the
// obstacle's end (an expiry publishes nothing), the wait bound or ctx; try again. wait < 0
// waits without bound; wait == 0 makes one attempt. Passing failures (Redis unreachable,
// loading, too few replica acknowledgements) are ridden out with backoff within the wait;
// if the wait ends that way, the last one is returned with ok false.
func (c *Client) waitLoop(ctx context.Context, wait time.Duration, spec waitSpec, att attempter) (ok bool, err error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	if spec.leave != nil && c.leaverBegin() {
		defer c.leaverEnd() // once the leave below is done: Close waits for it
	}
	attempted := false
	defer func() {
		if !ok && attempted && spec.leave != nil {
			spec.leave()
		}
	}()
	sub := c.sub
	pttl := time.Duration(-1) // unknown until an attempt tells
	var passing error         // why the last attempt failed, when it failed for a passing reason
	outage := backoff.New(outageRetry, time.Second)
	// try makes one attempt; done says whether the wait ends with its result.
	try := func(waiting bool) (ok bool, err error, done bool) {
		ok, ttl, err := att.attempt(waiting)
		if err == errWaitOver {
			// Nothing was sent: the bound ran out while the attempt awaited its turn behind
			// another call of the owner's. The wait goes on as after a refusal, and ends at
			// its bound (no leave for it: it registered nothing).
			return false, nil, false
		}
		attempted = true
		switch {
		case err == nil:
			// Redis answered: an earlier passing failure is over.
			passing = nil
			outage.Reset()
		case wait == 0:
		case passing != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
			// The attempt saw ctx's end (it sends nothing then, or left its send to the
			// background): the wait ends as when its sleep sees ctx's end, with the last
			// passing failure joined (before, that one was dropped on this path).
			err = errors.Join(err, passing)
		case errors.Is(err, ErrNoReplicaAck):
			passing, ttl, err = err, ackRetry, nil
		case transient(err), errors.Is(err, errLateGrant):
			// Redis is unreachable or not ready, or answered too slowly for the lease asked
			// for (the grant was given back): a waiter rides it out within its wait, as the
			// holder's renewals do, trying again with backoff, jittered: the waiters that
			// failed together (every waiter of a Redis that went away) come back apart.
			passing, ttl, err = err, outage.Next(), nil
		}
		pttl = ttl
		return ok, err, ok || err != nil
	}
	if spec.spin {
		return c.spinLoop(ctx, deadline, wait, spec, try, &pttl, &passing)
	}
	// A caller that finds waiters of this Client queued joins behind them rather than
	// barging in; a single attempt (wait 0) never queues.
	queued := spec.queue && wait != 0 && sub.Waiting(spec.channel) > 0
	mark := sub.Mark(spec.channel)
	if !queued {
		if ok, err, done := try(false); done || wait == 0 {
			return ok, err
		}
	}
	w, err := sub.WatchTag(spec.channel, spec.tag)
	if err != nil {
		return false, errorf("%s %q: %w", spec.op, spec.name, ErrClosed)
	}
	defer w.Close()
	if spec.waited != nil {
		*spec.waited = true // refused (or queued behind others): the call waits for a release
	}
	// Try (again) now unless a release is sure to wake some waiter of this Client: when the
	// waiters we queued behind are gone, or when a release may have been published between
	// the first attempt and the subscription. A channel not subscribed yet needs no attempt
	// now: Redis's confirmation wakes every waiter registered on it, this one included, and
	// the attempt follows that wake-up (before, one was made here and another at the
	// confirmation: three attempts where two do; RedLock's rounds wait for it too), or, when
	// no confirmation comes within confirmWait (a subscription connection that hangs or
	// cannot be made while commands are answered), the first sleep ends there and the loop
	// attempts anyway: a release published before the subscription would otherwise leave
	// this waiter asleep until the holder's lease end or its bound
	// (TestWait_releaseBeforeWatchOnPendingChannel). Not once
	// the wait bound has run out (the first attempt was answered after it): no attempt
	// begins after the bound, and the loop below ends the wait
	// (TestMutex_TryLock_firstReplyAfterWaitMakesNoOtherAttempt; before, this attempt took
	// the lock 300 ms into a 100 ms wait).
	pending := !queued && !sub.Live(spec.channel) // after WatchTag: its confirmation wakes w
	if ((queued && w.Ahead() == 0) || (!queued && !pending && !w.Live(mark))) && (deadline.IsZero() || time.Until(deadline) > 0) {
		if ok, err, done := try(true); done {
			if ok && spec.passOnGrant {
				w.Pass() // a waiter that joined behind meanwhile learns this grant's end
			}
			return ok, err
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// A wait with a leave ends as soon as Close begins (with ErrClosed, below), not when the
	// subscriber goes: its leave then goes before Close closes a Dial'ed Client's connections
	// (awaitLeavers).
	var closing <-chan struct{}
	if spec.leave != nil {
		closing = c.life.Done()
	}
	for {
		// Sleep until a wake-up, the obstacle's end (expiry publishes nothing), the wait
		// bound or ctx, whichever comes first.
		sleepFor := pttl
		switch {
		case pttl == 0: // under a millisecond left
			sleepFor = time.Millisecond
		case pttl < 0: // no expiry, or not yet asked: a lease is at most this long
			sleepFor = c.opts.watchdogTimeout
		}
		if pending {
			// The first sleep on a channel still to be confirmed: at most confirmWait.
			sleepFor, pending = min(sleepFor, confirmWait), false
		}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				w.Pass()
				return false, passing
			}
			sleepFor = min(sleepFor, left)
		}
		timer.Reset(sleepFor)
		var poke <-chan struct{}
		if spec.parker != nil {
			poke = spec.parker.park()
		}
		woken := false // a wake-up was consumed: one that ends the wait unused is passed on
		select {
		case <-w.C():
			woken = true
		case <-timer.C:
		case <-poke:
		case <-ctx.Done():
			w.Pass()
			return false, errors.Join(errorf("%s %q: %w", spec.op, spec.name, ctx.Err()), passing)
		case <-closing:
		}
		if spec.parker != nil {
			ok, done, claimed, err := spec.parker.unpark()
			if done {
				if woken || ok && spec.passOnGrant {
					w.Pass()
				}
				return ok, err
			}
			if err != nil {
				passing = err // a hand-off granted too late for its lease, given back
			}
			if claimed && !deadline.IsZero() && time.Until(deadline) <= 0 {
				// The wait bound ran out while a release's hand-off was awaited: no attempt
				// begins after it (TryLock). (A sleep that ends at the bound by itself is
				// followed by the last attempt, as before.)
				w.Pass()
				return false, passing
			}
		}
		if c.isClosed() {
			return false, ErrClosed
		}
		if ok, err, done := try(true); done {
			if err != nil || ok && spec.passOnGrant {
				w.Pass()
			}
			return ok, err
		}
	}
}

// spinLoop is waitLoop without pub/sub: attempts spaced by jittered exponential backoff
// from spinMin to spinMax, never sleeping past the obstacle's reported end.
func (c *Client) spinLoop(ctx context.Context, deadline time.Time, wait time.Duration, spec waitSpec,
	try func(bool) (bool, error, bool), pttl *time.Duration, passing *error) (bool, error) {
	if ok, err, done := try(false); done || wait == 0 {
		return ok, err
	}
	if spec.waited != nil {
		*spec.waited = true // refused: the call waits for the lock
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	spin := backoff.New(spinMin, spinMax)
	for {
		// Jittered: contenders that failed together spread out.
		sleepFor := spin.Next()
		if *pttl >= 0 {
			sleepFor = min(sleepFor, max(*pttl, time.Millisecond))
		}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return false, *passing
			}
			sleepFor = min(sleepFor, left)
		}
		timer.Reset(sleepFor)
		select {
		case <-timer.C:
		case <-ctx.Done():
			return false, errors.Join(errorf("%s %q: %w", spec.op, spec.name, ctx.Err()), *passing)
		}
		if c.isClosed() {
			return false, ErrClosed
		}
		if ok, err, done := try(false); done {
			return ok, err
		}
	}
}
