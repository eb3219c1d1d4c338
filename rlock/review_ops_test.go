package rlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestReviewOps_slowRenewalHookLosesLock: DEFECT. The RenewalRound hook runs on the
// watchdog's only renewal goroutine after Redis has confirmed the renewal but before the
// watchdog applies it (renewer.Renew calls the hook, watchdog.renew sets the new deadlines
// only after Renew returns). A hook that stalls once for more than about a third of the
// lease (the window between the renewal at 2/3 and the conservative deadline) makes the
// watchdog drop a lease that Redis had just renewed: the lock is reported lost (HoldEnd lost,
// ErrLockLost, HoldContext cancelled) though nobody else could have taken it. Any blocking
// log sink behind WithLogger's "renewal failed" Warn, or a metrics push, does this. Expected:
// the round's results are applied before the hook runs (call it from the watchdog after
// the deadlines are set, or off the renewal goroutine), so that a slow hook delays only
// observation, never the lease. A 1.8 s lease and an 800 ms stall (a third of the lease is
// 600 ms): the fixed watchdog has 600 ms for each renewal to land, beside the parallel tests.
func TestReviewOps_slowRenewalHookLosesLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	const lease = 1800 * time.Millisecond
	var once sync.Once
	c, err := rlock.New(srv.Client(t), rlock.WithWatchdogTimeout(lease),
		rlock.WithObserver(&rlock.Observer{RenewalRound: func(rlock.RenewalRoundInfo) {
			once.Do(func() { time.Sleep(800 * time.Millisecond) }) // one stall, under half the lease
		}}))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex("slow-hook")
	require.NoError(t, m.Lock(ctx))
	time.Sleep(lease * 20 / 9) // as 2 s of a 900 ms lease
	require.NoError(t, m.Err(ctx), "a lock renewed by Redis was lost because an observer hook was slow once")
}

// TestReviewOps_holdEndCallingTheLockDeadlocks: DEFECT (documented only in one sentence of
// Observer's Guarantees, not in HoldEnd's field doc, HoldEndInfo or the README's hook table).
// HoldEnd runs while the Client holds the owner's internal lock, so a HoldEnd hook that asks
// the lock anything (m.Err, m.IsLocked, m.TTL: the obvious "log why it ended" code)
// deadlocks the Unlock, the watchdog's loss handling or Close for good, silently. Expected:
// call HoldEnd after the internal lock is released (the tenure is already finished), or at
// least fail loudly; this test bounds the hang at 3s and leaks the stuck Client.
func TestReviewOps_holdEndCallingTheLockDeadlocks(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	var m *rlock.Mutex
	c, err := rlock.New(srv.Client(t), rlock.WithObserver(&rlock.Observer{HoldEnd: func(e rlock.HoldEndInfo) {
		_ = m.Err(ctx)
	}}))
	require.NoError(t, err)
	m = c.Mutex("hold-end-err")
	require.NoError(t, m.Lock(ctx))
	done := make(chan error, 1)
	go func() { done <- m.Unlock(ctx) }()
	select {
	case err := <-done:
		require.NoError(t, err)
		require.NoError(t, c.Close())
	case <-time.After(3 * time.Second):
		t.Error("Unlock never returned: the HoldEnd hook's m.Err deadlocked on the Client's internal lock (Client leaked)")
	}
}

// TestReviewOps_inspectAndListNilContext: DEFECT. Every primitive's method refuses a nil
// context with an error wrapping ErrInvalid ("nil context"); Client.Inspect and Client.List
// dereference it and panic inside rueidis instead.
func TestReviewOps_inspectAndListNilContext(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	var nilCtx context.Context
	require.NotPanics(t, func() {
		_, err := c.Inspect(nilCtx, "x")
		require.ErrorIs(t, err, rlock.ErrInvalid)
	})
	require.NotPanics(t, func() {
		for _, err := range c.List(nilCtx, "") {
			require.ErrorIs(t, err, rlock.ErrInvalid)
		}
	})
}
