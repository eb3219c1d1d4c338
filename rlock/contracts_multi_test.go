package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// multiCounts are the holds Redis counts for the caller's owner of each member.
func multiCounts(t *testing.T, ctx context.Context, ms []*rlock.Mutex) []int {
	t.Helper()
	out := make([]int, len(ms))
	for i, m := range ms {
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		out[i] = n
	}
	return out
}

// A MultiLock of three Mutexes held twice (a re-entry) whose member `lost` (first, middle or
// last in key order) is forced free by another Client. Promises (MultiLock: "reentrant as far
// as its members are", "Loss is per member", "a MultiLock never leaves part of itself held";
// Lock item 2: "the first member error that is not contention ... for example
// [ErrLockLost] ... naming the member"; Unlock: every member given back "even when some
// fail", [ErrNotHeld] for a member whose hold was lost; Mutex's Loss: refused with
// ErrLockLost "until Unlock has been called once for every hold taken"):
//   - Lock fails with ErrLockLost naming the member, and leaves the others' counts as they
//     were (a re-entry it took before the lost member is given back);
//   - the first Unlock reports ErrNotHeld for that member and gives back one hold of the
//     others; Lock is still refused with ErrLockLost, counts unchanged;
//   - the second Unlock frees the others; Lock then takes all three, once each.
func TestContractsMulti_memberLostWithNestedHolds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, lost := range []int{0, 1, 2} {
		for _, ctxOwner := range []bool{false, true} {
			t.Run([]string{"first", "middle", "last"}[lost]+"/"+ownerName(ctxOwner), func(t *testing.T) {
				t.Parallel()
				// Renewed every 250ms (a loss is told as soon as with 300ms at the default
				// fraction), each renewal with about 640ms to be confirmed: the members not
				// forced must stay held on a loaded machine (300ms left under 100ms).
				c := b.client(t, rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25))
				other := b.client(t)
				ns := names(t, 3)
				ms := []*rlock.Mutex{c.Mutex(ns[2]), c.Mutex(ns[0]), c.Mutex(ns[1])} // given out of key order
				byKey := []*rlock.Mutex{ms[1], ms[2], ms[0]}
				ml := rlock.NewMultiLock(ms[0], ms[1], ms[2])
				ctx := bg
				if ctxOwner {
					ctx = rlock.WithOwner(bg, "o-"+ns[0])
				}
				require.NoError(t, ml.Lock(ctx))
				require.NoError(t, ml.Lock(ctx))
				require.Equal(t, []int{2, 2, 2}, multiCounts(t, ctx, byKey))
				freed, err := other.Mutex(ns[lost]).ForceUnlock(bg)
				require.NoError(t, err)
				require.True(t, freed)
				within(t, 5*time.Second, "the member's Done", byKey[lost].Done(ctx))

				want := []int{2, 2, 2}
				want[lost] = 0
				err = ml.Lock(ctx)
				require.ErrorIs(t, err, rlock.ErrLockLost)
				require.ErrorContains(t, err, "member")
				require.Equal(t, want, multiCounts(t, ctx, byKey), "Lock left what it took")

				err = ml.Unlock(ctx)
				t.Logf("first Unlock: %v", err)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				want = []int{1, 1, 1}
				want[lost] = 0
				require.Equal(t, want, multiCounts(t, ctx, byKey))
				err = ml.Lock(ctx)
				require.ErrorIs(t, err, rlock.ErrLockLost, "one hold still to unlock")
				require.Equal(t, want, multiCounts(t, ctx, byKey), "Lock left what it took")

				err = ml.Unlock(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.Equal(t, []int{0, 0, 0}, multiCounts(t, ctx, byKey))
				requireFree(t, b, c, ns...)
				require.NoError(t, ml.Lock(ctx))
				require.Equal(t, []int{1, 1, 1}, multiCounts(t, ctx, byKey))
				require.NoError(t, ml.Unlock(ctx))
				requireFree(t, b, c, ns...)
			})
		}
	}
}

// The Client of one member of a MultiLock (members on two Clients) is closed while the
// MultiLock holds them: Unlock gives back the other member "even when some fail" and reports
// ErrClosed naming the closed one; Lock and TryLock then fail with ErrClosed (Lock item 2)
// and leave nothing held. Walked for the closed member first and last in key order.
func TestContractsMulti_memberClientClosed(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, closedFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "closedFirst", false: "closedLast"}[closedFirst], func(t *testing.T) {
			t.Parallel()
			c1, c2 := b.client(t), b.client(t)
			ns := names(t, 2)
			closing, open := c1.Mutex(ns[0]), c2.Mutex(ns[1])
			cc := c1
			if !closedFirst {
				closing, open = c2.Mutex(ns[1]), c1.Mutex(ns[0])
				cc = c2
			}
			ml := rlock.NewMultiLock(open, closing)
			require.NoError(t, ml.Lock(bg))
			require.NoError(t, ml.Lock(bg))
			require.NoError(t, cc.Close())
			for k := 1; k <= 2; k++ {
				err := ml.Unlock(bg)
				t.Logf("Unlock %d: %v", k, err)
				require.ErrorIs(t, err, rlock.ErrClosed)
				require.ErrorContains(t, err, "member")
			}
			n, err := open.HoldCount(bg)
			require.NoError(t, err)
			require.Zero(t, n, "the open member given back by both Unlocks")
			err = ml.Lock(bg)
			require.ErrorIs(t, err, rlock.ErrClosed)
			ok, err := ml.TryLock(bg, 100*time.Millisecond, 0)
			require.False(t, ok)
			require.ErrorIs(t, err, rlock.ErrClosed)
			locked, err := open.IsLocked(bg)
			require.NoError(t, err)
			require.False(t, locked, "nothing left held")
		})
	}
}

// Fixed leases with two holds (MultiLock.TryLock with lease > 0, twice) that run their
// course: each of the two Unlocks reports ErrLeaseExpired (and so ErrNotHeld) for the
// members, a third ErrNotHeld alone; the lease's end does not refuse the next Lock
// (ErrLeaseExpired), taken right after the end ("relock").
func TestContractsMulti_fixedLeaseEndWithNestedHolds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, then := range []string{"unlock", "relock"} {
		for _, ctxOwner := range []bool{false, true} {
			t.Run(then+"/"+ownerName(ctxOwner), func(t *testing.T) {
				t.Parallel()
				c := b.client(t)
				ns := names(t, 2)
				ms := []*rlock.Mutex{c.Mutex(ns[0]), c.Mutex(ns[1])}
				ml := rlock.NewMultiLock(ms[0], ms[1])
				ctx := bg
				if ctxOwner {
					ctx = rlock.WithOwner(bg, "o-"+ns[0])
				}
				for range 2 { // 1s: the second round re-enters both members before their leases end, under load
					ok, err := ml.TryLock(ctx, time.Second, time.Second)
					require.NoError(t, err)
					require.True(t, ok)
				}
				for _, m := range ms {
					within(t, 5*time.Second, "a member's lease end", m.Done(ctx))
				}
				if then == "relock" {
					require.NoError(t, ml.Lock(ctx))
					require.NoError(t, ml.Unlock(ctx))
					err := ml.Unlock(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld)
					require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
					return
				}
				for k := 1; k <= 2; k++ {
					require.ErrorIs(t, ml.Unlock(ctx), rlock.ErrLeaseExpired, "Unlock %d", k)
				}
				err := ml.Unlock(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
				requireFree(t, b, c, ns...)
			})
		}
	}
}

// A context owner's second MultiLock over members it holds already, plus one held by another
// owner, cancelled while it waits (Lock item 1; "nothing it took is left held"): its rounds
// take re-entries of the held members and give them back; when ctx ends it returns ctx's
// error and the first MultiLock's holds are as they were (one each, still held). Unlock on a
// cancelled ctx then gives them back. A handle's own owner is another owner: its TryLock is
// refused and leaves nothing.
func TestContractsMulti_cancelledReentryLeavesTheHolds(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	ns := names(t, 3)
	octx := rlock.WithOwner(bg, "o-"+ns[0])
	ms := []*rlock.Mutex{c.Mutex(ns[0]), c.Mutex(ns[1])}
	ml1 := rlock.NewMultiLock(ms[0], ms[1])
	require.NoError(t, ml1.Lock(octx))
	blocker := b.client(t).Mutex(ns[2])
	require.NoError(t, blocker.Lock(bg))
	ml2 := c.MultiLock(ns[1], ns[2], ns[0])
	ctx, cancel := context.WithTimeout(octx, 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ml2.Lock(ctx)
	t.Logf("took %v: %v", time.Since(start), err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, []int{1, 1}, multiCounts(t, octx, ms))

	ok, err := ml1.TryLock(bg, 0, 0) // the handles' own owners
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, []int{1, 1}, multiCounts(t, octx, ms))

	cancelled, cancel2 := context.WithCancel(octx)
	cancel2()
	require.NoError(t, ml1.Unlock(cancelled))
	require.NoError(t, blocker.Unlock(bg))
	requireFree(t, b, c, ns...)
}
