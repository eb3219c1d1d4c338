package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestReview2_orphanWhoseGiveBackWasAppliedIsNotGivenBackTwice: an orphan is a hold whose
// give-back *failed as far as the Client knows*: the give-back's outcome is unknown (its
// replies lost through the cleanup timeout), so Redis may well have applied it. Before
// settleOrphans (6295aa5) such an orphan rode to the last Unlock, which gave back only what
// Redis said remained: harmless. settleOrphans gives back h.orphans holds blindly at the
// next confirmed renewal: when the "failed" give-back had been applied, that release takes
// the owner's own last hold, and the lock is free in Redis while the owner's Err is nil
// (another Client takes it) until the next renewal tells a loss the Client made itself.
func TestReview2_orphanWhoseGiveBackWasAppliedIsNotGivenBackTwice(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	// A 2 s lease: a third of it for each renewal to land beside the parallel tests (the
	// owner losing its lease to a late renewal would fail the check below).
	const lease = 2 * time.Second
	// One armed acquire's reply comes 300ms after Redis applied it; while refusing, every
	// release IS applied by Redis, and its reply is lost.
	rc := &hookClient{Client: b.rueidis(t)}
	var armed, refusing atomic.Bool
	rc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		switch {
		case cmd.script == "release" && refusing.Load():
			res := call()
			v, e := res.AsInt64()
			t.Logf("release applied while refusing, its reply lost: %v %v", v, e)
			return hardLost()
		case cmd.script == "acquire" && armed.CompareAndSwap(true, false):
			res := call()
			time.Sleep(300 * time.Millisecond)
			return res
		}
		return call()
	})
	failed := make(chan rlock.GiveBackInfo, 4)
	c, err := rlock.New(rc, rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(300*time.Millisecond),
		rlock.WithObserver(&rlock.Observer{GiveBack: func(e rlock.GiveBackInfo) {
			if e.Err != nil {
				failed <- e
			}
		}}))
	require.NoError(t, err)
	defer c.Close()
	hardWarm(t, c) // the release script loaded: its EVALSHA is what the hook applies
	other, err := rlock.New(b.rueidis(t))
	require.NoError(t, err)
	defer other.Close()
	name := redistest.Name(t)
	m := c.Mutex(name)
	require.NoError(t, m.Lock(bg))

	// A re-entry whose caller leaves while its reply is on the way; its give-back is
	// applied, but the Client never learns it (unknown outcome): an orphan as it counts.
	orphanReentry(t, m, &armed, &refusing, failed)
	n, err := m.HoldCount(bg)
	require.NoError(t, err)
	require.Equal(t, 1, n, "precondition: Redis applied the give-back (the owner's own hold is left)")
	require.NoError(t, m.Err(bg), "the owner's own hold goes on")

	refusing.Store(false) // Redis answers again: renewals are confirmed
	// For over 2 renewal periods, no other Client may take the lock while the owner holds it.
	om := other.Mutex(name)
	deadline := time.Now().Add(lease * 3 / 2)
	for time.Now().Before(deadline) {
		ok, err := om.TryLock(bg, 0, 0)
		require.NoError(t, err)
		if ok {
			ownerErr := m.Err(bg)
			require.NoError(t, om.Unlock(bg))
			require.Error(t, ownerErr, "another Client took the lock while the owner's Err was nil: the orphan's give-back took the owner's own hold")
			t.Fatalf("the owner lost its lock (%v): the Client gave back its own last hold", ownerErr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, m.Err(bg))
	require.NoError(t, m.Unlock(bg))
}
