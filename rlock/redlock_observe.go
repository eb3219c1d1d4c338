package rlock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A RedLock's events (Observer): its Lock, LockLease, TryLock and Unlock are reported at
// their entry and exit, to the observer of the first of its Clients (in the order of their
// ids) that has one. Its instances' holds are not reported on their own (redVariant has no
// Kind).
//
// Its tenures are reported as a Mutex's are: a call that begins one (its AcquireDone says
// acquired, not re-entered) hands the redHold a redObs (redHold.next) that begin attaches to
// the tenure (redHold.obs) under the redHold's mu, in the same critical section that decides
// the tenure began, so that no end can slip between the grant and the report. finishLocked,
// the one place where a RedLock's tenure ends (unlock, lease run out, lost, closed), takes
// the redObs under the same mu and calls HoldEnd once. The Close of the Client whose
// observer hears the tenure also takes it (closeHooks): HoldEnd with cause closed, before
// that Close returns, even when the tenure goes on on the other instances (nothing more is
// told of it). Whichever takes the redObs first reports; the other finds none. An end that
// takes it on another goroutine (another Client's Close) counts its report as a hook being
// called (redObs.take), so that the observer's Close waits for it before it returns.

// observedBy is the first of r's Clients (in the order of their ids) that has an observer,
// nil when none has one, or when that Client is closed (a call then tells nothing).
func (r *RedLock) observedBy() *Client {
	for _, m := range r.insts {
		if m.c.obs != nil {
			if m.c.isClosed() {
				return nil
			}
			return m.c
		}
	}
	return nil
}

// observer is the observer the RedLock reports to now (see observedBy); nil: none.
func (r *RedLock) observer() *observer {
	if c := r.observedBy(); c != nil {
		return c.obs
	}
	return nil
}

// redObs is the report of one acquire's tenure of a RedLock: made by acquireObserved,
// attached to the tenure by begin (redHold.observeLocked), told by ended or closed.
type redObs struct {
	c           *Client // whose observer hears the tenure: its Close ends the report
	name, owner string
	fresh       bool          // the call began a tenure (set under the redHold's mu, read by the call)
	start       time.Duration // the grant, on c.obs's clock
	token       int64         // the tenure's, set with fresh or by a re-entry (reenter)
	stop        func()        // cancels the Close hook; guarded by the redHold's mu
	entered     bool          // take counted the report as a hook being called (ended leaves)
	// closedAtBegin: the observer's Client had closed when the tenure began (a call under
	// way at its Close, granted by the other Clients' instances): the call tells the
	// tenure's end (cause closed) right after its AcquireDone (acquireObserved).
	closedAtBegin atomic.Bool
}

// observeLocked attaches the report of the acquire under way (rh.next) to the tenure that
// begin has just decided on (ok), and returns it (nil when none). rh.mu must be held.
func (rh *redHold) observeLocked(ok bool, token int64) *redObs {
	ro := rh.next
	if !ok || ro == nil { // a round that did not begin it: the call may try again
		return nil
	}
	rh.next = nil
	ro.fresh, ro.start, ro.token = true, ro.c.obs.now(), token
	rh.obs = ro
	return ro
}

// watchClose makes the Close of ro's Client end ro's report (HoldEnd, cause closed), unless
// the tenure's end reported it first. A Client already closed ends it with the call's own
// report, right after its AcquireDone (closedAtBegin): told at once, the HoldEnd came before
// the AcquireDone that began the tenure, and after Close had returned
// (TestCloseHunt_redLockHoldEndAfterCloseReturned).
func (ro *redObs) watchClose(rh *redHold) {
	if ro == nil {
		return
	}
	stop, ok := ro.c.atClose.add(func() { rh.observerClosed(ro) })
	if !ok {
		rh.mu.Lock()
		if rh.obs == ro {
			rh.obs = nil
			ro.closedAtBegin.Store(true)
		}
		rh.mu.Unlock()
		return
	}
	rh.mu.Lock()
	if rh.obs == ro {
		ro.stop = stop
		stop = nil
	}
	rh.mu.Unlock()
	if stop != nil { // reported already
		stop()
	}
}

// observerClosed reports ro's tenure ended by its observer's Client's Close, unless
// reported already.
func (rh *redHold) observerClosed(ro *redObs) {
	rh.mu.Lock()
	if rh.obs != ro {
		rh.mu.Unlock()
		return
	}
	rh.obs = nil
	ro.stop = nil
	rh.mu.Unlock()
	ro.report(ErrClosed)
}

// take is called by the tenure's end (finishLocked) that has just taken ro from its redHold,
// under the redHold's mu, before it tells the end (ended), after the tenure's contexts, Done
// and the table: it counts the report as a hook being called (observer.enter), so that the
// Close of the observer's Client, whose hook (observerClosed) then finds no report to take,
// waits for it before it returns (observer.settle). Told by ended as it was, once Close
// returned (another Client's Close ended the tenure: the RedLock's Clients closing
// together), the HoldEnd was dropped (observer.shut), and the tenure, begun for the Observer,
// never ended (TestRedLock_holdEndTakenByAnotherClosesEndIsToldBeforeObserversCloseReturns,
// found by TestCloseHunt under load). When that Close has returned already, its hook did not
// find ro because watchClose had not added it yet: the call that began the tenure is still
// under way, and tells the end after its AcquireDone (closedAtBegin). A nil ro does nothing.
func (ro *redObs) take() {
	if ro == nil {
		return
	}
	if ro.c.obs.enter() {
		ro.entered = true
		return
	}
	ro.closedAtBegin.Store(true)
}

// ended reports the end of ro's tenure with cause (finishLocked has taken ro from its
// redHold, take). A nil ro reports nothing; nor does one whose call tells it (closedAtBegin).
func (ro *redObs) ended(cause error) {
	if ro == nil {
		return
	}
	if ro.stop != nil { // taken from the redHold under its mu: nobody else touches it now
		ro.stop()
	}
	if !ro.entered {
		return
	}
	defer ro.c.obs.leave()
	ro.c.obs.holdEndOfCall(ro.endInfo(cause))
}

func (ro *redObs) report(cause error) {
	ro.c.obs.holdEnd(ro.endInfo(cause))
}

// endInfo is the HoldEnd event of ro's tenure, ended with cause.
func (ro *redObs) endInfo(cause error) HoldEndInfo {
	return HoldEndInfo{Kind: KindRedLock, Name: ro.name, Owner: ro.owner, Token: ro.token,
		Held: ro.c.obs.now() - ro.start, Cause: endCause(cause), Err: cause}
}

// closeHooks are functions a Client's Close calls once it has ended its holds, before it
// returns (a RedLock's report of a tenure to the Client's observer ends there).
type closeHooks struct {
	mu   sync.Mutex
	done bool // Close ran them: no more are taken
	m    map[*func()]struct{}
}

// add arranges for f to be called at Close, and returns what cancels that; ok false: the
// Client has closed (f is not kept).
func (h *closeHooks) add(f func()) (stop func(), ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil, false
	}
	if h.m == nil {
		h.m = make(map[*func()]struct{})
	}
	key := &f
	h.m[key] = struct{}{}
	return func() {
		h.mu.Lock()
		delete(h.m, key)
		h.mu.Unlock()
	}, true
}

// run calls the functions added and not cancelled, once.
func (h *closeHooks) run() {
	h.mu.Lock()
	m := h.m
	h.m, h.done = nil, true
	h.mu.Unlock()
	for f := range m {
		(*f)()
	}
}

// acquireObserved is acquire told to the observer, if any: AcquireStart, then AcquireDone
// with the outcome, whether the call added a hold to a tenure rather than beginning one
// (Reentered) and the token; a tenure it began is reported by HoldEnd when it ends. Attempts are not counted (0), nor is Waited known (false). A
// call refused for bad input is not told.
func (r *RedLock) acquireObserved(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if r.check(ctx) != nil || (lease > 0 && checkLease("lease", lease) != nil) {
		return r.acquire(ctx, wait, lease, nil)
	}
	c := r.observedBy()
	if c == nil {
		return r.acquire(ctx, wait, lease, nil)
	}
	o := c.obs
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return r.acquire(ctx, wait, lease, nil)
	}
	si := AcquireStartInfo{Kind: KindRedLock, Name: r.name, Owner: owner, Wait: waitBound(wait)}
	if lease > 0 {
		si.Lease = lease
	}
	start := o.now()
	octx := o.acquireStart(ctx, si)
	ro := &redObs{c: c, name: r.name, owner: owner}
	ok, err := r.acquire(ctx, wait, lease, ro)
	tr := &acqTrace{}
	if ok {
		tr.reentered = !ro.fresh
		tr.token = ro.token // set when the grant or the re-entry was decided (begin, reenter)
	}
	o.done(ctx, octx, si, start, ok, err, tr)
	if ok && ro.closedAtBegin.Load() {
		o.holdEndOfCall(ro.endInfo(ErrClosed))
	}
	return ok, err
}

// observeUnlock tells the observer, if any, that an Unlock starts, and returns what tells
// it that it is done (nil when nothing is told: no observer, or bad input), with the call's
// error and whether the hold it gave back was the owner's last (unlockHeld's last, read
// under the owner's turn on the lock). Freed: that hold was the last, and the call
// succeeded. (It was read as the call began, before its turn: a re-entry or another Unlock
// of the owner that came first made it wrong: TestReview27_RedLock_releaseFreedIsTheUnlocks.)
func (r *RedLock) observeUnlock(ctx context.Context) func(err error, last bool) {
	if r.check(ctx) != nil {
		return nil
	}
	o := r.observer()
	if o == nil {
		return nil
	}
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return nil
	}
	si := ReleaseStartInfo{Kind: KindRedLock, Name: r.name, Owner: owner}
	start := o.now()
	octx := o.releaseStart(ctx, si)
	return func(err error, last bool) {
		o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start, Freed: last && err == nil})
	}
}
