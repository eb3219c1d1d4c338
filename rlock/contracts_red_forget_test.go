package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// A RedLock hold that ended while it still counts holds, when one of its Clients is then
// closed: the RedLock forgets it (Unlock's godoc: "until one of the Clients is closed: the
// RedLock then forgets the hold (as a Client forgets its Mutex holds at Close), and Unlock
// reports ErrClosed, or ErrNotHeld while a majority of the Clients are open"). The Clients
// left open do not forget: their instance holds of the owner stay counted, and the one still
// held in Redis stays renewed by its Client's watchdog, given back by nobody.
//
//   - "lost, then a minority Closes": the lock is forced away on two servers of three (the
//     RedLock is told: ErrLockLost), then the first Client is closed. Unlock says ErrNotHeld,
//     as documented; the owner's next TryLock over the two open Clients, with a second of
//     wait and nobody else holding the lock, should take it (Lock: ErrLockLost only "when the
//     owner's earlier hold was lost and not yet unlocked"). It fails, every round, with "1 of
//     3 instances answered, 2 needed: lock lost": the second Client still counts its lost
//     instance hold and refuses the owner's acquires there with ErrLockLost (hold.lost, kept
//     until an Unlock per hold, which the RedLock no longer sends); and the third server
//     keeps the owner's hold, renewed, for good (Lock with context.Background blocks
//     forever).
//   - "a majority Closes": the Clients of two servers of three are closed under the hold.
//     Unlock says ErrClosed at once (case 3); its godoc says that for a hold ended by Close
//     "all its give-backs go on in the background", but none is sent: the open Client's
//     instance keeps the owner's hold, renewed by its watchdog, as long as that Client
//     lives; nothing can give it back.
//
// Cause: redHold.dropLocked (redlock_hold.go:109-115) deletes an ended hold from the table as
// soon as any of its Clients is closed (watchClose, redlock_hold.go:132; instanceEnded's
// rh.drop(), redlock_hold.go:291), forgetting its counts n[i] without giving back the
// instance holds they count on the Clients still open; Unlock then finds count 0
// (redlock_release.go:83) and sends nothing.
func TestContractsRed_holdForgottenAtCloseIsGivenBack(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, tc := range []string{"lost, then a minority Closes", "a majority Closes"} {
		for _, ctxOwner := range []bool{false, true} {
			t.Run(tc+"/"+ownerName(ctxOwner), func(t *testing.T) {
				t.Parallel()
				r, cs, name, ctx := s.lock(t, ctxOwner)
				require.NoError(t, r.Lock(ctx))
				settled(t, r)
				if tc == "a majority Closes" {
					require.NoError(t, cs[0].Close())
					require.NoError(t, cs[1].Close())
					within(t, time.Second, "Done after the Close", r.Done(ctx))
					require.ErrorIs(t, r.Unlock(ctx), rlock.ErrClosed)
				} else {
					for i := 0; i < 2; i++ {
						freed, err := s.forcer[i].Mutex(name).ForceUnlock(bg)
						require.NoError(t, err)
						require.True(t, freed)
					}
					within(t, 5*time.Second, "Done after the loss", r.Done(ctx))
					require.ErrorIs(t, r.Err(ctx), rlock.ErrLockLost)
					require.NoError(t, cs[0].Close())
					require.ErrorIs(t, r.Unlock(ctx), rlock.ErrNotHeld)
				}
				settled(t, r)
				time.Sleep(3 * redContractLease) // a lease not renewed would have run out twice over
				held := ownerHoldsEverywhere(t, s.ss, name)
				t.Logf("holds in Redis %d leases after the Unlock: %v (PTTL on the third server: %dms)",
					3, held, pttlOn(t, s.ss[2], redKey(name)))
				assert.Equal(t, []int{0, 0, 0}, held, "the open Client's instance hold was given back, or expired")
				if tc == "lost, then a minority Closes" {
					ok, err := r.TryLock(ctx, time.Second, 0)
					t.Logf("TryLock over the two open Clients: %v, %v", ok, err)
					assert.NoError(t, err)
					assert.True(t, ok, "the lock is free on the open instances: the owner takes it")
					if ok {
						require.NoError(t, r.Unlock(ctx))
					}
				}
			})
		}
	}
}
