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

// sharedOwnerPair returns a Client whose acquire and release scripts go through hc's hook,
// and a plain Client on the same server: two Clients (two processes) that a context owner
// (WithOwner) shares.
func sharedOwnerPair(t *testing.T) (hc *hookClient, c0, c1 *rlock.Client) {
	t.Helper()
	b := realBackend(t)
	hc, c0 = hardSetup(t, b, rlock.WithWatchdogTimeout(3*time.Second), rlock.WithCleanupTimeout(400*time.Millisecond))
	c1 = b.client(t, rlock.WithWatchdogTimeout(3*time.Second), rlock.WithCleanupTimeout(400*time.Millisecond))
	hardWarm(t, c1)
	return hc, c0, c1
}

// TestSharedOwner_replayedAcquireAfterOtherClientAppliesTwice: a context owner used through
// two Clients (README guarantee 8 names the case: "which handles of other Clients may
// share"). Client 0's acquire is applied, its reply lost; before Client 0 replays it,
// Client 1's acquire for the same owner is applied. The replay then finds the owner's last
// applied sequence number to be Client 1's (q:<owner>), which lib_seq's superseded did not
// compare across Clients, and re-entered a second time (before the owner's field kept one
// number per Client): Redis counts 3 holds for the 2 the
// owner took (README guarantee 5, "never applied twice"; HoldCount's godoc), and once the
// owner has given back both, the lock stays held by nobody for a whole lease (a ghost).
// Found by TestDriftHunt_sharedOwnerAcrossClients.
func TestSharedOwner_replayedAcquireAfterOtherClientAppliesTwice(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	var armed atomic.Bool
	armed.Store(true)
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" || !armed.CompareAndSwap(true, false) {
			return call()
		}
		_ = call() // applied: the owner's first hold
		require.NoError(t, m1.Lock(ctx), "the other Client's Lock for the same owner")
		return hardLost() // the reply is lost: Client 0 replays
	})
	require.NoError(t, m0.Lock(ctx))
	n, err := m0.HoldCount(ctx)
	require.NoError(t, err)
	if n != 2 {
		t.Errorf("the owner took 2 holds (one Lock through each Client); Redis counts %d", n)
	}

	require.NoError(t, m0.Unlock(ctx))
	require.NoError(t, m1.Unlock(ctx))
	locked, err := m0.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "every hold was given back, but the lock is held by nobody (a ghost) for its lease")
}

// TestSharedOwner_replayedReleaseAfterOtherClientAppliesTwice: as above, for a release.
// The owner holds one hold through each Client. Client 0's Unlock is applied, its reply
// lost; Client 1 re-enters for the same owner before Client 0 replays; the replay gives back
// a second hold, one that Client 1 counts. Client 1's next Unlock then frees the lock (Redis
// answers 0) although the owner took 2 holds through Client 1 and gave back 1: its last hold
// ends with no loss notice (Err says ErrNotHeld, not ErrLockLost; README guarantee 3), and
// another owner takes the lock while the owner believes it holds it.
func TestSharedOwner_replayedReleaseAfterOtherClientAppliesTwice(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	require.NoError(t, m0.Lock(ctx))
	require.NoError(t, m1.Lock(ctx))
	var armed atomic.Bool
	armed.Store(true)
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "release" || !armed.CompareAndSwap(true, false) {
			return call()
		}
		_ = call()                       // applied: the owner's count goes from 2 to 1
		ok, err := m1.TryLock(ctx, 0, 0) // a re-entry through Client 1: 2 again
		require.NoError(t, err)
		require.True(t, ok)
		return hardLost()
	})
	require.NoError(t, m0.Unlock(ctx))
	n, err := m1.HoldCount(ctx)
	require.NoError(t, err)
	if n != 2 {
		t.Errorf("the owner holds 2 holds (both through Client 1); Redis counts %d", n)
	}

	require.NoError(t, m1.Unlock(ctx))
	if err := m1.Err(ctx); err != nil {
		t.Errorf("the owner took 2 holds through Client 1 and gave back 1, but Client 1 says %q: its hold ended with no loss notice", err)
	}
	other := c1.Mutex(name) // another owner: this handle's own
	ok, err := other.TryLock(bg, 0, 0)
	require.NoError(t, err)
	if ok {
		t.Errorf("another owner took the lock while the owner still holds one hold through Client 1")
		require.NoError(t, other.Unlock(bg))
	}
	_ = m1.Unlock(ctx)
}
