package rlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/watchdog"
)

// The acquire flow of Mutex and its variants: Lock, LockLease and TryLock (mutex.go) ->
// acquire -> waitForHold (the wait, wait.go) -> attempt (one acquire script, replayFor when
// its outcome is unknown) -> grant (the reply recorded in the hold: hold.granted). Work left
// when the caller goes (resolveGone, undo, give-backs) runs under the hold's op in the
// background (later), within the caller's grace. The hand-off path is in handoff.go, the
// release flow in release.go, replays in replay.go.

// returnGrace bounds how long Lock and TryLock outlive their ctx when work is left to do on
// its behalf (resolving an acquire whose reply was lost, giving back a grant that came too
// late): they wait that long for it, then return and leave it to finish in the background,
// within the cleanup timeout ([WithCleanupTimeout]); Close waits for it. It is half of README
// guarantee 6's 100 ms, so that the caller, which starts it when it sees ctx's end and then
// returns, still returns within 100 ms of that end on a loaded machine, whose runtime may
// fire the grace's timer late (TestGuarantee6_margin): at 100 ms it returned 100.5 ms after,
// every time; at 80 ms a timer fired 31 ms late under CI's load and the call returned 110 ms
// after (TestExplore_WaitBound, seed 1796500206977160763, SpinMutex.LockLease).
const returnGrace = 50 * time.Millisecond

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
	a := &acquisition{m: m, ctx: ctx, h: h, lease: lease, renew: renew, queue: wait != 0, tr: tr, g: grace{ctx: ctx}}
	g := &a.g // shared by every step of this call that waits past ctx's end

	// A re-entry never waits: an owner that holds the lock through this Client goes to Redis
	// at once, ahead of every waiter, and never parks as a hand-off candidate.
	reentry := h.holds() > 0
	sure := reentry // granted for sure: a re-entry, or a writer's read acquire (sureWith)
	if !sure && m.v.sureWith != nil {
		if wh := m.c.peek(m.keys, m.v.sureWith, owner); wh != nil && wh.holds() > 0 {
			sure = true
		}
	}
	if wait > 0 && !sure {
		// No attempt begins after the wait bound, nor waits past it for its turn (h.op)
		// behind another call of the owner (a sibling goroutine's, or work one left to the
		// background). waitLoop's own deadline, taken just after, is no earlier. A
		// re-entry, or a writer's read acquire, sure to be granted, waits for its turn within
		// ctx only, as Lock's (a writer's read acquire did not until RWMutex seed
		// 5722753596065657270: TestRWMutex_TryRLock_writersReadWaitsForItsTurn). wait 0
		// makes exactly one attempt: it waits for its turn within ctx.
		a.until = time.Now().Add(wait)
	}
	spec := waitSpec{op: "lock", name: m.name, channel: m.keys.channel, queue: m.v.queue && !reentry, spin: m.v.spin,
		passOnGrant: m.v.queue && !renew}
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
	until        time.Time // the wait bound (zero: none), for the attempts' turns (h.op)
	g            grace
	hw           handoffWait
	buf          attemptBuf
	tr           *acqTrace // the observer's trace; nil without an observer
}

func (a *acquisition) attempt(waiting bool) (bool, time.Duration, error) {
	return a.m.attempt(a.ctx, a.h, a.lease, a.renew, a.queue, waiting, a.until, &a.g, &a.buf, a.tr)
}

// attemptBuf is the memory one attempt needs for its request and reply, reused by the
// attempts of one call (they run one after another). An attempt that leaves work to the
// background (a replay, a give-back) ends the call's wait, so no later attempt overwrites
// what that work still reads.
type attemptBuf struct {
	kv   [6]string // KEYS then ARGV
	vals [4]int64
	cmds [4]rueidis.Completed // a fast grant's transaction (execFast)
	// first is the first send's memory (inflight), taken by the first attempt whose send
	// needs one (firstTaken) and never reused: a send the caller left lives on after it.
	first      inflight
	firstTaken bool
	// direct: the caller does not wait on the attempt itself (a RedLock round's instance,
	// whose round leaves it at ctx's end), so the first send needs no goroutine of its own.
	direct bool
}

// firstSend returns b.first the first time it is asked, nil after (send allocates).
func (b *attemptBuf) firstSend() *inflight {
	if b.firstTaken {
		return nil
	}
	b.firstTaken = true
	return &b.first
}

// leave runs the variant's leave (withdrawing what a wait that gave up registered in
// Redis) for a wait that ends: after this owner's operation in flight on the lock (the
// wait's own background work, say), and before its next one when it can (goroutines that
// share the owner share its place anyway). It holds the caller while ctx lives, and for
// what is left of the call's grace after; on a closed Client, until the leave is done
// (withdraw: within the cleanup timeout since Close began).
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
// behalf: returnGrace from the ctx's end, however many steps wait. ctx is the call's (nil:
// none known).
type grace struct {
	ctx context.Context
	end time.Time
}

// left starts the grace, at its first call, and returns what is left of it. The grace runs
// from the ctx's deadline when the deadline ended it, else from now (a cancel's moment is not
// known; it is seen at once but for a stall): a call whose goroutine saw its deadline late,
// or that had a send of its own under way past the deadline, still returns within
// returnGrace of it (TestExplore_WaitBound, seed 1796396775267609403: a FairMutex LockLease
// whose attempt went out 19 ms past its deadline waited a whole returnGrace from then and
// returned 104 ms after the deadline).
func (g *grace) left() time.Duration {
	if g.end.IsZero() {
		g.end = graceStart(g.ctx).Add(returnGrace)
	}
	return time.Until(g.end)
}

// graceStart is when ctx's end is known to have come: its deadline when that ended it and
// has passed, else now.
func graceStart(ctx context.Context) time.Time {
	now := time.Now()
	if ctx == nil {
		return now
	}
	if dl, ok := ctx.Deadline(); ok && dl.Before(now) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return dl
	}
	return now
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
// The attempt waits for its turn (h.op) behind the owner's other calls on the lock until ctx
// ends, and, when until is not zero (the wait bound), until then: it sends nothing and
// returns errWaitOver if the turn has not come by then (the model test's RWMutex seed
// 10071870183985473747: a TryLock with a 53 ms wait sent its attempt 500 ms past the bound,
// behind its sibling's attempt that replayed for the cleanup timeout).
//
// tr, when not nil, counts the attempt and records a grant for the observer.
func (m *Mutex) attempt(ctx context.Context, h *hold, lease time.Duration, renew, queue, waiting bool, until time.Time, g *grace, b *attemptBuf, tr *acqTrace) (bool, time.Duration, error) {
	if err := h.lockOpUntil(ctx, until); err == errWaitOver {
		return false, 0, err
	} else if err != nil {
		return false, 0, errorf("lock %q: %w", m.name, err)
	}
	o := &opHold{h: h, held: true}
	defer o.unlock()
	if err := ctx.Err(); err != nil {
		// ctx ended while the wait woke for this attempt (or while h.op was free to take):
		// nothing is sent past ctx's end, which the caller would then wait on.
		return false, 0, errorf("lock %q: %w", m.name, err)
	}
	within, lost := h.snapshot() // the tenure a re-entry joins (nil: a fresh acquire)
	if lost != nil {
		return false, 0, errorf("lock %q: %w", m.name, lost)
	}
	// A fresh acquire of the handle's that it took uncontended lately goes as a fast grant
	// (fast.go): fastVal is its token field, which holds its sequence number.
	var fastVal, seq string
	if m.fastEligible(h, within, waiting) {
		fastVal, seq = m.c.newFastRequest(h.owner)
	} else {
		seq = m.c.newRequest()
	}
	b.kv = [6]string{m.keys.lock, m.keys.fence, m.c.leaseArg(lease), h.owner, seq}
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
	if within != nil && within.fast != "" {
		// A re-entry of a tenure in the fast form: the script converts it with its token.
		for len(args) < 5 {
			args = append(args, "")
		}
		args = append(args, strconv.FormatInt(within.token, 10))
	}
	sent := time.Now() // the lease is counted from the first send
	if tr != nil {
		tr.attempts++
	}
	var vals []int64
	var acked int64
	var err error
	isFast := false // the lock is held in the fast form
	site := replaySite{kind: m.v.obs, name: m.name, owner: h.owner, op: "acquire"}
	if ctx.Done() == nil || b.direct {
		if fastVal != "" {
			vals, isFast, err = m.c.execFast(ctx, m.v.acquire, keys, args, fastVal, m.keys.pub, &b.cmds, b.vals[:0])
		} else {
			vals, acked, err = m.c.execAcquire(ctx, m.v.acquire, keys, args, b.vals[:0])
		}
	} else if f := m.c.send(ctx, sent, true, m.v.acquire, keys, args, fastVal, m.keys.pub, b.firstSend()); f.await(ctx) {
		// A ctx that can end: the caller must be able to leave (see inflight).
		vals, acked, err, isFast = append(b.vals[:0], f.vals...), f.acked, f.err, f.isFast
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
		if errors.Is(err, ErrUnknownOutcome) {
			h.unknownAcquire()
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
				_, _, err := m.sendRelease(ctx, h.owner, nil, nil, nil, 0)
				m.gaveBack(h, GiveBackNoReplicaAck, err)
			})
			return false, 0, errorf("lock %q: %w (%d of %d acknowledged)", m.name, ErrNoReplicaAck, acked, m.c.opts.ackReplicas)
		}
		if within != nil && m.v.fast {
			// The re-entry's script converted a tenure held in the fast form: recorded now,
			// under h.op, which grant may hand to background work (its orphans' give-back)
			// before it returns. Written after grant, as first done, it raced the owner's
			// next call's read of it (the race detector, in a model run).
			h.mu.Lock()
			within.fast = ""
			h.mu.Unlock()
		}
		switch err := m.grant(ctx, h, within, vals, sent, lease, renew, o, g, tr); {
		case errors.Is(err, watchdog.ErrClosed):
			return false, 0, ErrClosed
		case err != nil:
			return false, 0, errorf("lock %q: %w", m.name, err)
		}
		m.fastRecord(h, within, waiting, vals, sent, isFast, fastVal)
		return true, 0, nil
	case len(vals) == 2 && vals[0] == 0:
		m.fastGranted(sent, false)
		if vals[1] < 0 {
			return false, -1, nil
		}
		return false, time.Duration(vals[1]) * time.Millisecond, nil
	}
	return false, 0, errorf("lock %q: malformed reply %v", m.name, vals)
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
	// A ctx that can end: the caller must be able to leave (README guarantee 6). A replay is
	// sent under a deadline (the cleanup timeout), and rueidis heeds only that deadline for
	// a lone request, not the cancel at ctx's end (see inflight): on a paused Redis, Lock
	// outlived its ctx by the cleanup timeout (TestMutex_Lock_replayOnPausedRedisHeedsCtx).
	// pending: the replaying, still under way when the caller left.
	r, pending := aside(ctx, nil, func() replayed {
		res, err := m.c.replay(wctx, nil, site, m.v.acquire, keys, args, first)
		return replayed{res, err}
	})
	res, err := r.res, r.err
	stop()
	wcancel()
	if pending != nil {
		// The caller has gone while the replaying was under way: the background waits for
		// it (its answer, or its end at ctx's cancel), then resolves what is left.
		m.later(ctx, o, g, func() {
			defer cancel()
			var r replayed
			select {
			case r = <-pending:
			case <-m.c.life.Done():
				return // closed: a grant the replay made expires with its lease
			}
			if _, isReply := rueidis.IsRedisErr(r.err); r.err != nil && !isReply {
				m.resolveGone(cctx, h, site, keys, args, first, sent, lease, renew)
			} else if vals, err := r.res.AsIntSlice(); r.err == nil && err == nil && isGrant(vals) {
				m.undo(cctx, h, vals, sent, lease, renew)
			}
		})
		return nil, 0, errorf("lock %q: %w", m.name, ctx.Err()), true
	}
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
	var acking <-chan int64 // the wait for acknowledgements, still under way when the caller left
	if err == nil && isGrant(vals) && vals[2] == 1 && m.c.opts.ackReplicas > 0 {
		// As the replay: its WAIT lasts up to the ack timeout, on cctx, which ctx's end does
		// not end (and rueidis would heed only its deadline): Lock outlived a cancelled ctx
		// by the ack timeout (TestMutex_Lock_ackAfterReplayHeedsCancel).
		acked, acking = aside(ctx, nil, func() int64 { return m.c.ackAfterTouch(cctx, m.keys.lock, lease) })
	}
	if err == nil && isGrant(vals) && ctx.Err() != nil {
		// Granted, but the caller is gone: give it back, after the touch (a give-back that
		// overtook it would let it set the lease of a lock another owner took meanwhile).
		// The work reads a copy of vals: the return below clears the result it names.
		granted := vals
		m.later(ctx, o, g, func() {
			defer cancel()
			if acking != nil {
				select {
				case <-acking:
				case <-m.c.life.Done():
					return // closed: the grant expires with its lease
				}
			}
			m.undo(cctx, h, granted, sent, lease, renew)
		})
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
		h.unknownAcquire()
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
//
// The grant is recorded with its lease as a fixed one, whatever renew says: a re-entry in
// watchdog mode has raised the key's lease in Redis to the watchdog timeout (acquire.lua
// never shortens it), and the tenure it joined keeps its holds that long here too, but a
// caller that has gone did not turn the watchdog on for the rest of the tenure. Recorded in
// watchdog mode, it did: a fixed lease's hold (LockLease) was renewed until the owner's
// Unlock, and never freed by itself
// (TestRefusedGrant_canceledWatchdogReentryLeavesFixedLease).
//
// Its give-backs have a cleanup timeout of their own, not what is left of ctx's: the replays
// that learnt the grant (resolveGone, replayFor) may have spent nearly all of that, and a
// give-back left a few milliseconds got no answer from a Redis that answered in good time,
// and abandoned the hold, held for nobody until its lease ended
// (TestMutex_lostAcquireReplyGivesBackItsLateGrantWithAWholeCleanupTimeout).
func (m *Mutex) undo(ctx context.Context, h *hold, vals []int64, sent time.Time, lease time.Duration, renew bool) {
	gctx, cancel := m.c.ownCleanupCtx(ctx)
	defer cancel()
	var tr acqTrace
	if err := m.grant(gctx, h, nil, vals, sent, lease, false, nil, nil, &tr); err == nil {
		if !tr.reentered {
			h.hideTenure()
		}
		m.gaveBack(h, GiveBackCanceled, m.giveBackOne(gctx, h))
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
func (m *Mutex) grant(ctx context.Context, h *hold, within *tenure, vals []int64, sent time.Time, lease time.Duration, renew bool, o *opHold, g *grace, tr *acqTrace) error {
	mine := vals[2]
	if len(vals) == 4 {
		mine = vals[3] // a context owner: the holds this Client's operations took
	}
	fresh, extra, err := h.granted(within, vals[1], vals[2], mine, sent, lease, renew)
	reason := GiveBackOrphan
	// A refused grant (below) is given back with every other hold Redis counts of this
	// Client's for the owner (extra = mine), and only while Redis counts them for this
	// Client (keep 0). A refusal leaves the Client counting no hold of a live tenure of the
	// owner here (the tenure ended at its fixed lease's end, was lost, or never began), so
	// none of those holds is a caller's: the holds of a tenure reported lost are told lost,
	// and their Unlock gives nothing back that Redis still has. The grant may have extended
	// their lease in Redis (a re-entry never shortens it: to the watchdog's, or a long fixed
	// lease), and given back alone it left them counted for nobody until that lease ended
	// (TestRefusedGrant_*; TestModelRegression_lateReentryReplyLeavesGhost). keep 0: a late
	// grant's lease may have run out in Redis, and the owner's holds there may now be those
	// another Client took for a context owner (the same id through several Clients), which
	// an unconditional give-back would take.
	keep := 0
	var t *tenure // the tenure whose orphans the give-back takes (nil: a refused grant)
	switch {
	case errors.Is(err, ErrLockLost):
		extra, reason = max(1, mine), GiveBackLost
	case errors.Is(err, errReentryEnded), errors.Is(err, errLateGrant):
		extra, reason = max(1, mine), GiveBackLate
	case err != nil:
		return err
	default:
		tr.granted(fresh, vals[1])
		t, _ = h.snapshot()
		keep = h.holds()
	}
	if extra <= 0 {
		return err
	}
	giveBack := func() {
		// Orphans: each gives back one hold while Redis counts more of this Client's than
		// keep, so never this grant's, and the lock stays held. Those a give-back that
		// failed did not take are the tenure's orphans again (hold.unsettled), given back
		// at its next confirmed renewal. (They were left to the tenure's last Unlock, renewed
		// with it meanwhile: TestMutex_orphanWhoseGiveBackAtAGrantFailedIsSettledAtTheNextRenewal.)
		given, rerr := m.giveBackOrphans(ctx, h.owner, keep, extra)
		if rerr != nil {
			h.unsettled(t, extra-given)
		}
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

// replayed is the outcome of a replaying (Client.replay) run on a goroutine of its own.
type replayed struct {
	res rueidis.RedisResult
	err error
}
