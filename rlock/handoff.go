package rlock

import (
	"sync/atomic"
	"time"
)

// Direct hand-off between waiters of one Client.
//
// A Lock that waits for a lock held by another owner parks as a candidate. When an owner of
// the same Client gives back the last hold of that lock, its release script can pass the lock
// straight to the first parked candidate (a fresh grant, with its own token and lease) instead
// of freeing it and publishing: the candidate holds the lock when the release's reply comes
// back, without a wake-up through Redis or an acquire of its own. A lock passes on this way at
// most maxHandoffStreak times in a row; the next release frees it and publishes as usual, so
// that waiters of other Clients (other processes) get their turn.

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

	// Set by the claiming release before it sends on ready.
	token int64     // > 0: the lock was passed on with this token
	sent  time.Time // when the release was first sent (the lease counts from then)
	err   error     // the release's outcome is unknown: so is the grant
}

// handoffQueue is the candidates of one lock, in parking order. Guarded by Client.mu.
type handoffQueue struct {
	cands  []*candidate
	streak int // direct hand-offs since the last release that freed the lock
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
// and marks it claimed, or returns nil (none, or the streak is spent: the release then
// frees the lock and publishes, and the streak starts again). The claim takes the
// candidate's h.op, so that no other call of the candidate's owner runs a script between the
// release that grants it the lock and the candidate's record of that grant (a re-entry by
// another goroutine of the owner would otherwise be counted before the grant it rests on);
// the candidate gives it back. A candidate whose owner is busy is passed over.
func (c *Client) claim(h *hold) *candidate {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.handoffs[tableKey(h.keys, h.v)]
	if q == nil {
		return nil
	}
	if q.streak >= maxHandoffStreak {
		q.streak = 0
		return nil
	}
	for _, cand := range q.cands {
		if cand.h.owner == h.owner || cand.state.Load() != candParked || !cand.h.tryLockOp() {
			continue
		}
		if cand.state.CompareAndSwap(candParked, candClaimed) {
			q.streak++
			return cand
		}
		cand.h.unlockOp()
	}
	q.streak = 0 // this release frees the lock: the next streak starts afresh
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
