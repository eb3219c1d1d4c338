package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Give-backs "work even when ctx is already cancelled" (Mutex.Unlock, RWMutex.Unlock and
// RUnlock, Semaphore.Release, PermitSemaphore.Release), walked across every primitive; the
// latch's writes instead return "ctx's error when ctx had already ended (nothing sent)".
func TestContracts_giveBackOnCancelledCtx(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	dead, cancel := context.WithCancel(bg)
	cancel()
	for _, k := range contractKinds {
		t.Run(k.name, func(t *testing.T) {
			l := k.make(c, redistest.Name(t))
			require.NoError(t, l.Lock(bg))
			require.NoError(t, l.Lock(bg))
			require.NoError(t, l.Unlock(dead))
			n, err := k.count(l, bg)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.NoError(t, l.Unlock(dead))
			require.ErrorIs(t, l.Err(bg), rlock.ErrNotHeld)
			require.ErrorIs(t, l.Unlock(dead), rlock.ErrNotHeld)
		})
	}
	t.Run("Semaphore", func(t *testing.T) {
		s := c.Semaphore(redistest.Name(t))
		ok, err := s.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.Acquire(bg, 1))
		require.NoError(t, s.Release(dead, 1))
		ok, err = s.ReleaseIfExists(dead, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, semAvailable(t, s))
	})
	t.Run("PermitSemaphore", func(t *testing.T) {
		p := c.PermitSemaphore(redistest.Name(t))
		ok, err := p.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		pm, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		require.NoError(t, p.Release(dead, pm.ID))
		require.Equal(t, 1, semAvailable(t, p))
	})
	t.Run("CountDownLatch", func(t *testing.T) {
		l := c.CountDownLatch(redistest.Name(t))
		_, err := l.TrySetCount(dead, 1)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, b.exists(t, l.Key()), "nothing sent")
		ok, err := l.TrySetCount(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		require.ErrorIs(t, l.CountDown(dead), context.Canceled)
		_, err = l.Delete(dead)
		require.ErrorIs(t, err, context.Canceled)
		n, err := l.Count(bg)
		require.NoError(t, err)
		require.Equal(t, int64(2), n, "nothing sent")
	})
}
