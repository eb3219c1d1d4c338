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

// The give-back at a context owner's fixed lease's end (hold.giveBackExpired, cb439c1),
// reviewed: what it must give back (every hold Redis counts of the Client's for the ended
// tenure, orphans too), what it must never take (a hold the owner took since, here or
// through another Client; a hold of another Client's by a later Unlock of the ended holds),
// which script it sends (each kind's and side's own), and what it tells when Close cuts it.

// A shared owner's fixed-lease tenure through B, re-entered into the tenure A renews, has an
// orphan when it ends: one of B's two holds whose Unlock got no answer (ErrUnknownOutcome;
// here Redis never saw it), which the Client stops counting (hold.abandon) and rides with the
// tenure. A fixed tenure is never renewed, so settleOrphans never gives it back; at the
// lease's end B's Client must give back every hold Redis counts of its own for the tenure,
// the orphan too, or A's renewals keep it, and after A's last Unlock the lock stays held by
// nobody for up to A's watchdog lease (review5's D1, for an orphan).
//
// At cb439c1 it fails on both backends: giveBackExpired gives back n = h.count (1), taken
// before endLocked zeroes h.orphans:
//
//	the owner holds 1 hold (A's; B's tenure ended): Redis counts 2
func TestSharedOwner_fixedLeaseOrphanEndsInRedisToo(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
		hc := &hookClient{Client: b.rueidis(t)}
		cb, err := rlock.New(hc, rlock.WithWatchdogTimeout(3*time.Second), rlock.WithCleanupTimeout(300*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cb.Close() })
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		ma, mb := ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, ma.Lock(ctx))                             // A's tenure, renewed
		require.NoError(t, mb.LockLease(ctx, 1500*time.Millisecond)) // B's re-entry, fixed
		require.NoError(t, mb.LockLease(ctx, 1500*time.Millisecond)) // and again
		// B's Unlock of one of them is never answered, and never reaches Redis.
		var dropped atomic.Int32
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script == "release" && !cmd.multi {
				dropped.Add(1)
				return rueidis.NewErrorResult(context.DeadlineExceeded)
			}
			return call()
		})
		err = mb.Unlock(ctx)
		hc.set(nil)
		require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
		require.Positive(t, dropped.Load())
		hb := rlock.ModelMutexHold(mb, ctx)
		require.Equal(t, 1, hb.Count, "B counts one hold")
		require.Equal(t, 1, hb.Orphans, "and one orphan")
		n, err := ma.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 3, n, "Redis counts A's hold and both of B's")

		within(t, 5*time.Second, "B's fixed lease to end", mb.Done(ctx))
		require.ErrorIs(t, mb.Err(ctx), rlock.ErrLeaseExpired)
		for deadline := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
			n, err = ma.HoldCount(ctx)
			require.NoError(t, err)
			if n == 1 || time.Now().After(deadline) {
				break
			}
		}
		if n != 1 {
			t.Errorf("the owner holds 1 hold (A's; B's tenure ended): Redis counts %d", n)
		}
		require.NoError(t, ma.Unlock(ctx))
		other := ca.Mutex(name) // another owner
		ok, err := other.TryLock(bg, 0, 0)
		require.NoError(t, err)
		if !ok {
			ttl, _ := other.TTL(bg)
			t.Fatalf("every hold of the owner was given back or ran its course, yet the lock is held (for %v more)", ttl)
		}
		require.NoError(t, other.Unlock(bg))
	})
}
