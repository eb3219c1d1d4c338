package rlock

import (
	"context"
	"strings"
)

// Hooks for the external tests (package rlock_test) to wait for internal events instead of
// sleeping.

// ParkedCandidates is the number of waiters of c parked on m's lock, ready for a direct
// hand-off.
func ParkedCandidates(c *Client, m *Mutex) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.handoffs[m.keys.lock+m.v.holdSuffix]
	if q == nil {
		return 0
	}
	n := 0
	for _, cand := range q.cands {
		if cand.state.Load() == candParked {
			n++
		}
	}
	return n
}

// ChannelLive reports whether c's subscription to m's release channel is confirmed.
func ChannelLive(c *Client, m *Mutex) bool { return c.sub.Live(m.keys.channel) }

// RedHolds is the number of entries of the package's table of RedLock holds for the locks
// whose name starts with prefix (every owner, every set of Clients).
func RedHolds(prefix string) int {
	redHolds.mu.Lock()
	defer redHolds.mu.Unlock()
	n := 0
	for k := range redHolds.m {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// RedInFlight is the number of r's instance requests (acquire attempts, give-backs) that
// have not settled yet: a grant that reached a round after its decision counts until it
// was adopted or given back, a give-back left to the background until it ended.
func RedInFlight(r *RedLock) int64 { return r.inflight.Load() }

// RedLateGrants is how many grants that reached r's rounds after their decision were
// adopted into the hold, and how many were given back.
func RedLateGrants(r *RedLock) (adopted, returned int64) {
	return r.adopted.Load(), r.lateReturned.Load()
}

// RedInstanceHolds is the number of holds the caller's owner's RedLock hold counts on the
// instance of each Client, and whether it follows that instance's tenure.
func RedInstanceHolds(r *RedLock, ctx context.Context) (map[*Client]int, map[*Client]bool) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return nil, nil
	}
	rh := peekRed(r.key(owner))
	n, w := make(map[*Client]int), make(map[*Client]bool)
	if rh == nil {
		return n, w
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	for i, m := range r.insts {
		n[m.c], w[m.c] = rh.n[i], rh.watched[i]
	}
	return n, w
}

// OnGiveBackFailed has f called, with the lock's name, by every RedLock give-back of an
// instance hold that failed, before the hold is abandoned (as the give-back's kind says),
// until restore is called. f runs on the give-back's goroutine and may block it.
func OnGiveBackFailed(f func(name string)) (restore func()) {
	giveBackFailedHook.Store(&f)
	return func() { giveBackFailedHook.Store(nil) }
}

// OnRoundGiveBack has f called, with the lock's name and the Clients of the instances that
// granted, by every failed round of a RedLock's fresh acquire that is about to give grants
// back, until restore is called. f runs on the acquiring goroutine and may block it.
func OnRoundGiveBack(f func(name string, granted []*Client)) (restore func()) {
	roundGiveBackHook.Store(&f)
	return func() { roundGiveBackHook.Store(nil) }
}

// HoldRedInstanceOp takes the operation lock of the hold that r's own owner (its handle's)
// has on the instance of Client c, as a request of the owner in flight there would, and
// returns its release; ok is false when there is no such hold.
func HoldRedInstanceOp(r *RedLock, c *Client) (release func(), ok bool) {
	owner, err := r.ownerOf(context.Background())
	if err != nil {
		return nil, false
	}
	for _, m := range r.insts {
		if m.c != c {
			continue
		}
		h := m.instHold(owner)
		if h == nil || h.lockOp(context.Background()) != nil {
			return nil, false
		}
		return h.unlockOp, true
	}
	return nil, false
}
