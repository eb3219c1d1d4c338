package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// HoldContext: "When the owner holds no hold, the context is already cancelled, with the
// reason [Mutex.Err] gives as cause." After Client.Close, Err gives ErrClosed (mutex.go Err
// checks isClosed); HoldContext asks the hold table alone (Mutex.tenure), which Close leaves
// with every tenure ended, and so gives ErrNotHeld (or ErrLeaseExpired), not Err's reason.
// Walked across the lock kinds, for an owner that held the lock when Close came, one whose
// fixed lease had run out before, and one that never held it.
func TestContracts_holdContextAfterCloseHasErrsCause(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			for _, state := range []string{"held", "leaseEnded", "neverHeld"} {
				c := b.client(t)
				l := k.make(c, redistest.Name(t)+"-"+state)
				var before context.Context
				switch state {
				case "held":
					require.NoError(t, l.Lock(bg))
					var cancel context.CancelFunc
					before, cancel = l.HoldContext(bg)
					defer cancel()
				case "leaseEnded":
					require.NoError(t, l.LockLease(bg, 30*time.Millisecond))
					within(t, 5*time.Second, "the fixed lease to end", l.Done(bg))
					require.ErrorIs(t, l.Err(bg), rlock.ErrLeaseExpired)
				}
				require.NoError(t, c.Close())
				if before != nil {
					within(t, time.Second, "the HoldContext taken before Close", before.Done())
					require.ErrorIs(t, context.Cause(before), rlock.ErrClosed, state)
				}
				within(t, time.Second, "Done after Close", l.Done(bg))
				errNow := l.Err(bg)
				require.ErrorIs(t, errNow, rlock.ErrClosed, state)
				hctx, cancel := l.HoldContext(bg)
				cause := context.Cause(hctx)
				cancel()
				t.Logf("%s: Err %v; HoldContext's cause %v", state, errNow, cause)
				assert.ErrorIs(t, cause, rlock.ErrClosed, "%s: HoldContext's cause is not the reason Err gives", state)
			}
		})
	}
}
