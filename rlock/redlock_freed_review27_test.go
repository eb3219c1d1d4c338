package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A RedLock's ReleaseDone says Freed exactly when that Unlock gave back the owner's last
// hold, as a Mutex's does, whatever the owner's other calls on the lock do meanwhile (a
// handle shared by goroutines, or a context owner, is one owner). Freed was taken from the
// owner's count before the Unlock waited for its turn: an Unlock that a re-entry overtook
// said Freed while the tenure went on (no HoldEnd), and one that another Unlock overtook
// ended the tenure (HoldEnd, cause unlock) with Freed false (review27). The ReleaseStart
// hook holds the Unlock at its start while the other call runs, as a descheduled goroutine
// would.
func TestReview27_RedLock_releaseFreedIsTheUnlocks(t *testing.T) {
	ss := redServers(t, 3)
	for _, tc := range []struct {
		name  string
		holds int  // the owner's holds when the Unlock starts
		other bool // the call run as it starts: true a re-entry (Lock), false an Unlock
		freed bool // what the Unlock did
	}{
		{"reentryOvertakes", 1, true, false},
		{"unlockOvertakes", 2, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			var red *rlock.RedLock
			var hold atomic.Bool
			o := r.observer()
			start := o.ReleaseStart
			o.ReleaseStart = func(ctx context.Context, e rlock.ReleaseStartInfo) context.Context {
				if hold.CompareAndSwap(true, false) {
					done := make(chan error, 1)
					go func() {
						if tc.other {
							done <- red.Lock(bg)
						} else {
							done <- red.Unlock(bg)
						}
					}()
					select {
					case err := <-done:
						require.NoError(t, err)
					case <-time.After(10 * time.Second):
						t.Error("the other call did not return")
					}
				}
				return start(ctx, e)
			}
			cs := redClients(t, addrsOf(ss), rlock.WithObserver(o))
			red = rlock.NewRedLock(redistest.Name(t), cs)
			for range tc.holds {
				require.NoError(t, red.Lock(bg))
			}
			r.take()
			hold.Store(true)
			require.NoError(t, red.Unlock(bg))
			var freed []bool
			ends := 0
			for _, e := range r.take() {
				switch e := e.(type) {
				case rlock.ReleaseDoneInfo:
					freed = append(freed, e.Freed)
				case rlock.HoldEndInfo:
					ends++
				}
			}
			// The last ReleaseDone is the held Unlock's (the other call's comes first).
			require.NotEmpty(t, freed)
			require.Equal(t, tc.freed, freed[len(freed)-1], "the held Unlock's Freed; ReleaseDone Freed: %v, HoldEnds %d", freed, ends)
			if tc.freed { // the tenure ended: nothing is left to unlock
				require.Equal(t, 1, ends)
				require.ErrorIs(t, red.Unlock(bg), rlock.ErrNotHeld)
			} else { // the tenure goes on, with one hold
				require.Zero(t, ends)
				require.NoError(t, red.Unlock(bg))
			}
		})
	}
}
