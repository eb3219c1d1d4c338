package rlock_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A RedLock hold's end cancels its HoldContexts before Done closes, as a Mutex's does
// (tenure.finish): a goroutine that finds Done closed, whether it took the channel before
// the end or asks for it while the end is being told, finds the HoldContext it took during
// the hold already cancelled, with the end's cause. Ends by Unlock (ErrNotHeld) and by a
// fixed lease's end (ErrLeaseExpired), many times, with goroutines asking Done over and over
// while the hold ends.
func TestRedLock_HoldContext_cancelledBeforeDone(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 3)
	cs := redClients(t, addrsOf(ss))
	r := rlock.NewRedLock(redistest.Name(t), cs)
	const watchers = 3
	iters := 150
	if testing.Short() {
		iters = 30
	}
	for it := 0; it < iters; it++ {
		lease := it%3 == 2 // a third end by a fixed lease's end, the rest by Unlock
		if lease {
			// 300ms: the HoldContext below is taken during the hold, after the grants' round
			// trips, on a loaded machine (30ms left a stall no room: hctx came back cancelled).
			require.NoError(t, r.LockLease(bg, 300*time.Millisecond))
		} else {
			require.NoError(t, r.Lock(bg))
		}
		hctx, cancel := r.HoldContext(bg)
		require.NoError(t, hctx.Err())
		before := r.Done(bg) // taken during the hold
		var wg sync.WaitGroup
		bad := make(chan string, watchers+1)
		check := func(how string) {
			if hctx.Err() == nil {
				bad <- how + ": Done closed before the HoldContext was cancelled"
				return
			}
			want := rlock.ErrNotHeld
			if lease {
				want = rlock.ErrLeaseExpired
			}
			if cause := context.Cause(hctx); !errors.Is(cause, want) {
				bad <- how + ": cause " + cause.Error()
			}
		}
		for k := 0; k < watchers; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-r.Done(bg): // asked again and again, also while the end is told
						check("Done asked during the end")
						return
					default:
						runtime.Gosched()
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-before
			check("Done taken during the hold")
		}()
		if lease {
			<-before
			require.ErrorIs(t, r.Unlock(bg), rlock.ErrLeaseExpired)
		} else {
			require.NoError(t, r.Unlock(bg))
		}
		wg.Wait()
		cancel()
		select {
		case msg := <-bad:
			t.Fatalf("iteration %d (%s): %s", it, map[bool]string{true: "lease end", false: "unlock"}[lease], msg)
		default:
		}
	}
	settled(t, r)
}

// An Unlock that reports the end of a hold (here a fixed lease run out: ErrLeaseExpired)
// returns after the hold's HoldContexts were cancelled, as a Mutex's does
// (TestMutex_HoldContext_causeSetBeforeUnlockReturns), even when it runs while the end is
// being told: many HoldContexts make the telling long, and the Unlock is called as soon as
// Err shows the end. (It holds because the RedLock hold's end is told from the instance's
// tenure's end, under that instance hold's lock, which the Unlock's give-back there waits
// for: a guard for the rewrite of the instances' hold table, not a defect found.)
func TestRedLock_HoldContext_cancelledBeforeUnlockReportsTheEnd(t *testing.T) {
	ss := redServers(t, 3)
	cs := redClients(t, addrsOf(ss))
	r := rlock.NewRedLock(redistest.Name(t), cs)
	iters := 10
	if testing.Short() {
		iters = 3
	}
	for it := 0; it < iters; it++ {
		require.NoError(t, r.LockLease(bg, 50*time.Millisecond))
		hctxs := make([]context.Context, 5000)
		cancels := make([]context.CancelFunc, len(hctxs))
		for k := range hctxs {
			hctxs[k], cancels[k] = r.HoldContext(bg)
		}
		for r.Err(bg) == nil {
			runtime.Gosched()
		}
		require.ErrorIs(t, r.Unlock(bg), rlock.ErrLeaseExpired)
		for k, hctx := range hctxs {
			require.Error(t, hctx.Err(), "iteration %d: HoldContext %d not cancelled when Unlock reported the end", it, k)
			require.ErrorIs(t, context.Cause(hctx), rlock.ErrLeaseExpired)
		}
		for _, cancel := range cancels {
			cancel()
		}
	}
	settled(t, r)
}
