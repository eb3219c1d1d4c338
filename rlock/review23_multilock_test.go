package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// countedMutex is a user's Locker that embeds a *rlock.Mutex and keeps state of its own
// across TryLock and Unlock (a local count, standing for a metric, a local mutex, a lease
// registry...). Locker's godoc: a MultiLock gives back what it took with Unlock.
type countedMutex struct {
	*rlock.Mutex
	held atomic.Int64
}

func (m *countedMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	ok, err := m.Mutex.TryLock(ctx, wait, lease)
	if ok {
		m.held.Add(1)
	}
	return ok, err
}

func (m *countedMutex) Unlock(ctx context.Context) error {
	m.held.Add(-1)
	return m.Mutex.Unlock(ctx)
}

// TestMultiLock_roundGiveBackCallsForeignLockersUnlock: a failed round must give back a
// foreign Locker's hold through that Locker's Unlock (Locker's godoc; MultiLock's: "another
// Locker's is left as its Unlock leaves it"), even when the Locker embeds a lock of this
// package: the promoted unexported giveBackTaken must not bypass the user's Unlock.
func TestMultiLock_roundGiveBackCallsForeignLockersUnlock(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	other, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer other.Close()
	name := redistest.Name(t)
	a := &countedMutex{Mutex: c.Mutex(name + "-a")}
	b := c.Mutex(name + "-b")
	require.NoError(t, other.Mutex(name+"-b").Lock(bg))
	ok, err := rlock.NewMultiLock(a, b).TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, a.Err(bg), rlock.ErrNotHeld, "member a given back in Redis")
	require.Equal(t, int64(0), a.held.Load(), "the user's Locker was given back without its Unlock")
}
