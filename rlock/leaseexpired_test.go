package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// After a fixed lease ran its course, Err (and Unlock, HoldContext, Token) say so with
// ErrLeaseExpired, which still is ErrNotHeld, until the owner locks again or unlocks; the
// record survives the hold leaving the Client's table.
func TestMutex_Err_leaseExpired(t *testing.T) {
	t.Parallel() // its own servers; it waits out leases
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		// 1s: Err must still find the hold after the grant's round trip on a loaded machine.
		tryInTime(t, func() (bool, error) { return m.TryLock(bg, 0, time.Second) })
		require.NoError(t, m.Err(bg))
		within(t, 5*time.Second, "the end of the fixed lease", m.Done(bg))
		require.Eventually(t, func() bool { return rlock.HoldEntries(c) == 0 }, 2*time.Second, time.Millisecond,
			"a hold that ended by itself leaves the table")

		err := m.Err(bg)
		require.ErrorIs(t, err, rlock.ErrLeaseExpired)
		require.ErrorIs(t, err, rlock.ErrNotHeld, "existing ErrNotHeld checks keep working")
		hctx, cancel := m.HoldContext(bg)
		defer cancel()
		require.ErrorIs(t, context.Cause(hctx), rlock.ErrLeaseExpired)
		_, err = m.Token(bg)
		require.ErrorIs(t, err, rlock.ErrLeaseExpired)
		// Another handle of the name is another owner: it never held the lock.
		err = c.Mutex(m.Name()).Err(bg)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.NotErrorIs(t, err, rlock.ErrLeaseExpired)

		err = m.Unlock(bg)
		require.ErrorIs(t, err, rlock.ErrLeaseExpired)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		// Unlock ends the report.
		err = m.Err(bg)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)

		// So does the next Lock (the end of a lease never refuses it).
		require.NoError(t, m.LockLease(bg, 50*time.Millisecond))
		within(t, 2*time.Second, "the end of the fixed lease", m.Done(bg))
		require.ErrorIs(t, m.Err(bg), rlock.ErrLeaseExpired)
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Err(bg))
		require.NoError(t, m.Unlock(bg))
		err = m.Err(bg)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
	})
}

// A re-entry that extends a fixed lease: the expiry is reported once the extended lease ends.
// A lock lost (not run out) is still reported as ErrLockLost.
func TestMutex_Err_leaseExpiredVsLost(t *testing.T) {
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		c := b.client(t, rlock.WithWatchdogTimeout(300*time.Millisecond))
		m := c.Mutex(redistest.Name(t))
		// Past the first lease's end, 800 ms before the re-entry's: room for a loaded machine
		// beside the parallel tests.
		require.NoError(t, m.LockLease(bg, 200*time.Millisecond))
		require.NoError(t, m.LockLease(bg, 1200*time.Millisecond))
		time.Sleep(400 * time.Millisecond)
		require.NoError(t, m.Err(bg), "the re-entry extended the lease")
		within(t, 2*time.Second, "the end of the extended lease", m.Done(bg))
		require.ErrorIs(t, m.Err(bg), rlock.ErrLeaseExpired)

		require.NoError(t, m.Lock(bg)) // watchdog mode
		_, err := b.do(t, "DEL", m.Key())
		require.NoError(t, err)
		within(t, 2*time.Second, "loss notice", m.Done(bg))
		err = m.Err(bg)
		require.ErrorIs(t, err, rlock.ErrLockLost)
		require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)
	})
}

func TestErr_leaseExpired_contextOwnerAndReadSide(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ctx := c.WithNewOwner(bg)
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, m.LockLease(ctx, 50*time.Millisecond))
		within(t, 2*time.Second, "the end of the fixed lease", m.Done(ctx))
		require.ErrorIs(t, m.Err(ctx), rlock.ErrLeaseExpired)
		require.ErrorIs(t, m.Err(bg), rlock.ErrNotHeld) // the handle's own owner never held it
		require.NotErrorIs(t, m.Err(bg), rlock.ErrLeaseExpired)
		require.ErrorIs(t, m.Unlock(ctx), rlock.ErrLeaseExpired)

		rw := c.RWMutex(redistest.Name(t) + "-rw")
		require.NoError(t, rw.RLockLease(bg, 50*time.Millisecond))
		within(t, 2*time.Second, "the end of the read lease", rw.RLocker().Done(bg))
		require.ErrorIs(t, rw.RLocker().Err(bg), rlock.ErrLeaseExpired)
		require.ErrorIs(t, rw.Err(bg), rlock.ErrNotHeld)
		require.NotErrorIs(t, rw.Err(bg), rlock.ErrLeaseExpired)
		require.ErrorIs(t, rw.RUnlock(bg), rlock.ErrLeaseExpired)
	})
}
