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

// TestSharedOwner_lateGrantTakesNoOtherHold: a context owner used through two Clients.
// Client 0's TryLock with a fixed lease is applied (a fresh grant), but its reply comes only
// after the lease has run out, in Redis as on Client 0's clock; meanwhile Client 1 took the
// lock afresh for the same owner. Client 0 gives back the late grant (errLateGrant), a hold
// it let go of: that give-back must be conditional on the holds Redis counts for Client 0
// (none now), as every other give-back of holds a Client let go of is since the per-Client
// counts (owner.go: "never one that another Client took"). Sent unconditionally (Mutex.grant's
// keep -1, before), it gave back Client 1's hold: the lock was freed under Client 1, which
// still believed it held it (HoldCount 0, IsLocked false), and another owner could take it.
func TestSharedOwner_lateGrantTakesNoOtherHold(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	const lease = 200 * time.Millisecond
	var armed atomic.Bool
	armed.Store(true)
	var took atomic.Bool
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" || !armed.CompareAndSwap(true, false) {
			return call()
		}
		res := call() // applied: a fresh grant with a fixed lease
		// The reply is held until the grant expired in Redis, and Client 1 took the lock
		// afresh for the same owner.
		end := time.Now().Add(5 * time.Second)
		for {
			locked, err := m1.IsLocked(bg)
			if err == nil && !locked {
				break
			}
			if time.Now().After(end) {
				t.Errorf("the late grant did not expire in Redis within 5 s (%v)", err)
				return res
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := m1.Lock(ctx); err != nil {
			t.Errorf("Client 1's Lock for the same owner: %v", err)
			return res
		}
		took.Store(true)
		return res
	})
	ok, err := m0.TryLock(ctx, 0, lease)
	t.Logf("Client 0's TryLock: %v %v", ok, err)
	require.False(t, ok, "the grant came after its lease had run out")
	require.True(t, took.Load())
	hc.set(nil)

	n, err := m1.HoldCount(ctx)
	require.NoError(t, err)
	locked, err := m1.IsLocked(bg)
	require.NoError(t, err)
	if n != 1 || !locked {
		t.Errorf("Client 1 took a hold of the owner and gave back none, but Redis counts %d (locked %v): "+
			"Client 0's give-back of its late grant took Client 1's hold", n, locked)
	}
	if err := m1.Err(ctx); err != nil {
		t.Logf("Client 1's Err: %v", err)
	}
	_ = m1.Unlock(ctx)
}
