package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A fixed lease with two holds (a re-entry) that runs its course, walked across the lock
// kinds, for a handle's own owner and a context owner. Promises (Mutex.LockLease, Mutex.Err,
// Mutex.Unlock, ErrLeaseExpired):
//   - Done closes, HoldContext's cause wraps ErrLeaseExpired, Err says ErrLeaseExpired (and
//     so ErrNotHeld), and Redis counts no hold;
//   - each of the ended tenure's two Unlocks returns ErrLeaseExpired, the next ErrNotHeld
//     alone, and Err says ErrNotHeld after;
//   - unlike a loss, it does not refuse the owner's next Lock (variant "relock": Lock right
//     after the end, before any Unlock; Err is nil then).
func TestContracts_fixedLeaseEndAcrossKinds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		for _, then := range []string{"unlock", "relock"} {
			for _, ctxOwner := range []bool{false, true} {
				name := k.name + "/" + then + map[bool]string{false: "/own", true: "/ctx"}[ctxOwner]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := b.client(t)
					lname := redistest.Name(t)
					l := k.make(c, lname)
					ctx := bg
					if ctxOwner {
						ctx = rlock.WithOwner(bg, "o-"+lname)
					}
					// 1s: the re-entry must join the first tenure, before its lease ends, on a
					// loaded machine (200ms: a stall of that much between the two made the
					// re-entry a fresh tenure, whose first Unlock said nil).
					require.NoError(t, l.LockLease(ctx, time.Second))
					require.NoError(t, l.LockLease(ctx, time.Second))
					hctx, cancel := l.HoldContext(ctx)
					defer cancel()
					within(t, 5*time.Second, "the fixed lease's end", l.Done(ctx))
					require.ErrorIs(t, context.Cause(hctx), rlock.ErrLeaseExpired)
					require.ErrorIs(t, l.Err(ctx), rlock.ErrLeaseExpired)
					require.ErrorIs(t, l.Err(ctx), rlock.ErrNotHeld)
					redistest.WaitFor(t, 2*time.Second, "Redis to count no hold", func() bool {
						n, err := k.count(l, ctx)
						return err == nil && n == 0
					})

					if then == "relock" {
						require.NoError(t, l.Lock(ctx), "a lease's end does not refuse the next Lock")
						require.NoError(t, l.Err(ctx))
						require.NoError(t, l.Unlock(ctx))
						err := l.Unlock(ctx)
						require.ErrorIs(t, err, rlock.ErrNotHeld)
						require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "the owner locked again since")
						return
					}
					for i := 1; i <= 2; i++ {
						err := l.Unlock(ctx)
						require.ErrorIs(t, err, rlock.ErrLeaseExpired, "Unlock %d of the ended tenure's 2", i)
					}
					err := l.Unlock(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld, "a third Unlock")
					require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "a third Unlock")
					err = l.Err(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld)
					require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "every hold of the ended tenure unlocked")
				})
			}
		}
	}
}

// A handle serving two owners, walked across the lock kinds (Mutex.Err: ErrLeaseExpired
// "until the owner locks again or calls Unlock. For a handle's own owner only that handle
// reports it ...; for a context owner every handle of the name on this Client does"). Each
// owner's fixed lease runs its course; then the handle serves the other owner (a Lock and an
// Unlock); the first owner's end is still reported, by Err and by Unlock.
func TestContracts_leaseEndOutlivesTheOtherOwnersCalls(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		for _, first := range []string{"own", "ctx"} {
			t.Run(k.name+"/"+first+"First", func(t *testing.T) {
				t.Parallel()
				c := b.client(t)
				lname := redistest.Name(t)
				l := k.make(c, lname)
				octx := rlock.WithOwner(bg, "o-"+lname)
				ended, other := bg, octx
				if first == "ctx" {
					ended, other = octx, bg
				}
				require.NoError(t, l.LockLease(ended, 100*time.Millisecond))
				within(t, 5*time.Second, "the fixed lease's end", l.Done(ended))
				redistest.WaitFor(t, 2*time.Second, "the idle hold to leave the table", func() bool { return rlock.HoldEntries(c) == 0 })
				require.NoError(t, l.Lock(other))
				require.NoError(t, l.Unlock(other))
				asker := l
				if first == "ctx" {
					asker = k.make(c, lname) // another handle of the name on this Client
				}
				require.ErrorIs(t, asker.Err(ended), rlock.ErrLeaseExpired)
				require.ErrorIs(t, asker.Unlock(ended), rlock.ErrLeaseExpired)
				err := asker.Unlock(ended)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
			})
		}
	}
}

// Mutex.Err: ErrLeaseExpired "until the owner locks again or calls Unlock": attempts that do
// not lock (refused by another owner's hold: a single attempt, and one that waits until its
// bound) leave it reported, across the lock kinds and both kinds of owner.
func TestContracts_leaseEndOutlivesRefusedAttempts(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		for _, ctxOwner := range []bool{false, true} {
			t.Run(k.name+map[bool]string{false: "/own", true: "/ctx"}[ctxOwner], func(t *testing.T) {
				t.Parallel()
				c := b.client(t)
				lname := redistest.Name(t)
				l := k.make(c, lname)
				ctx := bg
				if ctxOwner {
					ctx = rlock.WithOwner(bg, "o-"+lname)
				}
				require.NoError(t, l.LockLease(ctx, 100*time.Millisecond))
				within(t, 5*time.Second, "the fixed lease's end", l.Done(ctx))
				other := b.client(t)
				if k.name == "RWMutex.read" {
					require.NoError(t, other.RWMutex(lname).Lock(bg)) // keeps readers out
				} else {
					require.NoError(t, k.make(other, lname).Lock(bg))
				}
				for _, wait := range []time.Duration{0, 150 * time.Millisecond} {
					ok, err := l.TryLock(ctx, wait, 0)
					require.NoError(t, err)
					require.False(t, ok)
					require.ErrorIs(t, l.Err(ctx), rlock.ErrLeaseExpired, "after a refused TryLock (wait %v)", wait)
				}
				require.ErrorIs(t, l.Unlock(ctx), rlock.ErrLeaseExpired)
			})
		}
	}
}
