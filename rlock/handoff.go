package rlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/watchdog"
)

// Direct hand-off between waiters of one Client.
//
// A Lock that waits for a lock held by another owner parks as a candidate. When an owner of
// the same Client gives back the last hold of that lock, its release script can pass the lock
// straight to the first parked candidate (a fresh grant, with its own token and lease) instead
// of freeing it and publishing: the candidate holds the lock when the release's reply comes
// back, without a wake-up through Redis or an acquire of its own. A lock passes on this way at
// most maxHandoffStreak times in a row; the next release frees it and publishes as usual, so
// that waiters of other Clients (other processes) get their turn. The count travels with the
// lock's tenures (tenure.streak: the hand-offs in a row that led to it, 0 for a tenure that
// began otherwise), not with the queue of candidates, which goes whenever its last candidate
// leaves: kept there, as first written, it started again at 0 when two owners took turns,
// and never bit (TestMutex_handoffStreakOutlivesEmptyQueue).

// maxHandoffStreak bounds consecutive direct hand-offs of one lock within a Client.
const maxHandoffStreak = 8

// Candidate states.
const (
	candIdle    int32 = iota // attempting, or not yet parked
	candParked               // asleep: a release may claim it
	candClaimed              // a release is passing the lock to it; the outcome is pending
)

// candidate is a parked Lock that a release of this Client may pass the lock to.
type candidate struct {
	h      *hold
	lease  time.Duration
	renew  bool
	state  atomic.Int32
	queued bool          // in its lock's handoffQueue; guarded by Client.mu
	ready  chan struct{} // capacity 1: a claim's outcome is ready (consumed by the candidate)
	poke   chan struct{} // capacity 1: wakes the candidate's wait (a hint, may be stale)

	// streak: the hand-offs in a row that the grant makes, this one included (set by claim;
	// the tenure the grant begins carries it: handedOff).
	streak int
	// Set by the claiming release before it sends on ready.
	token int64     // > 0: the lock was passed on with this token
	sent  time.Time // when the release was first sent (the lease counts from then)
	err   error     // the release's outcome is unknown: so is the grant
}

// handoffQueue is the candidates of one lock, in parking order. Guarded by Client.mu.
type handoffQueue struct {
	cands []*candidate
}

// park makes cand claimable, registering it on its first park.
func (c *Client) park(cand *candidate) {
	if cand.state.Load() == candClaimed {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !cand.queued {
		key := tableKey(cand.h.keys, cand.h.v)
		q := c.handoffs[key]
		if q == nil {
			q = &handoffQueue{}
			c.handoffs[key] = q
		}
		q.cands = append(q.cands, cand)
		cand.queued = true
	}
	cand.state.Store(candParked)
}

// drop unregisters cand. It reports whether a release has claimed it: the lock may have
// been passed on to cand's owner, and the claim's outcome is still to be read from
// cand.ready (it holds cand's h.op meanwhile).
func (c *Client) drop(cand *candidate) (claimed bool) {
	c.mu.Lock()
	key := tableKey(cand.h.keys, cand.h.v)
	if q := c.handoffs[key]; q != nil && cand.queued {
		for i, o := range q.cands {
			if o == cand {
				q.cands = append(q.cands[:i], q.cands[i+1:]...)
				break
			}
		}
		if len(q.cands) == 0 {
			delete(c.handoffs, key)
		}
	}
	cand.queued = false
	c.mu.Unlock()
	return !cand.unclaim()
}

// unclaim makes a parked cand idle before it attempts; it reports false when a release
// claimed it first (the caller then awaits the outcome).
func (cand *candidate) unclaim() bool {
	return cand.state.CompareAndSwap(candParked, candIdle) || cand.state.Load() == candIdle
}

// claim picks the first parked candidate for h's lock owned by someone other than h's owner
// and marks it claimed, or returns nil (none, or the streak is spent: streak, the hand-offs
// in a row that led to the tenure being released, is maxHandoffStreak; the release then
// frees the lock and publishes, and the next grant starts afresh). The claim takes the
// candidate's h.op, so that no other call of the candidate's owner runs a script between the
// release that grants it the lock and the candidate's record of that grant (a re-entry by
// another goroutine of the owner would otherwise be counted before the grant it rests on);
// the candidate gives it back. A candidate whose owner is busy is passed over.
func (c *Client) claim(h *hold, streak int) *candidate {
	if streak >= maxHandoffStreak {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.handoffs[tableKey(h.keys, h.v)]
	if q == nil {
		return nil
	}
	for _, cand := range q.cands {
		if cand.h.owner == h.owner || cand.state.Load() != candParked || !cand.h.tryLockOp() {
			continue
		}
		if cand.state.CompareAndSwap(candParked, candClaimed) {
			cand.streak = streak + 1 // read by handedOff once the claim's outcome is ready
			return cand
		}
		cand.h.unlockOp()
	}
	return nil
}

// settle delivers a claim's outcome to its candidate.
func (cand *candidate) settle(token int64, sent time.Time, err error) {
	cand.token, cand.sent, cand.err = token, sent, err
	cand.ready <- struct{}{}
	select {
	case cand.poke <- struct{}{}:
	default:
	}
}

// claimedAtEnd settles a wait that ended (with ok, err) while a release had claimed its
// candidate cand (and taken h.op for it). While ctx and the Client live it waits for the
// release's outcome: a grant that came as the wait bound ran out is taken (with lost replies,
// the release's replays and then the hand-off's may each take up to the cleanup timeout,
// past the wait bound; see TryLock). Once ctx has
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

func (w *handoffWait) unpark() (bool, bool, bool, error) {
	if w.cand == nil || w.cand.unclaim() {
		return false, false, false, nil
	}
	// A release claimed it: wait for its outcome while ctx and the Client live. If either
	// ends first, the wait ends and acquire settles the claim (claimedAtEnd).
	a := w.a
	select {
	case <-w.cand.ready:
	case <-a.ctx.Done():
		return false, true, true, errorf("lock %q: %w", a.m.name, a.ctx.Err())
	case <-a.m.c.life.Done():
		return false, true, true, errorf("lock %q: %w", a.m.name, ErrClosed)
	}
	w.cand.state.Store(candIdle)
	o := &opHold{h: a.h, held: true} // the claim took h.op for this wait
	defer o.unlock()
	ok, err, done := a.m.handedOff(a.ctx, a.h, w.cand, o, &a.g, a.tr)
	return ok, done, true, err
}

// handedOff records the outcome of a release that passed the lock to cand: (true, nil, true)
// when cand's owner now holds it; (false, err, true) when the outcome is unknown or the
// caller has gone; (false, nil, false) when the lock was not passed on, and (false, err,
// false), err wrapping ErrLeaseExpired, when its grant came too late to use (given back): the
// wait goes on. h.op must be held: the release that claimed cand
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
	var vals []int64
	if cand.err != nil {
		site := replaySite{kind: m.v.obs, name: m.name, owner: h.owner, op: "acquire"}
		keys := []string{m.keys.lock, m.keys.fence} // the plain lock's: the one kind with hand-off
		// Marked as a waiting caller's ('2', acquire.lua): a grant or a refusal marks the lock
		// so that its release publishes to the waiters still there.
		args := []string{m.c.leaseArg(cand.lease), h.owner, spentMark + h.handoff, "2"}
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
	} else {
		vals = []int64{1, cand.token, 1}
	}
	switch err := m.grant(ctx, h, nil, vals, cand.sent, cand.lease, cand.renew, o, g, tr); {
	case errors.Is(err, watchdog.ErrClosed):
		return false, ErrClosed, true
	case errors.Is(err, errLateGrant):
		return false, errorf("lock %q: %w", m.name, err), false // given back: the wait goes on
	case err != nil:
		return false, errorf("lock %q: %w", m.name, err), true
	}
	h.mu.Lock()
	if t := h.cur; t != nil && t.token == vals[1] {
		t.streak = cand.streak // the tenure the hand-off began (h.op is still held)
	}
	h.mu.Unlock()
	if tr != nil {
		tr.handedOff = true
	}
	return true, nil, true
}
