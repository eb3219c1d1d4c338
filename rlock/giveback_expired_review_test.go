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

// The common pattern with re-entry: a context owner takes two fixed-lease holds through B
// (LockLease; LockLease; work; Unlock; Unlock), the work overrunning the lease, while A holds
// the owner's lock through another Client. Both of B's Unlocks are of ended holds
// (ErrLeaseExpired) and must give back nothing of A's (as
// TestSharedOwner_unlockAfterFixedLeaseTakesNoOtherClientsHold asks of one Unlock): a third
// owner must not take the lock while A holds it.
//
//   - keptByRenewals: A renews the owner's tenure, B's holds re-entered it; B's Client gave
//     its holds back at the lease's end (giveBackExpired), before B's Unlocks.
//   - takenAfresh: B's tenure ended in Redis too, and A took the lock afresh for the owner.
//
// Both fail at cb439c1 (the first only since it: before, B's holds stayed in Redis and the
// second Unlock took one of them), on both backends: B's first Unlock cleared hold.expired
// (released), so its second went unconditionally (keep -1) and took A's hold:
//
//	B's second Unlock of an ended hold: <nil>; another owner took the lock while A holds it (A's Err: <nil>)
func TestSharedOwner_secondUnlockOfEndedHoldsTakesNoOtherClientsHold(t *testing.T) {
	t.Parallel()
	for _, story := range []string{"keptByRenewals", "takenAfresh"} {
		t.Run(story, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				ca := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
				cb := b.client(t, rlock.WithWatchdogTimeout(3*time.Second))
				name := redistest.Name(t)
				ctx := rlock.WithOwner(bg, "shared-"+name)
				ma, mb := ca.Mutex(name), cb.Mutex(name)
				if story == "keptByRenewals" {
					require.NoError(t, ma.Lock(ctx))
				}
				require.NoError(t, mb.LockLease(ctx, 200*time.Millisecond))
				require.NoError(t, mb.LockLease(ctx, 200*time.Millisecond))
				within(t, 5*time.Second, "B's fixed lease to end", mb.Done(ctx))
				if story == "keptByRenewals" {
					redistest.WaitFor(t, 5*time.Second, "B's Client to give its ended holds back", func() bool {
						n, err := ma.HoldCount(ctx)
						require.NoError(t, err)
						return n == 1
					})
				} else {
					redistest.WaitFor(t, 5*time.Second, "the lease to end in Redis too", func() bool { return !b.exists(t, mb.Key()) })
					require.NoError(t, ma.Lock(ctx)) // afresh: A's tenure
				}
				require.ErrorIs(t, mb.Unlock(ctx), rlock.ErrLeaseExpired)
				err := mb.Unlock(ctx)
				t.Logf("B's second Unlock of an ended hold: %v", err)
				n, herr := ma.HoldCount(ctx)
				require.NoError(t, herr)
				other := ca.Mutex(name) // a third owner
				ok, terr := other.TryLock(bg, 0, 0)
				require.NoError(t, terr)
				if ok {
					t.Errorf("B's second Unlock of an ended hold: %v; another owner took the lock while A holds it (A's Err: %v)", err, ma.Err(ctx))
					require.NoError(t, other.Unlock(bg))
				}
				require.Equal(t, 1, n, "A's hold stays")
				if !ok {
					require.NoError(t, ma.Err(ctx))
					require.NoError(t, ma.Unlock(ctx))
				}
			})
		})
	}
}
