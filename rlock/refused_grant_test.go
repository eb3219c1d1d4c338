package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
	"github.com/relock-go/relock/watchdog"
)

// Grants the Client refuses and gives back (Mutex.grant): a grant after the owner's tenure
// was reported lost, or a fresh grant while the Client counts holds (ErrLockLost); a re-entry
// whose tenure ran to the end of its fixed lease here before the grant came back
// (errReentryEnded); a fresh grant whose lease ran out before its reply (errLateGrant). Each
// such grant may have extended, in Redis, the lease of holds the owner no longer has (a
// re-entry never shortens the key's lease: acquire.lua), and the give-back must leave Redis
// counting none of them: not until the owner's next Unlock, nor until the refused grant's
// own lease ends. These tests look well before that lease could end them, for every kind of
// lock that shares the path (Mutex, SpinMutex, FairMutex, both sides of RWMutex) and for a
// handle's owner and a context owner.

// refusedKind is one kind of lock, or one side of a read-write lock, as the tests below use it.
type refusedKind struct {
	api  *lockAPI
	side int
	rc   rueidis.Client // a plain client of the server (forRefusedKinds), to read TTLs with
}

func (k refusedKind) String() string {
	if k.api.sides == 2 {
		return k.api.name + "/" + sideName(k.side)
	}
	return k.api.name
}

// spinAPI is the model's mutexAPI on a SpinMutex (the same calls on its embedded *Mutex).
var spinAPI = func() *lockAPI {
	a := *mutexAPI
	a.name = "SpinMutex"
	a.handle = func(c *rlock.Client, name string) any { return c.SpinMutex(name).Mutex }
	return &a
}()

var refusedKinds = []refusedKind{
	{api: mutexAPI}, {api: spinAPI}, {api: fairAPI}, {api: rwAPI, side: 0}, {api: rwAPI, side: 1},
}

var refusedOwners = []struct {
	name string
	ctx  func(t *testing.T) context.Context
}{
	{"context owner", func(t *testing.T) context.Context { return rlock.WithOwner(bg, "u-"+redistest.Name(t)) }},
	{"handle", func(*testing.T) context.Context { return bg }},
}

// loadScripts takes and gives back a hold of k's side (the scripts are then loaded: no
// NOSCRIPT fallback counts among the calls a fault names).
func loadScripts(t *testing.T, k refusedKind, h any, ctx context.Context) {
	t.Helper()
	if ok, err := k.api.acquire(h, ctx, k.side, -1, 0, true); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := k.api.release(h, ctx, k.side); err != nil {
		t.Fatal(err)
	}
}

// redisHolds is the owner's (ctx's) live hold count of k's side in Redis, and the lock key's
// TTL there.
func (k refusedKind) redisHolds(h any, ctx context.Context) (int, time.Duration, error) {
	var n int
	var err error
	switch {
	case k.api.sides == 1:
		n, err = mutexHandle(h).HoldCount(ctx)
	case k.side == 0:
		n, err = rwHandle(h).WriteHoldCount(ctx)
	default:
		n, err = rwHandle(h).ReadHoldCount(ctx)
	}
	if err != nil {
		return 0, 0, err
	}
	ms, err := k.rc.Do(bg, k.rc.B().Pttl().Key(k.api.key(h)).Build()).AsInt64()
	return n, time.Duration(ms) * time.Millisecond, err
}

// settleRedis waits, until by, for Redis to count no more holds of the owner (ctx) on k's side
// than the Client does (the give-backs of a refused grant run in the background), and fails
// t with what, the Client's count, Redis's and the TTL if it does not.
func settleRedis(t *testing.T, k refusedKind, h any, ctx context.Context, by time.Time, what string, start time.Time) {
	t.Helper()
	for {
		n, ttl, err := k.redisHolds(h, ctx)
		if err != nil {
			t.Fatal(err)
		}
		mh := k.api.hold(h, ctx, k.side)
		live := mh.Count
		if mh.Lost != nil {
			live = 0 // the holds of a tenure reported lost are nobody's
		}
		if n <= live {
			return
		}
		if time.Now().After(by) {
			t.Fatalf("%v after %s: the Client counts %d live holds of the owner (hold %+v), Redis %d (TTL %v)", time.Since(start).Round(time.Millisecond), what, live, mh, n, ttl)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// forRefusedKinds runs f for every kind and both kinds of owner, each on a lock of its own.
func forRefusedKinds(t *testing.T, rc rueidis.Client, f func(t *testing.T, k refusedKind, ctx context.Context)) {
	for _, k := range refusedKinds {
		k.rc = rc
		for _, o := range refusedOwners {
			t.Run(fmt.Sprintf("%v/%s", k, o.name), func(t *testing.T) { f(t, k, o.ctx(t)) })
		}
	}
}

// TestRefusedGrant_reentryAfterLossLeavesNoHold: the owner holds the lock in watchdog mode; its
// renewals are refused, and a re-entry with a long fixed lease, sent at once, reaches Redis
// while the hold is still there (Redis counts 2, and the key's lease is now the re-entry's),
// but its reply comes after the watchdog reported the tenure lost. The Client refuses the
// grant (ErrLockLost: hold.granted, h.lost). Redis must not count the lost tenure's hold,
// extended by the refused re-entry, for that re-entry's lease: the owner was told it lost the
// lock, and without the re-entry Redis would have dropped the hold with the lease last renewed.
func TestRefusedGrant_reentryAfterLossLeavesNoHold(t *testing.T) {
	t.Parallel() // servers and Clients of its own
	b := realBackend(t)
	rc := b.rueidis(t)
	mf := newModelFaults(rc, nil)
	const watchdogTTL = 300 * time.Millisecond
	c, err := rlock.New(mf.hc, rlock.WithWatchdogTimeout(watchdogTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forRefusedKinds(t, rc, func(t *testing.T, k refusedKind, ctx context.Context) {
		h := k.api.handle(c, redistest.Name(t))
		loadScripts(t, k, h, ctx)
		if ok, err := k.api.acquire(h, ctx, k.side, -1, 0, true); !ok || err != nil {
			t.Fatal(ok, err)
		}
		mf.refuseRenewals.Store(true) // the watchdog reports the tenure lost ~300ms from now
		const lease = 6 * time.Second
		start := time.Now()
		late := withFault(ctx, &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: 3 * watchdogTTL}}})
		ok, err := k.api.acquire(h, late, k.side, 0, lease, false)
		mf.refuseRenewals.Store(false)
		if ok || !errors.Is(err, rlock.ErrLockLost) {
			t.Fatalf("a re-entry answered after the tenure was reported lost: %v %v, want ErrLockLost", ok, err)
		}
		settleRedis(t, k, h, ctx, start.Add(lease/3), "a re-entry refused for the loss of its tenure", start)
		if err := k.api.release(h, ctx, k.side); !errors.Is(err, rlock.ErrNotHeld) {
			t.Errorf("the Unlock of the lost hold: %v, want ErrNotHeld", err)
		}
		if n, ttl, err := k.redisHolds(h, ctx); err != nil || n != 0 {
			t.Errorf("after the owner unlocked its lost hold Redis counts %d (TTL %v, %v)", n, ttl, err)
		}
	})
}

// acquireScripts are the acquire scripts of the kinds above, by name (hookCall.script).
var acquireScripts = map[string]bool{"acquire": true, "fair_acquire": true, "rw_acquire": true}

// TestRefusedGrant_lateGrantGivesBackTheClientsOtherHolds: Redis counts a hold of the owner's
// that the Client does not (an acquire whose outcome stayed unknown: the script ran, its reply
// was lost and every replay refused within the cleanup timeout), and the owner's next acquire
// reaches Redis after its own fixed lease ran out on the Client's clock (the request held back
// before it is sent: a stalled network or server). Redis counts it a re-entry of that hold (and
// raises the key's lease to the grant's, if longer); the Client refuses the grant (errLateGrant)
// and gives it back. It must give back the other hold too, as a grant it recorded would have
// (hold.granted's extra): Redis must not count it for the rest of its lease, nor for the
// refused grant's.
func TestRefusedGrant_lateGrantGivesBackTheClientsOtherHolds(t *testing.T) {
	t.Parallel() // servers and Clients of its own
	b := realBackend(t)
	rc := b.rueidis(t)
	mf := newModelFaults(rc, nil)
	// Above the faults, a hook that holds back the next acquire's send (not its reply).
	var holdBack atomic.Int64
	hc := &hookClient{Client: mf.hc}
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if d := time.Duration(holdBack.Load()); d > 0 && acquireScripts[cmd.script] && holdBack.CompareAndSwap(int64(d), 0) {
			time.Sleep(d)
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithCleanupTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forRefusedKinds(t, rc, func(t *testing.T, k refusedKind, ctx context.Context) {
		h := k.api.handle(c, redistest.Name(t))
		loadScripts(t, k, h, ctx)
		const orphanLease = 6 * time.Second
		unknown := withFault(ctx, &opFault{stages: []faultStage{{kind: fDrop, n: 1}, {kind: fRefuse, from: 1, n: 1 << 20}}})
		if ok, err := k.api.acquire(h, unknown, k.side, 0, orphanLease, false); ok || !errors.Is(err, rlock.ErrUnknownOutcome) {
			t.Fatalf("an acquire whose reply was lost and whose replays were refused: %v %v, want ErrUnknownOutcome", ok, err)
		}
		if n, ttl, err := k.redisHolds(h, ctx); err != nil || n != 1 {
			t.Fatalf("Redis counts %d holds of the owner after the acquire of unknown outcome (TTL %v, %v), want 1", n, ttl, err)
		}
		const lease = 200 * time.Millisecond
		start := time.Now()
		holdBack.Store(int64(2 * lease))
		ok, err := k.api.acquire(h, ctx, k.side, 0, lease, false)
		if ok || !errors.Is(err, rlock.ErrLeaseExpired) {
			t.Fatalf("an acquire that reached Redis after its lease ran out: %v %v, want ErrLeaseExpired", ok, err)
		}
		settleRedis(t, k, h, ctx, start.Add(orphanLease/3), "a grant refused as late", start)
		if mh := k.api.hold(h, ctx, k.side); mh.Count != 0 || mh.Lost != nil {
			t.Errorf("the Client's view after the refused grant: %+v, want no hold", mh)
		}
	})
}

// TestRefusedGrant_canceledWatchdogReentryLeavesFixedLease: the owner holds the lock for a
// fixed lease, and a re-entry in watchdog mode, applied in Redis at once, reaches a caller
// that has gone (its ctx ended before the reply): the Client records the grant and gives it
// back (Mutex.undo). The owner's fixed-lease hold must still end with its lease, the lock
// freeing by itself (LockLease: "whether or not Unlock was called"), once the re-entry's own
// lease in Redis (the watchdog timeout, which a re-entry sets there) has run out too: the
// canceled re-entry must not leave the tenure renewed by the watchdog until the owner's
// Unlock.
func TestRefusedGrant_canceledWatchdogReentryLeavesFixedLease(t *testing.T) {
	t.Parallel() // servers and Clients of its own
	b := realBackend(t)
	rc := b.rueidis(t)
	mf := newModelFaults(rc, nil)
	const watchdogTTL = time.Second
	c, err := rlock.New(mf.hc, rlock.WithWatchdogTimeout(watchdogTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forRefusedKinds(t, rc, func(t *testing.T, k refusedKind, ctx context.Context) {
		h := k.api.handle(c, redistest.Name(t))
		loadScripts(t, k, h, ctx)
		const lease = 400 * time.Millisecond
		var start time.Time // no later than the fixed-lease grant's send
		tryInTime(t, func() (bool, error) { start = time.Now(); return k.api.acquire(h, ctx, k.side, 0, lease, false) })
		f := &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: 200 * time.Millisecond}}}
		gone, cancel := context.WithTimeout(withFault(ctx, f), 50*time.Millisecond)
		ok, err := k.api.acquire(h, gone, k.side, 0, 0, false)
		cancel()
		if ok || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a re-entry whose caller left before its reply: %v %v, want DeadlineExceeded", ok, err)
		}
		// Past the fixed lease and the re-entry's watchdog lease in Redis (from its send, which
		// a loaded machine can hold back), with a margin of a watchdog timeout: renewals would
		// have kept the hold by now.
		by := maxTime(start.Add(lease), f.firstSend()).Add(2 * watchdogTTL)
		for {
			n, ttl, err := k.redisHolds(h, ctx)
			if err != nil {
				t.Fatal(err)
			}
			mh := k.api.hold(h, ctx, k.side)
			if n == 0 && mh.Count == 0 {
				break
			}
			if time.Now().After(by) {
				t.Fatalf("%v after a fixed lease of %v, with a canceled re-entry in watchdog mode given back: the Client counts %d holds (renew %v), Redis %d (TTL %v)", time.Since(start).Round(time.Millisecond), lease, mh.Count, mh.Renew, n, ttl)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := k.api.errOf(h, ctx, k.side); !errors.Is(err, rlock.ErrLeaseExpired) {
			t.Errorf("Err after the fixed lease ran its course: %v, want ErrLeaseExpired", err)
		}
		if err := k.api.release(h, ctx, k.side); !errors.Is(err, rlock.ErrLeaseExpired) {
			t.Errorf("the Unlock of the hold whose fixed lease ran out: %v, want ErrLeaseExpired", err)
		}
	})
}

// TestRefusedGrant_reentryAfterFixedLeaseEndLeavesNoHold is
// TestModelRegression_lateReentryReplyLeavesGhost on every kind: a re-entry in watchdog mode,
// applied in Redis while the owner's fixed lease still runs (the key's lease raised to the
// watchdog's), answered after that lease ended on the Client's clock, is refused
// (errReentryEnded, wrapping ErrLeaseExpired). Redis must count none of the owner's holds
// long before the watchdog lease would end them.
func TestRefusedGrant_reentryAfterFixedLeaseEndLeavesNoHold(t *testing.T) {
	t.Parallel() // servers and Clients of its own
	b := realBackend(t)
	rc := b.rueidis(t)
	const watchdogTTL = 15 * time.Second
	c, err := rlock.New(newModelFaults(rc, nil).hc, rlock.WithWatchdogTimeout(watchdogTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	forRefusedKinds(t, rc, func(t *testing.T, k refusedKind, ctx context.Context) {
		h := k.api.handle(c, redistest.Name(t))
		loadScripts(t, k, h, ctx)
		// The re-entry must go while the fixed lease runs on the Client's clock: sent after its
		// end, it is a fresh acquire and rightly granted. A fixed lease of 500ms (50ms, as
		// first written, left a loaded machine no room between the grant and the re-entry),
		// and a try again when the re-entry was granted having gone no sooner than the
		// lease's earliest end here (the grant's send, no sooner than t0, plus the lease less
		// the drift allowance): a re-entry granted that went before it is the defect.
		const lease = 500 * time.Millisecond
		for try := 1; ; try++ {
			var t0 time.Time
			tryInTime(t, func() (bool, error) { t0 = time.Now(); return k.api.acquire(h, ctx, k.side, 0, lease, false) })
			start := time.Now()
			// Its reply comes back 2 leases after its send: after the fixed lease's end here.
			f := &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: 2 * lease}}}
			ok, err := k.api.acquire(h, withFault(ctx, f), k.side, 0, 0, false)
			if earliestEnd := t0.Add(lease - watchdog.Drift(lease)); ok && err == nil && !f.firstSend().Before(earliestEnd) && try < 5 {
				t.Logf("try %d: the re-entry went %v after the fixed-lease grant was sent, at or past its end here, and was granted afresh; again", try, f.firstSend().Sub(t0).Round(time.Millisecond))
				if err := k.api.release(h, ctx, k.side); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if ok || !errors.Is(err, rlock.ErrLeaseExpired) {
				t.Fatalf("the re-entry, sent %v after the fixed-lease grant: %v %v, want ErrLeaseExpired", f.firstSend().Sub(t0).Round(time.Millisecond), ok, err)
			}
			settleRedis(t, k, h, ctx, start.Add(watchdogTTL/3), "a re-entry refused for the end of its tenure's fixed lease", start)
			break
		}
		if err := k.api.release(h, ctx, k.side); !errors.Is(err, rlock.ErrLeaseExpired) {
			t.Errorf("the Unlock of the hold whose fixed lease ran out: %v, want ErrLeaseExpired", err)
		}
		if n, ttl, err := k.redisHolds(h, ctx); err != nil || n != 0 {
			t.Errorf("after the owner's last Unlock Redis counts %d (TTL %v, %v)", n, ttl, err)
		}
	})
}
