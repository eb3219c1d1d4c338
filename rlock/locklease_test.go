package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

func TestMutex_LockLease_blocksThenHoldsForTheFixedLease(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		// The lease is long enough that the TTL read after the grant comes before its end on
		// a loaded machine (300ms was not always), and far below the watchdog timeout, so
		// that the TTL tells the two apart.
		const lease = time.Second
		c := b.client(t, rlock.WithWatchdogTimeout(10*time.Second))
		name := redistest.Name(t)
		holder, m := c.Mutex(name), c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		got := make(chan error, 1)
		go func() { got <- m.LockLease(bg, lease) }()
		select {
		case err := <-got:
			t.Fatalf("LockLease returned %v while another held the lock", err)
		case <-time.After(50 * time.Millisecond):
		}
		require.NoError(t, holder.Unlock(bg))
		require.NoError(t, await(t, got, 5*time.Second, "LockLease after the holder's Unlock"))

		ttl, err := m.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, lease, "the fixed lease, not the watchdog timeout")
		hctx, cancel := m.HoldContext(bg)
		defer cancel()
		// Never renewed: the lock frees by itself at the end of the lease. (The bounds are
		// hang guards, far above the lease, for loaded machines.)
		within(t, 10*time.Second, "the end of the fixed lease", m.Done(bg))
		require.ErrorIs(t, context.Cause(hctx), rlock.ErrLeaseExpired)
		require.Eventually(t, func() bool {
			locked, err := m.IsLocked(bg)
			return err == nil && !locked
		}, 10*time.Second, 5*time.Millisecond)
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)
		// Unlike a loss, the end of the lease does not refuse the next Lock.
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Unlock(bg))
	})
}

func TestMutex_LockLease_badLeaseAndCtx(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		for _, lease := range []time.Duration{0, -time.Second, time.Millisecond, 9 * time.Millisecond} {
			require.ErrorIs(t, m.LockLease(bg, lease), rlock.ErrInvalid, "lease %v", lease)
		}
		require.False(t, b.exists(t, m.Key()))

		other := c.Mutex(m.Name())
		require.NoError(t, other.Lock(bg))
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, m.LockLease(ctx, time.Second), context.DeadlineExceeded)
		require.NoError(t, other.Unlock(bg))
		require.NoError(t, m.LockLease(bg, 10*time.Millisecond)) // the shortest lease
		within(t, 2*time.Second, "the end of the 10ms lease", m.Done(bg))
	})
}

func TestLockLease_family(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		rw := c.RWMutex(redistest.Name(t) + "-rw")
		fixed := func(name string, lock func(context.Context, time.Duration) error, done func(context.Context) <-chan struct{}) {
			t.Helper()
			require.ErrorIs(t, lock(bg, 0), rlock.ErrInvalid, name)
			for i := 1; ; i++ {
				require.NoError(t, lock(bg, 200*time.Millisecond), name)
				err := lock(bg, 200*time.Millisecond) // re-entry
				if errors.Is(err, rlock.ErrLeaseExpired) && i < 20 {
					// On a loaded machine the re-entry's grant can come back after the tenure's
					// 200ms lease ran out (-race, beside the parallel tests, at d864deb): its
					// documented outcome, not what this test is about. Again, on a new tenure.
					t.Logf("%s: attempt %d: the re-entry's grant came back after the lease ran out (%v); again", name, i, err)
					continue
				}
				require.NoError(t, err, name+": re-entry")
				break
			}
			within(t, 2*time.Second, name+": the end of the fixed lease", done(bg))
		}
		fm, sm := c.FairMutex(redistest.Name(t)+"-fair"), c.SpinMutex(redistest.Name(t)+"-spin")
		fixed("FairMutex", fm.LockLease, fm.Done)
		fixed("SpinMutex", sm.LockLease, sm.Done)
		fixed("RWMutex write", rw.LockLease, rw.Done)
		fixed("RWMutex read", rw.RLockLease, rw.RLocker().Done)
		fixed("ReadLocker", rw.RLocker().LockLease, rw.RLocker().Done)
		require.Eventually(t, func() bool {
			locked, err := rw.IsLocked(bg)
			return err == nil && !locked
		}, 2*time.Second, 5*time.Millisecond)
	})
}
