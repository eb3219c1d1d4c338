package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A grant that finds orphans of the owner's tenure in Redis (a re-entry whose outcome stayed
// unknown, applied) gives them back (Mutex.grant). When that give-back failed, the Client
// forgot them all the same: Redis counted one more hold than the owner took, the watchdog
// renewed it with the tenure, and HoldCount said 3 for two holds until the last Unlock
// (TestRedOrphanHunt, CI of 0a409bf: "Redis 3, RedLock 2, Client 2 (orphans 0)" on a
// followed instance of a live hold). A give-back that fails now leaves them orphans of the
// tenure, given back at its next confirmed renewal.
func TestMutex_orphanWhoseGiveBackAtAGrantFailedIsSettledAtTheNextRenewal(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		t.Parallel()
		// Renewals every 2 s, refused until the premise is set: the lease (6 s) outlasts
		// the setup's two cleanup timeouts on a loaded machine.
		const watchdogTTL = 6 * time.Second
		name := redistest.Name(t)
		gave := make(chan rlock.GiveBackInfo, 8)
		obs := &rlock.Observer{GiveBack: func(e rlock.GiveBackInfo) {
			if e.Name == name {
				gave <- e
			}
		}}
		hc, c := hardSetup(t, b, rlock.WithWatchdogTimeout(watchdogTTL), rlock.WithCleanupTimeout(500*time.Millisecond), rlock.WithObserver(obs))
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		var phase atomic.Int32
		hc.set(orphanGrantPhases(&phase))
		phase.Store(phaseReentryLost)
		require.ErrorIs(t, m.Lock(bg), rlock.ErrUnknownOutcome)
		phase.Store(phaseGiveBackRefused)
		require.NoError(t, m.Lock(bg), "a re-entry, which finds the orphan")
		var e rlock.GiveBackInfo
		select {
		case e = <-gave:
		case <-time.After(10 * time.Second):
			t.Fatal("no GiveBack of the orphan within 10s")
		}
		require.Equal(t, rlock.GiveBackOrphan, e.Reason)
		require.Error(t, e.Err, "the test's premise: the give-back was refused")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 3, n, "the test's premise: Redis counts the orphan with the owner's two holds")
		phase.Store(phaseNormal)
		redistest.WaitFor(t, 3*watchdogTTL/3+2*time.Second, "HoldCount to count the owner's two holds (the next confirmed renewal gives the orphan back)", func() bool {
			n, err := m.HoldCount(bg)
			return err == nil && n == 2
		})
		require.NoError(t, m.Err(bg), "the lock is not lost")
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()), "the last Unlock frees the lock")
	})
}

// The same through a RedLock, whose instance grants go through Mutex.grant: the CI failure's
// shape ("Redis 3, RedLock 2, Client 2 (orphans 0)" on every instance of a live hold) until
// the last Unlock before, each instance back to the owner's two holds at its next confirmed
// renewal after.
func TestRedLock_orphanWhoseGiveBackAtAGrantFailedIsSettledAtTheNextRenewal(t *testing.T) {
	t.Parallel()
	const watchdogTTL = 6 * time.Second
	name := redistest.Name(t)
	var phase atomic.Int32
	var cs []*rlock.Client
	var ss []*redistest.Server
	for range 3 {
		b := realBackend(t)
		hc, c := hardSetup(t, b, rlock.WithWatchdogTimeout(watchdogTTL), rlock.WithCleanupTimeout(500*time.Millisecond))
		hc.set(orphanGrantPhases(&phase))
		cs, ss = append(cs, c), append(ss, b.srv)
	}
	// An instance timeout beyond the cleanup timeout: each instance's request is resolved
	// (its outcome unknown, its orphan counted) before the round's decision.
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(2*time.Second))
	require.NoError(t, r.Lock(bg))
	// beyond is, per instance, what Redis counts beyond the RedLock's holds there.
	beyond := func() []int {
		n, red := redLockHolds(r, cs), ownerHoldsEverywhere(t, ss, name)
		for i := range red {
			red[i] -= n[i]
		}
		return red
	}
	phase.Store(phaseReentryLost)
	require.Error(t, r.Lock(bg), "the re-entry's outcome is unknown on every instance")
	settled(t, r)
	idle(r, cs)
	phase.Store(phaseGiveBackRefused)
	require.NoError(t, r.Lock(bg), "a re-entry, which finds the orphans")
	settled(t, r)
	idle(r, cs) // the grants' give-backs, refused, are over
	orphaned := 0
	for _, d := range beyond() {
		if d > 0 {
			orphaned++
		}
	}
	require.GreaterOrEqual(t, orphaned, 2, "the test's premise: a majority of the instances count an orphan beyond the RedLock's holds (%v)", beyond())
	phase.Store(phaseNormal)
	redistest.WaitFor(t, 3*watchdogTTL/3+2*time.Second, "every instance to count the RedLock's holds (its next confirmed renewal gives the orphan back)", func() bool {
		d := beyond()
		return d[0] == 0 && d[1] == 0 && d[2] == 0
	})
	require.NoError(t, r.Err(bg))
	require.NoError(t, r.Unlock(bg))
	require.NoError(t, r.Unlock(bg))
	require.Equal(t, []int{0, 0, 0}, ownerHoldsEverywhere(t, ss, name), "the last Unlock frees every instance")
}

// The phases of the orphan-grant tests' faults: none (phaseNormal); a re-entry applied with
// every reply lost (phaseReentryLost); every release refused (phaseGiveBackRefused). Renewals
// are refused in the two fault phases, so that no confirmed renewal settles the orphan
// meanwhile.
const (
	phaseNormal = iota
	phaseReentryLost
	phaseGiveBackRefused
)

func orphanGrantPhases(phase *atomic.Int32) scriptHook {
	return func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		p := phase.Load()
		switch {
		case p == phaseNormal || cmd.multi:
			return call()
		case cmd.script == "renew":
			return refusedResult()
		case p == phaseReentryLost && cmd.script == "acquire":
			call() // applied; its reply, and every replay's, lost
			return hardLost()
		case p == phaseGiveBackRefused && cmd.script == "release":
			return refusedResult()
		}
		return call()
	}
}
