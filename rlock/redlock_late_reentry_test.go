package rlock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A re-entry's grant on a slow instance that reaches the round after its decision is adopted
// into the hold or given back: at every quiescent point the holds Redis counts for the owner
// on each instance are those the RedLock counts there (issue 23's invariant), and the owner's
// Unlocks leave nothing. A diagnostic run of the old TestRedLock_reentryUnlockWithLostMinority
// saw, once in ~1,500 runs under load, the slow server keep 2 holds, renewed, 5 s after the
// re-entry, while the RedLock counted 2,2,1 and followed every instance.
//
// The same state comes every time when the slow instance's resolution outlives the Client's
// cleanup timeout: the re-entry's first send reaches Redis (2 holds there), its reply comes
// after the instance timeout, and the replay that would learn the grant (through a new
// connection: rueidis closed the one whose request ran past its deadline) gets no answer in
// time. The Client counts the hold as a possible orphan of the instance's tenure
// (hold.unknownAcquire): it is given back, conditionally, at the next confirmed renewal
// (settleOrphans), as a Mutex's is; a RedLock's instances kept their orphans for their last
// hold (variant.ownOrphans, until this test), renewing them meanwhile. Here the cleanup
// timeout (150 ms) is shorter than the slow path (one way 12-150 ms), standing for a loaded
// machine's stall through a 2 s one; the round trips around the instance timeout (50 ms) also cover grants that land just
// before or after the round's decision (adopted). Each iteration takes a lock of its own on
// every instance, re-enters with the slow proxy's latency drawn from the seed (kept until the
// instance's resolution is over), waits one lease and a second for Redis to agree with the
// RedLock, Unlocks twice and checks that nothing is left. RELOCK_SEED replays a run.
//
// Failed at e58880e and cd16ffd, 5 in 5 ("instance 2: Redis 2, RedLock 1 (followed true),
// Client 1 (orphans 1)"); passes since settleOrphans settles a RedLock instance's orphans.
func TestRedLock_lateReentryGrantCounted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow proxy")
	}
	const (
		tmo = 50 * time.Millisecond
		// A lease that outlives a loaded machine's stalls: with 1.5 s, under extreme load
		// (the test at nice 10 beside a burner on one core,
		// TestFairMutex_Lock_manyWaitersAllAcquire beside it) an instance's hold was gone
		// from Redis and its tenure ended, most likely expired between late renewals
		// ("instance 2: Redis 0, RedLock 1 (followed false), Client 1", 1 of 3 runs; not
		// traced). The orphans that the test is about are settled at the next confirmed
		// renewal, a third of it.
		lease   = 3 * time.Second
		cleanup = 3 * tmo
		iters   = 6
	)
	rng := rand.New(rand.NewPCG(seed(t), 0))
	ss := redServers(t, 3)
	p := proxyTo(t, ss[2])
	cs := redClients(t, []string{ss[0].Addr(), ss[1].Addr(), p.Addr()},
		rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(cleanup))
	base := redistest.Name(t)

	for it := 0; it < iters; it++ {
		name := fmt.Sprintf("%s-%d", base, it)
		key := redKey(name)
		r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(tmo))
		// agree waits until nothing of the owner's is in flight, then, for up to a lease and
		// a second (a renewal), for Redis to count on each instance what the RedLock counts;
		// it returns the difference that stayed.
		agree := func() string {
			settled(t, r)
			idle(r, cs)
			deadline := time.Now().Add(lease + time.Second)
			for {
				n, watched := rlock.RedInstanceHolds(r, bg)
				cl, orph, _ := rlock.RedInstanceClientHolds(r, bg)
				diff := ""
				for i, c := range cs {
					if red := ownerHoldsOn(t, ss[i], key); red != n[c] {
						diff += fmt.Sprintf(" instance %d: Redis %d, RedLock %d (followed %v), Client %d (orphans %d);",
							i, red, n[c], watched[c], cl[c], orph[c])
					}
				}
				if diff == "" || time.Now().After(deadline) {
					return diff
				}
				time.Sleep(20 * time.Millisecond)
			}
		}

		p.SetLatency(0, 0)
		require.NoError(t, r.Lock(bg), "iteration %d: the Lock", it)
		require.Empty(t, agree(), "iteration %d: after the Lock", it)

		oneWay := tmo/4 + time.Duration(rng.Int64N(int64(3*tmo-tmo/4)+1))
		p.SetLatency(oneWay, oneWay)
		err := r.Lock(bg) // a re-entry: it may fail when too few instances grant it in time
		settled(t, r)
		idle(r, cs) // the slow instance's resolution is over
		p.SetLatency(0, 0)
		adopted, returned := rlock.RedLateGrants(r)
		require.Empty(t, agree(), "iteration %d: after the re-entry (one way %v: %v; late grants adopted %d, given back %d)",
			it, oneWay, err, adopted, returned)

		if err == nil {
			unlockOrRunOut(t, r, cleanup, fmt.Sprintf("iteration %d: the re-entry's Unlock", it))
			require.Empty(t, agree(), "iteration %d: after the re-entry's Unlock", it)
		}
		unlockOrRunOut(t, r, cleanup, fmt.Sprintf("iteration %d: the last Unlock", it))
		settled(t, r)
		idle(r, cs)
		// Two leases: a hold whose give-back went unanswered (unlockOrRunOut) expires with its lease.
		redistest.WaitFor(t, 2*lease, "released everywhere", func() bool { return holdersOn(t, ss, key) == 0 })
	}
}

// unlockOrRunOut is r.Unlock(bg), required to succeed unless its outcome stayed unknown once the
// Clients' cleanup timeout had run out: the short cleanup timeout that
// TestRedLock_lateReentryGrantCounted explores bounds its Unlocks too, and on a loaded machine
// (the test at nice 10 beside a burner on one core) an instance's give-back went unanswered
// within it ("1 of 3 instances answered"), although no proxy delayed it; on a quiet one it is
// answered at once. Such a hold is given up as Unlock's godoc says: an instance that
// counts another hold keeps it as an orphan, given back at its next confirmed renewal (the
// test's agree then waits for it), and the last hold, no longer renewed, expires with its
// lease (the test's wait for nothing left is two leases). What the test checks (Redis agrees
// with the RedLock, nothing is left) stays as it was.
func unlockOrRunOut(t *testing.T, r *rlock.RedLock, cleanup time.Duration, what string) {
	t.Helper()
	start := time.Now()
	err := r.Unlock(bg)
	if took := time.Since(start); errors.Is(err, rlock.ErrUnknownOutcome) && took >= cleanup {
		t.Logf("%s: outcome unknown after %v (the cleanup timeout ran out): %v", what, took, err)
		return
	}
	require.NoError(t, err, what)
}
