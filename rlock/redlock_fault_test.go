package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A round that a majority refuses is decided by the instances that answer: with 2 of 5
// servers paused, an acquire refused by the other 3 does not wait for the silent two up to
// the instance timeout. (An acquire that the 3 grant is decided by them at once: see
// TestRedLock_slowMinorityNotWaitedFor.)
func TestRedLock_silentMinorityNotWaitedFor(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses servers")
	}
	ss := redServers(t, 5)
	const tmo, lease = time.Second, 20 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	other := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(tmo))
	o := rlock.NewRedLock(name, other, rlock.WithInstanceTimeout(tmo))
	for _, x := range []*rlock.RedLock{r, o} { // the scripts loaded, the servers checked
		require.NoError(t, x.Lock(bg))
		require.NoError(t, x.Unlock(bg))
	}
	settled(t, r, o) // no grant or give-back still on its way to a server about to pause
	ss[0].Pause(t)
	ss[1].Pause(t)
	defer func() {
		for _, s := range ss {
			s.Resume(t)
		}
	}()

	start := time.Now()
	ok, err := r.TryLock(bg, 0, lease)
	took := time.Since(start)
	require.NoError(t, err)
	require.True(t, ok, "granted by the 3 that answer")
	ttl, err := r.TTL(bg)
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, lease-took, "validity reduced by the time spent")

	start = time.Now()
	ok, err = o.TryLock(bg, 0, lease)
	took = time.Since(start)
	require.NoError(t, err)
	require.False(t, ok, "refused by the 3 that answer")
	require.Less(t, took, tmo*3/4, "a refusal by a majority decides the round without the silent two")

	require.NoError(t, r.Unlock(bg))
	require.Equal(t, 0, holdersOn(t, ss[2:], redKey(name)))
}
