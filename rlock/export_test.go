package rlock

import (
	"context"
	"strings"
	"sync"
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
// until restore is called. f runs on the give-back's goroutine and may block it. Tests that
// run in parallel may each set one: every f set is called for every lock, so f must return
// at once for the names that are not its test's.
func OnGiveBackFailed(f func(name string)) (restore func()) {
	return giveBackFailedHooks.add(f, func(on bool) {
		if !on {
			giveBackFailedHook.Store(nil)
			return
		}
		call := func(name string) {
			for _, f := range giveBackFailedHooks.all() {
				f(name)
			}
		}
		giveBackFailedHook.Store(&call)
	})
}

// OnRoundGiveBack has f called, with the lock's name and the Clients of the instances that
// granted, by every failed round of a RedLock's fresh acquire that is about to give grants
// back, until restore is called. f runs on the acquiring goroutine and may block it. As with
// OnGiveBackFailed, tests in parallel may each set one, and f must filter by name.
func OnRoundGiveBack(f func(name string, granted []*Client)) (restore func()) {
	return roundGiveBackHooks.add(f, func(on bool) {
		if !on {
			roundGiveBackHook.Store(nil)
			return
		}
		call := func(name string, granted []*Client) {
			for _, f := range roundGiveBackHooks.all() {
				f(name, granted)
			}
		}
		roundGiveBackHook.Store(&call)
	})
}

var (
	giveBackFailedHooks testHooks[func(name string)]
	roundGiveBackHooks  testHooks[func(name string, granted []*Client)]
)

// testHooks are the hooks of one kind that tests have set and not yet restored; the
// package's hook of that kind, installed while there is one, calls them all.
type testHooks[F any] struct {
	mu   sync.Mutex
	next int
	fs   map[int]F
}

// add sets f; switch installs the package's hook (on) when f is the first, and removes it
// when the last is restored.
func (th *testHooks[F]) add(f F, switchHook func(on bool)) (restore func()) {
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.fs == nil {
		th.fs = map[int]F{}
	}
	id := th.next
	th.next++
	th.fs[id] = f
	if len(th.fs) == 1 {
		switchHook(true)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			th.mu.Lock()
			defer th.mu.Unlock()
			delete(th.fs, id)
			if len(th.fs) == 0 {
				switchHook(false)
			}
		})
	}
}

// all is a copy of the hooks set, to call without the lock (a hook may block).
func (th *testHooks[F]) all() []F {
	th.mu.Lock()
	defer th.mu.Unlock()
	fs := make([]F, 0, len(th.fs))
	for _, f := range th.fs {
		fs = append(fs, f)
	}
	return fs
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

// LockClient takes c's mutex, as a call of c's that takes it does, and returns its unlock.
// A wait of c's woken while it is held stops there, before its next attempt (waitLoop asks
// isClosed first), so that a test can end the wait's ctx between the wake-up and the attempt.
func LockClient(c *Client) (unlock func()) {
	c.mu.Lock()
	return c.mu.Unlock
}

// GiveBackRoundAs makes a MultiLock's failed round give back a member for which f returns a
// Mutex as that Mutex is (Mutex.giveBackTaken), not through the member's Unlock: for a
// test's recording wrapper that embeds the Mutex (the MultiLock hunt). f returns nil for
// any other Locker.
func GiveBackRoundAs(f func(Locker) *Mutex) { ownLockerHook.Store(&f) }
