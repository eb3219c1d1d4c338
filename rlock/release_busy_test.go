package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Unlock's godoc, case 4: an Unlock that waits for another call of the same owner on the lock
// (two goroutines sharing a handle) for the whole cleanup timeout gives up, sending nothing:
// its error wraps context.DeadlineExceeded, and the hold is still counted, by the Client and
// by Redis, so that Unlock again gives it back. (The model test met it, FairMutex seed
// 9007142354052241084: one goroutine's Unlock replayed through refused dials and LOADING
// for the whole cleanup timeout while its sibling's waited.)
func TestMutex_Unlock_waitingOutTheOwnersOtherCallGivesUpWithItsHoldKept(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	b := realBackend(t)
	const cleanup = 500 * time.Millisecond
	var armed atomic.Bool
	release := make(chan struct{})
	hc := &hookClient{Client: b.rueidis(t)}
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script == "release" && armed.CompareAndSwap(true, false) {
			// The first Unlock's give-back hangs until the test lets it go, past its own
			// deadline, then goes through.
			<-release
			return cmd.sendWith(context.Background())
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Lock(bg)) // two holds of the handle's owner
	armed.Store(true)
	first := make(chan error, 1)
	go func() { first <- m.Unlock(bg) }()
	redistest.WaitFor(t, 5*time.Second, "the first Unlock to send", func() bool { return !armed.Load() })
	start := time.Now()
	err = m.Unlock(bg)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the second Unlock, after %v", took)
	require.Less(t, took, cleanup+time.Second, "Unlock is bounded by the cleanup timeout")
	n, err := m.HoldCount(bg)
	require.NoError(t, err)
	require.Equal(t, 2, n, "Redis counts both holds: the first Unlock hangs, the second sent nothing")
	close(release)
	// The first Unlock's send was held past its own cleanup timeout: it may report the
	// outcome unknown (its replays had no time left), though Redis applied it.
	if err := await(t, first, 10*time.Second, "the first Unlock"); !errors.Is(err, rlock.ErrUnknownOutcome) {
		require.NoError(t, err)
	}
	require.NoError(t, m.Unlock(bg), "the second hold, given back again")
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
}
