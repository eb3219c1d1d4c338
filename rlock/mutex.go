package rlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/watchdog"
)

// Mutex is a handle on a reentrant lock named in Redis. Get one with [Client.Mutex].
//
// # Owners and reentrancy
//
// The handle is an owner: while it holds the lock, Lock and TryLock on it succeed at once and
// add a hold; the lock is free again when Unlock has given back every hold. A context
// carrying an owner ([WithOwner]) overrides the handle's own, so that the handles of one
// name used down a call chain re-enter. Goroutines that use one handle (or one context
// owner) share its holds: the handle is safe for concurrent use, but it is not a lock
// between those goroutines. Ownership never depends on the goroutine.
//
// # Leases
//
// A hold always has a lease in Redis, so the lock of a crashed process frees by itself.
// [Mutex.Lock], and [Mutex.TryLock] with lease <= 0, hold in watchdog mode: the lease is the
// watchdog timeout and the Client's watchdog renews it while the lock is held.
// [Mutex.LockLease], and TryLock with lease > 0, hold for that fixed lease, never renewed. A re-entry never shortens the lease
// in force: a re-entry with a longer fixed lease extends it; a re-entry in watchdog mode
// turns the watchdog on for the rest of the tenure.
//
// # Loss
//
// The holder learns at once when its hold ends other than by its own Unlock: [Mutex.Done]
// closes and the context from [Mutex.HoldContext] is cancelled with cause [ErrLockLost]
// when a renewal finds the lock gone or taken, or when the lease runs out (by the
// holder's own conservative clock) before a renewal was confirmed, even while Redis is
// unreachable. A lost lock is never silently taken again: Lock and TryLock by the same owner
// fail with ErrLockLost until Unlock has been called once for every hold taken.
//
// # Fairness
//
// Waiters of one Client queue in arrival order. When the last hold is given back while a
// waiter of the same Client is parked, the release script passes the lock straight to it (a
// fresh grant with its own token and lease; no publish, no acquire of its own); otherwise
// the release wakes one waiter per Client through Redis pub/sub. A Lock call that finds
// others of its Client already waiting queues behind them rather than barging in. A lock
// passes on within a Client at most 8 times in a row; the next release frees it and
// publishes, so that waiters of other Clients get a turn. Between Clients there is no order:
// whoever's request reaches Redis first wins, so shares between busy Clients are uneven,
// the more so the faster each Client cycles (Jain 0.42-0.65 and a longest wait of 0.12-0.73 s
// over 16 goroutines on 4 Clients in BenchmarkMutex_HotKey on a 2-core machine, at 15,000-
// 20,000 acquisitions/s; 1.000 on one Client). Use [Client.FairMutex] for arrival order across
// processes. TryLock with wait 0 never queues: it makes one attempt.
//
// # Invalid handles
//
// A Mutex is made by a Client. A nil or zero *Mutex, or one made by a nil or zero Client, is
// no handle: its methods return an error wrapping [ErrInvalid] (Done a closed channel,
// HoldContext a context cancelled with that cause, Name and Key "") rather than panic.
type Mutex struct {
	c     *Client
	name  string
	keys  lockKeys
	owner string
	v     *variant
	err   error // an invalid name: every method returns it
	spare *hold // the hold this handle used last (Client.ref); guarded by c.mu
}

// Mutex returns a handle on the lock called name. It sends nothing to Redis. An empty name,
// or a nil or zero Client, makes a handle whose every method returns an error wrapping
// [ErrInvalid].
func (c *Client) Mutex(name string) *Mutex {
	return c.newMutex(name, mutexVariant)
}

// newMutex returns a handle on the lock called name of variant v.
func (c *Client) newMutex(name string, v *variant) *Mutex {
	if err := c.usable(); err != nil {
		return &Mutex{name: name, v: v, err: err}
	}
	m := &Mutex{c: c, name: name, keys: c.lockKeys(name), owner: c.newOwner(), v: v}
	if name == "" {
		m.err = invalid("empty %s name", v.kind)
	}
	return m
}

// Name is the lock's name as given to [Client.Mutex] ("" for a nil handle).
func (m *Mutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Key is the Redis key of the lock's hash (owner id -> hold count). Its fencing counter and
// release channel share its hash tag. It is "" for a nil or zero handle, or one of a nil or
// zero Client.
func (m *Mutex) Key() string {
	if m == nil {
		return ""
	}
	return m.keys.lock
}

// check returns the error of an invalid handle or ctx: a nil or zero handle (not made by a
// Client), an invalid name or Client, or a nil ctx. Every method of a handle checks it
// before anything else, so that none of them panics.
func (m *Mutex) check(ctx context.Context) error {
	switch {
	case m == nil:
		return invalid("nil lock handle")
	case m.err != nil:
		return m.err
	case m.c == nil || m.v == nil:
		return invalid("zero lock handle: make one with a Client")
	case ctx == nil:
		return invalid("nil context")
	}
	return nil
}

// ownerOf returns the owner an operation with ctx acts for.
func (m *Mutex) ownerOf(ctx context.Context) (string, error) {
	if err := m.check(ctx); err != nil {
		return "", err
	}
	if id, ok := OwnerFrom(ctx); ok {
		if id == "" {
			return "", invalid("empty owner id in context")
		}
		return "u:" + id, nil
	}
	return m.owner, nil
}

// Lock blocks until the lock is held by the caller's owner, then keeps it held (watchdog
// mode) until Unlock. If the owner already holds it through this Client, Lock adds a hold
// at once: a re-entry never waits behind other waiters.
//
// Lock never outlives ctx by more than 100ms, even while Redis does not answer. Work left
// to do when ctx ends (resolving an acquire whose reply was lost, giving back a grant that
// reached a caller that had gone) goes on in the background, within the cleanup timeout
// ([WithCleanupTimeout]); [Client.Close] ends it and waits for it. To keep that bound while
// Redis does not answer, an acquire whose ctx can end is sent from a goroutine of its own; one
// whose ctx cannot end (context.Background, [context.WithoutCancel]) is sent on the caller's
// goroutine, which saves a hand-over between goroutines per attempt (BenchmarkMutex_Uncontended
// against BenchmarkMutex_UncontendedBackground in bench/).
//
// Lock returns nil when the lock is held. Otherwise it returns:
//  1. ctx's error, wrapped, when ctx ends first; nothing is left held or queued in Redis
//     once the background work above is done (if Redis stays unreachable, a hold it may
//     have granted is never renewed and expires with its lease; a re-entry's, into a hold the
//     owner keeps, rides with that hold, renewed with it, until it is given back: see
//     [Mutex.HoldCount]);
//  2. [ErrLockLost] when the owner's earlier hold was lost and not yet unlocked;
//  3. [ErrWrongType] when the key holds another kind of value;
//  4. [ErrClosed] after [Client.Close]; [ErrInvalid] for an invalid name or owner;
//  5. a Redis or connection error, wrapped; an acquire whose reply was lost is resolved
//     first (and undone if the caller is gone), or reported as [ErrUnknownOutcome].
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, -1, 0)
	return err
}

// LockLease blocks until the lock is held by the caller's owner, like [Mutex.Lock], and holds
// it for the fixed lease, never renewed (Redisson's lock(leaseTime)): the lock frees by itself
// when the lease ends, whether or not Unlock was called. The lease is counted from the moment
// the request that got the lock was sent. A lease below 10ms (the drift allowance, 1% + 2ms,
// would leave nothing of it), 0 and negative leases included, is an error wrapping
// [ErrInvalid]; use Lock for watchdog mode.
//
// When the lease ends before Unlock, the hold is over: [Mutex.Done] closes, the context from
// [Mutex.HoldContext] is cancelled with cause [ErrLeaseExpired], and [Mutex.Err] and Unlock
// return an error wrapping ErrLeaseExpired (and so [ErrNotHeld]); unlike a loss, it does not
// refuse the owner's next Lock. A re-entry never shortens the lease in force (see
// [Mutex]). A grant that comes back after its lease ran out on the holder's clock (Redis
// answered too slowly) is given back and tried again until ctx ends.
//
// LockLease returns nil when the lock is held, or else the errors listed at [Mutex.Lock].
func (m *Mutex) LockLease(ctx context.Context, lease time.Duration) error {
	if err := checkLease("lease", lease); err != nil {
		return err
	}
	_, err := m.acquire(ctx, -1, lease)
	return err
}

// TryLock tries to take the lock within wait. wait 0 makes exactly one attempt. lease > 0
// holds the lock for that fixed lease, never renewed; lease <= 0 holds it in watchdog mode,
// like Lock.
//
// TryLock returns (true, nil) when the lock is held, (false, nil) when wait ran out with the
// lock held by another owner, and (false, err) for the failures listed at [Mutex.Lock] (a
// ctx that ends before wait does is such a failure). A negative wait, or a fixed lease
// below 10ms (the drift allowance, 1% + 2ms, would leave nothing of it), is an error
// wrapping [ErrInvalid]. A grant that comes back after its fixed lease ran out on the
// holder's clock (Redis answered too slowly) is given back and tried again within wait; if
// wait ends that way, the error wraps [ErrLeaseExpired].
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return m.acquire(ctx, wait, lease)
}

// minLease is the shortest fixed lease: below it the drift allowance (1% + 2ms) leaves too
// little of the lease for a request's round trip, and every grant would come back already
// over on the holder's clock.
const minLease = 10 * time.Millisecond

// checkLease validates a fixed lease.
func checkLease(what string, lease time.Duration) error {
	if lease < minLease {
		return invalid("%s %v is below %v (the drift allowance, 1%% + 2ms, would leave nothing of it)", what, lease, minLease)
	}
	return nil
}

// returnGrace bounds how long Lock and TryLock outlive their ctx when work is left to do on
// its behalf (resolving an acquire whose reply was lost, giving back a grant that came too
// late): they wait that long for it, then return and leave it to finish in the background,
// within the cleanup timeout ([WithCleanupTimeout]); Close waits for it. It is below README
// guarantee 6's 100 ms, so that the caller, which starts it when it sees ctx's end and then
// returns, still returns within 100 ms of that end (TestGuarantee6_margin): at 100 ms it
// returned 100.5 ms after, every time.
const returnGrace = 80 * time.Millisecond

// acquire implements Lock (wait < 0: no bound) and TryLock.
func (m *Mutex) acquire(ctx context.Context, wait, lease time.Duration) (bool, error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return false, err
	}
	renew := lease <= 0
	if renew {
		lease = m.c.opts.watchdogTimeout
	} else if err := checkLease("lease", lease); err != nil {
		return false, err
	}
	if o := m.c.obs; o != nil && m.v.obs != "" {
		return m.acquireObserved(ctx, o, owner, wait, lease, renew)
	}
	return m.acquireAs(ctx, owner, wait, lease, renew, nil)
}

// acquireObserved is acquire told to the Client's observer: AcquireStart, then the
// acquisition traced (tr), then AcquireDone. A Client that is already closed tells nothing.
func (m *Mutex) acquireObserved(ctx context.Context, o *observer, owner string, wait, lease time.Duration, renew bool) (bool, error) {
	if m.c.isClosed() {
		return false, ErrClosed
	}
	si := AcquireStartInfo{Kind: m.v.obs, Name: m.name, Owner: owner, Wait: waitBound(wait)}
	if !renew {
		si.Lease = lease
	}
	start := o.now()
	octx := o.acquireStart(ctx, si)
	tr := &acqTrace{}
	ok, err := m.acquireAs(ctx, owner, wait, lease, renew, tr)
	o.done(ctx, octx, si, start, ok, err, tr)
	return ok, err
}

// acquireAs is acquire for owner, with the lease checked; tr, when not nil, traces it for
// the observer.
func (m *Mutex) acquireAs(ctx context.Context, owner string, wait, lease time.Duration, renew bool, tr *acqTrace) (bool, error) {
	ok, err := m.waitForHold(ctx, owner, wait, lease, renew, tr)
	if err != nil && m.v.acquireErr != nil {
		err = m.v.acquireErr(m.name, err)
	}
	return ok, err
}

// waitForHold is acquireAs before its error is mapped: it counts the call on owner's hold,
// waits (attempts, parks as a hand-off candidate) within wait, and settles a hand-off claimed
// as the wait ended.
func (m *Mutex) waitForHold(ctx context.Context, owner string, wait, lease time.Duration, renew bool, tr *acqTrace) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, errorf("lock %q: %w", m.name, err)
	}
	h, err := m.c.ref(m, owner)
	if err != nil {
		return false, err
	}
	defer m.c.unref(h)
	// One allocation for what the call's attempts, its wait and its hand-off share.
	a := &acquisition{m: m, ctx: ctx, h: h, lease: lease, renew: renew, queue: wait != 0, tr: tr}
	g := &a.g // shared by every step of this call that waits past ctx's end

	// A re-entry never waits: an owner that holds the lock through this Client goes to Redis
	// at once, ahead of every waiter, and never parks as a hand-off candidate.
	reentry := h.holds() > 0
	spec := waitSpec{op: "lock", name: m.name, channel: m.keys.channel, queue: m.v.queue && !reentry, spin: m.v.spin}
	if m.v.tagged {
		spec.tag = owner
	}
	if tr != nil {
		spec.waited = &tr.waited
	}
	if m.v.leave != nil && wait != 0 {
		// A single attempt (wait 0) never joins a queue: nothing to leave.
		spec.leave = func() { m.leave(ctx, h, owner, g) }
	}
	var hw *handoffWait
	if m.v.handoff && wait != 0 && m.c.opts.ackReplicas == 0 && !reentry {
		hw = &a.hw
		hw.a = a
		spec.parker = hw
	}
	ok, err := m.c.waitLoop(ctx, wait, spec, a)
	if hw != nil && hw.cand != nil && m.c.drop(hw.cand) {
		// A release claimed this waiter as the wait was ending: it may have passed the lock on.
		return m.claimedAtEnd(ctx, h, hw.cand, g, ok, err, tr)
	}
	return ok, err
}

// acquisition is one Lock or TryLock call: what its attempts (it is the wait's attempter),
// its wait and its hand-off share.
type acquisition struct {
	m            *Mutex
	ctx          context.Context
	h            *hold
	lease        time.Duration
	renew, queue bool
	g            grace
	hw           handoffWait
	buf          attemptBuf
	tr           *acqTrace // the observer's trace; nil without an observer
}

func (a *acquisition) attempt(waiting bool) (bool, time.Duration, error) {
	return a.m.attempt(a.ctx, a.h, a.lease, a.renew, a.queue, waiting, &a.g, &a.buf, a.tr)
}

// attemptBuf is the memory one attempt needs for its request and reply, reused by the
// attempts of one call (they run one after another). An attempt that leaves work to the
// background (a replay, a give-back) ends the call's wait, so no later attempt overwrites
// what that work still reads.
type attemptBuf struct {
	kv   [6]string // KEYS then ARGV
	vals [4]int64
	// direct: the caller does not wait on the attempt itself (a RedLock round's instance,
	// whose round leaves it at ctx's end), so the first send needs no goroutine of its own.
	direct bool
}

// claimedAtEnd settles a wait that ended (with ok, err) while a release had claimed its
// candidate cand (and taken h.op for it). While ctx and the Client live it waits for the
// release's outcome: a grant that came as the wait bound ran out is taken. Once ctx has
// ended, the outcome is waited for, and a grant given back, in the background, until Close;
// once the Client is closed, the call ends at once with ErrClosed.
func (m *Mutex) claimedAtEnd(ctx context.Context, h *hold, cand *candidate, g *grace, ok bool, err error, tr *acqTrace) (bool, error) {
	o := &opHold{h: h, held: true} // the claim took h.op for this call
	defer o.unlock()
	var gone error // why the call ends without the outcome
	select {
	case <-cand.ready:
	case <-ctx.Done():
		gone = ctx.Err()
	case <-m.c.life.Done():
		gone = ErrClosed
	}
	if gone != nil {
		m.later(ctx, o, g, func() {
			// The outcome comes when the release's first send ends, within the cleanup
			// timeout, which Close does not bring forward (rueidis heeds only the deadline
			// of a lone request sent on the caller's goroutine). Once the Client is closed,
			// nothing is recorded or given back any more (a grant the release made expires
			// with its lease), and this work may be running on the caller's goroutine
			// (Client.background): it stops waiting, so that the call ends within its grace.
			select {
			case <-cand.ready:
			case <-m.c.life.Done():
				return
			}
			cand.state.Store(candIdle)
			cctx, cancel := m.c.cleanupCtx(ctx)
			defer cancel()
			if gok, _, _ := m.handedOff(cctx, h, cand, nil, nil, nil); gok {
				h.hideTenure() // a hand-off is a fresh grant
				m.gaveBack(h, GiveBackCanceled, m.giveBackOne(cctx, h))
			}
		})
		if err == nil {
			err = errorf("lock %q: %w", m.name, gone)
		}
		return false, err
	}
	cand.state.Store(candIdle)
	gok, gerr, _ := m.handedOff(ctx, h, cand, o, g, tr)
	switch {
	case gok && ctx.Err() == nil && err == nil:
		return true, nil // the wait bound ran out as the lock came: take it
	case gok:
		// The caller is gone: give it back.
		h.hideTenure() // a hand-off is a fresh grant
		m.later(ctx, o, g, func() { m.gaveBack(h, GiveBackCanceled, m.giveBackOne(ctx, h)) })
	case err == nil:
		err = gerr
	}
	return ok, err
}

// handoffWait is a Lock's wait seen as a hand-off candidate (the parker of its waitSpec). Its
// candidate is made on the first park: a Lock that gets the lock at once allocates none.
type handoffWait struct {
	a    *acquisition // the Lock call whose wait this is (it holds this handoffWait)
	cand *candidate
}

func (w *handoffWait) park() <-chan struct{} {
	a := w.a
	if w.cand == nil {
		w.cand = &candidate{h: a.h, lease: a.lease, renew: a.renew, ready: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
	}
	a.m.c.park(w.cand)
	return w.cand.poke
}

func (w *handoffWait) unpark() (bool, error, bool) {
	if w.cand == nil || w.cand.unclaim() {
		return false, nil, false
	}
	// A release claimed it: wait for its outcome while ctx and the Client live. If either
	// ends first, the wait ends and acquire settles the claim (claimedAtEnd).
	a := w.a
	select {
	case <-w.cand.ready:
	case <-a.ctx.Done():
		return false, errorf("lock %q: %w", a.m.name, a.ctx.Err()), true
	case <-a.m.c.life.Done():
		return false, errorf("lock %q: %w", a.m.name, ErrClosed), true
	}
	w.cand.state.Store(candIdle)
	o := &opHold{h: a.h, held: true} // the claim took h.op for this wait
	defer o.unlock()
	return a.m.handedOff(a.ctx, a.h, w.cand, o, &a.g, a.tr)
}

// handedOff records the outcome of a release that passed the lock to cand: (true, nil, true)
// when cand's owner now holds it; (false, err, true) when the outcome is unknown or the
// caller has gone; (false, nil, false) when the lock was not passed on, or its grant came too
// late to use (given back): the wait goes on. h.op must be held: the release that claimed cand
// took it, so that no other script of the owner runs between the grant and its record here.
// o is the caller's hold of it (nil: work already in the background, for a caller that has
// gone), g its grace (see grant), tr the observer's trace of the call (nil: none).
//
// A release whose outcome is unknown leaves the hand-off's unknown too. The hand-off is an
// acquire of cand's owner, sent under the sequence number the claiming release wrote into
// h.handoff, and it is resolved as any acquire of unknown outcome: replayed under that
// number, it is answered from the state if the release passed the lock on (the caller then
// holds it; for a caller that has gone, it is given back: resolveGone), and refused, the
// number spent, if not (the wait goes on; a release send still on its way then frees the
// lock instead of passing it on: release.lua). Before, a caller that had gone left a grant
// that stayed in Redis for its whole lease (the drift hunt, seed 1796324201455082267 trial
// 4), and a caller still waiting was told ErrUnknownOutcome at once, its number unspent.
func (m *Mutex) handedOff(ctx context.Context, h *hold, cand *candidate, o *opHold, g *grace, tr *acqTrace) (bool, error, bool) {
	vals := []int64{1, cand.token, 1}
	if cand.err != nil {
		site := replaySite{kind: m.v.obs, name: m.name, owner: h.owner, op: "acquire"}
		keys := []string{m.keys.lock, m.keys.fence} // the plain lock's: the one kind with hand-off
		args := []string{m.c.leaseArg(cand.lease), h.owner, spentMark + h.handoff}
		if o == nil {
			m.resolveGone(ctx, h, site, keys, args, cand.err, cand.sent, cand.lease, cand.renew)
			return false, errorf("lock %q: passed on by a release whose outcome is unknown: %w", m.name, cand.err), true
		}
		var err error
		var gone bool
		switch vals, _, err, gone = m.replayFor(ctx, h, o, g, site, keys, args, cand.err, cand.sent, cand.lease, cand.renew); {
		case gone:
			return false, err, true
		case err != nil:
			if _, isReply := rueidis.IsRedisErr(err); isReply {
				return false, classify("lock", m.name, err), true
			}
			return false, errorf("lock %q: passed on by a release whose outcome is unknown: %w", m.name, err), true
		case !isGrant(vals):
			return false, nil, false
		}
	} else if cand.token <= 0 {
		return false, nil, false
	}
	switch err := m.grant(ctx, h, vals, cand.sent, cand.lease, cand.renew, o, g, tr); {
	case errors.Is(err, watchdog.ErrClosed):
		return false, ErrClosed, true
	case errors.Is(err, errLateGrant):
		return false, nil, false
	case err != nil:
		return false, errorf("lock %q: %w", m.name, err), true
	}
	if tr != nil {
		tr.handedOff = true
	}
	return true, nil, true
}

// giveBackOne gives back one hold of h on behalf of a caller that has gone. If the give-back
// fails, this Client stops counting and renewing the hold (h.abandon): Redis lets it expire
// within its lease; the error is returned (for the observer). h.op must be held.
func (m *Mutex) giveBackOne(ctx context.Context, h *hold) error {
	err := m.release(ctx, h, nil)
	if err != nil && !errors.Is(err, ErrNotHeld) {
		h.abandon()
	}
	return err
}

// gaveBack tells the observer that one hold of h was given back on the Client's own
// initiative for reason (err: how the give-back failed).
func (m *Mutex) gaveBack(h *hold, reason GiveBackReason, err error) {
	if m.c.obs != nil && m.v.obs != "" {
		m.c.gaveBack(m.v.obs, m.name, h.owner, 1, reason, err)
	}
}

// leave runs the variant's leave (withdrawing what a wait that gave up registered in
// Redis) for a wait that ends: after this owner's operation in flight on the lock (the
// wait's own background work, say), and before its next one when it can (goroutines that
// share the owner share its place anyway). It holds the caller while ctx lives, and for
// what is left of the call's grace after.
func (m *Mutex) leave(ctx context.Context, h *hold, owner string, g *grace) {
	m.later(ctx, &opHold{h: h, held: h.tryLockOp()}, g, func() { m.v.leave(ctx, m, owner) })
}

// opHold is a call's possession of h.op, which it may hand over to work that goes on after
// the call (later).
type opHold struct {
	h    *hold
	held bool
}

// unlock gives h.op back unless it was handed over.
func (o *opHold) unlock() {
	if o.held {
		o.held = false
		o.h.unlockOp()
	}
}

// grace is how long, in all, a call may still wait after its ctx ended for work done on its
// behalf: returnGrace from the first such wait, however many steps wait.
type grace struct{ end time.Time }

// left starts the grace, at its first call (returnGrace from now), and returns what is left
// of it.
func (g *grace) left() time.Duration {
	if g.end.IsZero() {
		g.end = time.Now().Add(returnGrace)
	}
	return time.Until(g.end)
}

// wait waits for done while ctx lives, then for what is left of the grace.
func (g *grace) wait(ctx context.Context, done <-chan struct{}) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	d := g.left()
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// later runs work on behalf of a call, holding h.op and a reference on h until work is
// done. When the call holds h.op (through o), it hands it over (o no longer holds it);
// otherwise work takes it first, after whatever holds it now (work the call handed over
// before, say), or goes on without it if it cannot within the cleanup timeout. The call
// waits for work while its ctx lives and for its grace after (g, shared by the call's steps),
// then leaves it to the background (counted for Close).
func (m *Mutex) later(ctx context.Context, o *opHold, g *grace, work func()) {
	h, held := o.h, o.held
	o.held = false
	m.c.reref(h)
	done := make(chan struct{})
	m.c.background(func() {
		defer close(done)
		defer m.c.unref(h)
		if !held {
			cctx, cancel := m.c.cleanupCtx(ctx)
			held = h.lockOp(cctx) == nil
			cancel()
		}
		if held {
			defer h.unlockOp()
		}
		work()
	})
	g.wait(ctx, done)
}

// ackRetry is the pause before another attempt after a grant was given back for want of
// replica acknowledgements; outageRetry the first pause after Redis could not be reached.
const (
	ackRetry    = 10 * time.Millisecond
	outageRetry = 10 * time.Millisecond
)

// attempt makes one acquire request, replaying it under the same request id until its
// outcome is known. It returns whether the lock is now held, or else the holder's remaining
// lease.
// queue tells a variant that keeps a wait queue (the fair lock) whether a failed attempt
// joins it; for the plain lock (variant.marks) it says that the caller waits on the release
// channel if refused: the attempt then marks the lock when refused, and also when granted
// if the caller was waiting already (others may still be), so that the release publishes.
//
// attempt never outlives ctx by more than returnGrace: when ctx ends before an ambiguous
// acquire (its reply lost) is resolved, the resolution goes on in the background, and a hold
// it turns out to have granted is given back there.
//
// tr, when not nil, counts the attempt and records a grant for the observer.
func (m *Mutex) attempt(ctx context.Context, h *hold, lease time.Duration, renew, queue, waiting bool, g *grace, b *attemptBuf, tr *acqTrace) (bool, time.Duration, error) {
	if err := h.lockOp(ctx); err != nil {
		return false, 0, errorf("lock %q: %w", m.name, err)
	}
	o := &opHold{h: h, held: true}
	defer o.unlock()
	if _, lost := h.snapshot(); lost != nil {
		return false, 0, errorf("lock %q: %w", m.name, lost)
	}
	b.kv = [6]string{m.keys.lock, m.keys.fence, m.c.leaseArg(lease), h.owner, m.c.newRequest()}
	keys, args := b.kv[0:2:2], b.kv[2:5:6]
	switch {
	case m.v.marks && queue && waiting:
		args = append(args, "2")
	case m.v.marks && queue:
		args = append(args, "1")
	}
	if m.v.clockToken {
		if len(args) == 3 {
			args = append(args, "")
		}
		args = append(args, "c")
	}
	if m.v.acquireExtra != nil {
		k, a := m.v.acquireExtra(m, queue)
		keys, args = append(keys, k...), append(args, a...)
	}
	sent := time.Now() // the lease is counted from the first send
	if tr != nil {
		tr.attempts++
	}
	var vals []int64
	var acked int64
	var err error
	site := replaySite{kind: m.v.obs, name: m.name, owner: h.owner, op: "acquire"}
	if ctx.Done() == nil || b.direct {
		vals, acked, err = m.c.execAcquire(ctx, m.v.acquire, keys, args, b.vals[:0])
	} else if f := m.c.send(ctx, sent, true, m.v.acquire, keys, args); f.await(ctx) {
		// A ctx that can end: the caller must be able to leave (see inflight).
		vals, acked, err = append(b.vals[:0], f.vals...), f.acked, f.err
	} else {
		// The caller has gone before the first send was answered: resolve it in the
		// background, from its own answer when it comes, else by replays.
		m.later(ctx, o, g, func() {
			if !f.wait() {
				return // closed first
			}
			cctx, cancel := m.c.cleanupCtx(ctx)
			defer cancel()
			switch {
			case f.err != nil && !definitive(f.err):
				m.resolveGone(cctx, h, site, keys, replayArgs(args), f.err, sent, lease, renew)
			case f.err == nil && isGrant(f.vals):
				m.undo(cctx, h, f.vals, sent, lease, renew)
			}
		})
		return false, 0, errorf("lock %q: %w", m.name, ctx.Err())
	}
	if err != nil && !definitive(err) {
		// The request may or may not have been applied: replay it (same request id).
		var gone bool
		if vals, acked, err, gone = m.replayFor(ctx, h, o, g, site, keys, replayArgs(args), err, sent, lease, renew); gone {
			return false, 0, err
		}
	}
	if err != nil {
		return false, 0, classify("lock", m.name, err)
	}
	switch {
	case isGrant(vals):
		if vals[2] == 1 && acked < int64(m.c.opts.ackReplicas) {
			// Too few replicas have the fresh grant: a failover now could lose it.
			m.later(ctx, o, g, func() {
				// Conditional (keep 0), as every give-back the Client starts on its own: if
				// the WAIT outlasted a fixed lease, the hold Redis counts for the owner may
				// be one another Client took afresh.
				_, _, err := m.sendReleaseKeep(ctx, h.owner, nil, nil, nil, 0)
				m.gaveBack(h, GiveBackNoReplicaAck, err)
			})
			return false, 0, errorf("lock %q: %w (%d of %d acknowledged)", m.name, ErrNoReplicaAck, acked, m.c.opts.ackReplicas)
		}
		switch err := m.grant(ctx, h, vals, sent, lease, renew, o, g, tr); {
		case errors.Is(err, watchdog.ErrClosed):
			return false, 0, ErrClosed
		case err != nil:
			return false, 0, errorf("lock %q: %w", m.name, err)
		}
		return true, 0, nil
	case len(vals) == 2 && vals[0] == 0:
		if vals[1] < 0 {
			return false, -1, nil
		}
		return false, time.Duration(vals[1]) * time.Millisecond, nil
	}
	return false, 0, errorf("lock %q: malformed reply %v", m.name, vals)
}

// spentMark starts the request id of an acquire's replay (spentMark in lib_fence.lua): the
// script spends the id, so that the request's first send, if it reaches Redis after the
// replay (rueidis spreads a client's commands over several connections: nothing orders a
// replay after the send it replays), grants nothing. Without it, a first send that the
// caller had given up on could take the lock afresh after the replay's grant was given back:
// a hold nobody records or renews, blocking every other owner until its lease ends.
const spentMark = "+"

// spentGone starts the permit id of a permit acquire's resend sent after its caller has gone
// (spentAlways in lib_spent.lua): the id is spent even if the resend is refused.
const spentGone = "!"

// replayArgs returns an acquire script's ARGV (lease, owner, request id, ...) as its replays
// send them: the request id marked as a replay's (spentMark). args is left as it is.
func replayArgs(args []string) []string { return replayArgsAt(args, 2) }

// replayArgsAt is replayArgs for a script whose request id is args[i].
func replayArgsAt(args []string, i int) []string {
	r := append([]string(nil), args...)
	r[i] = spentMark + r[i]
	return r
}

// replayFor replays an acquire (keys, and args as a replay sends them) whose first send, sent
// at sent, failed with first, its outcome unknown, until Redis answers, within the cleanup
// timeout, for as long as the caller (ctx) waits. It returns the script's answer and, for a
// fresh grant when the Client waits for replicas, how many acknowledged it. If the caller goes
// first, gone is true, err is ctx's, and what is left goes on in the background under o: the
// replaying (resolveGone), or the give-back of a grant learnt (undo). h.op must be held.
func (m *Mutex) replayFor(ctx context.Context, h *hold, o *opHold, g *grace, site replaySite, keys, args []string, first error, sent time.Time, lease time.Duration, renew bool) (vals []int64, acked int64, err error, gone bool) {
	cctx, cancel := m.c.cleanupCtx(ctx)
	wctx, wcancel := context.WithCancel(cctx)
	stop := context.AfterFunc(ctx, wcancel)
	res, err := m.c.replay(wctx, nil, site, m.v.acquire, keys, args, first)
	stop()
	wcancel()
	if _, isReply := rueidis.IsRedisErr(err); err != nil && !isReply && ctx.Err() != nil && cctx.Err() == nil && !errors.Is(err, ErrClosed) {
		// The caller has gone first: resolve the request in the background.
		m.later(ctx, o, g, func() {
			defer cancel()
			m.resolveGone(cctx, h, site, keys, args, first, sent, lease, renew)
		})
		return nil, 0, errorf("lock %q: %w", m.name, ctx.Err()), true
	}
	if err == nil {
		vals, err = res.AsIntSlice()
	}
	if err == nil && isGrant(vals) && vals[2] == 1 && m.c.opts.ackReplicas > 0 {
		acked = m.c.ackAfterTouch(cctx, m.keys.lock, lease)
	}
	if err == nil && isGrant(vals) && ctx.Err() != nil {
		// Granted, but the caller is gone: give it back.
		m.later(ctx, o, g, func() { defer cancel(); m.undo(cctx, h, vals, sent, lease, renew) })
		return nil, 0, errorf("lock %q: %w", m.name, ctx.Err()), true
	}
	cancel()
	return vals, acked, err, false
}

// resolveGone resolves, for a caller that has gone, an acquire whose first send's outcome
// (first) is unknown: it replays the request (args marked as a replay's) within cctx, and
// gives back a grant it learns of (undo). A hold of an outcome still unknown, if Redis
// granted it, is never renewed by this Client and expires with its lease, unless the owner's
// next grant through this Client finds it first among the Client's holds in Redis and gives
// it back (hold.granted's extra). h.op must be held; it runs in the background.
func (m *Mutex) resolveGone(cctx context.Context, h *hold, site replaySite, keys, args []string, first error, sent time.Time, lease time.Duration, renew bool) {
	res, err := m.c.replay(cctx, nil, site, m.v.acquire, keys, args, first)
	if err != nil {
		return
	}
	if vals, err := res.AsIntSlice(); err == nil && isGrant(vals) {
		m.undo(cctx, h, vals, sent, lease, renew)
	}
}

// isGrant reports whether vals is an acquire script's grant: {1, token, holds}, or {1, token,
// holds, mine} for a context owner (mine: the holds this Client's operations took, lib_seq.lua).
func isGrant(vals []int64) bool { return (len(vals) == 3 || len(vals) == 4) && vals[0] == 1 }

// undo gives back what an acquire reply granted a caller that has gone. If the give-back
// fails, this Client stops counting and renewing the hold (h.abandon): Redis lets it expire
// within its lease. h.op must be held; undo runs in the background.
func (m *Mutex) undo(ctx context.Context, h *hold, vals []int64, sent time.Time, lease time.Duration, renew bool) {
	var tr acqTrace
	if err := m.grant(ctx, h, vals, sent, lease, renew, nil, nil, &tr); err == nil {
		if !tr.reentered {
			h.hideTenure()
		}
		m.gaveBack(h, GiveBackCanceled, m.giveBackOne(ctx, h))
	}
}

// grant records the hold an acquire reply {1, token, holds} granted. When the reply shows
// that the owner's earlier hold had been lost unnoticed (Redis granted afresh what the owner
// believed it held), the new hold is given back at once and the loss reported: a lost lock
// is never silently taken again. A grant that came back too late to use is given back too
// (errLateGrant). When Redis counts holds of the owner that this Client had let go of
// (orphans: see hold.granted), grant gives them back, never beyond the holds Redis counts
// for this Client (giveBackOrphans), so that Redis's count is this Client's again. h.op must
// be held; through o (nil when grant already runs in the
// background), the give-backs take it over and run in the background after the call's
// grace g (see later). tr, when not nil, records the grant for the observer.
func (m *Mutex) grant(ctx context.Context, h *hold, vals []int64, sent time.Time, lease time.Duration, renew bool, o *opHold, g *grace, tr *acqTrace) error {
	mine := vals[2]
	if len(vals) == 4 {
		mine = vals[3] // a context owner: the holds this Client's operations took
	}
	fresh, extra, err := h.granted(vals[1], vals[2], mine, sent, lease, renew)
	reason := GiveBackOrphan
	// The grant itself is given back only while Redis counts it for this Client (keep 0): a
	// late grant's lease may have run out in Redis, and the owner's hold there may now be one
	// that another Client took afresh for a context owner (the same id through several
	// Clients), which an unconditional give-back would take.
	keep := 0
	switch {
	case errors.Is(err, ErrLockLost):
		extra, reason = 1, GiveBackLost // the grant itself
	case errors.Is(err, errLateGrant):
		extra, reason = 1, GiveBackLate
	case err != nil:
		return err
	default:
		tr.granted(fresh, vals[1])
		keep = h.holds()
	}
	if extra <= 0 {
		return err
	}
	giveBack := func() {
		// Orphans: each gives back one hold while Redis counts more of this Client's than
		// keep, so never this grant's, and the lock stays held. One that fails leaves the
		// orphan to the end of this tenure, whose last Unlock gives back what Redis still
		// counts of this Client's (hold.released).
		_, rerr := m.giveBackOrphans(ctx, h.owner, keep, extra)
		if m.c.obs != nil && m.v.obs != "" {
			// Holds: how many were to be given back (GiveBackInfo), as Redis may have let
			// some expire meanwhile (a late grant's fixed lease).
			m.c.gaveBack(m.v.obs, m.name, h.owner, int(extra), reason, rerr)
		}
	}
	if o == nil {
		giveBack()
	} else {
		m.later(ctx, o, g, giveBack)
	}
	return err
}

// giveBackOrphans gives back at most n holds of owner that this Client let go of, one
// release each, within one cleanup timeout. With keep >= 0 each release is conditional in
// Redis (the release script's keep): it gives back a hold only while Redis counts more than
// keep holds of this Client's operations (for a handle's owner, the owner's holds; for a
// context owner, this Client's count, lib_seq.lua): so a hold whose give-back Redis applied
// after all is not given back twice, and another Client's hold of a context owner is never
// taken. keep < 0 gives back n holds unconditionally (no caller asks for it: even a grant
// given back at once goes with keep 0, see grant). It stops at the first release that
// fails, or that finds nothing more to give back, and returns how many holds it gave back
// and the failure.
func (m *Mutex) giveBackOrphans(ctx context.Context, owner string, keep int, n int64) (int64, error) {
	cctx, cancel := m.c.cleanupCtx(ctx)
	defer cancel()
	var given int64
	for ; given < n; given++ {
		left, _, err := m.sendReleaseKeep(cctx, owner, nil, nil, nil, keep)
		if err != nil {
			return given, err
		}
		if left == releaseKept || left < 0 {
			return given, nil // nothing more of this Client's beyond keep, or nothing at all
		}
		if left == 0 {
			return given + 1, nil // the lock is free
		}
	}
	return given, nil
}

// releaseKept is the release scripts' answer to a conditional give-back (keep) that found no
// more than keep holds of the Client's: nothing was written.
const releaseKept = -4

// replay re-sends a script whose first send failed with first (not a Redis reply) until it
// gets the script's answer from Redis or ctx ends. The scripts answer a replayed request id
// without applying it twice. An error reply in which Redis declines to run the replay (BUSY,
// LOADING, READONLY, ...) is no answer: the first send may have been applied all the same,
// so replaying goes on. While Redis cannot even be reached, replaying stops early once the
// caller's own context (caller, may be nil) has ended: it could go on for the whole cleanup
// timeout for nothing, and the caller is owed a prompt answer. ctx must come from
// cleanupCtx: replaying then also stops when the Client is closed, and when the rueidis
// client is; the error then wraps ErrClosed (and ErrUnknownOutcome).
//
// site names the request for the observer's Replay event, told once the replaying ends.
func (c *Client) replay(ctx, caller context.Context, site replaySite, s *lua.Script, keys, args []string, first error) (rueidis.RedisResult, error) {
	res, _, err := c.replayAt(ctx, caller, site, s, keys, args, first)
	return res, err
}

// replayAt is replay that also returns when the send that was answered left.
func (c *Client) replayAt(ctx, caller context.Context, site replaySite, s *lua.Script, keys, args []string, first error) (res rueidis.RedisResult, at time.Time, err error) {
	if o := c.obs; o != nil && site.kind != "" {
		sends := 1 // the first send
		defer func() {
			o.replay(ReplayInfo{Kind: site.kind, Name: site.name, Owner: site.owner, Op: site.op, Sends: sends, Err: err})
		}()
		return c.replayLoop(ctx, caller, s, keys, args, first, &sends)
	}
	return c.replayLoop(ctx, caller, s, keys, args, first, nil)
}

// replayLoop is replayAt; sends, when not nil, counts the sends.
func (c *Client) replayLoop(ctx, caller context.Context, s *lua.Script, keys, args []string, first error, sends *int) (rueidis.RedisResult, time.Time, error) {
	rctx, cancel := context.WithCancelCause(ctx) // ctx is a cleanupCtx: it ends with Close
	defer cancel(nil)
	backoff := 5 * time.Millisecond
	last := first
	unknown := func() (rueidis.RedisResult, time.Time, error) {
		return rueidis.RedisResult{}, time.Time{}, errorf("%w: %w (last error: %w)", ErrUnknownOutcome, context.Cause(rctx), last)
	}
	for {
		if errors.Is(last, rueidis.ErrClosing) {
			return rueidis.RedisResult{}, time.Time{}, errorf("%w: %w: the rueidis client is closed (%w)", ErrUnknownOutcome, ErrClosed, last)
		}
		if err := sleep(rctx, backoff); err != nil {
			return unknown()
		}
		backoff = min(2*backoff, 250*time.Millisecond)
		sent := time.Now()
		if sends != nil {
			*sends++
		}
		res := c.exec(rctx, s, keys, args)
		err := res.Error()
		if re, isReply := rueidis.IsRedisErr(err); err == nil || isReply && answers(re) {
			return res, sent, err
		}
		// A replay that could not even be sent (a refused dial) says nothing of the first
		// send: keep trying, unless the caller has gone.
		if rctx.Err() == nil {
			last = err
		}
		if caller != nil && caller.Err() != nil && transient(err) {
			cancel(caller.Err())
			return unknown()
		}
	}
}

// Unlock gives back one hold of the caller's owner; the lock is free when every hold is
// given back, and then one waiter is woken. Unlock works even when ctx is already cancelled:
// it uses ctx's values with its own timeout ([WithCleanupTimeout]). When it returns, the
// watchdog no longer renews a lock that it freed.
//
// Unlock returns nil on success, or:
//  1. [ErrNotHeld] when the owner holds no hold: never locked, already unlocked, expired or
//     taken by another (the loss cause is joined when the owner was told of a loss; after a
//     fixed lease ran its course, the error wraps [ErrLeaseExpired], even when Redis still
//     had the hold for the drift allowance and Unlock gave it back there);
//  2. [ErrWrongType], [ErrClosed], [ErrInvalid], or a Redis error, wrapped. A give-back that
//     Redis cannot serve yet (unreachable, loading, a Cluster slot being migrated or a
//     master failing over: nothing was applied) is sent again with backoff, and its error
//     is returned only when the cleanup timeout ends first;
//  3. [ErrUnknownOutcome] when the give-back was sent and no answer came within the cleanup
//     timeout: Redis may or may not have applied it. The Client counts the hold as given
//     back all the same (do not call Unlock again for it): when the owner holds others, Redis
//     gives it back with them once it answers again (at the first renewal it confirms), never
//     one of the owner's own, for an owner of this Client's handles; for a context owner,
//     whose holds other Clients may count too, it rides with the owner's holds and expires
//     with its lease once nobody renews them; a last hold Redis still has is no longer
//     renewed and expires with its lease ([Mutex.HoldCount] counts it meanwhile).
//
// An Unlock that waits for another call of the same owner on this lock (one handle or owner
// used by several goroutines) gives back a hold of the owner's tenure in force when Unlock was
// called: if that tenure ends meanwhile (a fixed lease runs out) and the running call begins
// another, Unlock gives nothing back and returns as in case 1, ErrLeaseExpired after a fixed
// lease; the new tenure's holds stay with the caller that took them.
//
// Unlock gives back a hold of whatever Redis counts for the owner: an owner that took no hold
// through this Client but has one in Redis (left by an acquire whose outcome stayed unknown,
// or, for a context owner ([WithOwner]), taken through another Client) gives it back, and
// Unlock returns nil.
func (m *Mutex) Unlock(ctx context.Context) error {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return err
	}
	if o := m.c.obs; o != nil && m.v.obs != "" {
		if m.c.isClosed() {
			return ErrClosed
		}
		si := ReleaseStartInfo{Kind: m.v.obs, Name: m.name, Owner: owner}
		start := o.now()
		octx := o.releaseStart(ctx, si)
		rt := &relTrace{}
		err := m.unlock(ctx, owner, rt, nil, nil)
		o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start,
			Freed: rt.freed && err == nil, HandedOff: rt.handedOff && err == nil})
		return err
	}
	return m.unlock(ctx, owner, nil, nil, nil)
}

// relTrace is what an observed release learns, for its ReleaseDone.
type relTrace struct{ freed, handedOff bool }

// unlock is Unlock for owner; rt, when not nil, traces it for the observer. failed, when not
// nil, is called with h and the error when the release ran and failed (not when unlock gave
// up before it: a closed Client, h.op busy for the whole cleanup timeout), while h.op is
// still held: no other call of the owner on the lock has run since (a RedLock's give-back
// abandons the hold there, giveBackInst). held, when not nil, is called once h.op is taken
// (or when unlock gives up before): a RedLock's Unlock that leaves its give-backs to the
// background returns only then, so that each is ahead of the owner's next request there.
func (m *Mutex) unlock(ctx context.Context, owner string, rt *relTrace, failed func(h *hold, err error), held func()) error {
	if held != nil {
		// Told once h.op is taken (the give-back is then ahead of any later request of the
		// owner on this lock from this Client), or when unlock gives up before.
		once := sync.OnceFunc(held)
		held = once
		defer once()
	}
	h, err := m.c.ref(m, owner)
	if err != nil {
		return err
	}
	defer m.c.unref(h)
	if !h.tryLockOp() {
		// Another call of this owner on this lock is running (or finishing in the
		// background): wait for it, within the one cleanup timeout the whole Unlock has.
		// The hold this Unlock gives back is one of the tenure in force now: if that tenure
		// ends meanwhile (its fixed lease runs out, another Unlock gives back its last hold)
		// and another begins (the running call's fresh grant), the caller's hold went with
		// the first, and the new one's holds are not the caller's to give back (seed
		// 13329750963578692308 of the model test).
		t, _ := h.snapshot()
		cctx, cancel := m.c.cleanupCtx(ctx)
		defer cancel()
		if err := h.lockOp(cctx); err != nil {
			return errorf("unlock %q: %w", m.name, context.Cause(cctx))
		}
		if now, _ := h.snapshot(); t != nil && now != nil && now != t {
			h.unlockOp()
			return errorf("unlock %q: %w", m.name, endedErr(t.endedBy()))
		}
		ctx = cctx
	}
	defer h.unlockOp()
	if held != nil {
		held()
	}
	err = m.release(ctx, h, rt)
	if errors.Is(err, ErrNoPermission) || errors.Is(err, ErrUnknownOutcome) && h.holds() > 0 {
		// Redis refuses the give-back for want of rights, and would refuse it again, or no
		// answer told whether it was applied: this Client stops counting and renewing the hold
		// (hold.abandon). Another hold of the owner keeps it as an orphan, given back once
		// Redis answers (never beyond the holds Redis counts for this Client: if the
		// give-back was applied after all, nothing more goes, and a context owner's holds
		// taken through other Clients stay); the last expires with its lease if Redis still
		// has it, unless the owner's next grant finds it first. Counting it on (as before)
		// left the Client one hold above Redis when the give-back had been applied, until
		// the tenure ended as lost (the drift hunt), or renewed for ever a last hold that was
		// not given back.
		h.abandon()
	}
	if err != nil && failed != nil {
		failed(h, err)
	}
	return err
}

// release gives back one hold of h and updates h. h.op must be held. When it gives back the
// last hold and a waiter of this Client is parked on the lock, it passes the lock to that
// waiter in the same script (handoff.go). rt, when not nil, records for the observer
// whether the release ended the tenure and whether it passed the lock on.
func (m *Mutex) release(ctx context.Context, h *hold, rt *relTrace) error {
	t, lost := h.snapshot()
	_, why := h.why()
	expired := errors.Is(why, ErrLeaseExpired)
	last := lost == nil && t != nil && h.holds() == 1
	var cand *candidate
	if m.v.handoff && m.c.opts.ackReplicas == 0 && last {
		cand = m.c.claim(h)
	}
	if !last {
		t = nil
	} else {
		h.beginRelease(t)
	}
	sent := time.Now()
	n, token, err := m.sendRelease(ctx, h.owner, cand, h, t)
	if err != nil && t != nil {
		h.releaseFailed(t)
	}
	if cand != nil {
		var unknown error
		if err != nil && !definitive(err) {
			unknown = err
		}
		if n != 0 {
			token = 0
		}
		cand.settle(token, sent, unknown)
	}
	if err != nil {
		return err
	}
	if rt != nil {
		rt.freed = last && n >= 0
		rt.handedOff = cand != nil && n == 0 && token > 0
	}
	if extra := h.released(n); extra > 0 {
		// This Client's last hold is given back, and Redis still counts holds of the owner:
		// those this Client let go of (orphans, holds of an acquire whose outcome it never
		// learnt) go too, so the lock is free now rather than at the end of their lease; a
		// context owner's holds taken through other Clients stay (keep 0: never beyond what
		// Redis counts for this Client).
		given, rerr := m.giveBackOrphans(ctx, h.owner, 0, extra)
		if m.c.obs != nil && m.v.obs != "" && (given > 0 || rerr != nil) {
			m.c.gaveBack(m.v.obs, m.name, h.owner, int(max(given, 1)), GiveBackOrphan, rerr)
		}
	}
	switch {
	case lost != nil:
		return errorf("unlock %q: %w (%w)", m.name, ErrNotHeld, lost)
	case expired:
		return errorf("unlock %q: %w", m.name, ErrLeaseExpired)
	case n < 0:
		return errorf("unlock %q: %w", m.name, ErrNotHeld)
	}
	return nil
}

// sendRelease runs the release script for owner, on a context that outlives ctx, replaying
// it until Redis answers. It returns the owner's remaining holds, 0 when the lock was freed,
// -1 when the owner held none; with a successor (next, may be nil), also the token of the
// grant that passed the lock to it (0 when it did not).
//
// t is the tenure of h whose last hold (as this Client counts) the release gives back, or
// nil. A replay that finds the owner's holds gone, and no force that took them (release.lua
// answers -2), counts as the first send having freed the lock only when t is given and the
// replay was sent before t's lease ran out on this Client's conservative clock: until then
// the lease cannot have run out in Redis. Otherwise the owner held none (-1). The deadline is
// the later of the one known before the first send and the one known at the replay: a
// renewal that finds the lock already freed by the first send ends the lease (it was not
// lost: it was given back).
func (m *Mutex) sendRelease(ctx context.Context, owner string, next *candidate, h *hold, t *tenure) (int64, int64, error) {
	return m.sendReleaseKeep(ctx, owner, next, h, t, -1)
}

// sendReleaseKeep is sendRelease; keep >= 0 (only without a successor) makes the release the
// give-back of a hold this Client let go of, applied only while Redis counts more than keep
// holds of this Client's (the release script's ARGV[8]): else it answers releaseKept.
func (m *Mutex) sendReleaseKeep(ctx context.Context, owner string, next *candidate, h *hold, t *tenure, keep int) (int64, int64, error) {
	fctx, fcancel := m.c.firstSendCtx(ctx)
	defer fcancel()
	channel := m.keys.pub
	if m.v.spin {
		channel = ""
	}
	req := m.c.newRequest()
	var keys, args []string
	if m.v.forced {
		keys = []string{m.keys.lock, m.keys.forced}
		args = []string{owner, req, channel, ""}
	} else {
		keys = []string{m.keys.lock, m.keys.releaseRecord(req)}
		args = []string{owner, req, channel, strconv.FormatInt(2*m.c.opts.cleanupTimeout.Milliseconds(), 10)}
	}
	if m.v.releaseExtra != nil {
		k, a := m.v.releaseExtra(m)
		keys, args = append(keys, k...), append(args, a...)
	}
	if next != nil {
		next.h.handoff = m.c.newRequest() // the claim holds next.h.op (hold.handoff)
		keys = append(keys, m.keys.fence)
		args = append(args, next.h.owner, strconv.FormatInt(next.lease.Milliseconds(), 10), next.h.handoff)
	} else if keep >= 0 {
		for len(args) < 7 {
			args = append(args, "") // ARGV[5..7]: no successor (release.lua), unused (the others)
		}
		args = append(args, strconv.Itoa(keep))
	}
	parse := func(res rueidis.RedisResult) (int64, int64, error) {
		if next == nil {
			n, err := res.AsInt64()
			return n, 0, err
		}
		vals, err := res.AsIntSlice()
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("malformed reply %v", vals)
		}
		if err != nil {
			return 0, 0, err
		}
		return vals[0], vals[1], nil
	}
	var before time.Time // t's deadline before the first send
	if t != nil {
		before = h.deadline(t)
	}
	// A first send that Redis could not serve (a refused dial, a failover or a migration
	// in progress) applied nothing: it goes again, within the cleanup timeout.
	first := keys
	if m.v.forced && m.v.releaseExtra == nil {
		// A first send reads no forced record (release.lua reads it on replays only): it
		// leaves it out, so that every key it names exists. A Cluster node serves such a
		// script while the slot migrates (following ASK); one that names a key that exists
		// nowhere is refused (TRYAGAIN) for as long as the migration lasts. With a
		// successor, the lock's key stands in for the record, keeping the fence third.
		if next == nil {
			first = keys[:1]
		} else {
			first = []string{keys[0], keys[0], keys[2]}
		}
	}
	res := m.c.execServed(fctx, m.v.release, first, args)
	err := res.Error()
	var sent time.Time
	if err != nil && !definitive(err) {
		dl, _ := fctx.Deadline()
		cctx, cancel := m.c.cleanupCtxUntil(fctx, dl)
		defer cancel()
		if m.v.forced {
			// A replay names the tenure it gives a hold of back, so that the script can
			// tell a hold forced away from one this request freed.
			// It names it for a hold that is not the last too (the tenure in force), so
			// that a replay reaching a tenure begun since (the first send freed the lock, or
			// the lease ran out, and a grant took it afresh: for a context owner perhaps
			// through another Client) gives nothing back there (release.lua).
			args[3] = "0"
			if t != nil {
				args[3] = strconv.FormatInt(t.token, 10)
			} else if h != nil {
				if cur, _ := h.snapshot(); cur != nil {
					args[3] = strconv.FormatInt(cur.token, 10)
				}
			}
		}
		site := replaySite{kind: m.v.obs, name: m.name, owner: owner, op: "release"}
		res, sent, err = m.c.replayAt(cctx, ctx, site, m.v.release, keys, args, err)
	}
	var n, token int64
	if err == nil {
		n, token, err = parse(res)
	}
	if err != nil {
		return 0, 0, classify("unlock", m.name, err)
	}
	if n == -3 {
		// Only a release sent beside a later operation of the owner on the lock (not one
		// after another, as h.op keeps them) meets it: nothing was given back.
		return 0, 0, errorf("unlock %q: %w: the owner's later operation reached Redis first", m.name, ErrUnknownOutcome)
	}
	if n == -2 {
		n = -1
		if t != nil && (sent.Before(before) || sent.Before(h.deadline(t))) {
			n = 0
		}
	}
	return n, token, nil
}

// ForceUnlock frees the lock whoever holds it and wakes a waiter. It reports whether there
// was a lock to free. The former holder learns of the loss at its next renewal. A key of
// another type is left untouched: the error wraps [ErrWrongType].
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	return m.force(ctx, nil)
}

// force frees the lock, with ARGV seen appended to the force script's (ARGV[4...] of
// force_release.lua: the token and owners seen; none frees whoever holds it). A lock held
// otherwise than seen is left alone: the error wraps ErrConflict.
func (m *Mutex) force(ctx context.Context, seen []string) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	if m.c.isClosed() {
		return false, ErrClosed
	}
	if seen != nil && m.v.force != lua.ForceRelease {
		return false, invalid("force unlock %q: this kind cannot be freed as seen", m.name) // no such kind today
	}
	keys, args := []string{m.keys.lock}, []string{m.keys.pub, m.v.forceMessage}
	if m.v.spin {
		args[0] = ""
	}
	if m.v.force == lua.ForceRelease {
		// A holder replaying a release of what this takes asks the record, for as long as
		// it may: until its lease would have run out, and its cleanup timeout after. (Any
		// kind that frees with this script may take a plain lock's holds: the fair lock
		// shares its hash.)
		keep := max(forcedKeep, 2*m.c.opts.cleanupTimeout)
		keys = append(keys, m.keys.forced)
		args = append(args, strconv.FormatInt(keep.Milliseconds(), 10))
	}
	args = append(args, seen...)
	n, err := m.c.exec(ctx, m.v.force, keys, args).AsInt64()
	if err != nil {
		return false, classify("force unlock", m.name, err)
	}
	if n == -1 {
		return false, errorf("force unlock %q: %w: nothing freed", m.name, ErrConflict)
	}
	return n == 1, nil
}

// forcedKeep is the least time a forced record outlives the lease it ended (force_release.lua):
// more than any holder's cleanup timeout that is not set far above the default.
const forcedKeep = time.Minute

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	t, err := m.keyType(ctx)
	return t == "hash", err
}

func (m *Mutex) keyType(ctx context.Context) (string, error) {
	if err := m.check(ctx); err != nil {
		return "", err
	}
	if m.c.isClosed() {
		return "", ErrClosed
	}
	t, err := m.c.rc.Do(ctx, m.c.rc.B().Type().Key(m.keys.lock).Build()).ToString()
	if err != nil {
		return "", classify("type of", m.name, err)
	}
	if t != "hash" && t != "none" {
		return "", errorf("lock %q: %w (a %s)", m.name, ErrWrongType, t)
	}
	return t, nil
}

// HoldCount is the number of holds the caller's owner has on the lock, as Redis sees it (0
// when it holds none). It is the number of holds the owner took and has not given back, but
// for two windows: a re-entry granted to a caller that had gone (its ctx ended while the
// reply was on the way), whose give-back then failed (Redis did not answer within the
// cleanup timeout), is counted until the watchdog's first renewal that Redis confirms after
// that (within one renewal period of Redis answering again; under a fixed lease, until the
// lease ends or the owner's last Unlock; for a context owner, [WithOwner], which other Clients
// may share, until its last Unlock through this Client); and a hold from an acquire whose
// outcome stayed unknown (its caller had gone, or was told [ErrUnknownOutcome]; only the
// Observer's Replay event tells the former), or that an Unlock told [ErrUnknownOutcome] may
// not have given back, is counted until the owner's next grant or last Unlock finds it, or
// the first renewal Redis confirms (an owner of this Client's handles), or its lease ends
// once nobody renews the owner's holds.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	if m.c.isClosed() {
		return 0, ErrClosed
	}
	n, err := m.c.rc.Do(ctx, m.c.rc.B().Hget().Key(m.keys.lock).Field(owner).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, classify("hold count of", m.name, err)
	}
	return int(n), nil
}

// TTL is the lock's remaining lease in Redis, whoever holds it: 0 when it is not locked,
// -1ms when the key has no expiry (it was not set by relock).
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if _, err := m.keyType(ctx); err != nil {
		return 0, err
	}
	ms, err := m.c.rc.Do(ctx, m.c.rc.B().Pttl().Key(m.keys.lock).Build()).AsInt64()
	if err != nil {
		return 0, classify("ttl of", m.name, err)
	}
	switch {
	case ms == -2:
		return 0, nil
	case ms == -1:
		return -time.Millisecond, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// tenure returns the caller's owner's current tenure on this Client, or else why there is
// none: ErrNotHeld, the loss that ended the last one while the owner still counts holds, or
// ErrLeaseExpired when the last one ran to the end of its fixed lease (see Mutex.Err).
func (m *Mutex) tenure(ctx context.Context) (*tenure, error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return nil, err
	}
	h := m.c.peekFor(m, owner)
	if h == nil {
		return nil, ErrNotHeld
	}
	return h.why()
}

// Done returns a channel that is closed when the caller's owner's current hold on the lock
// ends: released by its last Unlock, lost (see [Mutex]), run to the end of its fixed lease,
// or ended by [Client.Close]. When the owner holds no hold through this Client (or the
// handle is invalid), the channel is already closed. [Mutex.Err] tells why it closed
// ([ErrLeaseExpired] for a fixed lease that ran its course). Nothing else closes it.
func (m *Mutex) Done(ctx context.Context) <-chan struct{} {
	t, _ := m.tenure(ctx)
	if t == nil {
		return closedCh
	}
	return t.doneCh()
}

// Err is nil while the caller's owner holds the lock through this Client; otherwise it says
// why not:
//   - an error wrapping [ErrLockLost]: lost, until every hold has been unlocked;
//   - [ErrLeaseExpired], which wraps [ErrNotHeld]: the last hold was taken with a fixed lease
//     ([Mutex.LockLease], [Mutex.TryLock] with lease > 0) and the lease ran its course, until
//     the owner locks again or calls Unlock. The handle that took the hold reports it; another
//     handle of the same name reports plain ErrNotHeld, and so does this handle (for a context
//     owner, [WithOwner]) once it has been used for another owner since;
//   - [ErrNotHeld]: never held, or released;
//   - [ErrClosed], or [ErrInvalid] for an invalid handle or owner.
func (m *Mutex) Err(ctx context.Context) error {
	if _, err := m.ownerOf(ctx); err != nil {
		return err
	}
	if m.c.isClosed() {
		return ErrClosed
	}
	_, err := m.tenure(ctx)
	return err
}

// Token is the fencing token of the caller's owner's current hold: a number that strictly
// rises with every fresh grant of this lock name (re-entry keeps it). The name's counter of
// tokens is set from the Redis server's clock in microseconds (to the larger of that and the
// last token + 1) and then counts up by one per fresh grant for a second ([lua.CounterTTL]),
// when it expires; so a token is the server's clock at its grant to within a second, and does
// not rise by exactly one. The counter can also be lost with a restart without persistence or
// a failover to a replica that lacked it: tokens keep rising across all of these as long as
// the server's clock reads later than it did at the name's last grant (it was not set back).
// (A fair lock's, a read-write lock's and a RedLock's tokens follow the clock at every grant;
// their counter lives a day, [lua.FenceTTL].) Pass it to the resource you protect and have it
// refuse any token lower than one it has seen: that is what keeps a paused or partitioned
// former holder from doing harm. It returns [ErrNotHeld] when the owner holds no hold through
// this Client.
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	t, err := m.tenure(ctx)
	if err != nil {
		return 0, errorf("token of %q: %w", m.name, err)
	}
	return t.token, nil
}

// HoldContext returns a copy of ctx that is also cancelled when the caller's owner's current
// hold ends; [context.Cause] then tells why: an error wrapping [ErrLockLost], [ErrNotHeld]
// (released by Unlock) or [ErrClosed]. It is cancelled before the call that ended the hold
// returns (an Unlock that found the lock gone has set the cause [ErrLockLost] by the time it
// returns ErrNotHeld), so calling cancel right after never hides the cause. Run the guarded work under it to stop as soon as
// the lock is lost. When the owner holds no hold, the context is already cancelled, with
// the reason [Mutex.Err] gives as cause. Call cancel when done with it.
func (m *Mutex) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background() // the error says nil context
	}
	hctx, cancel := context.WithCancelCause(ctx)
	t, err := m.tenure(ctx)
	switch {
	case err != nil:
		cancel(err)
	default:
		stop := t.subscribe(func(cause error) { cancel(cause) })
		return hctx, func() { stop(); cancel(context.Canceled) }
	}
	return hctx, func() { cancel(context.Canceled) }
}
