package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A release of a lock that a waiter of the same Client is parked on passes the lock to that
// waiter in the release script: the waiter holds it without an acquire of its own and
// without a publish.
func TestMutex_handoffToParkedLocalWaiter(t *testing.T) {
	b := realBackend(t)
	c := b.client(t)
	name := redistest.Name(t)
	holder, waiter := c.Mutex(name), c.Mutex(name)
	require.NoError(t, holder.Lock(bg))
	tok1, err := holder.Token(bg)
	require.NoError(t, err)
	// A first waiter leaves the release channel subscribed (it lingers), so that the next
	// one parks after a single attempt, with no confirmation to wake it again.
	ok, err := c.Mutex(name).TryLock(bg, 50*time.Millisecond, 0)
	require.NoError(t, err)
	require.False(t, ok)
	redistest.WaitFor(t, 5*time.Second, "the subscription to be live", func() bool { return rlock.ChannelLive(c, holder) })
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(bg) }()
	redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
	b.srv.ResetStats(t)
	require.NoError(t, holder.Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "the waiter to hold the lock"))
	stats := b.srv.CommandStats(t)
	require.EqualValues(t, 1, stats["evalsha"], "one release script, no acquire by the waiter")
	require.Zero(t, stats["publish"], "a hand-off publishes nothing")

	tok2, err := waiter.Token(bg)
	require.NoError(t, err)
	require.Greater(t, tok2, tok1, "a hand-off is a fresh grant with a new token")
	n, err := waiter.HoldCount(bg)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ttl, err := waiter.TTL(bg)
	require.NoError(t, err)
	require.Greater(t, ttl, rlock.DefaultWatchdogTimeout/2, "the waiter's own lease")
	require.ErrorIs(t, holder.Unlock(bg), rlock.ErrNotHeld)
	require.NoError(t, waiter.Unlock(bg))
	locked, err := waiter.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
}

// The hand-off keeps the waiter's fixed lease and, in watchdog mode, renews it.
func TestMutex_handoffKeepsWaitersLease(t *testing.T) {
	if testing.Short() {
		t.Skip("long: holds across watchdog leases, ~1 s (run without -short)")
	}
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		// A 1 s lease: a third of it (333 ms) for each renewal to land beside the parallel tests.
		const lease = time.Second
		c := b.client(t, rlock.WithWatchdogTimeout(lease))
		name := redistest.Name(t)
		holder, fixed, dog := c.Mutex(name), c.Mutex(name), c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		gotFixed := make(chan error, 1)
		go func() {
			ok, err := fixed.TryLock(bg, 10*time.Second, 5*time.Second)
			if err == nil && !ok {
				err = context.DeadlineExceeded
			}
			gotFixed <- err
		}()
		redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
		require.NoError(t, holder.Unlock(bg))
		require.NoError(t, await(t, gotFixed, 10*time.Second, "the fixed-lease waiter"))
		ttl, err := fixed.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, 2*time.Second, "the waiter's fixed lease, not the watchdog's")

		gotDog := make(chan error, 1)
		go func() { gotDog <- dog.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
		require.NoError(t, fixed.Unlock(bg))
		require.NoError(t, await(t, gotDog, 10*time.Second, "the watchdog waiter"))
		// Held across several watchdog timeouts: the watchdog renews the handed-off lock.
		hw := watchHold(t, dog.Done(bg), lease/3)
		timer := time.NewTimer(lease * 10 / 3)
		select {
		case <-dog.Done(bg):
			hw.excuse(t, dog.Err(bg))
			t.Fatalf("lost: %v", dog.Err(bg))
		case <-timer.C:
		}
		hw.noLoss(t, dog.Unlock(bg))
	})
}

// Hand-offs within a Client are bounded: a waiter of another Client gets the lock even while
// two goroutines of one Client keep passing it to each other.
func TestMutex_handoffStreakLetsOtherClientsIn(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c := b.client(t)
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		var rounds atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i := 0; i < 2; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := c.Mutex(name)
				for ctx.Err() == nil {
					if err := m.Lock(ctx); err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					rounds.Add(1)
					time.Sleep(time.Millisecond)
					if err := m.Unlock(bg); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		redistest.WaitFor(t, 10*time.Second, "the ping-pong to start", func() bool { return rounds.Load() > 20 })
		other := b.client(t).Mutex(name)
		ok, err := other.TryLock(bg, 20*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok, "a waiter of another Client got no turn")
		require.NoError(t, other.Unlock(bg))
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})
}

// A waiter that gives up while a release is passing the lock to it leaves nothing held.
func TestMutex_handoffRacingCancelLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		holder := c.Mutex(name)
		for i := 0; i < 30; i++ {
			require.NoError(t, holder.Lock(bg))
			waiter := c.Mutex(name)
			ctx, cancel := context.WithCancel(bg)
			got := make(chan error, 1)
			go func() { got <- waiter.Lock(ctx) }()
			parked(t, b, holder, 1)
			go cancel()
			require.NoError(t, holder.Unlock(bg))
			err := await(t, got, 10*time.Second, "the waiter to return")
			if err == nil {
				require.NoError(t, waiter.Unlock(bg))
			} else {
				require.ErrorIs(t, err, context.Canceled)
				require.ErrorIs(t, waiter.Err(bg), rlock.ErrNotHeld)
			}
			redistest.WaitFor(t, 5*time.Second, "the lock to be free", func() bool { return !b.exists(t, holder.Key()) })
			cancel()
		}
	})
}

// HoldContext is cancelled, with its cause, before the call that ended the hold returns:
// a caller that cancels it right after Unlock still finds why the hold ended. (The chaos
// soak once reported a holder as never told of a loss: the cause had been set from another
// goroutine, after the caller's own cancel.)
func TestMutex_HoldContext_causeSetBeforeUnlockReturns(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no time bound
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		for i := 0; i < 20; i++ {
			m := c.Mutex(redistest.Name(t))
			require.NoError(t, m.Lock(bg))
			hctx, cancel := m.HoldContext(bg)
			_, err := b.do(t, "DEL", m.Key()) // lost behind the holder's back
			require.NoError(t, err)
			require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)
			require.Error(t, hctx.Err(), "cancelled by the time Unlock returned")
			cancel()
			require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)

			// A plain release: the cause is ErrNotHeld, also set before Unlock returns.
			require.NoError(t, m.Lock(bg))
			hctx, cancel = m.HoldContext(bg)
			require.NoError(t, m.Unlock(bg))
			cancel()
			require.ErrorIs(t, context.Cause(hctx), rlock.ErrNotHeld)
		}
	})
}

// A waiter whose call has gone when the release that passes the lock to it ends with its
// outcome unknown (every reply of the release lost for the whole cleanup timeout) leaves
// nothing held in Redis once its background work is done: the hand-off is an acquire of the
// waiter's owner whose outcome is unknown, and the work resolves it by replaying that acquire
// (the hand-off's sequence number) and gives back what it finds granted. Before, it only noted
// the hold stale: a grant nobody took stayed in Redis for its whole lease, blocking every other
// owner, and the Observer told no Replay of the waiter's owner (the drift hunt, seed
// 1796324201455082267 trial 4: a context owner's waiter parked, cancelled while another owner's
// release passed it the lock in a storm of lost replies; "owner u:ctxA-4: booked 0, Redis 1").
// With the release's first send lost instead, the replay finds the lock still the holder's and
// grants nothing.
func TestMutex_handoffOfUnknownOutcomeToGoneWaiterLeavesNothing(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, applied := range []bool{true, false} {
			for _, ctxOwner := range []bool{true, false} {
				t.Run(fmt.Sprintf("applied=%v/ctxOwner=%v", applied, ctxOwner), func(t *testing.T) {
					handoffUnknownToGoneWaiter(t, b, applied, ctxOwner)
				})
			}
		}
	})
}

func handoffUnknownToGoneWaiter(t *testing.T, b *backend, applied, ctxOwner bool) {
	const cleanup = 300 * time.Millisecond
	name := redistest.Name(t)
	obs, replays := acquireReplays(name)
	wbase := waiterBase(ctxOwner)
	ctx, cancel := context.WithCancel(wbase)
	defer cancel()
	s := parkWaiter(t, b, name, ctx, rlock.WithCleanupTimeout(cleanup), rlock.WithObserver(obs))

	// The holder's release with a successor (it names the fence: three keys): its first send
	// passes the lock on (applied) or is lost, and no reply of it, nor of any replay, comes
	// back. The caller of the waiter gives up as the first send goes.
	sent := make(chan struct{})
	var calls atomic.Int32
	s.hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if !isHandoffRelease(cmd) {
			return call()
		}
		if calls.Add(1) == 1 {
			if applied {
				call()
			}
			close(sent)
		}
		return hardLost()
	})
	unlocked := make(chan error, 1)
	go func() { unlocked <- s.holder.Unlock(bg) }()
	within(t, 5*time.Second, "the holder's release to be sent", sent)
	cancel()
	require.ErrorIs(t, await(t, s.got, 5*time.Second, "the waiter to return"), context.Canceled)
	require.ErrorIs(t, await(t, unlocked, 10*time.Second, "the holder's Unlock"), rlock.ErrUnknownOutcome)
	require.Positive(t, calls.Load())

	// The waiter's owner holds nothing in Redis once the work left behind is done (within a
	// cleanup timeout; the lease, the watchdog's 30 s, is far longer).
	redistest.WaitFor(t, 3*time.Second, "Redis to count no hold of the waiter's owner, whose call had gone", func() bool {
		n, err := s.waiter.HoldCount(wbase)
		require.NoError(t, err)
		return n == 0
	})
	// The waiter's part of the hand-off is told as an acquire replayed, its outcome known.
	select {
	case e := <-replays:
		require.NoError(t, e.Err, "the waiter's acquire stayed unresolved")
	case <-time.After(3 * time.Second):
		t.Fatal("no Replay of the waiter's acquire: the hand-off's outcome was never resolved")
	}
	// The background work records the grant it learnt of and then gives it back: Redis may
	// count no hold a moment before the Client has recorded the give-back's answer (the tenure
	// ends then), so the end is waited for, not read once (a loaded run found Err nil here).
	redistest.WaitFor(t, 3*time.Second, "the waiter's tenure, if any, to end", func() bool {
		return errors.Is(s.waiter.Err(wbase), rlock.ErrNotHeld)
	})
	if applied {
		require.False(t, b.exists(t, s.holder.Key()), "the lock passed to the gone waiter is free again")
	}
}

// A waiter whose caller still waits when the release that passes the lock to it ends with its
// outcome unknown gets the lock if the release passed it on, and waits on if not: the hand-off
// is resolved as an acquire of unknown outcome, replayed under its sequence number (answered
// from the state when applied; refused, the number spent, when not). Before, the caller was told
// at once ("passed on by a release whose outcome is unknown", ErrUnknownOutcome) and nothing
// resolved the hand-off: a hold Redis counted for the owner stayed for its lease, and a release
// send arriving late could still pass the lock on.
func TestMutex_handoffOfUnknownOutcomeToWaitingCallerIsResolved(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, applied := range []bool{true, false} {
			for _, ctxOwner := range []bool{true, false} {
				t.Run(fmt.Sprintf("applied=%v/ctxOwner=%v", applied, ctxOwner), func(t *testing.T) {
					handoffUnknownToWaitingCaller(t, b, applied, ctxOwner)
				})
			}
		}
	})
}

func handoffUnknownToWaitingCaller(t *testing.T, b *backend, applied, ctxOwner bool) {
	const cleanup, watchdog = 300 * time.Millisecond, time.Second
	name := redistest.Name(t)
	obs, replays := acquireReplays(name)
	ctx := waiterBase(ctxOwner)
	s := parkWaiter(t, b, name, ctx, rlock.WithCleanupTimeout(cleanup), rlock.WithWatchdogTimeout(watchdog), rlock.WithObserver(obs))

	// The holder's release with a successor (it names the fence: three keys): its first send
	// passes the lock on (applied) or is lost; no reply of it, nor of any replay, comes back,
	// and no replay reaches Redis.
	var calls atomic.Int32
	s.hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if !isHandoffRelease(cmd) {
			return call()
		}
		if calls.Add(1) == 1 && applied {
			call()
		}
		return hardLost()
	})
	require.ErrorIs(t, s.holder.Unlock(bg), rlock.ErrUnknownOutcome)
	// Applied: the replay finds the lock passed on. Not applied: the replay is refused, and the
	// waiter takes the lock once the holder's lease, no longer renewed, has run out.
	require.NoError(t, await(t, s.got, 5*watchdog+5*time.Second, "the waiter's Lock"))
	select {
	case e := <-replays:
		require.NoError(t, e.Err, "the hand-off's replay got no answer")
	case <-time.After(3 * time.Second):
		t.Fatal("no Replay of the waiter's acquire: the hand-off's outcome was never resolved")
	}
	require.NoError(t, s.waiter.Err(ctx))
	n, err := s.waiter.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "Redis counts the waiter's one hold")
	require.NoError(t, s.waiter.Unlock(ctx))
	require.False(t, b.exists(t, s.holder.Key()), "the waiter's Unlock frees the lock")
}

// acquireReplays returns an Observer that sends on the returned channel the Replay event of
// every acquire of the lock called name (in the hand-off tests only a waiter replays one).
func acquireReplays(name string) (*rlock.Observer, chan rlock.ReplayInfo) {
	replays := make(chan rlock.ReplayInfo, 16)
	return &rlock.Observer{Replay: func(e rlock.ReplayInfo) {
		if e.Name == name && e.Op == "acquire" {
			replays <- e
		}
	}}, replays
}

// parkedHandoff is the setup the hand-off tests of unknown outcome share: on a Client with
// hard faults (hardSetup), holder holds a lock and waiter, another handle of the same Client
// on the same name, is parked on it as the candidate the holder's release passes the lock to.
// The Client's scripts go through hc, which has no hook set yet.
type parkedHandoff struct {
	hc             *hookClient
	c              *rlock.Client
	holder, waiter *rlock.Mutex
	got            chan error // what the waiter's Lock returns
}

// parkWaiter sets up a parkedHandoff on the lock called name, with a Client of b made with
// opts: the holder takes the lock (with bg), the Client is left subscribed to the lock's
// release channel (hardSubscribe), so that the waiter parks after one attempt, and the
// waiter's Lock(wctx) runs in a goroutine; it returns once the waiter is parked.
func parkWaiter(t *testing.T, b *backend, name string, wctx context.Context, opts ...rlock.Option) *parkedHandoff {
	t.Helper()
	hc, c := hardSetup(t, b, opts...)
	s := &parkedHandoff{hc: hc, c: c, holder: c.Mutex(name), waiter: c.Mutex(name), got: make(chan error, 1)}
	require.NoError(t, s.holder.Lock(bg))
	hardSubscribe(t, c, name)
	go func() { s.got <- s.waiter.Lock(wctx) }()
	redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, s.holder) == 1 })
	return s
}

// waiterBase returns the context a hand-off test's waiter locks under: bg, or, when ctxOwner,
// bg with the context owner "waiter" (rlock.WithOwner).
func waiterBase(ctxOwner bool) context.Context {
	if ctxOwner {
		return rlock.WithOwner(bg, "waiter")
	}
	return bg
}
