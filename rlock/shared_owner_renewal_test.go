package rlock_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The other side of TestSharedOwner_renewalOfTenureTakenByAnotherClientIsALoss (review5): a
// context owner's renewal names its tenure's token (renew.lua), and a renewal that finds
// another token ends the hold as lost. These tests look for a live, legitimate hold of a
// context owner shared by several Clients that the token check would report lost (a false
// loss): every path by which a Client records a tenure's token (a fresh grant, a re-entry
// into another Client's tenure, a hand-off, a re-entry that replaces the lease, a grant
// learnt from a replay, a hash written by v0.1.0) and every kind that shares renew.lua
// (Mutex, SpinMutex, FairMutex, RedLock's instances), in one renewal batch with handles'
// owners (whose renewals name no token). Each keeps the holds over several renewal rounds
// of a short watchdog (a 1 s lease renewed every 300ms, leaving 700ms for a round to be
// answered on a loaded machine) and checks Err, HoldContext, the token and the count in
// Redis.

// sharedRenew are the options of the Clients whose renewals the tests watch.
func sharedRenew() []rlock.Option {
	return []rlock.Option{rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.3)}
}

// sharedRenewRounds is how long the tests let renewals run: three rounds and some.
const sharedRenewRounds = 1100 * time.Millisecond

// sharedRenewWindow is the part of sharedRenew's lease left for a renewal to be confirmed.
const sharedRenewWindow = 700 * time.Millisecond

// sharedLocker is what the tests need of a Mutex, SpinMutex or FairMutex.
type sharedLocker interface {
	Lock(ctx context.Context) error
	LockLease(ctx context.Context, lease time.Duration) error
	Unlock(ctx context.Context) error
	Err(ctx context.Context) error
	Token(ctx context.Context) (int64, error)
	HoldCount(ctx context.Context) (int, error)
	HoldContext(ctx context.Context) (context.Context, context.CancelFunc)
	Key() string
}

// sharedKinds makes, for one lock name, a handle of each kind that shares renew.lua.
var sharedKinds = []struct {
	kind string
	make func(c *rlock.Client, name string) sharedLocker
}{
	{"Mutex", func(c *rlock.Client, name string) sharedLocker { return c.Mutex(name) }},
	{"SpinMutex", func(c *rlock.Client, name string) sharedLocker { return c.SpinMutex(name) }},
	{"FairMutex", func(c *rlock.Client, name string) sharedLocker { return c.FairMutex(name) }},
}

// keptThroughRenewals lets renewals run for sharedRenewRounds, then checks that each of ms
// still holds for ctx (Err nil, its HoldContext live, the token tok) and that Redis counts
// want holds of the owner.
func keptThroughRenewals(t *testing.T, ctx context.Context, want int, tok int64, ms ...sharedLocker) {
	t.Helper()
	hctxs := make([]context.Context, len(ms))
	hws := make([]*holdWatch, len(ms))
	for i, m := range ms {
		h, cancel := m.HoldContext(ctx)
		defer cancel()
		hctxs[i] = h
		hws[i] = watchHold(t, h.Done(), sharedRenewWindow)
	}
	time.Sleep(sharedRenewRounds)
	for i, m := range ms {
		hws[i].noLoss(t, m.Err(ctx), "handle %d: a live hold of the shared owner reported lost", i)
		require.NoError(t, hctxs[i].Err(), "handle %d: HoldContext ended: %v", i, context.Cause(hctxs[i]))
		got, err := m.Token(ctx)
		require.NoError(t, err)
		require.Equal(t, tok, got, "handle %d: the tenure's token", i)
	}
	n, err := ms[0].HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, want, n, "Redis's count of the owner's holds")
}

// Three Clients share a context owner's tenure (one fresh grant, two re-entries) on each
// kind, beside a handle's own hold on another lock of each Client (so that one renewal
// batch carries tokens for some leases and none for others); the first Client's Unlock
// leaves the others' holds live.
func TestSharedOwner_renewalsKeepASharedTenure(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		cs := []*rlock.Client{
			b.client(t, sharedRenew()...),
			b.client(t, sharedRenew()...),
			b.client(t, sharedRenew()...),
		}
		for _, k := range sharedKinds {
			t.Run(k.kind, func(t *testing.T) {
				name := redistest.Name(t)
				ctx := rlock.WithOwner(bg, "shared-"+name)
				var ms []sharedLocker
				for i, c := range cs {
					own := c.Mutex(fmt.Sprintf("%s-own%d", name, i)) // a handle's owner: its renewal names no token
					require.NoError(t, own.Lock(bg))
					t.Cleanup(func() { _ = own.Unlock(bg) })
					ms = append(ms, k.make(c, name))
				}
				for _, m := range ms {
					require.NoError(t, m.Lock(ctx))
				}
				tok, err := ms[0].Token(ctx)
				require.NoError(t, err)
				keptThroughRenewals(t, ctx, 3, tok, ms...)
				require.NoError(t, ms[0].Unlock(ctx))
				require.ErrorIs(t, ms[0].Err(ctx), rlock.ErrNotHeld)
				keptThroughRenewals(t, ctx, 2, tok, ms[1:]...)
				require.NoError(t, ms[2].Unlock(ctx))
				require.NoError(t, ms[1].Unlock(ctx))
				require.False(t, b.exists(t, ms[0].Key()), "every hold given back")
			})
		}
	})
}

// A re-entry that replaces the lease in force (a fixed lease, then the watchdog turned on
// by a Lock; the renewal of the replaced lease names no token, tenureOf) and a fixed lease
// re-entered through another Client in watchdog mode: the holds outlive the fixed lease, and
// nothing is reported lost.
func TestSharedOwner_renewalsAfterALeaseReplaced(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca := b.client(t, sharedRenew()...)
		cb := b.client(t, sharedRenew()...)
		for _, k := range sharedKinds {
			t.Run(k.kind, func(t *testing.T) {
				name := redistest.Name(t)
				ctx := rlock.WithOwner(bg, "shared-"+name)
				ma, mb := k.make(ca, name), k.make(cb, name)
				require.NoError(t, ma.LockLease(ctx, 400*time.Millisecond)) // fixed
				require.NoError(t, mb.Lock(ctx))                            // B's tenure: watchdog
				require.NoError(t, ma.Lock(ctx))                            // A's lease replaced
				tok, err := ma.Token(ctx)
				require.NoError(t, err)
				keptThroughRenewals(t, ctx, 3, tok, ma, mb)        // past the 400ms fixed lease
				require.NoError(t, mb.LockLease(ctx, time.Second)) // B's re-entry, fixed and longer: kept as it is
				keptThroughRenewals(t, ctx, 4, tok, ma, mb)
				for range 2 {
					require.NoError(t, ma.Unlock(ctx))
					require.NoError(t, mb.Unlock(ctx))
				}
				require.False(t, b.exists(t, ma.Key()))
			})
		}
	})
}

// A hand-off (release.lua passes the lock to a parked waiter of the releasing Client, under
// a new token) to a context owner that also waits through another Client: that Client's
// waiter then re-enters the handed-off tenure. Both keep it through the renewals.
func TestSharedOwner_renewalsAfterAHandOff(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca := b.client(t, sharedRenew()...)
		cb := b.client(t, sharedRenew()...)
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		v, ma, mb := ca.Mutex(name), ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, v.Lock(bg)) // another owner: the handle's own
		vtok, err := v.Token(bg)
		require.NoError(t, err)
		hardSubscribe(t, ca, name)
		gotA, gotB := make(chan error, 1), make(chan error, 1)
		go func() { gotA <- ma.Lock(ctx) }()
		redistest.WaitFor(t, 5*time.Second, "A's waiter to park", func() bool { return rlock.ParkedCandidates(ca, ma) == 1 })
		go func() { gotB <- mb.Lock(ctx) }()
		time.Sleep(50 * time.Millisecond) // B waits too (its attempt refused)
		require.NoError(t, v.Unlock(bg))
		require.NoError(t, await(t, gotA, 5*time.Second, "the hand-off to A's waiter"))
		require.NoError(t, await(t, gotB, 5*time.Second, "B's re-entry into the handed-off tenure"))
		tok, err := ma.Token(ctx)
		require.NoError(t, err)
		require.Greater(t, tok, vtok)
		keptThroughRenewals(t, ctx, 2, tok, ma, mb)
		require.NoError(t, ma.Unlock(ctx))
		keptThroughRenewals(t, ctx, 1, tok, mb)
		require.NoError(t, mb.Unlock(ctx))
		require.False(t, b.exists(t, ma.Key()))
	})
}

// A fresh grant and a re-entry whose replies are lost: each Client learns its grant from the
// replay's answer, read from the hash (the tenure's token), and keeps it through renewals.
func TestSharedOwner_renewalsAfterGrantsLearntFromReplays(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	hca, ca := hardSetup(t, b, sharedRenew()...)
	hcb, cb := hardSetup(t, b, sharedRenew()...)
	for _, hc := range []*hookClient{hca, hcb} {
		var armed atomic.Bool
		armed.Store(true)
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script != "acquire" || !armed.CompareAndSwap(true, false) {
				return call()
			}
			_ = call() // applied, its reply lost: the Client replays
			return hardLost()
		})
	}
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	ma, mb := ca.Mutex(name), cb.Mutex(name)
	require.NoError(t, ma.Lock(ctx))
	require.NoError(t, mb.Lock(ctx))
	tok, err := ma.Token(ctx)
	require.NoError(t, err)
	keptThroughRenewals(t, ctx, 2, tok, ma, mb)
	require.NoError(t, ma.Unlock(ctx))
	require.NoError(t, mb.Unlock(ctx))
	require.False(t, b.exists(t, ma.Key()))
}

// A context owner's hold written by v0.1.0 (its q: field one request id, no count; its token
// a decimal string): a Client of this version re-enters it and keeps it through renewals.
func TestSharedOwner_renewalsOfAV1Hold(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t, sharedRenew()...)
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		m := c.Mutex(name)
		const old = int64(1796000000000000)
		_, err := b.do(t, "HSET", m.Key(), "u:shared-"+name, "1", "q:u:shared-"+name, "0b8d9c1e7f1a4a559a3e1d2c3b4a5f60.6",
			"token", strconv.FormatInt(old, 10))
		require.NoError(t, err)
		_, err = b.do(t, "PEXPIRE", m.Key(), "2000")
		require.NoError(t, err)
		require.NoError(t, m.Lock(ctx))
		keptThroughRenewals(t, ctx, 2, old, m)
		require.NoError(t, m.Unlock(ctx))
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the v0.1.0 Client's hold is left to it")
	})
}

// Two RedLocks over different Clients of the same three servers (two processes) share a
// context owner: the second re-enters each instance's tenure (clock tokens), and both keep
// it through renewals. (Their Tokens may differ: a RedLock's is the largest of the majority
// that answered its own acquire first, and each instance's token is its own server's clock.)
func TestSharedOwner_renewalsOfARedLock(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	set := func() []*rlock.Client {
		var cs []*rlock.Client
		for _, s := range srvs {
			c, err := rlock.New(s.Client(t), sharedRenew()...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			cs = append(cs, c)
		}
		return cs
	}
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	ra, rb := rlock.NewRedLock(name, set()), rlock.NewRedLock(name, set())
	require.NoError(t, ra.Lock(ctx))
	require.NoError(t, rb.Lock(ctx))
	ha, ca := ra.HoldContext(ctx)
	defer ca()
	hb, cb := rb.HoldContext(ctx)
	defer cb()
	time.Sleep(sharedRenewRounds)
	require.NoError(t, ra.Err(ctx))
	require.NoError(t, rb.Err(ctx))
	require.NoError(t, ha.Err())
	require.NoError(t, hb.Err())
	require.NoError(t, ra.Unlock(ctx))
	time.Sleep(sharedRenewRounds)
	require.NoError(t, rb.Err(ctx))
	require.NoError(t, rb.Unlock(ctx))
	locked, err := ra.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
}

// A context owner's fixed lease taken through one Client as a re-entry into the tenure
// another Client renews (watchdog mode) ends on its own Client (ErrLeaseExpired: the hold
// is over, LockLease's godoc), but in Redis the hold stays: the other Client's renewals keep
// the key, and nothing gives the expired hold back. Redis counts it beyond the holds the
// owner has (README guarantee 8: a Client's count is Redis's at every quiescent point; the
// exception it names, "a fixed lease re-entered in the moment its lease ends", lasts a
// drift allowance for a lock one Client holds, and here as long as the other Client holds),
// and once the other Client has given back its last hold, the lock stays held by nobody's
// hold until the key's lease (the other Client's watchdog timeout) runs out: the lock is
// not free when every hold has been given back or has run its course (Unlock's godoc), and
// other owners wait for it.
//
// It failed (review5's D1) on both backends: "the owner holds 1 hold (A's; B's fixed lease
// ended 3 s ago); Redis counts 2", "every hold of the owner was given back or ran its course,
// yet the lock is held (for 1.488s more)". B's Client knows its tenure is shared (its grant
// found A's hold) and gives its holds back at their fixed lease's end (hold.giveBackExpired).
func TestSharedOwner_fixedLeaseReentryEndsInRedisToo(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) { fixedLeaseEndsInRedisToo(t, b, false) })
}

// The other order: B's fixed lease begins the tenure, and A (watchdog mode) re-enters it
// after. A's renewals keep the key and B's hold with it; B's grant found no hold of another
// Client, so B's Client does not know that its tenure is shared ("Redis counts 2", "held for
// 1.496s more" with the give-back made only where the grant found another Client's hold).
func TestSharedOwner_fixedLeaseTenureJoinedByARenewedReentryEndsInRedisToo(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) { fixedLeaseEndsInRedisToo(t, b, true) })
}

// fixedLeaseEndsInRedisToo: A (watchdog mode) and B (a 200 ms fixed lease) hold the lock for
// one context owner through two Clients, B first when bFirst. Once B's lease has ended, Redis
// must count A's hold alone, and once A unlocks, the lock must be free.
func fixedLeaseEndsInRedisToo(t *testing.T, b *backend, bFirst bool) {
	ca := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
	cb := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	ma, mb := ca.Mutex(name), cb.Mutex(name)
	lockA := func() { require.NoError(t, ma.Lock(ctx)) }                            // renewed
	lockB := func() { require.NoError(t, mb.LockLease(ctx, 200*time.Millisecond)) } // fixed
	if bFirst {
		lockB()
		lockA()
	} else {
		lockA()
		lockB()
	}
	within(t, 5*time.Second, "B's fixed lease to end", mb.Done(ctx))
	require.ErrorIs(t, mb.Err(ctx), rlock.ErrLeaseExpired)
	// A's renewals (every 2 s) meanwhile; then A's count and B's must be Redis's.
	time.Sleep(300 * time.Millisecond)
	aloneThenFree(t, ctx, ma, cb.Mutex(name), 3*time.Second, "B's fixed lease ended 3 s ago")
}

// aloneThenFree waits up to wait for Redis to count the owner's one hold that ma took (ctx's
// owner) and no other, why saying what ended the others; then it unlocks that hold, and
// another owner (other, a handle on the same lock) must take the lock at once.
func aloneThenFree(t *testing.T, ctx context.Context, ma, other *rlock.Mutex, wait time.Duration, why string) {
	t.Helper()
	n := 0
	for deadline := time.Now().Add(wait); ; time.Sleep(10 * time.Millisecond) {
		var err error
		n, err = ma.HoldCount(ctx)
		require.NoError(t, err)
		if n == 1 || time.Now().After(deadline) {
			break
		}
	}
	if n != 1 {
		t.Errorf("the owner holds 1 hold (A's; %s); Redis counts %d", why, n)
	}
	require.NoError(t, ma.Unlock(ctx))
	ok, err := other.TryLock(bg, 0, 0)
	require.NoError(t, err)
	if !ok {
		ttl, _ := other.TTL(bg)
		t.Fatalf("every hold of the owner was given back or ran its course, yet the lock is held (for %v more)", ttl)
	}
	require.NoError(t, other.Unlock(bg))
}

// A context owner's fixed lease through one Client runs its course (in Redis too), and
// another Client takes the lock afresh for the same owner id. The first Client's Unlock of
// its ended hold (the common LockLease; work; Unlock, the work overrunning the lease) says
// ErrLeaseExpired, and must give back nothing: the hold it took is over, and the hold Redis
// has is the other Client's. It gave that one back instead (its Client counts no hold, so
// its release was not conditional on its count in Redis: keep = holds - 1 = -1), which
// freed the lock under the other Client: a third owner takes it while the other Client's
// Err is nil, until its next renewal round tells it of a loss it did not cause.
//
// The Unlock may come through another handle of the first Client (c.Mutex(name) made anew
// for each call, a common style), after the handle that locked was dropped: the Client
// knows the tenure ended whichever handle asks. Before, only the handle that used the hold
// last knew (Mutex.spare): another handle's Unlock went unconditionally and took the other
// Client's hold ("Redis counts 0 (A holds 1)", found in review of D1's fix).
func TestSharedOwner_unlockAfterFixedLeaseTakesNoOtherClientsHold(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"theHandleThatLocked", "anotherHandle"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b *backend) {
				ca := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
				cb := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
				name := redistest.Name(t)
				ctx := rlock.WithOwner(bg, "shared-"+name)
				ma, mb := ca.Mutex(name), cb.Mutex(name)
				require.NoError(t, mb.LockLease(ctx, 100*time.Millisecond)) // B's tenure, fixed
				within(t, 5*time.Second, "B's fixed lease to end", mb.Done(ctx))
				redistest.WaitFor(t, 5*time.Second, "the lease to end in Redis too", func() bool { return !b.exists(t, mb.Key()) })
				require.NoError(t, ma.Lock(ctx)) // afresh: A's tenure
				if via == "anotherHandle" {
					mb = cb.Mutex(name)
					runtime.GC() // the handle that locked is gone
				}
				err := mb.Unlock(ctx)
				t.Logf("B's Unlock: %v", err)
				require.ErrorIs(t, err, rlock.ErrLeaseExpired)
				n, err := ma.HoldCount(ctx)
				require.NoError(t, err)
				if n != 1 {
					t.Errorf("A holds 1 hold (B's Unlock was of its own ended hold); Redis counts %d", n)
				}
				other := ca.Mutex(name) // a third owner
				ok, err := other.TryLock(bg, 0, 0)
				require.NoError(t, err)
				if ok {
					t.Errorf("another owner took the lock while A holds it (A's Err: %v)", ma.Err(ctx))
					require.NoError(t, other.Unlock(bg))
				}
				require.NoError(t, ma.Unlock(ctx))
			})
		})
	}
}

// The Unlock of a fixed lease that ran its course still gives back the hold Redis keeps of
// its Client's: here one re-entered into another Client's tenure, which that Client's
// renewals keep in Redis (see TestSharedOwner_fixedLeaseReentryEndsInRedisToo).
func TestSharedOwner_unlockAfterFixedLeaseGivesBackItsOwnKeptHold(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca := b.client(t, sharedRenew()...)
		cb := b.client(t, sharedRenew()...)
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		ma, mb := ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, ma.Lock(ctx))
		require.NoError(t, mb.LockLease(ctx, 100*time.Millisecond)) // a re-entry, fixed
		within(t, 5*time.Second, "B's fixed lease to end", mb.Done(ctx))
		require.ErrorIs(t, mb.Unlock(ctx), rlock.ErrLeaseExpired)
		n, err := ma.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "B's kept hold given back, A's left")
		require.NoError(t, ma.Err(ctx))
		require.NoError(t, ma.Unlock(ctx))
		require.False(t, b.exists(t, ma.Key()))
	})
}
