package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

func TestSpinMutex_basics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		m := c.SpinMutex(name)
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Lock(bg), "reentrant")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		other := c.SpinMutex(name)
		ok, err := other.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		start := time.Now()
		ok, err = other.TryLock(bg, 150*time.Millisecond, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "the wait bound is honoured")
		require.ErrorIs(t, other.Unlock(bg), rlock.ErrNotHeld)

		// A blocked Lock gets the lock after the holder's last Unlock.
		got := make(chan error, 1)
		go func() { got <- other.Lock(bg) }()
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, await(t, got, 10*time.Second, "the spinning waiter to get the lock"))
		require.NoError(t, other.Unlock(bg))

		// A Mutex and a SpinMutex of one name are one lock.
		require.NoError(t, c.Mutex(name).Lock(bg))
		ok, err = m.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
	})
}

// A holder that dies is waited out until its lease ends (nothing is published anyway).
func TestSpinMutex_crashedHolderFreesWithinLease(t *testing.T) {
	t.Parallel() // waits out a lease, bounded at 10 s; servers, Clients and names of its own
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		dead := b.client(t)
		// Beside the parallel tests a grant may come back after its 300ms lease: tryInTime
		// takes again.
		tryInTime(t, func() (bool, error) { return dead.SpinMutex(name).TryLock(bg, 0, 300*time.Millisecond) })
		require.NoError(t, dead.Close())
		m := b.client(t).SpinMutex(name)
		ok, err := m.TryLock(bg, 10*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, m.Unlock(bg))
	})
}

// Waiting and releasing use no pub/sub at all.
func TestSpinMutex_noPubSub(t *testing.T) {
	b := realBackend(t)
	c := b.client(t)
	name := redistest.Name(t)
	m := c.SpinMutex(name)
	require.NoError(t, m.Lock(bg))
	b.srv.ResetStats(t)
	got := make(chan error, 1)
	other := c.SpinMutex(name)
	go func() { got <- other.Lock(bg) }()
	redistest.WaitFor(t, 5*time.Second, "the waiter to try more than once", func() bool {
		return b.srv.CommandStats(t)["evalsha"] >= 3
	})
	require.NoError(t, m.Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "the spinning waiter"))
	require.NoError(t, other.Unlock(bg))
	_, err := m.ForceUnlock(bg)
	require.NoError(t, err)
	stats := b.srv.CommandStats(t)
	for _, cmd := range []string{"publish", "subscribe", "ssubscribe", "spublish"} {
		require.Zero(t, stats[cmd], cmd)
	}
}

func TestSpinMutex_mutualExclusion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		hammer(t, b, 12, 15, func(c *rlock.Client) locker { return c.SpinMutex(name) })
	})
}

func TestSpinMutex_badInput(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	m := c.SpinMutex("")
	require.ErrorIs(t, m.Lock(bg), rlock.ErrInvalid)
	_, err = c.SpinMutex("x").TryLock(bg, -time.Second, 0)
	require.ErrorIs(t, err, rlock.ErrInvalid)
}
