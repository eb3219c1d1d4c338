package rlock_test

// Review of the hardened hold state machine (issue 9): each test here failed on the code it
// was written against, and names the promise it checks.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// reviewStuck is what a script gets from a Redis that does not answer: nothing until the
// request's context ends (as rueidis does against a SIGSTOPped server), then a lost reply.
func reviewStuck(ctx context.Context) rueidis.RedisResult {
	<-ctx.Done()
	return hardLost()
}

// README guarantee 6 ("Lock and TryLock return within 100 ms of their context's end even
// while Redis does not answer"), direct hand-off: a waiter parked as a hand-off candidate is
// claimed by a release whose reply does not come (Redis stops answering). The waiter's ctx
// ends; its Lock waits for the claiming release's outcome (handoff.go await, from
// Client.drop in Mutex.acquire, and from handoffWait.unpark), which the release only knows
// at the end of its cleanup timeout.
func TestReview_ClaimedCandidateOutlivesItsCtx(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out a 2 s cleanup timeout (run without -short)")
	}
	t.Parallel() // its own servers and names; the bound subtracts this process's stalls
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		const cleanup = 2 * time.Second
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		name := redistest.Name(t)
		holder, waiter := c.Mutex(name), c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		hardSubscribe(t, c, name)

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(ctx) }()
		redistest.WaitFor(t, 5*time.Second, "the waiter to park as a hand-off candidate", func() bool { return rlock.ParkedCandidates(c, waiter) == 1 })

		sent := make(chan struct{})
		var once atomic.Bool
		hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script != "release" {
				return call()
			}
			if once.CompareAndSwap(false, true) {
				close(sent) // the release has claimed the candidate (claim runs before the send)
			}
			return reviewStuck(ctx)
		})
		unlocked := make(chan error, 1)
		go func() { unlocked <- holder.Unlock(bg) }()
		within(t, 5*time.Second, "the release passing the lock on to be sent", sent)
		require.Zero(t, rlock.ParkedCandidates(c, waiter), "the release claimed the waiter")

		stalled := watchStalls(nil)
		cancel() // the waiter gives up
		ended := time.Now()
		err = await(t, got, 3*cleanup, "the waiter's Lock to return")
		elapsed := time.Since(ended)
		stall := stalled(ended, time.Now())
		t.Logf("waiter's Lock returned %v after its ctx ended (the process stalled %v of it): %v", elapsed.Round(time.Millisecond), stall.Round(time.Millisecond), err)
		require.Error(t, err)
		require.Less(t, elapsed-stall, 500*time.Millisecond,
			"Lock outlived its ctx by %v (README: within 100ms of its context's end even while Redis does not answer)", elapsed.Round(time.Millisecond))
		hc.set(nil)
		t.Logf("holder's Unlock: %v", await(t, unlocked, 3*cleanup, "the holder's Unlock"))
	})
}

// README guarantee 6, a grant given back in the foreground: a TryLock whose grant comes back
// after its fixed lease ran out gives it back (Mutex.grant, errLateGrant: sendRelease on a
// cleanup context) before it returns; when Redis then stops answering, TryLock outlives its
// ctx by the cleanup timeout. (The same foreground give-back runs for a grant that shows an
// unnoticed loss, for orphans in Mutex.grant, and for an unacknowledged grant with
// WithReplicaAck.)
func TestReview_LateGrantGiveBackOutlivesCtx(t *testing.T) {
	t.Parallel() // its own servers and names; the bound subtracts this process's stalls
	eachBackend(t, func(t *testing.T, b *backend) {
		const cleanup = 2 * time.Second
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		m := c.Mutex(redistest.Name(t))
		hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			switch cmd.script {
			case "acquire":
				res := call()
				time.Sleep(60 * time.Millisecond) // Redis answers slowly: after the 20ms lease
				return res
			case "release":
				return reviewStuck(ctx) // and then not at all
			}
			return call()
		})
		stalled := watchStalls(nil)
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		defer cancel()
		got := make(chan error, 1)
		go func() {
			ok, err := m.TryLock(ctx, 0, 20*time.Millisecond)
			if ok {
				err = nil
			}
			got <- err
		}()
		err = await(t, got, 3*cleanup, "TryLock to return")
		dl, _ := ctx.Deadline()
		now := time.Now()
		stall := stalled(dl, now) // 0 if it returned before the deadline
		late := time.Duration(0)
		if now.After(dl) {
			late = now.Sub(dl)
		}
		t.Logf("TryLock returned %v after its ctx ended (the process stalled %v of it): %v", late.Round(time.Millisecond), stall.Round(time.Millisecond), err)
		require.Less(t, late-stall, 500*time.Millisecond,
			"TryLock outlived its ctx by %v (README: within 100ms of its context's end even while Redis does not answer)", late.Round(time.Millisecond))
	})
}

// README guarantee 6 ("Unlock is bounded by the cleanup timeout"): an acquire left to resolve
// in the background keeps h.op for up to the cleanup timeout (Mutex.later); an Unlock of that
// owner first waits up to a cleanup timeout for h.op (Mutex.Unlock: lockOp on a cleanup
// context), then sends its release on a fresh cleanup context: twice the bound.
func TestReview_UnlockAfterBackgroundResolutionOutlivesCleanupTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out a 1 s cleanup timeout (run without -short)")
	}
	t.Parallel() // its own servers and names; the bound subtracts this process's stalls
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		const cleanup = time.Second
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, m.Lock(bg))

		// Redis stops answering scripts.
		hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script == "renew" {
				return call()
			}
			return reviewStuck(ctx)
		})
		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		ok, err := m.TryLock(ctx, 0, 0) // a re-entry: its outcome is left to the background
		require.False(t, ok)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		stalled := watchStalls(nil)
		start := time.Now()
		err = m.Unlock(bg)
		elapsed := time.Since(start)
		stall := stalled(start, time.Now())
		t.Logf("Unlock returned after %v (the process stalled %v of it): %v", elapsed.Round(time.Millisecond), stall.Round(time.Millisecond), err)
		hc.set(nil)
		require.Less(t, elapsed-stall, cleanup+300*time.Millisecond,
			"Unlock took %v, the cleanup timeout is %v (README: Unlock is bounded by the cleanup timeout)", elapsed.Round(time.Millisecond), cleanup)
	})
}

// DESIGN invariant / README guarantee 8, context owners: an acquire whose outcome stays
// unknown in the foreground (Lock returns ErrUnknownOutcome) may have granted a hold; the
// background resolution noted such a hold as stale (Client.noteStale, since removed: the
// Client's count in Redis tells), the foreground path did not (Mutex.attempt). The owner's next Lock joins the ghost hold: Redis counts 2, the
// Client 1, nobody is told, the watchdog renews the ghost, and after the owner's Unlock the
// lock stays held by nobody for a whole lease.
func TestReview_UnknownOutcomeOfContextOwnerDriftsAtNextGrant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc, rlock.WithCleanupTimeout(200*time.Millisecond))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c) // the scripts are loaded: the acquire below is applied at its first send
		name := redistest.Name(t)
		m := c.Mutex(name)
		ctx := rlock.WithOwner(bg, "review-"+name)

		lc.always.Store(true) // the acquire is applied; its reply and every replay's are lost
		err = m.Lock(ctx)
		require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
		lc.always.Store(false)
		require.ErrorIs(t, m.Err(ctx), rlock.ErrNotHeld)
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the acquire whose outcome was unknown was applied")

		require.NoError(t, m.Lock(ctx))
		n, err = m.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "Redis counts %d holds for the owner, the Client 1, and the owner was told nothing", n)
		require.NoError(t, m.Unlock(ctx))
		require.False(t, b.exists(t, m.Key()), "the owner's only Unlock left the lock held in Redis")
	})
}

// DESIGN invariant / README guarantee 8, context owners, the hand-off path: a release that
// passes the lock to a parked context owner is applied but its outcome stays unknown (every
// reply lost until the cleanup timeout). Before, the candidate's Lock failed at once ("passed
// on by a release whose outcome is unknown") while Redis counted a hold for it: its next Lock
// joined that hold, one hold more than the Client counted. The hand-off is resolved as an
// acquire of unknown outcome (Mutex.handedOff): replayed under the successor's number, it is
// answered from the state, and the waiting caller gets the lock the release passed on.
// The other outcome (the release not applied: the replay refused, the wait going on) is
// TestMutex_unknownHandoffNotAppliedWaitsOn.
func TestReview_UnknownHandoffOfContextOwnerIsResolvedForTheWaitingCaller(t *testing.T) {
	t.Parallel() // a server, Client and names of its own per case; no time bound
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc, rlock.WithCleanupTimeout(300*time.Millisecond))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		name := redistest.Name(t)
		holder, m := c.Mutex(name), c.Mutex(name)
		ctx := rlock.WithOwner(bg, "review-"+name)
		require.NoError(t, holder.Lock(bg))
		hardSubscribe(t, c, name)
		got := make(chan error, 1)
		go func() { got <- m.Lock(ctx) }()
		redistest.WaitFor(t, 5*time.Second, "the context owner to park as a hand-off candidate", func() bool { return rlock.ParkedCandidates(c, m) == 1 })

		var lose atomic.Bool
		lose.Store(true)
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			res := call()
			if cmd.script == "release" && lose.Load() {
				return hardLost() // applied; the reply and every replay's lost
			}
			return res
		})
		uerr := holder.Unlock(bg)
		t.Logf("holder's Unlock: %v", uerr)
		require.ErrorIs(t, uerr, rlock.ErrUnknownOutcome)
		require.NoError(t, await(t, got, 10*time.Second, "the candidate's Lock"), "the hand-off was applied: the replay learns it")
		lose.Store(false)
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the release passed the lock on in Redis")
		require.NoError(t, m.Err(ctx))

		require.NoError(t, m.Lock(ctx))
		n, err = m.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n, "Redis counts the hand-off's hold and the re-entry's")
		require.NoError(t, m.Unlock(ctx))
		require.NoError(t, m.Unlock(ctx))
		require.False(t, b.exists(t, m.Key()), "the owner's Unlocks left the lock held in Redis")
	})
}

// reviewSlowClient delays the scripts it is told of by their name (Redis answers them
// slowly); everything else goes straight on.
func TestReview_WaiterThatGivesUpLeavesBeforeReturning(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out slow replies (2 s) (run without -short)")
	}
	for _, kind := range []string{"fair", "rw-write"} {
		t.Run(kind, func(t *testing.T) {
			b := realBackend(t)
			name := redistest.Name(t)
			holderC := b.client(t)
			sc := &hookClient{Client: b.rueidis(t)}
			sc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if cmd.script == "fair_leave" || cmd.script == "rw_leave" {
					time.Sleep(400 * time.Millisecond) // slow to reach Redis
				}
				return call()
			})
			c, err := rlock.New(sc)
			require.NoError(t, err)
			defer c.Close()
			var try func(ctx context.Context) (bool, error)
			var key string
			switch kind {
			case "fair":
				require.NoError(t, holderC.FairMutex(name).Lock(bg))
				w := c.FairMutex(name)
				try = func(ctx context.Context) (bool, error) { return w.TryLock(ctx, 300*time.Millisecond, 0) }
				key = w.Key() + ":queue"
			case "rw-write":
				require.NoError(t, holderC.RWMutex(name).RLock(bg))
				w := c.RWMutex(name)
				try = func(ctx context.Context) (bool, error) { return w.TryLock(ctx, 300*time.Millisecond, 0) }
				key = w.Key() + ":writers"
			}
			ok, err := try(bg)
			require.NoError(t, err)
			require.False(t, ok, "the lock is held by another")
			msg, err := b.do(t, "ZCARD", key)
			require.NoError(t, err)
			n, _ := msg.AsInt64()
			redistest.WaitFor(t, 5*time.Second, "the leave to run in the background", func() bool {
				msg, err := b.do(t, "ZCARD", key)
				require.NoError(t, err)
				left, _ := msg.AsInt64()
				return left == 0
			})
			require.Zero(t, n, "TryLock returned with its place (claim) still in %s; the leave ran after it returned", key)
		})
	}
}

// reviewStuckClient stops answering the scripts it is told of while stuck is set (see
// reviewStuck); everything else goes straight on.
// README guarantee 6 ("Lock and TryLock return within 100 ms of their context's end even
// while Redis does not answer"), the family with a leave (FairMutex, RWMutex write side): an
// attempt whose reply is lost when ctx ends waits returnGrace for its background resolution
// (Mutex.later via Client.soon), then the wait's leave waits returnGrace again (spec.leave via
// Client.soon): the two grace periods add up.
func TestReview_FamilyLockOutlivesCtxByTwoGracePeriods(t *testing.T) {
	// Beside the other parallel tests, its cases side by side: each has a server and names of
	// its own, and its bound subtracts what this process stalled.
	t.Parallel()
	for _, kind := range []string{"fair", "rw-write"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			eachBackendParallel(t, func(t *testing.T, b *backend) {
				sc := &hookClient{Client: b.rueidis(t)}
				var stuck atomic.Bool // Redis stops answering the scripts of the acquire and the leave
				sc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					switch cmd.script {
					case "fair_acquire", "fair_leave", "rw_acquire", "rw_leave":
						if stuck.Load() {
							return reviewStuck(ctx)
						}
					}
					return call()
				})
				c, err := rlock.New(sc)
				require.NoError(t, err)
				defer c.Close()
				name := redistest.Name(t)
				var lock func(ctx context.Context) error
				switch kind {
				case "fair":
					w := c.FairMutex(name)
					require.NoError(t, w.Lock(bg)) // scripts loaded
					require.NoError(t, w.Unlock(bg))
					lock = w.Lock
				case "rw-write":
					w := c.RWMutex(name)
					require.NoError(t, w.Lock(bg))
					require.NoError(t, w.Unlock(bg))
					lock = w.Lock
				}
				stuck.Store(true) // Redis stops answering
				stalled := watchStalls(nil)
				ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
				defer cancel()
				err = lock(ctx)
				dl, _ := ctx.Deadline()
				now := time.Now()
				late, stall := now.Sub(dl), stalled(dl, now)
				stuck.Store(false)
				t.Logf("Lock returned %v after its ctx ended (the process stalled %v of it): %v", late.Round(time.Millisecond), stall.Round(time.Millisecond), err)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				// Less what this process stalled meanwhile: other packages' tests share the
				// cores under go test ./... -race.
				require.Less(t, late-stall, 170*time.Millisecond,
					"Lock outlived its ctx by %v (README: within 100ms of its context's end even while Redis does not answer)", late.Round(time.Millisecond))
			})
		})
	}
}
