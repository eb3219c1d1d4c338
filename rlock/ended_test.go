package rlock_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The Client's record of a context owner's tenures that ran to the end of their fixed lease
// (Client.ended), reviewed (endedreview, on 3c3b9cb).

// An Unlock through a Client whose own last tenure of the owner on the lock ran to the end of
// its fixed lease, never unlocked, is taken as that tenure's Unlock, whichever handle it
// comes through: ErrLeaseExpired, and it gives back only holds Redis counts of this
// Client's. So when another Client has since taken the lock for the owner, the first such
// Unlock leaves that hold (it cannot tell a late Unlock of its own ended lease from an
// Unlock meant for the other Client's hold, and taking a live holder's lock is the worse
// mistake); the next Unlock through it gives back as an Unlock through a Client that took
// no hold does (Mutex.Unlock, WithOwner).
func TestEnded_unlockThroughTheClientOfAnEndedLeaseIsThatLeasesFirst(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	ca, cb := b.client(t), b.client(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m := ca.Mutex(name)
	require.NoError(t, m.LockLease(ctx, 50*time.Millisecond)) // runs out, never unlocked
	within(t, 5*time.Second, "the fixed lease to end", m.Done(ctx))
	redistest.WaitFor(t, 5*time.Second, "the lease to end in Redis", func() bool { return !b.exists(t, m.Key()) })
	redistest.WaitFor(t, 5*time.Second, "the hold to leave A's table", func() bool { return rlock.HoldEntries(ca) == 0 })

	mb := cb.Mutex(name)
	require.NoError(t, mb.Lock(ctx)) // B takes it (watchdog)
	require.ErrorIs(t, ca.Mutex(name).Unlock(ctx), rlock.ErrLeaseExpired, "the ended lease's Unlock")
	n, err := mb.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "B's hold left")
	require.NoError(t, ca.Mutex(name).Unlock(ctx), "then an Unlock of the owner's hold through A")
	require.False(t, b.exists(t, m.Key()), "B's hold given back through A")
	require.ErrorIs(t, mb.Unlock(ctx), rlock.ErrNotHeld)
}

// Mutex, FairMutex and SpinMutex of one name share a key in the Client's table. A kept hold
// carries the variant that made it: the same context owner's next FairMutex tenure on the
// name ran on the Mutex's hold, and its HoldEnd said KindMutex (and its give-backs would use
// the Mutex's release script).
func TestEnded_anotherKindOfTheNameGetsAHoldOfItsOwn(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	var mu sync.Mutex
	var ends []rlock.Kind
	c := b.client(t, rlock.WithObserver(&rlock.Observer{HoldEnd: func(e rlock.HoldEndInfo) {
		mu.Lock()
		ends = append(ends, e.Kind)
		mu.Unlock()
	}}))
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "o-"+name)
	m := c.Mutex(name)
	require.NoError(t, m.LockLease(ctx, 50*time.Millisecond))
	within(t, 5*time.Second, "the fixed lease to end", m.Done(ctx))
	redistest.WaitFor(t, 5*time.Second, "the lease to end in Redis", func() bool { return !b.exists(t, m.Key()) })
	// The give-back at the lease's end keeps the hold in the table while it runs.
	redistest.WaitFor(t, 5*time.Second, "the hold to leave the table", func() bool { return rlock.HoldEntries(c) == 0 })

	f := c.FairMutex(name)
	require.NoError(t, f.Lock(ctx))
	require.NoError(t, f.Unlock(ctx))
	redistest.WaitFor(t, 5*time.Second, "two HoldEnds", func() bool { mu.Lock(); defer mu.Unlock(); return len(ends) == 2 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []rlock.Kind{rlock.KindMutex, rlock.KindFairMutex}, ends)
	require.ErrorIs(t, m.Err(ctx), rlock.ErrNotHeld)
	require.NotErrorIs(t, m.Err(ctx), rlock.ErrLeaseExpired, "the owner locked the name again since")
}

// Handles' own owners' ended holds are not kept by the Client (no other handle can ask for
// them; the handle keeps its own): 4100 of them (TryLock with a lease as a flag that expires,
// never unlocked) pushed a context owner's record out, and another handle's Unlock of its
// ended lease took the hold another Client had taken afresh.
func TestEnded_handleOwnersDoNotPushOutContextOwners(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("4100 leases")
	}
	b := realBackend(t)
	ca := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
	cb := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m := ca.Mutex(name)
	require.NoError(t, m.LockLease(ctx, 100*time.Millisecond)) // A's fixed tenure
	within(t, 5*time.Second, "A's fixed lease to end", m.Done(ctx))
	var last *rlock.Mutex
	for i := 0; i < 4100; i++ {
		last = ca.Mutex(fmt.Sprintf("%s-flag-%d", name, i))
		ok, err := last.TryLock(bg, 0, time.Second) // long enough for a loaded machine: a grant back after its lease is an error
		require.NoError(t, err)
		require.True(t, ok)
	}
	within(t, 5*time.Second, "the flags' leases to end", last.Done(bg))
	redistest.WaitFor(t, 10*time.Second, "the flags to leave the table", func() bool { return rlock.HoldEntries(ca) == 0 })
	redistest.WaitFor(t, 5*time.Second, "the lease to end in Redis", func() bool { return !b.exists(t, m.Key()) })
	mb := cb.Mutex(name)
	require.NoError(t, mb.Lock(ctx)) // afresh: B's tenure
	err := ca.Mutex(name).Unlock(ctx)
	t.Logf("A's Unlock through another handle: %v", err)
	require.ErrorIs(t, err, rlock.ErrLeaseExpired)
	n, err := mb.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "B's hold")
	require.NoError(t, mb.Unlock(ctx))
}

// A record pushed out of the Client's bound is forgotten by every handle: the handle that
// used the hold last (Mutex.spare) said ErrLeaseExpired even after the owner locked and
// unlocked again through another handle of the Client (Err's godoc: "until the owner locks
// again").
func TestEnded_forgottenRecordIsForgottenByItsHandleToo(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("4100 leases")
	}
	b := realBackend(t)
	c := b.client(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "o-"+name)
	m1 := c.Mutex(name)
	require.NoError(t, m1.LockLease(ctx, 50*time.Millisecond))
	within(t, 5*time.Second, "the fixed lease to end", m1.Done(ctx))
	redistest.WaitFor(t, 5*time.Second, "the hold to leave the table", func() bool { return rlock.HoldEntries(c) == 0 })
	var last *rlock.Mutex
	lctx := ctx
	for i := 0; i < 4100; i++ { // other context owners' leases on other names, run out
		last, lctx = c.Mutex(fmt.Sprintf("%s-flag-%d", name, i)), rlock.WithOwner(bg, fmt.Sprintf("f%d", i))
		ok, err := last.TryLock(lctx, 0, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
	}
	within(t, 5*time.Second, "the flags' leases to end", last.Done(lctx))
	redistest.WaitFor(t, 10*time.Second, "the flags to leave the table", func() bool { return rlock.HoldEntries(c) == 0 })

	m2 := c.Mutex(name)
	require.NoError(t, m2.Lock(ctx)) // the owner locks again through this Client
	require.NoError(t, m2.Unlock(ctx))
	require.ErrorIs(t, m2.Err(ctx), rlock.ErrNotHeld)
	err := m1.Err(ctx)
	t.Logf("m1.Err: %v", err)
	require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "the owner locked again since")
}
