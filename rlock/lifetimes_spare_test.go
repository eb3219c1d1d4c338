package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A handle's own owner's fixed lease that ran its course is reported (ErrLeaseExpired, by
// Err and Unlock) "until the owner locks again or calls Unlock" (Mutex.Err): the record is the
// hold, which leaves the Client's table once idle and is kept only by the handle's one slot
// (Mutex.spare). A call of the same handle for a context owner (WithOwner) takes that slot
// (Client.ref sets m.spare to the context owner's hold), and the own owner's end is
// forgotten: Err and Unlock say ErrNotHeld though the owner neither locked again nor
// unlocked.
func TestLifetimes_ownOwnersLeaseEndOutlivesTheHandlesSpare(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.LockLease(bg, 50*time.Millisecond))
	within(t, 5*time.Second, "the fixed lease to end", m.Done(bg))
	redistest.WaitFor(t, 5*time.Second, "the hold to leave the table", func() bool { return rlock.HoldEntries(c) == 0 })
	require.ErrorIs(t, m.Err(bg), rlock.ErrLeaseExpired, "before the handle serves another owner")

	// The same handle, for a context owner: one Lock and Unlock.
	octx := rlock.WithOwner(bg, "other-"+m.Name())
	require.NoError(t, m.Lock(octx))
	require.NoError(t, m.Unlock(octx))

	err := m.Err(bg)
	t.Logf("own owner's Err after the handle served a context owner: %v", err)
	require.ErrorIs(t, err, rlock.ErrLeaseExpired, "the own owner neither locked again nor unlocked")
	err = m.Unlock(bg)
	t.Logf("own owner's Unlock: %v", err)
	require.ErrorIs(t, err, rlock.ErrLeaseExpired)
}

// The same, while Redis still counts the ended lease's hold (its expiry later than the
// Client's conservative end: the drift moment, made long here by a PEXPIRE): the own
// owner's Unlock through the handle that kept the record says ErrLeaseExpired; once the
// handle served a context owner (one refused TryLock), the Unlock goes as one of a live hold
// and returns nil, after Done had closed and Err had said the lease ran out.
func TestLifetimes_ownOwnersUnlockAfterLeaseEndSaysNilOnceSpareIsTaken(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	for _, served := range []bool{false, true} {
		m := c.Mutex(redistest.Name(t) + map[bool]string{false: "-kept", true: "-taken"}[served])
		// 1s: the PEXPIRE must reach Redis before the lease ends there, on a loaded machine.
		require.NoError(t, m.LockLease(bg, time.Second))
		res, err := b.do(t, "PEXPIRE", m.Key(), "60000") // Redis's end comes later than the Client's
		require.NoError(t, err)
		set, err := res.AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, set, "the PEXPIRE found the held key")
		within(t, 5*time.Second, "the fixed lease to end here", m.Done(bg))
		require.ErrorIs(t, m.Err(bg), rlock.ErrLeaseExpired)
		if served {
			// The lock is still held in Redis: the context owner's one attempt is refused
			// (any call of the handle that takes a hold entry for that owner will do).
			ok, err := m.TryLock(rlock.WithOwner(bg, "other-"+m.Name()), 0, 0)
			require.NoError(t, err)
			require.False(t, ok)
		}
		err = m.Unlock(bg)
		t.Logf("served a context owner %v: own owner's Unlock after its lease ended here: %v", served, err)
		require.ErrorIs(t, err, rlock.ErrLeaseExpired, "served a context owner: %v", served)
	}
}
