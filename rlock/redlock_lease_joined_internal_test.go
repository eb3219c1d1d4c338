package rlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// A RedLock's fixed lease ends its hold even when the fresh acquire's grants on a majority
// came while those instances' Clients still counted a hold of the owner's earlier tenure, in
// watchdog mode: the last Unlock of a Lock returns once a majority gave the hold back, and
// waits at most returnGrace for the others' give-backs to take their instance holds' turn;
// under load (flake29 r2) two came after the next LockLease's grants there. Each of those
// grants was a re-entry of the instance's tenure, renewed by its Client's watchdog ("the lease
// in force already covers this hold", hold.granted), which the RedLock then followed:
// once the late give-backs ran, the instances kept one hold each, renewed for ever, the
// RedLock's majority stayed live, and Done never closed
// (TestRedLock_HoldContext_cancelledBeforeDone waited 19 minutes at its <-Done). Here the
// Clients of instances 0 and 1 count a hold of the owner's that the RedLock does not (a grant
// of the instance's own, as the give-back that has not run yet leaves it), given back once a
// round of the LockLease has been decided without it, or once the LockLease returned.
func TestRedLock_fixedLeaseEndsWhenGrantsJoinedRenewedInstanceTenures(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	var cs []*Client
	for _, s := range srvs {
		c, err := New(s.Client(t))
		require.NoError(t, err)
		defer c.Close()
		cs = append(cs, c)
	}
	ctx := context.Background()
	name := redistest.Name(t)
	r := NewRedLock(name, cs)
	require.NoError(t, r.Lock(ctx))
	require.NoError(t, r.Unlock(ctx))
	leftover := []int{0, 1}
	for _, i := range leftover {
		m := r.insts[i]
		x := m.attemptOnce(ctx, m.c.opts.watchdogTimeout, true, false, false)
		require.True(t, x.ok, "instance %d: %v", i, x.err)
		require.Equal(t, 1, m.instHold(r.owner).holds())
	}
	var once sync.Once
	giveBack := func() {
		once.Do(func() {
			for _, i := range leftover {
				_, err := r.insts[i].giveBackInst(ctx, abandonOne, nil)
				require.NoError(t, err, "instance %d", i)
			}
		})
	}
	defer OnRoundGiveBack(func(n string, _ []*Client) {
		if n == name {
			giveBack() // the earlier tenure's give-backs run while the acquire retries
		}
	})()
	const lease = 300 * time.Millisecond
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, r.LockLease(lctx, lease))
	giveBack()
	select {
	case <-r.Done(ctx):
	case <-time.After(lease + 2*time.Second):
		var modes []string
		for i, m := range r.insts {
			if h := m.instHold(r.owner); h != nil {
				h.mu.Lock()
				mode := "none"
				if h.cur != nil {
					mode = map[bool]string{true: "renewed", false: "fixed"}[h.cur.renew]
				}
				modes = append(modes, string(rune('0'+i))+": "+mode)
				h.mu.Unlock()
			}
		}
		t.Fatalf("Done still open %v after a %v lease began; instance tenures: %v", lease+2*time.Second, lease, modes)
	}
	require.ErrorIs(t, r.Err(ctx), ErrLeaseExpired)
	require.ErrorIs(t, r.Unlock(ctx), ErrLeaseExpired)
	for i, m := range r.insts {
		require.Eventually(t, func() bool {
			h := m.instHold(r.owner)
			return h == nil || h.holds() == 0
		}, 2*time.Second, 10*time.Millisecond, "instance %d still counts a hold", i)
	}
}
