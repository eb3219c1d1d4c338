package rlock

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// The Observer's guarantee "an Unlock that ends a tenure calls HoldEnd before its
// ReleaseDone" holds for a RedLock whose end an instance's give-back decides on its own
// goroutine. The last Unlock gives the instances back in parallel (sendGiveBacks) and
// returns once a majority has; each instance's tenure end is followed (instanceEnded), and
// the one that leaves fewer than a majority holding ends the RedLock's tenure there
// (finishLocked, then HoldEnd). With three instances followed, that is the second to end,
// while the third, no longer followed, answers at once: the Unlock returned on the first
// and third answers, its reset found the tenure ended already, and ReleaseDone (Freed)
// came before the HoldEnd still being told. TestObserver_redLockTenures/redis met it under
// load (a full rlock run beside the chaos package and a CPU hog: "RS red_lock", "RD red_lock
// freed" with no HoldEnd between). Here HoldEnd takes its time (a hook may), which holds the
// window open on every round once the third instance's grant is followed.
func TestRedLock_lastUnlockCallsHoldEndBeforeReleaseDoneWhenAnInstanceEndsTheTenure(t *testing.T) {
	t.Parallel() // servers and Clients of its own; no bound but the hook's pause
	const pause = 300 * time.Millisecond
	srvs := redistest.StartN(t, 3)
	var (
		mu     sync.Mutex
		events []string
	)
	record := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	obs := &Observer{
		HoldEnd: func(e HoldEndInfo) {
			time.Sleep(pause) // a slow hook: the tenure's end is being told meanwhile
			record("HoldEnd " + string(e.Cause))
		},
		ReleaseDone: func(_ context.Context, e ReleaseDoneInfo) {
			if e.Freed {
				record("ReleaseDone freed")
			} else {
				record("ReleaseDone")
			}
		},
	}
	var cs []*Client
	for _, s := range srvs {
		c, err := New(s.Client(t), WithObserver(obs)) // the first in the ids' order hears
		require.NoError(t, err)
		defer c.Close()
		cs = append(cs, c)
	}
	ctx := context.Background()
	r := NewRedLock(redistest.Name(t), cs)
	owner, err := r.ownerOf(ctx)
	require.NoError(t, err)
	for round := range 3 {
		require.NoError(t, r.Lock(ctx))
		rh := peekRed(r.key(owner))
		require.NotNil(t, rh)
		// The round is decided by a majority: the third grant may be adopted a little later.
		redistest.WaitFor(t, 10*time.Second, "every instance followed", func() bool {
			rh.mu.Lock()
			defer rh.mu.Unlock()
			return rh.live == len(cs)
		})
		require.NoError(t, r.Unlock(ctx))
		mu.Lock()
		got := events
		events = nil
		mu.Unlock()
		require.Equal(t, []string{"HoldEnd unlock", "ReleaseDone freed"}, got, "round %d: the last Unlock's HoldEnd, then its ReleaseDone", round)
	}
}
