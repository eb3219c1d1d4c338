package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// Close of a majority of a RedLock's Clients (two of three, or all three) under a hold of one
// or two holds. Promises: RedLock.Err "says why not: ... [ErrClosed] (a Client was closed
// under the hold)"; RedLock.HoldContext "When the owner holds no hold, it is already
// cancelled with the reason [RedLock.Err] gives"; Unlock "An Unlock of a hold that the
// RedLock knows has ended (... or ended by a Client's Close: what [RedLock.Err] reports)
// returns the end at once (case 1 or 3 below)", case 3 [ErrClosed]; Lock item 4 (ErrClosed
// on more than a minority).
//
// The HoldContext taken before the Close is cancelled with ErrClosed, Done closes, Unlock
// and Lock say ErrClosed; but Err says ErrNotHeld, and so does HoldContext asked after (and
// Token): the hold ended by Close is dropped from the RedLock's hold table at once
// (redHold.instanceEnded's rh.drop(), redlock_hold.go:291, which drops an ended hold as soon
// as any of its Clients is closed, redlock_hold.go:109-115), and Err finds no hold
// (redlock.go:473-475: ErrNotHeld; HoldContext the same, redlock.go:525).
func TestContractsRed_errAfterCloseEndedTheHold(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, closed := range []int{2, 3} {
		for _, holds := range []int{1, 2} {
			for _, ctxOwner := range []bool{false, true} {
				t.Run(map[int]string{2: "majority", 3: "all"}[closed]+"/"+map[int]string{1: "one", 2: "nested"}[holds]+"/"+ownerName(ctxOwner), func(t *testing.T) {
					t.Parallel()
					r, cs, _, ctx := s.lock(t, ctxOwner)
					for range holds {
						require.NoError(t, r.Lock(ctx))
						settled(t, r)
					}
					before, cancel := r.HoldContext(ctx)
					defer cancel()
					for i := 0; i < closed; i++ {
						require.NoError(t, cs[i].Close())
					}
					within(t, time.Second, "Done after the Close", r.Done(ctx))
					within(t, time.Second, "the HoldContext taken before", before.Done())
					require.ErrorIs(t, context.Cause(before), rlock.ErrClosed)
					errNow := r.Err(ctx)
					after, cancel2 := r.HoldContext(ctx)
					defer cancel2()
					cause := context.Cause(after)
					_, tokErr := r.Token(ctx)
					t.Logf("Err %v; HoldContext's cause %v; Token %v", errNow, cause, tokErr)
					assert.ErrorIs(t, errNow, rlock.ErrClosed, "Err after a Close ended the hold")
					assert.ErrorIs(t, cause, errNow, "HoldContext's cause is Err's reason")
					for k := 1; k <= holds; k++ {
						assert.ErrorIs(t, r.Unlock(ctx), rlock.ErrClosed, "Unlock %d", k)
					}
					assert.ErrorIs(t, r.Lock(ctx), rlock.ErrClosed)
				})
			}
		}
	}
}
