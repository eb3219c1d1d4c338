package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A round is decided by the instances that answer: with 2 of 5 servers paused, an acquire
// granted by the other 3 does not wait for the silent two up to the instance timeout, nor
// does one that a majority refuses; and an Unlock whose hold is on a paused majority
// returns within two instance timeouts, not the cleanup timeout. The instance timeout here
// (3s) is long so that the bounds below are far from both the expected durations (a few
// milliseconds, at most a quarter of it for stragglers) and the machine's noise.
func TestRedLock_silentMinorityNotWaitedFor(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses servers")
	}
	ss := redServers(t, 5)
	const tmo, lease = 3 * time.Second, 20 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(20*time.Second))
	other := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(20*time.Second))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(tmo))
	o := rlock.NewRedLock(name, other, rlock.WithInstanceTimeout(tmo))
	for _, x := range []*rlock.RedLock{r, o} { // the scripts loaded, the servers checked
		require.NoError(t, x.Lock(bg))
		require.NoError(t, x.Unlock(bg))
	}
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
	require.Less(t, took, tmo, "the silent two were waited for up to the instance timeout")
	ttl, err := r.TTL(bg)
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, lease-took, "validity reduced by the time spent")

	start = time.Now()
	ok, err = o.TryLock(bg, 0, lease)
	took = time.Since(start)
	require.NoError(t, err)
	require.False(t, ok, "refused by the 3 that answer")
	require.Less(t, took, tmo/2, "a refusal by a majority decides the round at once")

	require.NoError(t, r.Unlock(bg))
	require.Equal(t, 0, holdersOn(t, ss[2:], redKey(name)))

	// Held on all 5, then a majority paused: Unlock hears from 2 only.
	ss[0].Resume(t)
	ss[1].Resume(t)
	redistest.WaitFor(t, 30*time.Second, "late grants undone on the resumed servers", func() bool {
		return holdersOn(t, ss, redKey(name)) == 0
	})
	require.NoError(t, r.Lock(bg))
	require.Equal(t, 5, holdersOn(t, ss, redKey(name)))
	ss[0].Pause(t)
	ss[1].Pause(t)
	ss[2].Pause(t)
	start = time.Now()
	err = r.Unlock(bg)
	took = time.Since(start)
	require.Error(t, err, "fewer than a majority answered")
	require.Less(t, took, 3*tmo, "Unlock waited for a paused majority beyond two instance timeouts")
}
