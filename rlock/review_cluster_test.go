package rlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Review tests on a real 3+3 Redis Cluster (skipped under -short).

// An Unlock while the lock's slot is being migrated, before any key moved: every key is on
// the source, which serves single-key scripts and multi-key scripts whose keys all exist.
// The plain Mutex's release names only keys that exist (its first send leaves the forced
// record out, or names the lock again in its place when it hands the lock to a parked waiter
// of the same Client): it is served. The FairMutex's and RWMutex's releases name their
// request's release record, a key that exists nowhere yet, so the source answers TRYAGAIN
// for as long as the migration lasts: the Unlock is sent again until the cleanup timeout and
// then fails with it, the hold kept; once the migration ends, Unlock succeeds (documented in
// the README's Deployments).
func TestReviewCluster_unlockWhileSlotMigrates(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	const cleanup = 2 * time.Second
	// The release channel lingers subscribed for the whole test (see the parked waiter below).
	c, err := rlock.New(rc, rlock.WithCleanupTimeout(cleanup), rlock.WithSubscriptionLinger(time.Hour))
	require.NoError(t, err)
	defer c.Close()
	names, slot := sameSlotNames(t, c, 5)

	plain := c.Mutex(names[4])
	fair := c.FairMutex(names[1])
	rw := c.RWMutex(names[2])
	rd := c.RWMutex(names[3])
	for i, lock := range []func() (bool, error){
		func() (bool, error) { return plain.TryLock(bg, 0, time.Minute) },
		func() (bool, error) { return fair.TryLock(bg, 0, time.Minute) },
		func() (bool, error) { return rw.TryLock(bg, 0, time.Minute) },
		func() (bool, error) { return rd.TryRLock(bg, 0, time.Minute) },
	} {
		ok, err := lock()
		require.NoError(t, err, "lock #%d", i)
		require.True(t, ok, "lock #%d", i)
	}

	// A second Mutex handle of the same Client waits on names[0]: parked, it is the
	// successor a release hands the lock to.
	hand := c.Mutex(names[0])
	hold := c.Mutex(names[0])
	ok, err := hold.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	// The waiter must stay parked until the release below: a waiter that is awake (between
	// two attempts) is passed over, the release frees the lock instead, and the waiter's own
	// acquire meets TRYAGAIN for as long as the migration lasts. The confirmation of a new
	// subscription wakes every waiter of its channel (pubsub: "a hint to try again"); under
	// load it came after the waiter had parked and just before the release ("parked" seen,
	// then 0 parked at the Unlock, and the waiter's TryLock failing with TRYAGAIN after 30s).
	// So the channel is made live first, by a waiter that then gives up (the channel lingers),
	// and the waiter of the test joins it live: nothing but a release wakes it.
	warm := c.Mutex(names[0])
	wctx, wcancel := context.WithCancel(bg)
	warmed := make(chan error, 1)
	go func() {
		_, err := warm.TryLock(wctx, 30*time.Second, time.Minute)
		warmed <- err
	}()
	redistest.WaitFor(t, 10*time.Second, "the release channel to be live", func() bool { return rlock.ChannelLive(c, warm) })
	wcancel()
	require.ErrorIs(t, await(t, warmed, 10*time.Second, "the warming waiter to give up"), context.Canceled)
	require.True(t, rlock.ChannelLive(c, hand), "the channel lingers")
	got := make(chan error, 1)
	hctx, hcancel := context.WithCancel(bg)
	defer hcancel()
	go func() {
		ok, err := hand.TryLock(hctx, 30*time.Second, time.Minute)
		if err == nil && !ok {
			err = errors.New("not acquired within the wait")
		}
		got <- err
	}()
	redistest.WaitFor(t, 10*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, hand) == 1 })

	src := cl.MasterOf(t, plain.Key())
	dst := otherMaster(t, cl, src)
	mig := cl.BeginMigration(t, slot, dst)
	finished := false
	defer func() {
		if !finished {
			mig.Finish(t)
		}
	}()

	require.NoError(t, plain.Unlock(bg), "Mutex.Unlock while the slot migrates")
	require.NoError(t, hold.Unlock(bg), "Mutex.Unlock handing the lock to a parked waiter while the slot migrates")
	require.NoError(t, await(t, got, 30*time.Second, "the parked waiter"))
	for what, unlock := range map[string]func() error{
		"FairMutex.Unlock": func() error { return fair.Unlock(bg) },
		"RWMutex.Unlock":   func() error { return rw.Unlock(bg) },
		"RWMutex.RUnlock":  func() error { return rd.RUnlock(bg) },
	} {
		tryAgain := errorCount(t, src, "TRYAGAIN") + errorCount(t, dst, "TRYAGAIN")
		start := time.Now()
		err := unlock()
		require.Error(t, err, "%s while the slot migrates (documented: waits for the migration within the cleanup timeout)", what)
		// The give-back is refused with TRYAGAIN and sent again until the cleanup timeout. It
		// fails with the last refusal, or, when the timeout cuts a send short (on a loaded
		// machine: "outcome unknown: context deadline exceeded (last error: context deadline
		// exceeded)"), with an unknown outcome. Either way Redis refused it with TRYAGAIN.
		if !strings.Contains(err.Error(), "TRYAGAIN") {
			t.Logf("%s: the cleanup timeout cut a send short: %v", what, err)
			require.ErrorIs(t, err, rlock.ErrUnknownOutcome, what)
			require.ErrorIs(t, err, context.DeadlineExceeded, what)
		}
		require.Greater(t, errorCount(t, src, "TRYAGAIN")+errorCount(t, dst, "TRYAGAIN"), tryAgain, "%s was refused with TRYAGAIN", what)
		require.GreaterOrEqual(t, time.Since(start), cleanup-100*time.Millisecond, "%s gave up before its cleanup timeout", what)
	}
	mig.Finish(t)
	finished = true
	require.NoError(t, fair.Unlock(bg), "FairMutex.Unlock after the migration: the hold was kept")
	require.NoError(t, rw.Unlock(bg), "RWMutex.Unlock after the migration")
	require.NoError(t, rd.RUnlock(bg), "RWMutex.RUnlock after the migration")
	require.NoError(t, hand.Unlock(bg))
}

// A waiter asleep on a lock whose keys have moved to the target of a migration in progress
// (the slot is still the source's: CLUSTER SLOTS, and so the Subscriber, say so, and the
// source serves SSUBSCRIBE until SETSLOT NODE). The holder's release is served on the target
// (ASK), and its SPUBLISH goes to the target's subscribers: none. The waiter is woken when
// the slot's migration ends (the source ends its subscription: it looks at the lock again),
// not by the release (a documented limitation of sharded pub/sub during a migration: the
// README's Deployments). A stalled migration would leave it to its lease-end timer.
func TestReviewCluster_wakeUpLostWhileSlotMigrates(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	holderC, err := rlock.New(cl.Client(t))
	require.NoError(t, err)
	defer holderC.Close()
	sc := countScripts(cl.Client(t))
	attempts := &sc.ran // the lock attempts: scripts answered otherwise than NOSCRIPT
	waiterC, err := rlock.New(sc)
	require.NoError(t, err)
	defer waiterC.Close()

	name := redistest.Name(t)
	holder := holderC.Mutex(name)
	ok, err := holder.TryLock(bg, 0, time.Minute) // a fixed lease: no renewals
	require.NoError(t, err)
	require.True(t, ok)

	src := cl.MasterOf(t, holder.Key())
	mig := cl.BeginMigration(t, redistest.Slot(holder.Key()), otherMaster(t, cl, src))
	finished := false
	defer func() {
		if !finished {
			mig.Finish(t)
		}
	}()
	mig.MoveKeys(t) // every key of the slot (the lock and its fence) is on the target now

	waiter := waiterC.Mutex(name)
	got := make(chan error, 1)
	go func() {
		ok, err := waiter.TryLock(bg, 40*time.Second, time.Minute)
		if err == nil && !ok {
			err = errors.New("not acquired within the wait")
		}
		got <- err
	}()
	// The waiter's wait: an attempt, the Watch (the channel still to be confirmed: no attempt
	// then, DESIGN 7), the subscription's confirmation wakes it, an attempt; then it sleeps
	// (the holder's lease is about a minute).
	redistest.WaitFor(t, 10*time.Second, "the waiter to subscribe and make its two attempts", func() bool {
		return rlock.ChannelLive(waiterC, waiter) && attempts.Load() >= 2
	})
	require.EqualValues(t, 2, attempts.Load())

	released := time.Now()
	require.NoError(t, holder.Unlock(bg), "the release (served on the target through ASK)")
	select {
	case err := <-got:
		// Woken by the release after all (a rueidis refresh re-homed the channel first):
		// better than documented.
		require.NoError(t, err)
		t.Logf("acquired %v after the release", time.Since(released))
	case <-time.After(time.Second):
		mig.Finish(t)
		finished = true
		require.NoError(t, await(t, got, 10*time.Second, "the waiter once the migration finished"))
		t.Logf("woken when the migration finished, %v after the release", time.Since(released))
	}
	require.NoError(t, waiter.Unlock(bg))
}
