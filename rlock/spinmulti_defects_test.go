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

// TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld: a MultiLock's round took member 0,
// could not have member 1 (held by another), and gave member 0 back while Redis refused every
// send for longer than the cleanup timeout (a give-back Redis cannot serve is sent again
// with backoff within it: Unlock's godoc, case 2). TryLock returns false with that error.
// MultiLock's godoc: "A failure ... gives back everything the round took before it returns: a
// MultiLock never leaves part of itself held"; TryLock's: "In every case but (true, nil)
// nothing it took is left held". So once Redis answers again, member 0 must not stay held:
// the Client must not count it (Err, HoldCount) nor renew it, and Redis must let it go
// within its lease.
func TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld(t *testing.T) {
	srv := redistest.Start(t)
	var refuse atomic.Bool
	hc := &hookClient{Client: srv.Client(t)}
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if refuse.Load() && cmd.script == "release" {
			return rueidis.NewErrorResult(errDriftDial)
		}
		return call()
	})
	const watchdog = time.Second
	c, err := rlock.New(hc, rlock.WithWatchdogTimeout(watchdog), rlock.WithCleanupTimeout(150*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	other, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer other.Close()

	name := redistest.Name(t)
	m0, m1 := c.SpinMutex(name+"-a"), c.SpinMutex(name+"-b")
	require.NoError(t, other.SpinMutex(name+"-b").Lock(bg))
	ml := rlock.NewMultiLock(m0, m1)

	refuse.Store(true)
	ok, err := ml.TryLock(bg, 0, 0)
	refuse.Store(false)
	t.Logf("TryLock -> %v, %v", ok, err)
	require.False(t, ok)

	// Redis answers again. Within the lease (and a renewal or two), member 0 must be free.
	time.Sleep(2 * watchdog)
	hcount, herr := m0.HoldCount(bg)
	pm := srv.Do(t, "PTTL", m0.Key())
	pttl, _ := pm.AsInt64()
	t.Logf("2 leases later: member 0 HoldCount %d (%v), Err %v, IsLocked pttl %dms", hcount, herr, m0.Err(bg), pttl)
	require.ErrorIs(t, m0.Err(bg), rlock.ErrNotHeld, "the Client still holds the member the failed TryLock took")
	require.Equal(t, 0, hcount, "Redis still counts the member the failed TryLock took (renewed)")
	_ = errors.Is
}
