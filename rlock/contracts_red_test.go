package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// redContractLease is the watchdog timeout of the RedLock contract tests, renewed every
// redContractRenewFraction of it (225ms): a loss is told within about a quarter of a second,
// and a renewal has about 575ms to be confirmed before the lease's latest renewal. (300ms at
// the default fraction, as first written, left it under 100ms: a stall of that much on a
// loaded machine, with a minority's instances gone, lost the hold the tests keep.)
const (
	redContractLease         = 900 * time.Millisecond
	redContractRenewFraction = 0.25
	// redContractInstanceTimeout is the RedLocks' instance timeout: a round under -race with
	// the subtests in parallel may take longer than a tenth of a lease. (100ms, as first
	// written, was not enough on a loaded machine: "re-entry granted by 1 of 3 instances, 2
	// needed: ... instance 1: outcome unknown: no answer within the instance timeout (100ms)".)
	redContractInstanceTimeout = 250 * time.Millisecond
)

// redContractSetup is three servers shared by a RedLock contract test's subtests (each on a
// name of its own), with a forcer Client per server.
type redContractSetup struct {
	ss     []*redistest.Server
	forcer []*rlock.Client
}

func newRedContractSetup(t *testing.T) *redContractSetup {
	ss := redServers(t, 3)
	return &redContractSetup{ss: ss, forcer: redClients(t, addrsOf(ss))}
}

// lock returns a RedLock on a fresh name over three Clients of its own (one per server, in
// the servers' order), the name, and the owner's ctx (a context owner when ctxOwner).
func (s *redContractSetup) lock(t *testing.T, ctxOwner bool) (*rlock.RedLock, []*rlock.Client, string, context.Context) {
	cs := redClients(t, addrsOf(s.ss), rlock.WithWatchdogTimeout(redContractLease), rlock.WithRenewFraction(redContractRenewFraction))
	name := redistest.Name(t)
	ctx := bg
	if ctxOwner {
		ctx = rlock.WithOwner(bg, "o-"+name)
	}
	return rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(redContractInstanceTimeout)), cs, name, ctx
}

// ownerHoldsEverywhere are the holds Redis counts for the lock on each server.
func ownerHoldsEverywhere(t *testing.T, ss []*redistest.Server, name string) []int {
	out := make([]int, len(ss))
	for i, s := range ss {
		out[i] = ownerHoldsOn(t, s, redKey(name))
	}
	return out
}

// redLockHolds are the holds r counts for the caller's owner on the instance of each of cs.
func redLockHolds(r *rlock.RedLock, cs []*rlock.Client) []int {
	n, _ := rlock.RedInstanceHolds(r, bg)
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = n[c]
	}
	return out
}

func ownerName(ctxOwner bool) string { return map[bool]string{false: "own", true: "ctx"}[ctxOwner] }

// A RedLock held with two holds (a re-entry) loses instances: forced or deleted on a
// majority (two of three, leaving one that still holds it, or all three by the RedLock's
// ForceUnlock) or on a minority (one). Promises (RedLock's Holding; Lock item 2; Err; Unlock
// cases and "Instances lost in a minority change nothing for the holder"):
//   - majority, watchdog mode: Done closes, HoldContext's cause wraps ErrLockLost, Err, Lock
//     and TryLock say ErrLockLost;
//   - majority: each of the two Unlocks returns ErrNotHeld; between them Err still wraps
//     ErrLockLost and Lock is refused with it; after them Err says ErrNotHeld (not the loss),
//     the owner locks again, on every instance (no lost instance hold left to refuse it),
//     and unlocks;
//   - minority: Done stays open, Err nil, HoldContext alive; both Unlocks return nil; the
//     owner locks again on every instance.
func TestContractsRed_lossWithNestedHolds(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, loss := range []string{"force2", "del2", "forceAll", "force1", "del1"} {
		for _, mode := range []string{"watchdog", "fixed"} {
			for _, ctxOwner := range []bool{false, true} {
				t.Run(loss+"/"+mode+"/"+ownerName(ctxOwner), func(t *testing.T) {
					t.Parallel()
					r, _, name, ctx := s.lock(t, ctxOwner)
					take := func() error { return r.Lock(ctx) }
					if mode == "fixed" {
						take = func() error { return r.LockLease(ctx, 20*time.Second) }
					}
					require.NoError(t, take())
					settled(t, r) // held on all three: the re-entry asks every instance
					require.NoError(t, take())
					settled(t, r)
					require.Equal(t, []int{2, 2, 2}, ownerHoldsEverywhere(t, s.ss, name))
					hctx, cancel := r.HoldContext(ctx)
					defer cancel()
					majority := true
					switch loss {
					case "force2", "force1":
						n := map[string]int{"force2": 2, "force1": 1}[loss]
						majority = n == 2
						for i := 0; i < n; i++ {
							freed, err := s.forcer[i].Mutex(name).ForceUnlock(bg)
							require.NoError(t, err)
							require.True(t, freed)
						}
					case "del2", "del1":
						n := map[string]int{"del2": 2, "del1": 1}[loss]
						majority = n == 2
						for i := 0; i < n; i++ {
							s.ss[i].Do(t, "DEL", redKey(name))
						}
					case "forceAll":
						freed, err := rlock.NewRedLock(name, s.forcer).ForceUnlock(bg)
						require.NoError(t, err)
						require.True(t, freed)
					}

					if !majority {
						time.Sleep(2 * redContractLease) // renewals (watchdog mode) find the minority's loss
						select {
						case <-r.Done(ctx):
							t.Fatal("Done closed for a minority's loss")
						default:
						}
						require.NoError(t, hctx.Err())
						require.NoError(t, r.Err(ctx))
						require.NoError(t, r.Unlock(ctx), "first Unlock")
						require.NoError(t, r.Err(ctx))
						require.NoError(t, r.Unlock(ctx), "second Unlock")
						require.ErrorIs(t, r.Err(ctx), rlock.ErrNotHeld)
					} else {
						if mode == "watchdog" {
							within(t, 5*time.Second, "Done after the loss", r.Done(ctx))
							require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
							require.ErrorIs(t, r.Err(ctx), rlock.ErrLockLost)
							require.ErrorIs(t, r.Lock(ctx), rlock.ErrLockLost)
							_, err := r.TryLock(ctx, 0, 0)
							require.ErrorIs(t, err, rlock.ErrLockLost)
						}
						err := r.Unlock(ctx)
						t.Logf("first Unlock: %v", err)
						require.ErrorIs(t, err, rlock.ErrNotHeld, "first Unlock")
						within(t, time.Second, "Done after the first Unlock", r.Done(ctx))
						require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
						errNow, lockNow := r.Err(ctx), r.Lock(ctx)
						t.Logf("after 1 of 2 Unlocks: Err %v; Lock %v", errNow, lockNow)
						require.ErrorIs(t, errNow, rlock.ErrLockLost, "one hold still to unlock")
						require.ErrorIs(t, lockNow, rlock.ErrLockLost, "one hold still to unlock")
						err = r.Unlock(ctx)
						require.ErrorIs(t, err, rlock.ErrNotHeld, "second Unlock")
						err = r.Err(ctx)
						require.ErrorIs(t, err, rlock.ErrNotHeld, "every hold unlocked")
						require.NotErrorIs(t, err, rlock.ErrLockLost, "every hold unlocked")
					}

					settled(t, r)
					redistest.WaitFor(t, 2*time.Second, "the lost holds given back", func() bool {
						return holdersOn(t, s.ss, redKey(name)) == 0
					})
					require.NoError(t, r.Lock(ctx))
					require.NoError(t, r.Err(ctx))
					settled(t, r)
					require.Equal(t, []int{1, 1, 1}, ownerHoldsEverywhere(t, s.ss, name), "locked again on every instance")
					require.NoError(t, r.Unlock(ctx))
					require.ErrorIs(t, r.Unlock(ctx), rlock.ErrNotHeld)
					settled(t, r)
					require.Zero(t, holdersOn(t, s.ss, redKey(name)))
				})
			}
		}
	}
}

// A fixed lease with two holds (a re-entry) that runs its course (RedLock.LockLease: "When
// the lease runs out before Unlock, Done closes and the cause is ErrLeaseExpired (see
// Mutex.LockLease)"; Err; Unlock case 1; ErrLeaseExpired: "Unlike a loss it does not block
// the owner's next Lock"):
//   - Done closes, HoldContext's cause, Err and Token wrap ErrLeaseExpired;
//   - "unlock": each of the two Unlocks returns ErrLeaseExpired, a third ErrNotHeld alone,
//     and Err says ErrNotHeld;
//   - "relock": Lock right after the end takes it afresh (Err nil); one Unlock frees it,
//     the next says ErrNotHeld, not the old lease's end.
func TestContractsRed_fixedLeaseEndWithNestedHolds(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, then := range []string{"unlock", "relock"} {
		for _, ctxOwner := range []bool{false, true} {
			t.Run(then+"/"+ownerName(ctxOwner), func(t *testing.T) {
				t.Parallel()
				r, _, name, ctx := s.lock(t, ctxOwner)
				// 1s: the re-entry must join the first tenure on every instance before its lease
				// ends, on a loaded machine (200ms left a stall of that much no room).
				require.NoError(t, r.LockLease(ctx, time.Second))
				require.NoError(t, r.LockLease(ctx, time.Second))
				hctx, cancel := r.HoldContext(ctx)
				defer cancel()
				within(t, 5*time.Second, "the fixed lease's end", r.Done(ctx))
				require.ErrorIs(t, context.Cause(hctx), rlock.ErrLeaseExpired)
				require.ErrorIs(t, r.Err(ctx), rlock.ErrLeaseExpired)
				_, err := r.Token(ctx)
				require.ErrorIs(t, err, rlock.ErrLeaseExpired)
				redistest.WaitFor(t, 2*time.Second, "the keys to expire", func() bool {
					return holdersOn(t, s.ss, redKey(name)) == 0
				})
				if then == "relock" {
					require.NoError(t, r.Lock(ctx), "a lease's end does not refuse the next Lock")
					require.NoError(t, r.Err(ctx))
					require.NoError(t, r.Unlock(ctx))
					err := r.Unlock(ctx)
					require.ErrorIs(t, err, rlock.ErrNotHeld)
					require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "the owner locked again since")
					return
				}
				for i := 1; i <= 2; i++ {
					require.ErrorIs(t, r.Unlock(ctx), rlock.ErrLeaseExpired, "Unlock %d of 2", i)
				}
				err = r.Unlock(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld, "a third Unlock")
				require.NotErrorIs(t, err, rlock.ErrLeaseExpired, "a third Unlock")
				err = r.Err(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.NotErrorIs(t, err, rlock.ErrLeaseExpired)
			})
		}
	}
}

// A re-entry never shortens the lease in force (RedLock has "the Mutex's surface"; Mutex's
// Leases): over a fixed lease of 1s, a re-entry with a 6s fixed lease, or in watchdog
// mode, keeps the hold past 1s. (The re-entry must be granted before the first lease ends:
// 200ms, as first written, left a loaded machine's stall no room.)
func TestContractsRed_reentryDoesNotShortenTheLease(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, second := range []string{"longerLease", "watchdog"} {
		t.Run(second, func(t *testing.T) {
			t.Parallel()
			r, _, _, ctx := s.lock(t, false)
			require.NoError(t, r.LockLease(ctx, time.Second))
			if second == "watchdog" {
				require.NoError(t, r.Lock(ctx))
			} else {
				require.NoError(t, r.LockLease(ctx, 6*time.Second))
			}
			time.Sleep(2 * time.Second) // past the first lease's end, well before the second's
			require.NoError(t, r.Err(ctx))
			locked, err := r.IsLocked(bg)
			require.NoError(t, err)
			require.True(t, locked)
			require.NoError(t, r.Unlock(ctx))
			require.NoError(t, r.Unlock(ctx))
		})
	}
}

// Close of one Client of three under the hold: "Instances lost in a minority change nothing
// for the holder" (RedLock's Holding), "A closed Client counts as an instance that refuses:
// an acquire fails with ErrClosed only when fewer than a majority of the Clients are open"
// (Acquisition). Done stays open, HoldContext alive, Err nil; a re-entry works; every Unlock
// returns nil; the lock is then free; the owner locks again over the two open Clients.
func TestContractsRed_minorityCloseChangesNothing(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, mode := range []string{"watchdog", "fixed"} {
		for _, ctxOwner := range []bool{false, true} {
			t.Run(mode+"/"+ownerName(ctxOwner), func(t *testing.T) {
				t.Parallel()
				r, cs, name, ctx := s.lock(t, ctxOwner)
				take := func() error { return r.Lock(ctx) }
				if mode == "fixed" {
					take = func() error { return r.LockLease(ctx, 20*time.Second) }
				}
				require.NoError(t, take())
				settled(t, r)
				hctx, cancel := r.HoldContext(ctx)
				defer cancel()
				require.NoError(t, cs[0].Close())
				time.Sleep(2 * redContractLease)
				select {
				case <-r.Done(ctx):
					t.Fatal("Done closed when a minority's Client closed")
				default:
				}
				require.NoError(t, hctx.Err())
				require.NoError(t, r.Err(ctx))
				require.NoError(t, take(), "re-entry over the two open instances")
				require.NoError(t, r.Unlock(ctx))
				require.NoError(t, r.Err(ctx))
				require.NoError(t, r.Unlock(ctx))
				require.ErrorIs(t, r.Err(ctx), rlock.ErrNotHeld)
				within(t, time.Second, "Done after the last Unlock", r.Done(ctx))
				require.ErrorIs(t, context.Cause(hctx), rlock.ErrNotHeld)
				settled(t, r)
				require.Equal(t, 0, holdersOn(t, s.ss[1:], redKey(name)), "the open instances gave it back")
				require.NoError(t, take())
				require.NoError(t, r.Unlock(ctx))
			})
		}
	}
}

// Context owners share a hold across RedLock handles of one name over the same Clients,
// whatever order the Clients are given in (RedLock's Owners): the second handle's Lock is a
// re-entry that does not wait, every handle reports the same Err, Token and Done, Unlocks
// through either handle count down the one hold; the handles' own owners are others
// (TryLock refused, nothing left held). A loss is seen through every handle.
func TestContractsRed_contextOwnerAcrossHandles(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, end := range []string{"unlock", "loss"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			r1, cs, name, ctx := s.lock(t, true)
			r2 := rlock.NewRedLock(name, []*rlock.Client{cs[2], cs[0], cs[1]}, rlock.WithInstanceTimeout(redContractInstanceTimeout))
			require.NoError(t, r1.Lock(ctx))
			start := time.Now()
			ok, err := r2.TryLock(ctx, 0, 0)
			require.NoError(t, err)
			require.True(t, ok, "a re-entry through the other handle")
			require.Less(t, time.Since(start), time.Second)
			t1, err := r1.Token(ctx)
			require.NoError(t, err)
			t2, err := r2.Token(ctx)
			require.NoError(t, err)
			require.Equal(t, t1, t2)
			require.NoError(t, r2.Err(ctx))
			ok, err = r2.TryLock(bg, 0, 0)
			require.NoError(t, err)
			require.False(t, ok, "the handle's own owner is another owner")
			require.ErrorIs(t, r2.Err(bg), rlock.ErrNotHeld)
			hctx, cancel := r2.HoldContext(ctx)
			defer cancel()
			if end == "loss" {
				_, err := rlock.NewRedLock(name, s.forcer).ForceUnlock(bg)
				require.NoError(t, err)
				within(t, 5*time.Second, "Done through r1", r1.Done(ctx))
				within(t, time.Second, "Done through r2", r2.Done(ctx))
				require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
				require.ErrorIs(t, r2.Err(ctx), rlock.ErrLockLost)
				require.ErrorIs(t, r1.Lock(ctx), rlock.ErrLockLost)
				require.ErrorIs(t, r2.Unlock(ctx), rlock.ErrLockLost)
				require.ErrorIs(t, r1.Err(ctx), rlock.ErrLockLost, "one hold still to unlock")
				require.ErrorIs(t, r1.Unlock(ctx), rlock.ErrLockLost)
				require.ErrorIs(t, r2.Err(ctx), rlock.ErrNotHeld)
				require.NotErrorIs(t, r2.Err(ctx), rlock.ErrLockLost)
			} else {
				require.NoError(t, r2.Unlock(ctx))
				require.NoError(t, r1.Err(ctx), "one hold left")
				require.NoError(t, hctx.Err())
				require.NoError(t, r1.Unlock(ctx))
				require.ErrorIs(t, r2.Err(ctx), rlock.ErrNotHeld)
				require.ErrorIs(t, context.Cause(hctx), rlock.ErrNotHeld)
			}
			settled(t, r1, r2)
			require.Zero(t, holdersOn(t, s.ss, redKey(name)))
			require.NoError(t, r2.Lock(ctx))
			require.NoError(t, r1.Unlock(ctx))
		})
	}
}

// ctx ended mid-call or before it (Lock item 1: "ctx's error, wrapped, when ctx ends first
// (within 100ms of its end, as a Mutex)", "nothing it took is left held"; Unlock "works on a
// ctx that has ended"):
//   - "waiting": a Lock waiting for another owner's hold returns ctx's error within 100ms of
//     its deadline; it holds nothing (Err ErrNotHeld), and once the holder unlocks the lock
//     is free everywhere;
//   - "reentry": a re-entry on a cancelled ctx fails with ctx's error and adds no hold;
//   - "unlock": Unlock on a cancelled ctx gives the lock back on every instance.
func TestContractsRed_ctxEnded(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, tc := range []string{"waiting", "waitingTryLock", "reentry", "unlock"} {
		t.Run(tc, func(t *testing.T) {
			t.Parallel()
			r, cs, name, ctx := s.lock(t, true)
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			switch tc {
			case "waiting", "waitingTryLock":
				other := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(redContractInstanceTimeout)) // its own owner
				require.NoError(t, other.Lock(bg))
				stalled := watchStalls(nil)
				wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer wcancel()
				start := time.Now()
				var err error
				if tc == "waiting" {
					err = r.Lock(wctx)
				} else {
					var ok bool
					ok, err = r.TryLock(wctx, 5*time.Second, 0)
					require.False(t, ok)
				}
				now := time.Now()
				took, stall := now.Sub(start), stalled(start, now)
				t.Logf("took %v (the process stalled %v of it): %v", took, stall, err)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				// Less what this process stalled meanwhile (parallel subtests under -race).
				require.Less(t, took-stall, 300*time.Millisecond+redContractInstanceTimeout+50*time.Millisecond)
				require.ErrorIs(t, r.Err(ctx), rlock.ErrNotHeld)
				require.NoError(t, other.Unlock(bg))
				settled(t, r, other)
				require.Zero(t, holdersOn(t, s.ss, redKey(name)), "the waiter left nothing held")
			case "reentry":
				require.NoError(t, r.Lock(ctx))
				settled(t, r)
				err := r.Lock(cancelled)
				require.ErrorIs(t, err, context.Canceled)
				settled(t, r)
				require.Equal(t, []int{1, 1, 1}, ownerHoldsEverywhere(t, s.ss, name))
				require.NoError(t, r.Unlock(ctx))
				require.ErrorIs(t, r.Err(ctx), rlock.ErrNotHeld)
			case "unlock":
				require.NoError(t, r.Lock(ctx))
				require.NoError(t, r.Lock(ctx))
				require.NoError(t, r.Unlock(cancelled))
				require.NoError(t, r.Unlock(cancelled))
				require.ErrorIs(t, r.Err(ctx), rlock.ErrNotHeld)
				settled(t, r)
				require.Zero(t, holdersOn(t, s.ss, redKey(name)))
			}
		})
	}
}

// A fixed-lease hold (no renewals to find a loss) forced away on a majority, then re-entered
// (RedLock's Owners: "A re-entry ... needs a majority of them to succeed"; Lock item 2): the
// re-entry fails with ErrLockLost and takes nothing, Done closes and Err says ErrLockLost;
// the one hold's Unlock reports the loss, the next says ErrNotHeld alone; the owner locks
// again.
func TestContractsRed_reentryFindsTheLoss(t *testing.T) {
	t.Parallel()
	s := newRedContractSetup(t)
	for _, forced := range []int{2, 3} {
		for _, ctxOwner := range []bool{false, true} {
			t.Run(map[int]string{2: "force2", 3: "force3"}[forced]+"/"+ownerName(ctxOwner), func(t *testing.T) {
				t.Parallel()
				r, _, name, ctx := s.lock(t, ctxOwner)
				require.NoError(t, r.LockLease(ctx, 20*time.Second))
				settled(t, r)
				for i := 0; i < forced; i++ {
					_, err := s.forcer[i].Mutex(name).ForceUnlock(bg)
					require.NoError(t, err)
				}
				require.ErrorIs(t, r.LockLease(ctx, 20*time.Second), rlock.ErrLockLost)
				within(t, time.Second, "Done after the re-entry found the loss", r.Done(ctx))
				require.ErrorIs(t, r.Err(ctx), rlock.ErrLockLost)
				err := r.Unlock(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.ErrorIs(t, err, rlock.ErrLockLost)
				err = r.Unlock(ctx)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				require.NotErrorIs(t, err, rlock.ErrLockLost)
				settled(t, r)
				require.Zero(t, holdersOn(t, s.ss, redKey(name)))
				require.NoError(t, r.Lock(ctx))
				require.NoError(t, r.Unlock(ctx))
			})
		}
	}
}
