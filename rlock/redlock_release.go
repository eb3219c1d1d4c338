package rlock

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"
)

// Unlock gives back one hold of the caller's owner; when it gives back the last, the lock
// is released on every instance (in parallel) and one waiter of each instance is woken.
// It works on a ctx that has ended (it uses ctx's values, bounded by each Client's cleanup
// timeout) and returns as soon as a majority of the instances gave the hold back, or every
// instance answered, or a majority answered and one per-instance timeout more has passed.
// The other instances' give-backs go on in the background, each within its Client's
// cleanup timeout (a Client's Close ends them, and waits for them). One of the last hold
// that fails there is abandoned: that instance's hold is no longer renewed and expires with
// its lease. One of another hold that fails stays with the instance's other holds: renewed
// with them, and given back at the instance's next renewal that Redis confirms (only if Redis
// still counts it: a give-back applied with its replies lost is not given back twice), or
// with the last. A grant that reaches an acquire's round after the
// owner's last Unlock began is given back, not adopted. An Unlock whose give-backs went out
// has given the hold back whatever it returns (cases 1 and 2 below): do not call Unlock
// again for it.
//
// An Unlock of a hold that the RedLock knows has ended (lost, run to the end of its fixed
// lease, or ended by a Client's Close: what [RedLock.Err] reports) returns the end at once
// (case 1 or 3 below), whatever the instances would answer, and all its give-backs go on in
// the background as above: it waits for no instance, silent ones included.
//
// Unlock of the last hold returns nil when the owner held the lock and a majority of the
// instances gave it back (instances lost in a minority, and those still answering, are not
// an error: the lock is free on a majority, so another owner can take it); Unlock of
// another hold returns nil when the instances that counted more than one hold (or a
// majority of them) gave one back or answered that they lost the lock (a minority's loss
// leaves the lock held on a majority); otherwise:
//  1. [ErrNotHeld] when the owner holds no hold (joined with the loss when the lock was
//     lost; an error wrapping [ErrLeaseExpired] after a fixed lease ran its course), or
//     when the give-backs showed it lost: enough instances answered, too few gave it back
//     ("given back by k of N");
//  2. the instances' errors, joined, when fewer than a majority answered (a give-back
//     whose outcome is unknown, [ErrUnknownOutcome], is no answer);
//  3. [ErrClosed] when a Client's Close ended the hold, or the owner holds none and fewer
//     than a majority of the Clients are open;
//  4. [ErrInvalid] for an invalid handle or owner;
//  5. an error wrapping [context.DeadlineExceeded] when another call of the same owner on
//     the lock (another goroutine sharing the handle or the context owner) kept the hold's
//     operations busy for the whole cleanup timeout (that of the first open Client): nothing
//     was sent, and the hold is still counted (call Unlock again), as at [Mutex.Unlock]. (A
//     [MultiLock] whose failed round took the hold gives it back in the background once that
//     call is done, as it does a Mutex member: see [MultiLock].)
//
// The end of a hold that was lost, ran to the end of its fixed lease or was ended by Close
// is reported by the owner's next Unlock (as case 1 or 3), which gives back what the open
// Clients still count of it, until one of the Clients is closed while no open Client counts
// any: the RedLock then forgets the hold (as a Client forgets its Mutex holds at Close),
// and Unlock reports ErrClosed, or ErrNotHeld while a majority of the Clients are open.
func (r *RedLock) Unlock(ctx context.Context) (err error) {
	var last bool
	if done := r.observeUnlock(ctx); done != nil {
		defer func() { done(err, last) }()
	}
	return r.unlock(ctx, false, &last)
}

// giveBackTaken is Unlock for a hold that a [MultiLock]'s failed round took (multiLocker):
// the MultiLock's caller, told that nothing it took is left held, will not unlock it. A
// give-back that went out leaves nothing counted whatever it returns (Unlock's godoc: one
// that fails on an instance abandons the hold there, giveBackInst). When nothing was sent
// because another call of the owner on the lock kept it busy for the whole cleanup timeout
// (Unlock's case 5), the give-back goes on in the background once that call is done
// (giveBackAfter), as Mutex.giveBackTaken's does. (Before, the hold stayed counted and
// renewed with no caller: TestMultiLock_redLockMemberGiveBackBusyBehindOwnersOtherCall.)
func (r *RedLock) giveBackTaken(ctx context.Context) (err error) {
	var last bool
	if done := r.observeUnlock(ctx); done != nil {
		defer func() { done(err, last) }()
	}
	return r.unlock(ctx, true, &last)
}

// unlock is Unlock, untold to the observer. taken (giveBackTaken): when rh.op stays busy for
// the whole cleanup timeout (nothing sent), the hold is given back in the background once it
// is free, unless the tenure in force now has ended by then (giveBackAfter). *last is set
// as unlockHeld sets it (left false when the call gave nothing back).
func (r *RedLock) unlock(ctx context.Context, taken bool, last *bool) error {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return err
	}
	rh := r.refHold(owner)
	defer unrefRed(rh)
	// The cleanup bound of an open Client: a closed one's has ended.
	c := r.insts[0].c
	for _, m := range r.insts {
		if !m.c.isClosed() {
			c = m.c
			break
		}
	}
	cctx, cancel := c.cleanupCtx(ctx)
	defer cancel()
	gen := 0
	if taken {
		rh.mu.Lock()
		gen = rh.gen
		rh.mu.Unlock()
	}
	if err := rh.lockOp(cctx); err != nil {
		if taken {
			r.giveBackAfter(ctx, rh, owner, gen)
		}
		return errorf("unlock red lock %q: %w", r.name, context.Cause(cctx))
	}
	defer rh.unlockOp()
	return r.unlockHeld(ctx, rh, last)
}

// giveBackAfter gives back, in the background, one hold of owner's tenure gen of rh once the
// owner's other call on the lock lets go of it (rh.op), unless that tenure has ended by then
// (lost, run to the end of its fixed lease, ended by Close, or its last hold given back): as
// Unlock would, told to the observer as a GiveBack (GiveBackCanceled), as Mutex.giveBackAfter
// does. The first open Client counts the wait; its Close hands the wait to the next open one
// (the other instances still hold the lock), and once every Client is closed the hold is
// forgotten as at Close. The caller counts an operation on rh.
func (r *RedLock) giveBackAfter(ctx context.Context, rh *redHold, owner string, gen int) {
	var c *Client
	for _, m := range r.insts {
		if !m.c.isClosed() {
			c = m.c
			break
		}
	}
	if c == nil {
		return
	}
	redHolds.mu.Lock()
	rh.refs++
	redHolds.mu.Unlock()
	values := context.WithoutCancel(ctx)
	c.background(func() {
		defer unrefRed(rh)
		if err := rh.lockOp(c.life); err != nil {
			r.giveBackAfter(values, rh, owner, gen) // c is closed: the next open Client waits
			return
		}
		defer rh.unlockOp()
		rh.mu.Lock()
		current := rh.gen == gen && rh.count > 0 && rh.ended == nil
		rh.mu.Unlock()
		if !current {
			return
		}
		err := r.unlockHeld(values, rh, nil)
		if oc := r.observedBy(); oc != nil {
			oc.gaveBack(KindRedLock, r.name, owner, 1, GiveBackCanceled, err)
		}
	})
}

// unlockHeld gives back one hold of rh as Unlock does, and returns Unlock's error. rh.op must
// be held. last, when not nil, is set to whether the hold was the owner's last: read under
// rh.op, so that the owner's other calls on the lock (a re-entry, another Unlock) cannot
// change it before the give-back, and with a nil error the call ended the tenure (the
// observer's ReleaseDone.Freed).
func (r *RedLock) unlockHeld(ctx context.Context, rh *redHold, last *bool) error {
	rh.mu.Lock()
	count, ended, done := rh.count, rh.ended, rh.done
	rh.mu.Unlock()
	if last != nil {
		*last = count == 1
	}
	if ended != nil && done != nil {
		// The end is reported once its HoldContexts are cancelled: a loss found by a renewal
		// may be being told now (finishLocked), and the give-backs are not waited for.
		<-done
	}
	if count == 0 {
		return errorf("unlock red lock %q: %w", r.name, r.noHold())
	}
	// A hold known to have ended (lost, run to the end of its fixed lease, ended by Close) is
	// answered with its end whatever its give-backs find: they go on in the background, not
	// waited for (an instance that went silent would cost its Client's cleanup timeout).
	wait := ended == nil
	var errs []error
	var answered []bool
	var idx []int
	if count > 1 {
		rh.mu.Lock()
		// One hold back on every instance that counts more than one: each keeps one until
		// the last Unlock. (An instance may count fewer than count: it missed a re-entry,
		// or its late grant of one is still to be adopted.) Each is uncounted now, before
		// its give-back is answered: the give-back of a slow instance goes on after the
		// return, and the owner's next Unlock, counting it still, would give it back again,
		// releasing that instance's last hold while the owner holds the lock (and the last
		// Unlock would find one hold too few: ErrNotHeld). A give-back that fails leaves the
		// hold to the instance's tenure as an orphan (abandonOne): renewed with it and given
		// back at its next confirmed renewal (hold.settleOrphans), or with its last hold.
		for i, n := range rh.n {
			if n > 1 {
				idx = append(idx, i)
				rh.n[i]--
			}
		}
		// The hold is uncounted with its instances', so that a re-entry's late grant
		// adopted meanwhile (redHold.adopt: while the instance counts fewer holds than the
		// RedLock) is not one the instance keeps beyond the RedLock's holds: counted down
		// after the give-backs, the count let instance i adopt one while this Unlock was
		// answered, n[i] ending above it until the last Unlock
		// (TestRedLock_lateReentryGrantAfterItsUnlockIsGivenBack/during).
		rh.count--
		rh.mu.Unlock()
		if wait {
			errs, answered = r.giveBack(ctx, nil, idx, nil, abandonOne)
		} else {
			r.sendGiveBacks(ctx, idx, nil, abandonOne, nil, nil)
		}
		rh.mu.Lock()
		if ended == nil {
			// A loss of the majority that the give-backs found (ErrNotHeld there, counted
			// as given back below) is reported now, as a Mutex's Unlock does.
			ended = rh.ended
		}
		rh.mu.Unlock()
	} else {
		// The instances are those giveBackAll took: one adopted since the count above is
		// given back too, and counted.
		idx, errs, answered = r.giveBackAll(ctx, rh, wait)
	}
	switch {
	case ended != nil && errors.Is(ended, ErrLeaseExpired):
		return errorf("unlock red lock %q: %w", r.name, ErrLeaseExpired)
	case ended != nil && errors.Is(ended, ErrClosed):
		return errorf("unlock red lock %q: %w", r.name, ErrClosed)
	case ended != nil:
		return errorf("unlock red lock %q: %w (%w)", r.name, ErrNotHeld, ended)
	}
	// The last hold: a majority must give it back. Another: the instances that counted more
	// than one, or a majority of them; one whose hold was lost there (ErrNotHeld) has
	// nothing of the owner's left to give back: instances lost in a minority are not an
	// error (a lost majority ended the hold, reported above or by the next call).
	need := r.quorum
	if count > 1 {
		need = min(need, len(idx))
	}
	// heardFrom: instance i answered (an unknown outcome is not an answer: the give-back may
	// or may not have been applied); gaveBack: its answer counts as given back.
	heardFrom := func(i int) bool { return answered[i] && !errors.Is(errs[i], ErrUnknownOutcome) }
	gaveBack := func(i int) bool { return errs[i] == nil || (count > 1 && errors.Is(errs[i], ErrNotHeld)) }
	ok, heard := 0, 0
	for _, i := range idx {
		if heardFrom(i) {
			heard++
			if gaveBack(i) {
				ok++
			}
		}
	}
	if ok >= need {
		return nil
	}
	// The errors, in the instances' order, only for an Unlock that reports them.
	var failed []error
	for _, i := range idx {
		switch {
		case !answered[i]:
			failed = append(failed, errorf("instance %d: no answer yet", i))
		case !heardFrom(i) || !gaveBack(i):
			failed = append(failed, errs[i])
		}
	}
	if heard >= need {
		return errorf("unlock red lock %q: %w: given back by %d of %d instances (%w)", r.name, ErrNotHeld, ok, len(r.insts), errors.Join(failed...))
	}
	return errorf("unlock red lock %q: %d of %d instances answered: %w", r.name, heard, len(r.insts), errors.Join(failed...))
}

// giveBack's failure modes: what becomes of an instance hold whose give-back failed.
type giveBackFail int

const (
	// abandonOne: nothing counts it (a failed re-entry round, an Unlock that is not the
	// owner's last): it becomes an orphan of the instance's tenure (hold.abandon), given
	// back at its next confirmed renewal (hold.settleOrphans), or with its last hold.
	abandonOne giveBackFail = iota
	// abandonAll: nothing counts any hold of the owner on the instance (a failed fresh
	// round, the last Unlock): they are no longer renewed and expire (hold.abandonAll).
	abandonAll
)

// giveBackAll gives back every hold rh counts on every instance and forgets them (the
// owner's last Unlock, or a fresh start after a fixed lease ran out). It returns the
// instances it gave back (the counts taken under rh.mu, after which no late grant is
// adopted), and giveBack's results; with wait false, it only starts the give-backs
// (sendGiveBacks), and the results are nil.
func (r *RedLock) giveBackAll(ctx context.Context, rh *redHold, wait bool) ([]int, []error, []bool) {
	rh.mu.Lock()
	times := slices.Clone(rh.n)
	rh.releasing = true // a late grant is not adopted now: it would not be given back
	rh.mu.Unlock()
	var idx []int
	for i, n := range times {
		if n > 0 {
			idx = append(idx, i)
		}
	}
	var errs []error
	var answered []bool
	if wait {
		errs, answered = r.giveBack(ctx, nil, idx, times, abandonAll)
	} else {
		r.sendGiveBacks(ctx, idx, times, abandonAll, nil, nil)
	}
	rh.reset()
	return idx, errs, answered
}

// giveBackRound gives back the grants of a round that failed (instances got), as giveBack
// does, waiting for their answers at most one per-instance timeout tmo (then returnGrace
// more, as when the caller's ctx ends): an instance that granted and then went down or
// silent does not answer its give-back until it comes back or its Client's cleanup timeout
// ends, and the caller's next round need not wait for it (its attempt on that instance
// waits for the give-back, as any request of the owner there does).
func (r *RedLock) giveBackRound(ctx context.Context, got []int, fail giveBackFail, tmo time.Duration) {
	bound, cancel := context.WithTimeout(ctx, tmo)
	defer cancel()
	r.giveBack(ctx, bound, got, nil, fail)
}

// giveBack gives back one hold on each instance in idx (times[i] holds when times is
// given, see giveBackAll), in parallel, on ctx's values without its cancellation. It
// returns as soon as a majority of the instances gave their holds back, or every instance
// answered, or, once a majority answered, one per-instance timeout more has passed, or,
// when caller (an acquire's ctx; nil for Unlock) ends, returnGrace more; the rest go on in
// the background, each within its Client's cleanup timeout and ended by its Close (counted
// for it), and a give-back that fails there is treated as fail says. It returns each
// instance's error (nil: given back), and which answered in time.
func (r *RedLock) giveBack(ctx, caller context.Context, idx []int, times []int, fail giveBackFail) ([]error, []bool) {
	errs := make([]error, len(r.insts))
	answered := make([]bool, len(r.insts))
	if len(idx) == 0 {
		return errs, answered
	}
	// g: the caller's grace, one returnGrace from when its ctx's end is seen, for every wait
	// here. Not from the deadline, as a Mutex's grace runs: the wait for the give-backs to
	// take their instance holds' operation locks (sendGiveBacks' begun) is what orders them
	// before the owner's next round on those instances, and a grace already spent when a
	// late-seen deadline is noticed would skip it (review17: a give-back that then fails
	// abandons the next round's tenure there).
	g := &grace{}
	var gone <-chan struct{}
	if caller != nil {
		gone = caller.Done()
		if caller.Err() != nil {
			g.left() // gone already: the grace starts now
		}
	}
	ch := r.sendGiveBacks(ctx, idx, times, fail, gone, g)
	var grace, callerGrace <-chan time.Time
	if !g.end.IsZero() {
		// The caller has gone: wait what is left of its grace, then leave the rest to the
		// background.
		gone = nil
		t := time.NewTimer(g.left())
		defer t.Stop()
		callerGrace = t.C
	}
	ok := 0
	for k := 0; k < len(idx); k++ {
		if grace == nil && k >= r.quorum {
			t := time.NewTimer(r.instanceTimeout(redTimeoutMax * 10))
			defer t.Stop()
			grace = t.C
		}
		select {
		case d := <-ch:
			errs[d.i], answered[d.i] = d.err, true
			if d.err == nil {
				if ok++; ok >= r.quorum {
					return errs, answered
				}
			}
		case <-grace:
			return errs, answered
		case <-gone:
			// The caller has gone: wait what a Mutex would, then leave the rest to the
			// background.
			gone = nil
			t := time.NewTimer(g.left())
			defer t.Stop()
			callerGrace = t.C
			k--
		case <-callerGrace:
			return errs, answered
		}
	}
	return errs, answered
}

// givenBack is one instance's outcome of a give-back (sendGiveBacks): err nil when given
// back.
type givenBack struct {
	i   int
	err error
}

// sendGiveBacks starts the give-backs of giveBack and returns once each has begun: one hold
// on each instance in idx (times[i] holds when times is given), in parallel, on ctx's values without
// its cancellation, each within its Client's cleanup timeout and ended by its Close (counted
// for it); a give-back that fails is treated as fail says. Each instance's outcome comes on
// the channel returned, which never blocks a sender: nobody need read it.
//
// Begun: the give-back's goroutine runs, and is about to ask the instance, ahead of the
// owner's next request there (an Unlock that returns before its give-backs ended, all of them
// for a hold known to have ended, must not let the owner's next grant on an instance come
// before the give-back there, which would give that grant back: as first written, the next
// Unlock found it "given back by 1 of 3 instances"). Both then queue for the instance hold's
// operation lock, the give-back well ahead; waiting for the give-back's end instead would
// hold the owner's next rounds up to the cleanup timeout after a request lost in a fault.
//
// gone and g (both nil for Unlock) are the caller's: once gone is closed (an acquire's ctx
// ended), the wait for the give-backs to begin ends with the caller's grace g too, which it
// starts if nobody has (g.end), so that this wait and the caller's later ones (giveBack's)
// add up to one returnGrace after the ctx's end, not one each.
func (r *RedLock) sendGiveBacks(ctx context.Context, idx []int, times []int, fail giveBackFail, gone <-chan struct{}, g *grace) <-chan givenBack {
	ctx = withoutCancel(ctx)
	ch := make(chan givenBack, len(idx))
	// begun: each give-back has taken its instance hold's operation lock (or given up), so
	// it goes before any later request of the owner there from this Client. The caller waits
	// for that at most returnGrace: an instance hold busy with a request to a silent server
	// does not hold up an Unlock that answers at once.
	begun := make(chan struct{}, len(idx))
	defer func() {
		t := time.NewTimer(returnGrace)
		defer t.Stop()
		var graceEnd <-chan time.Time
		if g != nil && !g.end.IsZero() {
			gone = nil
			gt := time.NewTimer(g.left())
			defer gt.Stop()
			graceEnd = gt.C
		}
		for k := 0; k < len(idx); {
			select {
			case <-begun:
				k++
			case <-t.C:
				return
			case <-gone:
				gone = nil
				gt := time.NewTimer(g.left())
				defer gt.Stop()
				graceEnd = gt.C
			case <-graceEnd:
				return
			}
		}
	}()
	for _, i := range idx {
		n := 1
		if times != nil {
			n = times[i]
		}
		m := r.insts[i]
		r.inflight.Add(1)
		m.c.spare(func() {
			defer r.inflight.Add(-1)
			// Told once, by this goroutine alone (its give-backs, then the deferred call).
			told := false
			held := func() {
				if !told {
					told = true
					begun <- struct{}{}
				}
			}
			defer held() // n == 0, or a give-back that gave up before its hold's op
			var err error
			for k := 0; k < n; k++ {
				more, e := m.giveBackInst(ctx, fail, held)
				if err == nil {
					err = e
				}
				// One that fails is not given back: let it expire. The give-back of a hold
				// lost on this Client reports the loss (ErrNotHeld) and gives back one hold
				// that Redis may still count (a renewal that reached it late): the next go
				// on while this Client counts any (more, decided under the hold's operation
				// lock: read after it, the owner's next grant there could be counted and
				// given back), else its lost count would stay and refuse the owner's next
				// acquires on the instance.
				if e != nil && !more {
					break
				}
			}
			ch <- givenBack{i, err}
		})
	}
	return ch
}

// giveBackLate gives back a grant whose reply reached a RedLock round after the round was
// decided without it, on ctx's values (the owner) without its cancellation, within the
// Client's cleanup timeout. A give-back that fails leaves the hold to expire with its
// lease: this Client stops counting and renewing it (hold.abandon).
func (m *Mutex) giveBackLate(ctx context.Context) {
	_, _ = m.giveBackInst(withoutCancel(ctx), abandonOne, nil)
}

// withoutCancel is [context.WithoutCancel] of ctx under a value context of its own, for a
// context whose values are looked up several times: a Value look-up made on
// context.WithoutCancel's context itself boxes that context (one allocation per look-up,
// Go 1.26), one made from a context above it walks the chain without. Each give-back of a
// RedLock looks its owner up twice (Mutex.ownerOf).
func withoutCancel(ctx context.Context) context.Context {
	return context.WithValue(context.WithoutCancel(ctx), withoutCancelKey{}, nil)
}

// withoutCancelKey is the key of withoutCancel's value context: nothing reads it.
type withoutCancelKey struct{}

// giveBackInst gives back one hold of the caller's owner on instance m, as Unlock does (the
// instances report no events), and returns Unlock's error, and whether this Client still
// counts a hold of the owner there that the give-back found lost (ErrNotHeld: a hold Redis
// may still count, to give back next). When the give-back failed (other
// than with ErrNotHeld: then there is nothing to abandon), this Client stops counting and
// renewing the hold as fail says (abandonFailed) before the owner's next call on the
// instance runs: the hold abandoned is the one the give-back was for. Were it abandoned
// after the give-back let the instance go, an acquire of the owner granted in between (the
// RedLock's next round, right after an Unlock that returned at a majority) would lose its
// new tenure to the abandon, unrenewed while the RedLock counts it. A give-back that never
// ran, because another call of the owner on the instance kept it busy for the whole cleanup
// timeout, abandons the hold all the same once it gives up (nothing else will give it back).
func (m *Mutex) giveBackInst(ctx context.Context, fail giveBackFail, held func()) (more bool, err error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return false, err
	}
	ran := false
	err = m.unlock(ctx, owner, nil, func(h *hold, err error) {
		ran = true
		if f := giveBackFailedHook.Load(); f != nil {
			(*f)(m.name)
		}
		h.abandonFailed(err, fail)
		// Decided under h.op: a hold lost here still counted means its loss is recorded
		// (which refuses the owner's acquires), so no new grant can come in before the next
		// give-back.
		more = errors.Is(err, ErrNotHeld) && h.holds() > 0
	}, held)
	if err != nil && !ran {
		if h := m.instHold(owner); h != nil {
			h.abandonFailed(err, fail)
		}
	}
	return more, err
}

// giveBackFailedHook, set by tests only (export_test.go), is called with the lock's name by
// a RedLock's give-back of an instance hold that failed, before the hold is abandoned.
var giveBackFailedHook atomic.Pointer[func(name string)]

// abandonFailed stops this Client counting and renewing one of h's holds, an instance hold
// of a RedLock, when err says its give-back failed (nil or ErrNotHeld: nothing to abandon):
// one hold (abandonOne, hold.abandon) or all of them (abandonAll, hold.abandonAll). A
// give-back refused for want of rights (ErrNoPermission), or whose outcome stayed unknown
// (ErrUnknownOutcome), abandoned its hold already
// (Mutex.unlock), and one of an owner this Client counts no hold of has none to abandon:
// abandonOne abandons no other. The give-back holds h.op, unless it never ran
// (giveBackInst).
func (h *hold) abandonFailed(err error, fail giveBackFail) {
	switch {
	case err == nil || errors.Is(err, ErrNotHeld):
	case fail == abandonOne:
		if !errors.Is(err, ErrNoPermission) && !errors.Is(err, ErrUnknownOutcome) && h.holds() > 0 {
			h.abandon()
		}
	default:
		h.abandonAll()
	}
}
