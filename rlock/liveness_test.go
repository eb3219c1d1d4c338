package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Found by TestExplore_Liveness. A waiter's sleep is bounded by the holder's lease that its
// own last attempt was told (an expiry publishes nothing, DESIGN 7). A direct hand-off
// begins a tenure with the candidate's lease and tells nobody: no publish, no attempt. When
// that lease is shorter than what the other waiters were told and it runs out (the new
// holder stalls or dies: what a fixed lease is for), the lock is free and every waiter
// sleeps on to the previous holder's lease end: here 5 s of a watchdog lease (30 s by
// default). A waiter of another Client waits, its wait unbounded, while the lock is free.
func TestMutex_handoffToShortLeaseThenExpiryWakesWaiters(t *testing.T) {
	t.Parallel() // its own Clients and names
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		const watchdog, lease, slack = 5 * time.Second, 300 * time.Millisecond, 700 * time.Millisecond
		ca, cb := b.client(t, rlock.WithWatchdogTimeout(watchdog)), b.client(t, rlock.WithWatchdogTimeout(watchdog))
		name := redistest.Name(t)
		holder, successor, other := ca.Mutex(name), ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, holder.Lock(bg)) // watchdog mode: a 5 s lease

		ctx, cancel := context.WithTimeout(bg, 2*watchdog)
		defer cancel()
		otherDone := make(chan time.Time, 1)
		go func() {
			if err := other.Lock(ctx); err == nil {
				otherDone <- time.Now()
				_ = other.Unlock(bg)
			}
			close(otherDone)
		}()
		// The other Client's waiter was refused (the lock is marked), told about 5 s, and
		// sleeps, its subscription confirmed.
		redistest.WaitFor(t, 2*time.Second, "the other Client's waiter to park", func() bool {
			return rlock.ParkedCandidates(cb, other) == 1 && rlock.ChannelLive(cb, other)
		})

		succDone := make(chan error, 1)
		go func() { succDone <- successor.LockLease(ctx, lease) }()
		redistest.WaitFor(t, 2*time.Second, "the successor to park", func() bool { return rlock.ParkedCandidates(ca, holder) == 1 })

		require.NoError(t, holder.Unlock(bg)) // passes the lock to the successor, publishes nothing
		require.NoError(t, await(t, succDone, 2*time.Second, "the hand-off"))
		granted := time.Now()
		// The successor never gives the lock back: its 300 ms lease ends it.
		time.Sleep(lease + 100*time.Millisecond)
		freeAt := time.Now()
		free := !b.exists(t, holder.Key())
		select {
		case at, ok := <-otherDone:
			require.True(t, ok, "the other Client's Lock failed")
			t.Logf("the other Client's waiter took the lock %v after the hand-off", at.Sub(granted).Round(time.Millisecond))
			return
		default:
		}
		require.True(t, free, "the successor's lease should have run out")
		select {
		case at, ok := <-otherDone:
			require.True(t, ok, "the other Client's Lock failed")
			t.Logf("the other Client's waiter took the lock %v after the hand-off", at.Sub(granted).Round(time.Millisecond))
			require.Less(t, at.Sub(granted), lease+slack)
		case <-time.After(time.Until(granted.Add(lease + slack))):
			at, ok := <-otherDone
			require.True(t, ok, "the other Client's Lock failed")
			t.Fatalf("the lock was free from %v after the hand-off (the successor's %v lease ran out; Redis had no key %v after), "+
				"yet the other Client's waiter took it only %v after the hand-off: it slept to the end of the previous holder's lease",
				lease, lease, freeAt.Sub(granted).Round(time.Millisecond), at.Sub(granted).Round(time.Millisecond))
		}
	})
}

// Found by TestExplore_Liveness. A Lock that finds waiters of its own Client queued joins
// behind them (local FIFO) without an attempt, so it is told no lease at all, and sleeps up
// to the watchdog timeout (5 s here, 30 s by default) unless a release's publish or a
// waiter's Pass wakes it. The waiter ahead wakes at the holder's lease end and takes the
// lock; when that grant's own lease then runs out (its holder stalls or dies), nothing
// publishes, nothing is passed on, and the joiner sleeps on while the lock is free.
func TestMutex_queuedJoinerWakesAtExpiry(t *testing.T) {
	t.Parallel() // its own Clients and names
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		const watchdog, holdLease, firstLease, slack = 5 * time.Second, 1500 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond
		ca, cb := b.client(t, rlock.WithWatchdogTimeout(watchdog)), b.client(t)
		name := redistest.Name(t)
		holder, first, joiner := cb.Mutex(name), ca.Mutex(name), ca.Mutex(name)
		require.NoError(t, holder.LockLease(bg, holdLease)) // never given back: it expires

		ctx, cancel := context.WithTimeout(bg, 2*watchdog)
		defer cancel()
		firstDone := make(chan error, 1)
		go func() { firstDone <- first.LockLease(ctx, firstLease) }() // never given back either
		redistest.WaitFor(t, holdLease/2, "the first waiter to park", func() bool {
			return rlock.ParkedCandidates(ca, first) == 1 && rlock.ChannelLive(ca, first)
		})
		joinerDone := make(chan time.Time, 1)
		go func() {
			if err := joiner.Lock(ctx); err == nil {
				joinerDone <- time.Now()
				_ = joiner.Unlock(bg)
			}
			close(joinerDone)
		}()
		redistest.WaitFor(t, holdLease/2, "the joiner to park behind it", func() bool { return rlock.ParkedCandidates(ca, first) == 2 })

		// The holder's lease runs out; the first waiter wakes then and takes the lock.
		require.NoError(t, await(t, firstDone, 2*time.Second, "the first waiter's grant"))
		granted := time.Now()
		time.Sleep(firstLease + 100*time.Millisecond)
		freeAt := time.Now()
		free := !b.exists(t, first.Key())
		select {
		case at, ok := <-joinerDone:
			require.True(t, ok, "the joiner's Lock failed")
			t.Logf("the joiner took the lock %v after the first waiter's grant", at.Sub(granted).Round(time.Millisecond))
			return
		default:
		}
		require.True(t, free, "the first waiter's lease should have run out")
		select {
		case at, ok := <-joinerDone:
			require.True(t, ok, "the joiner's Lock failed")
			t.Logf("the joiner took the lock %v after the first waiter's grant", at.Sub(granted).Round(time.Millisecond))
			require.Less(t, at.Sub(granted), firstLease+slack)
		case <-time.After(time.Until(granted.Add(firstLease + slack))):
			at, ok := <-joinerDone
			require.True(t, ok, "the joiner's Lock failed")
			t.Fatalf("the lock was free from %v after the first waiter's grant (its %v lease ran out; Redis had no key %v after), "+
				"yet the joiner, queued behind it, took it only %v after: it slept its watchdog timeout, told no lease",
				firstLease, firstLease, freeAt.Sub(granted).Round(time.Millisecond), at.Sub(granted).Round(time.Millisecond))
		}
	})
}
