package rlock_test

// Regression tests for the defects of issue 9. Each test names the defect it covers; each
// failed on the code before the fixes.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// hardRefused is what a refused dial gives: nothing was sent (definitive).
func hardRefused() rueidis.RedisResult {
	return rueidis.NewErrorResult(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
}

// hardLost is what a lost reply gives: the outcome is unknown.
func hardLost() rueidis.RedisResult { return rueidis.NewErrorResult(context.DeadlineExceeded) }

// hardSetup returns a Client of b whose Mutex scripts go through a hook (set it on the
// returned hookClient), warmed (hardWarm) and closed when the test ends.
func hardSetup(t *testing.T, b *backend, opts ...rlock.Option) (*hookClient, *rlock.Client) {
	t.Helper()
	hc := &hookClient{Client: b.rueidis(t)}
	c, err := rlock.New(hc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	hardWarm(t, c)
	return hc, c
}

// hardWarm runs one Lock/Unlock cycle on a lock of its own through c, so that the scripts are
// loaded on the server and c knows whether the server takes shebang flags: the next script
// call of each kind is then the one that does the work (no NOSCRIPT or refused shebang first).
// A call of the cycle whose outcome stayed unknown (ErrUnknownOutcome: the Client's cleanup
// timeout, which bounds an Unlock and a lost reply's replays and which some tests set to a
// few hundred ms, ran out on a loaded machine) leaves the scripts loaded or not: the cycle is
// made again on a lock of its own, up to 10 times.
func hardWarm(t *testing.T, c *rlock.Client) {
	t.Helper()
	for i := 1; ; i++ {
		name := redistest.Name(t) + "-warm"
		if i > 1 {
			name += fmt.Sprint(i)
		}
		w := c.Mutex(name)
		err := w.Lock(bg)
		if err == nil {
			err = w.Unlock(bg)
		}
		if !errors.Is(err, rlock.ErrUnknownOutcome) || i == 10 {
			require.NoError(t, err, "the warm-up cycle %d", i)
			return
		}
		t.Logf("the warm-up cycle %d: %v; again", i, err)
	}
}

// hardSubscribe leaves c subscribed to name's release channel, confirmed and lingering, so
// that the next waiters park after one attempt, with no confirmation to wake them again. The
// lock must be held by another owner. Its waiter stays until the subscription is live: a
// channel without waiters when the Subscriber first plans is never subscribed.
func hardSubscribe(t *testing.T, c *rlock.Client, name string) {
	t.Helper()
	m := c.Mutex(name)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		ok, err := m.TryLock(ctx, time.Minute, 0)
		if ok {
			err = fmt.Errorf("the lock must be held by another owner")
		}
		done <- err
	}()
	redistest.WaitFor(t, 10*time.Second, "the subscription to be live", func() bool { return rlock.ChannelLive(c, m) })
	cancel()
	require.ErrorIs(t, await(t, done, 10*time.Second, "the subscribing waiter to leave"), context.Canceled)
}

// Defect 1 (issue 9): a nested Lock queued behind other waiters of its own Client (wait.go,
// the queued decision: a caller that finds waiters of its Client on the channel does not try
// first, even when its owner holds the lock). A re-entry never waits.
func TestHardening_ReentryDoesNotQueueBehindLocalWaiters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		a, other := c.Mutex(name), c.Mutex(name)
		require.NoError(t, a.Lock(bg))
		// The subscription is confirmed before anyone queues: no confirmation wakes the
		// holder's call below by chance.
		hardSubscribe(t, c, name)
		got := make(chan error, 1)
		go func() { got <- other.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "the other handle to park", func() bool { return rlock.ParkedCandidates(c, other) == 1 })

		// A wait bound that cannot run out first: the context ends a call that waits. (The
		// wait loop's last attempt, when its bound runs out, would re-enter: the defect shows
		// as a re-entry that waits the whole bound.)
		tctx, tcancel := context.WithTimeout(bg, time.Second)
		defer tcancel()
		ok, err := a.TryLock(tctx, 10*time.Second, 0)
		require.NoError(t, err, "the holder's TryLock queued behind a waiter of its Client instead of re-entering")
		require.True(t, ok)
		n, err := a.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		require.NoError(t, a.Lock(ctx), "the holder's Lock must re-enter at once")
		n, err = a.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		for i := 0; i < 3; i++ {
			require.NoError(t, a.Unlock(bg))
		}
		require.NoError(t, await(t, got, 10*time.Second, "the waiter to get the lock"))
		require.NoError(t, other.Unlock(bg))
		require.False(t, b.exists(t, a.Key()))
	})
}

// Defect 2 (issue 9): a give-back that fails left a phantom hold renewed forever (mutex.go:
// the paths that grant and then `_ = m.release(...)` because the caller is gone, here the
// attempt whose acquire reply was lost and whose replay resolved "granted" after ctx ended).
// The hold the Client could not give back must not be renewed: it expires with its lease.
func TestHardening_FailedGiveBackIsNotRenewed(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		const wd = 600 * time.Millisecond
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc, rlock.WithWatchdogTimeout(wd), rlock.WithCleanupTimeout(300*time.Millisecond))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		m := c.Mutex(redistest.Name(t))

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		var dropped atomic.Bool
		var refused atomic.Int32
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			switch cmd.script {
			case "acquire":
				res := call()
				if res.Error() == nil && dropped.CompareAndSwap(false, true) {
					cancel() // the caller gives up while its (applied) acquire's reply is lost
					return hardLost()
				}
				return res
			case "release":
				refused.Add(1) // every give-back fails, sending nothing
				return hardRefused()
			}
			return call()
		})
		ok, err := m.TryLock(ctx, time.Second, 0)
		require.False(t, ok)
		require.ErrorIs(t, err, context.Canceled)
		require.True(t, dropped.Load(), "the acquire's reply was dropped")
		require.Positive(t, refused.Load(), "a give-back was tried and failed")

		// The grant could not be given back: it must expire with its lease, not be renewed.
		redistest.WaitFor(t, 4*wd, "the hold that could not be given back to expire (it is still renewed)", func() bool { return !b.exists(t, m.Key()) })
		ok, err = b.client(t).Mutex(m.Name()).TryLock(bg, 2*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok, "another Client must get the lock")
	})
}

// Defect 3 (issue 9): re-locking in the drift window of a fixed lease left a ghost hold
// (hold.go): the local expiry fires drift (1% + 2 ms) before Redis expires the key, and a Lock
// sent in between is a re-entry in Redis (count 2) that the Client records as a fresh grant
// (count 1): the Unlock then leaves a hold in Redis, with the watchdog's lease. The window is
// widened by holding the first acquire 200 ms on its way to Redis (a slow network path,
// which the conservative deadline allows for), so that the re-lock lands in it every time.
func TestHardening_RelockInDriftWindowLeavesNoGhostHold(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out a 1 s fixed lease (run without -short)")
	}
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc)
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		m := c.Mutex(redistest.Name(t))
		var delay atomic.Bool
		delay.Store(true)
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script == "acquire" && delay.CompareAndSwap(true, false) {
				time.Sleep(200 * time.Millisecond) // the request is slow on its way
			}
			return call()
		})
		ok, err := m.TryLock(bg, 0, time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		tok1, err := m.Token(bg)
		require.NoError(t, err)
		within(t, 5*time.Second, "the fixed lease to run out locally", m.Done(bg))
		require.ErrorIs(t, m.Err(bg), rlock.ErrNotHeld)

		require.NoError(t, m.Lock(bg))
		tok2, err := m.Token(bg)
		require.NoError(t, err)
		t.Logf("token before %d, after the re-lock %d", tok1, tok2)
		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()), "the Unlock of the only hold taken left a hold in Redis (a ghost of the expired lease)")
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)
	})
}

// Defect 4 (issue 9): expired fixed-lease holds never left the Client's table (hold.go:
// onLost ends the tenure, but only unref deletes an entry, and no operation is running by
// then). The table holds only what is held or in flight.
func TestHardening_ExpiredFixedLeasesLeaveTheTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		base := redistest.Name(t)
		const n = 200
		locks := make([]*rlock.Mutex, n)
		granted := 0
		for i := range locks {
			locks[i] = c.Mutex(fmt.Sprintf("%s-%d", base, i))
			ok, err := locks[i].TryLock(bg, 0, 50*time.Millisecond)
			if errors.Is(err, rlock.ErrLeaseExpired) {
				// On a loaded machine the grant can come back after its 50ms lease ran out:
				// it was given back, and nothing is held (TryLock's documented outcome).
				require.False(t, ok)
				continue
			}
			require.NoError(t, err)
			if ok {
				granted++
			}
		}
		require.Positive(t, granted)
		for _, m := range locks {
			within(t, 5*time.Second, "a fixed lease to run out", m.Done(bg))
		}
		redistest.WaitFor(t, 3*time.Second, fmt.Sprintf("the table to drop the %d expired holds", granted), func() bool { return rlock.HoldEntries(c) == 0 })
		for _, m := range locks {
			require.ErrorIs(t, m.Err(bg), rlock.ErrNotHeld)
		}
	})
}

// Defect 5 (issue 9): a direct hand-off racing a re-entry on a shared handle was reported as
// a loss. The release passes the lock to the parked G2 (a fresh grant to handle m in Redis);
// before its reply is back, G3 re-enters through m (count 2 in Redis). G2 then records the
// hand-off as a fresh grant while m already counts a hold, takes it for an unnoticed loss,
// gives one hold back and returns ErrLockLost. Both calls hold the lock: m holds it twice.
func TestHardening_HandoffRacingReentryOnSharedHandle(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a stalled release, ~1 s (run without -short)")
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc)
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		name := redistest.Name(t)
		a, m := c.Mutex(name), c.Mutex(name)
		require.NoError(t, a.Lock(bg))
		hardSubscribe(t, c, name)
		g2 := make(chan error, 1)
		go func() { g2 <- m.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "G2 to park", func() bool { return rlock.ParkedCandidates(c, m) == 1 })

		// The release's reply is held back until the re-entry's acquire has been answered
		// (or 1 s, should a fixed Client hold the re-entry back until the hand-off is known).
		applied, reentered := make(chan struct{}), make(chan struct{})
		var armed, after atomic.Bool
		armed.Store(true)
		var once sync.Once
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			switch {
			case cmd.script == "release" && armed.Load():
				res := call()
				if res.Error() != nil || !armed.CompareAndSwap(true, false) {
					return res
				}
				after.Store(true)
				close(applied)
				select {
				case <-reentered:
				case <-time.After(time.Second):
				}
				return res
			case cmd.script == "acquire" && after.Load():
				res := call()
				once.Do(func() { close(reentered) })
				return res
			}
			return call()
		})
		unlocked := make(chan error, 1)
		go func() { unlocked <- a.Unlock(bg) }()
		within(t, 5*time.Second, "the release to pass the lock on in Redis", applied)
		type result struct {
			ok  bool
			err error
		}
		g3 := make(chan result, 1)
		go func() {
			ok, err := m.TryLock(bg, 0, 0)
			g3 <- result{ok, err}
		}()
		require.NoError(t, await(t, unlocked, 10*time.Second, "a's Unlock"))
		require.NoError(t, await(t, g2, 10*time.Second, "G2's Lock"), "G2 was passed the lock: the re-entry racing the hand-off is no loss")
		var r3 result
		select {
		case r3 = <-g3:
		case <-time.After(10 * time.Second):
			t.Fatal("G3's TryLock did not return")
		}
		require.NoError(t, r3.err)
		require.True(t, r3.ok, "G3 re-enters the lock its handle holds")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n, "G2's hold and G3's")
		require.NoError(t, m.Err(bg))
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()))
	})
}

// Defect 6 (issue 9): Lock outlived its context while Redis was unresponsive: the acquire's
// replay ran on the cleanup timeout (5 s) and the call ended with ErrUnknownOutcome. It must
// end with its ctx, and the acquire that Redis applies late must be given back.
func TestHardening_LockEndsWithCtxWhileRedisIsUnresponsive(t *testing.T) {
	b := realBackend(t)
	c := b.client(t) // watchdog timeout 30 s: a late grant does not expire by itself here
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.Lock(bg)) // the connection is up and the scripts are loaded
	require.NoError(t, m.Unlock(bg))

	b.srv.Pause(t) // SIGSTOP: requests are sent and queue up, no reply comes
	paused := true
	defer func() {
		if paused {
			b.srv.Resume(t)
		}
	}()
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	got := make(chan error, 1)
	start := time.Now()
	go func() { got <- m.Lock(ctx) }()
	err := await(t, got, 20*time.Second, "Lock to return")
	elapsed := time.Since(start)
	b.srv.Resume(t)
	paused = false

	require.Less(t, elapsed, time.Second, "Lock with a 200ms context returned after %v: %v", elapsed.Round(time.Millisecond), err)
	require.NotErrorIs(t, err, rlock.ErrUnknownOutcome)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	redistest.WaitFor(t, 5*time.Second, "the acquire applied late to be given back", func() bool { return !b.exists(t, m.Key()) })
	// The key goes when the give-back runs in Redis; the Client records it when the reply
	// comes back, a moment later.
	redistest.WaitFor(t, 5*time.Second, "the Client to record the give-back", func() bool { return errors.Is(m.Err(bg), rlock.ErrNotHeld) })
	require.NoError(t, c.Close()) // goleak (TestMain): nothing of the Client keeps running
}

// Defect 7 (issue 9): a wake-up consumed by a wait that then ends with an error was not passed
// on (wait.go: the parker's unpark path returns without w.Pass). m1 is parked and claimed by
// a release whose outcome stays unknown; meanwhile a ForceUnlock's publish wakes m1 (first in
// line). m1 ends with the unknown outcome, and the wake-up it consumed was the only one: m2,
// parked behind it, slept on until its fallback timer (the holder's 30 s lease) although the
// lock was free.
func TestHardening_WakeupConsumedByFailedHandoffIsPassedOn(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a 1 s cleanup timeout (run without -short)")
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		hc := &hookClient{Client: b.rueidis(t)}
		c, err := rlock.New(hc, rlock.WithCleanupTimeout(time.Second))
		require.NoError(t, err)
		defer c.Close()
		hardWarm(t, c)
		name := redistest.Name(t)
		holder, m1, m2 := c.Mutex(name), c.Mutex(name), c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		hardSubscribe(t, c, name)
		got1, got2 := make(chan error, 1), make(chan error, 1)
		go func() { got1 <- m1.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "m1 to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
		go func() { got2 <- m2.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "m2 to park", func() bool { return rlock.ParkedCandidates(c, holder) == 2 })
		seen, stop, err := rlock.WatchMessages(c, holder)
		require.NoError(t, err)
		defer stop()

		// The release passing the lock to m1 is applied, but its reply and every replay's are
		// lost: the outcome stays unknown, and so does the hand-off's, whose replays (m1's
		// acquire under the successor's number, '+'-marked) never reach Redis. The first
		// reply is held back until the test has seen m1 woken by the publish.
		applied, proceed := make(chan struct{}), make(chan struct{})
		var armed, lose atomic.Bool
		armed.Store(true)
		lose.Store(true)
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script == "acquire" && lose.Load() && strings.HasPrefix(cmd.args[5], "+") {
				return hardLost()
			}
			if cmd.script != "release" {
				return call()
			}
			if armed.Load() {
				res := call()
				if res.Error() != nil || !armed.CompareAndSwap(true, false) {
					return res
				}
				close(applied)
				select {
				case <-proceed:
				case <-time.After(10 * time.Second):
				}
				return hardLost()
			}
			if lose.Load() {
				return hardLost()
			}
			return call()
		})
		unlocked := make(chan error, 1)
		go func() { unlocked <- holder.Unlock(bg) }()
		within(t, 5*time.Second, "the release to pass the lock to m1 in Redis", applied)
		forced, err := b.client(t).Mutex(name).ForceUnlock(bg)
		require.NoError(t, err)
		require.True(t, forced)
		redistest.WaitFor(t, 5*time.Second, "the ForceUnlock's publish to wake m1", seen)
		close(proceed)

		err1 := await(t, got1, 10*time.Second, "m1's Lock")
		require.Error(t, err1, "the hand-off's outcome is unknown: m1 cannot claim the lock")
		t.Logf("m1: %v", err1)
		lose.Store(false)
		t.Logf("holder's Unlock: %v", await(t, unlocked, 10*time.Second, "the holder's Unlock"))

		// The lock is free; the publish that said so woke m1, which left without using it.
		require.NoError(t, await(t, got2, 3*time.Second, "m2 to be woken by the wake-up m1 consumed and must pass on"))
		require.NoError(t, m2.Unlock(bg))
		require.False(t, b.exists(t, m2.Key()))
	})
}

// Defect 8 (issue 9): calls in flight outlived Close: an Unlock or an acquire replaying a
// request whose reply was lost went on for the cleanup timeout after Close; and after the
// rueidis client itself was closed, Unlock replayed until the cleanup timeout.
func TestHardening_CloseEndsInFlightCalls(t *testing.T) {
	const cleanup = 5 * time.Second
	eachBackend(t, func(t *testing.T, b *backend) {
		// closeWhileReplaying starts op, waits until kind's script was sent twice (the
		// request and a replay), closes c and checks op ends promptly with ErrClosed.
		closeWhileReplaying := func(t *testing.T, hc *hookClient, c *rlock.Client, kind string, op func() error) {
			var sends atomic.Int32
			hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if cmd.script != kind {
					return call()
				}
				sends.Add(1)
				call() // applied, the reply lost
				return hardLost()
			})
			got := make(chan error, 1)
			go func() { got <- op() }()
			redistest.WaitFor(t, 5*time.Second, "the "+kind+" to be replayed", func() bool { return sends.Load() >= 2 })
			closed := time.Now()
			require.NoError(t, c.Close())
			err := await(t, got, 3*cleanup, "the call in flight to return")
			elapsed := time.Since(closed)
			require.Less(t, elapsed, time.Second, "the call returned %v after Close: %v", elapsed.Round(time.Millisecond), err)
			require.ErrorIs(t, err, rlock.ErrClosed)
		}
		t.Run("Unlock", func(t *testing.T) {
			hc := &hookClient{Client: b.rueidis(t)}
			c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
			require.NoError(t, err)
			defer c.Close()
			m := c.Mutex(redistest.Name(t))
			require.NoError(t, m.Lock(bg))
			closeWhileReplaying(t, hc, c, "release", func() error { return m.Unlock(bg) })
		})
		t.Run("Lock", func(t *testing.T) {
			hc := &hookClient{Client: b.rueidis(t)}
			c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
			require.NoError(t, err)
			defer c.Close()
			m := c.Mutex(redistest.Name(t))
			closeWhileReplaying(t, hc, c, "acquire", func() error { return m.Lock(bg) })
		})
		t.Run("rueidis closed", func(t *testing.T) {
			rc := b.rueidis(t)
			c, err := rlock.New(rc, rlock.WithCleanupTimeout(cleanup))
			require.NoError(t, err)
			defer c.Close()
			m := c.Mutex(redistest.Name(t))
			require.NoError(t, m.Lock(bg))
			rc.Close()
			got := make(chan error, 1)
			start := time.Now()
			go func() { got <- m.Unlock(bg) }()
			err = await(t, got, 3*cleanup, "Unlock to return")
			elapsed := time.Since(start)
			require.Less(t, elapsed, time.Second, "Unlock on a closed rueidis client returned after %v: %v", elapsed.Round(time.Millisecond), err)
			require.Error(t, err)
		})
	})
}

// Defect 9 (issue 9): leases that the drift swallows were accepted: a fixed lease of 1, 2 or
// 3 ms leaves no time (drift = 1% + 2 ms) and the wait spun, each grant arriving too late and
// given back, thousands of scripts in 100 ms. Such a lease is ErrInvalid and sends nothing.
func TestHardening_LeaseSwallowedByDriftIsInvalid(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		for _, lease := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond} {
			if b.srv != nil {
				b.srv.ResetStats(t)
			}
			ok, err := m.TryLock(bg, 100*time.Millisecond, lease)
			assert.False(t, ok, "lease %v", lease)
			assert.ErrorIs(t, err, rlock.ErrInvalid, "lease %v", lease)
			if b.srv != nil {
				stats := b.srv.CommandStats(t)
				assert.Zero(t, stats["evalsha"]+stats["eval"], "lease %v: scripts sent by one TryLock", lease)
			}
			if ok {
				_ = m.Unlock(bg)
			}
		}
		require.False(t, b.exists(t, m.Key()))
	})
}
