package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Loss by ForceUnlock from another Client, walked across the lock kinds, for a handle's own
// owner and a context owner, holding two holds (a re-entry). Promises (Mutex "Loss": "A lost
// lock is never silently taken again: Lock and TryLock by the same owner fail with
// ErrLockLost until Unlock has been called once for every hold taken"; Mutex.Err: ErrLockLost
// "until every hold has been unlocked"; Mutex.Unlock; Mutex.HoldContext;
// RWMutex.ForceUnlock: fixed leases learn of the loss at their Unlock):
//   - watchdog mode: Done closes and HoldContext's cause wraps ErrLockLost at the next
//     renewal, and Err, Lock and TryLock say ErrLockLost;
//   - Unlock returns ErrNotHeld (the loss joined once the owner was told of it);
//   - after the first of the two Unlocks, Err still wraps ErrLockLost and Lock is refused
//     with it;
//   - after the second, Err says ErrNotHeld and the owner locks again.
//
// It fails at the first-of-two step: released (hold.go) sets the count to 0 whenever Redis
// answers that the owner holds none (remaining <= 0), so one Unlock forgets every hold of the
// lost tenure and its loss: Err says ErrNotHeld, Lock takes the lock afresh, and the nested
// caller's second Unlock then returns nil, giving back the hold that Lock took.
func TestContracts_forcedLossAcrossKinds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		for _, mode := range []string{"watchdog", "fixed"} {
			for _, ctxOwner := range []bool{false, true} {
				name := k.name + "/" + mode + map[bool]string{false: "/own", true: "/ctx"}[ctxOwner]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					c := b.client(t, rlock.WithWatchdogTimeout(600*time.Millisecond))
					other := b.client(t)
					lname := redistest.Name(t)
					l := k.make(c, lname)
					ctx := bg
					if ctxOwner {
						ctx = rlock.WithOwner(bg, "o-"+lname)
					}
					take := func() error { return l.Lock(ctx) }
					if mode == "fixed" {
						take = func() error { return l.LockLease(ctx, 20*time.Second) }
					}
					require.NoError(t, take())
					require.NoError(t, take())
					hctx, cancel := l.HoldContext(ctx)
					defer cancel()
					freed, err := k.force(other, lname)
					require.NoError(t, err)
					require.True(t, freed)

					if mode == "watchdog" {
						within(t, 5*time.Second, "Done after the force", l.Done(ctx))
						require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
						require.ErrorIs(t, l.Err(ctx), rlock.ErrLockLost)
						require.ErrorIs(t, l.Lock(ctx), rlock.ErrLockLost)
						_, err = l.TryLock(ctx, 0, 0)
						require.ErrorIs(t, err, rlock.ErrLockLost)
					}

					err = l.Unlock(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld, "first Unlock")
					if mode == "watchdog" {
						require.ErrorIs(t, err, rlock.ErrLockLost, "first Unlock: the loss is joined")
					}
					within(t, time.Second, "Done after the first Unlock", l.Done(ctx))
					errNow := l.Err(ctx)
					lockNow := l.Lock(ctx)
					t.Logf("after 1 of 2 Unlocks of the lost holds: Err %v; Lock %v", errNow, lockNow)
					require.ErrorIs(t, errNow, rlock.ErrLockLost, "one hold still to unlock")
					require.ErrorIs(t, lockNow, rlock.ErrLockLost, "one hold still to unlock")

					err = l.Unlock(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld, "second Unlock")
					err = l.Err(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld, "every hold unlocked")
					require.NotErrorIs(t, err, rlock.ErrLockLost, "every hold unlocked")

					require.NoError(t, l.Lock(ctx))
					require.NoError(t, l.Err(ctx))
					n, err := k.count(l, ctx)
					require.NoError(t, err)
					require.Equal(t, 1, n)
					require.NoError(t, l.Unlock(ctx))
					require.ErrorIs(t, l.Unlock(ctx), rlock.ErrNotHeld)
				})
			}
		}
	}
}

// A fixed-lease holder forced free: RWMutex.ForceUnlock says "Former holders learn of the
// loss ... (fixed leases: at their Unlock, which returns [ErrNotHeld])"; Mutex.Unlock lists
// "taken by another" under ErrNotHeld. After that Unlock, the end of the lease that was
// forced away is not reported as a lease that ran its course (the owner did call Unlock):
// Err stays ErrNotHeld, and the owner locks again.
func TestContracts_forcedFixedLeaseAcrossKinds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		for _, ctxOwner := range []bool{false, true} {
			name := k.name + map[bool]string{false: "/own", true: "/ctx"}[ctxOwner]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := b.client(t)
				other := b.client(t)
				lname := redistest.Name(t)
				l := k.make(c, lname)
				ctx := bg
				if ctxOwner {
					ctx = rlock.WithOwner(bg, "o-"+lname)
				}
				const lease = 300 * time.Millisecond
				require.NoError(t, l.LockLease(ctx, lease))
				freed, err := k.force(other, lname)
				require.NoError(t, err)
				require.True(t, freed)

				err = l.Unlock(ctx)
				t.Logf("Unlock after the force: %v", err)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "the lease had not run out")
				within(t, time.Second, "Done after the Unlock", l.Done(ctx))
				require.ErrorIs(t, l.Err(ctx), rlock.ErrNotHeld)

				time.Sleep(lease + 50*time.Millisecond) // past the lease that was forced away
				err = l.Err(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "the owner unlocked before the lease's end")
				require.NoError(t, l.Lock(ctx))
				require.NoError(t, l.Unlock(ctx))
			})
		}
	}
}
