package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A re-entered RedLock whose hold is gone from a majority of the instances (keys deleted,
// before any renewal noticed): the non-last Unlock finds it (ErrNotHeld from those
// instances), yet since ca403d8 answers nil, as if a majority gave it back. A Mutex's
// non-last Unlock in the same spot answers ErrNotHeld.
func TestReview_reentryUnlockWithLostMajority(t *testing.T) {
	for _, lost := range []int{3} {
		t.Run("all", func(t *testing.T) {
			ss := redServers(t, 3)
			cs := redClients(t, []string{ss[0].Addr(), ss[1].Addr(), ss[2].Addr()},
				rlock.WithWatchdogTimeout(10*time.Second))
			name := redistest.Name(t)
			key := redKey(name)
			r := rlock.NewRedLock(name, cs)
			require.NoError(t, r.Lock(bg))
			require.NoError(t, r.Lock(bg))
			settled(t, r)
			for i := 0; i < lost; i++ {
				ss[i].Do(t, "DEL", key)
			}
			err := r.Unlock(bg)
			t.Logf("non-last Unlock: %v; Err after: %v", err, r.Err(bg))
			n, w := rlock.RedInstanceHolds(r, bg)
			for i, c := range cs {
				t.Logf("instance %d: RedLock counts %d, followed %v; Redis holds %d", i, n[c], w[c], ownerHoldsOn(t, ss[i], key))
			}
			time.Sleep(300 * time.Millisecond)
			t.Logf("Err 300ms later: %v", r.Err(bg))
			require.ErrorIs(t, err, rlock.ErrNotHeld, "the hold was gone from a majority")
		})
	}
}

// The same with a Mutex, for comparison.
func TestReview_mutexReentryUnlockLost(t *testing.T) {
	ss := redServers(t, 1)
	cs := redClients(t, []string{ss[0].Addr()}, rlock.WithWatchdogTimeout(10*time.Second))
	name := redistest.Name(t)
	m := cs[0].Mutex(name)
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Lock(bg))
	ss[0].Do(t, "FLUSHALL")
	err := m.Unlock(bg)
	t.Logf("mutex non-last Unlock: %v", err)
	require.ErrorIs(t, err, rlock.ErrNotHeld)
}
