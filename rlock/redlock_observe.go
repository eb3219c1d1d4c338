package rlock

import (
	"context"
	"time"
)

// A RedLock's events (Observer): its Lock, LockLease, TryLock and Unlock are reported at
// their entry and exit, to the observer of the first of its Clients (in the order of their
// ids) that has one. Its instances' holds are not reported on their own (redVariant has no
// Kind), and the RedLock reports no tenure of its own (no HoldEnd) yet.

// observer is the observer the RedLock reports to now: nil when none of its Clients has
// one, or when that Client is closed (a call then tells nothing).
func (r *RedLock) observer() *observer {
	for _, m := range r.insts {
		if m.c.obs != nil {
			if m.c.isClosed() {
				return nil
			}
			return m.c.obs
		}
	}
	return nil
}

// holdsOf is the owner's count of RedLock holds, and whether its tenure lasts.
func (r *RedLock) holdsOf(owner string) (int, bool) {
	rh := peekRed(r.key(owner))
	if rh == nil {
		return 0, false
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	return rh.count, rh.ended == nil
}

// acquireObserved is acquire told to the observer, if any: AcquireStart, then AcquireDone
// with the outcome, whether the owner already held the lock when the call began
// (Reentered) and the token. Attempts are not counted (0), nor is Waited known (false). A
// call refused for bad input is not told.
func (r *RedLock) acquireObserved(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if r.check(ctx) != nil || (lease > 0 && checkLease("lease", lease) != nil) {
		return r.acquire(ctx, wait, lease)
	}
	o := r.observer()
	if o == nil {
		return r.acquire(ctx, wait, lease)
	}
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return r.acquire(ctx, wait, lease)
	}
	si := AcquireStartInfo{Kind: KindRedLock, Name: r.name, Owner: owner, Wait: waitBound(wait)}
	if lease > 0 {
		si.Lease = lease
	}
	n, live := r.holdsOf(owner)
	start := o.now()
	octx := o.acquireStart(ctx, si)
	ok, err := r.acquire(ctx, wait, lease)
	tr := &acqTrace{}
	if ok {
		tr.reentered = n > 0 && live
		tr.token, _ = r.Token(ctx)
	}
	o.done(ctx, octx, si, start, ok, err, tr)
	return ok, err
}

// observeUnlock tells the observer, if any, that an Unlock starts, and returns what tells
// it that it is done (nil when nothing is told: no observer, or bad input). Freed: the owner
// held one hold when the call began, and the call succeeded.
func (r *RedLock) observeUnlock(ctx context.Context) func(error) {
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
	n, _ := r.holdsOf(owner)
	start := o.now()
	octx := o.releaseStart(ctx, si)
	return func(err error) {
		o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start, Freed: n == 1 && err == nil})
	}
}
