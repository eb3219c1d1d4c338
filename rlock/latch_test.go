package rlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// latchParked waits until n connections listen on the latch's channel.
func latchParked(t *testing.T, b *backend, l *rlock.CountDownLatch, n int64) {
	t.Helper()
	subscribed(t, b, l.Key()+":released", n)
}

func latchCount(t *testing.T, l *rlock.CountDownLatch) int64 {
	t.Helper()
	n, err := l.Count(bg)
	require.NoError(t, err)
	return n
}

// Five waiters on two Clients are all released by the last of five count-downs, and not
// before.
func TestCountDownLatch_Await_releasedAtZero(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c1, c2 := b.client(t), b.client(t)
		l := c1.CountDownLatch(name)
		ok, err := l.TrySetCount(bg, 5)
		require.NoError(t, err)
		require.True(t, ok)
		require.EqualValues(t, 5, latchCount(t, l))

		done := make(chan error, 5)
		for i := 0; i < 5; i++ {
			c := c1
			if i%2 == 1 {
				c = c2
			}
			go func(w *rlock.CountDownLatch) { done <- w.Await(bg) }(c.CountDownLatch(name))
		}
		latchParked(t, b, l, 2)
		for i := 0; i < 4; i++ {
			require.NoError(t, c2.CountDownLatch(name).CountDown(bg))
		}
		require.EqualValues(t, 1, latchCount(t, l))
		select {
		case err := <-done:
			t.Fatalf("a waiter returned at count 1: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		start := time.Now()
		require.NoError(t, l.CountDown(bg))
		for i := 0; i < 5; i++ {
			require.NoError(t, await(t, done, 5*time.Second, "every waiter to be released"))
		}
		require.Less(t, time.Since(start), 5*time.Second)
		require.EqualValues(t, 0, latchCount(t, l))
		require.False(t, b.exists(t, l.Key()), "the latch is deleted at zero")
	})
}

func TestCountDownLatch_Await_missingLatchReturnsAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.client(t).CountDownLatch(redistest.Name(t))
		ctx, cancel := context.WithTimeout(bg, 2*time.Second)
		defer cancel()
		require.NoError(t, l.Await(ctx))
		ok, err := l.TryAwait(bg, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.False(t, b.exists(t, l.Key()), "waiting creates nothing")
	})
}

// TryAwait honours its bound: false when the count-down comes after it, true when it comes
// within it (Redisson's await(500ms)/await(550ms) pair, with wider margins).
func TestCountDownLatch_TryAwait_bound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		l := c.CountDownLatch(redistest.Name(t))
		ok, err := l.TrySetCount(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)

		ok, err = l.TryAwait(bg, 0)
		require.NoError(t, err)
		require.False(t, ok)
		start := time.Now()
		ok, err = l.TryAwait(bg, 200*time.Millisecond)
		require.NoError(t, err)
		require.False(t, ok)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)

		counted := make(chan error, 1)
		other := b.client(t).CountDownLatch(l.Name())
		go func() {
			time.Sleep(100 * time.Millisecond)
			counted <- other.CountDown(bg)
		}()
		ok, err = l.TryAwait(bg, 5*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, await(t, counted, 5*time.Second, "the count-down"))

		// A ctx that ends first is an error, not a timeout.
		require.True(t, mustSet(t, l, 1))
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		ok, err = l.TryAwait(ctx, 5*time.Second)
		require.False(t, ok)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, l.Await(ctx), context.DeadlineExceeded)
	})
}

func mustSet(t *testing.T, l *rlock.CountDownLatch, n int64) bool {
	t.Helper()
	ok, err := l.TrySetCount(bg, n)
	require.NoError(t, err)
	return ok
}

func TestCountDownLatch_TrySetCount_onlyWhenAbsent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		l := c.CountDownLatch(redistest.Name(t))
		require.True(t, mustSet(t, l, 2))
		require.False(t, mustSet(t, l, 7), "a second set is refused")
		require.False(t, mustSet(t, b.client(t).CountDownLatch(l.Name()), 9), "from any Client")
		require.EqualValues(t, 2, latchCount(t, l), "and leaves the count alone")
		require.NoError(t, l.CountDown(bg))
		require.NoError(t, l.CountDown(bg))
		require.True(t, mustSet(t, l, 3), "an opened latch can be set again")
		require.EqualValues(t, 3, latchCount(t, l))

		for _, n := range []int64{0, -1} {
			_, err := l.TrySetCount(bg, n)
			require.ErrorIs(t, err, rlock.ErrInvalid)
		}
		require.EqualValues(t, 3, latchCount(t, l))
	})
}

func TestCountDownLatch_CountDown_atZeroKeepsZero(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.client(t).CountDownLatch(redistest.Name(t))
		require.NoError(t, l.CountDown(bg), "a missing latch: nothing to do")
		require.False(t, b.exists(t, l.Key()))
		require.True(t, mustSet(t, l, 1))
		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 0, latchCount(t, l))
		require.NoError(t, l.CountDown(bg))
		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 0, latchCount(t, l))
		require.False(t, b.exists(t, l.Key()), "no negative count is left behind")
		require.True(t, mustSet(t, l, 1), "and the latch can be set again")
		require.EqualValues(t, 1, latchCount(t, l))
	})
}

// A parked waiter sends nothing until the count-down's message wakes it.
func TestCountDownLatch_Await_wakesThroughPubSubNotPolling(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t) // watchdog timeout 30 s: the waiter's safety-net timer
		l := c.CountDownLatch(redistest.Name(t))
		require.True(t, mustSet(t, l, 1))
		got := make(chan time.Time, 1)
		waiter := b.client(t).CountDownLatch(l.Name())
		go func() {
			if err := waiter.Await(bg); err == nil {
				got <- time.Now()
			}
			close(got)
		}()
		latchParked(t, b, l, 1)
		time.Sleep(100 * time.Millisecond) // the waiter is asleep on its 30 s timer
		sent := func() int64 {
			if b.srv == nil {
				return 0
			}
			s := b.srv.CommandStats(t)
			return s["evalsha"] + s["eval"] + s["get"] + s["pttl"]
		}
		before := sent()
		time.Sleep(400 * time.Millisecond)
		require.Equal(t, before, sent(), "a parked waiter sends nothing")
		counted := time.Now()
		require.NoError(t, l.CountDown(bg))
		select {
		case at, ok := <-got:
			require.True(t, ok, "waiter failed")
			require.Less(t, at.Sub(counted), 2*time.Second, "woken by the message, not its 30 s timer")
		case <-time.After(10 * time.Second):
			t.Fatal("waiter not woken by the count-down")
		}
	})
}

// A latch whose key expires (an expiry set by someone else) publishes nothing: the waiter
// looks again when the key would be gone, not after its 30 s safety net.
func TestCountDownLatch_Await_expiredLatchOpens(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		l := b.client(t).CountDownLatch(redistest.Name(t))
		require.True(t, mustSet(t, l, 3))
		_, err := b.do(t, "PEXPIRE", l.Key(), "300")
		require.NoError(t, err)
		ok, err := l.TryAwait(bg, 5*time.Second)
		require.NoError(t, err)
		require.True(t, ok)
	})
}

func TestCountDownLatch_Delete_wakesWaiters(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		l := c.CountDownLatch(redistest.Name(t))
		ok, err := l.Delete(bg)
		require.NoError(t, err)
		require.False(t, ok, "nothing to delete")
		require.True(t, mustSet(t, l, 10))
		done := make(chan error, 1)
		waiter := b.client(t).CountDownLatch(l.Name())
		go func() { done <- waiter.Await(bg) }()
		latchParked(t, b, l, 1)
		ok, err = l.Delete(bg)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, await(t, done, 5*time.Second, "the waiter to be released by Delete"))
		require.False(t, b.exists(t, l.Key()))
	})
}

// A request whose reply is lost is resent under the same id and applied once.
func TestCountDownLatch_replayedRequestsApplyOnce(t *testing.T) {
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc)
		require.NoError(t, err)
		defer c.Close()
		l := c.CountDownLatch(redistest.Name(t))

		lc.drop.Store(1) // the set applied, its reply lost: the replay must still say true
		require.True(t, mustSet(t, l, 5))
		require.EqualValues(t, 5, latchCount(t, l))

		lc.drop.Store(1)
		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 4, latchCount(t, l), "a replayed count-down must not count twice")

		lc.drop.Store(3) // the reply and two replays' replies lost
		require.NoError(t, l.CountDown(bg))
		require.EqualValues(t, 3, latchCount(t, l))

		lc.drop.Store(1)
		ok, err := l.Delete(bg)
		require.NoError(t, err)
		require.True(t, ok, "a replayed delete reports the deletion it made")
		require.False(t, b.exists(t, l.Key()))

		// With the outcome never learned, the caller is told so.
		c2, err := rlock.New(lc, rlock.WithCleanupTimeout(200*time.Millisecond))
		require.NoError(t, err)
		defer c2.Close()
		lc.always.Store(true)
		require.ErrorIs(t, c2.CountDownLatch(l.Name()).CountDown(bg), rlock.ErrUnknownOutcome)
	})
}

func TestCountDownLatch_wrongTypeKeyIsAClearErrorAndUntouched(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		for _, setup := range [][]string{{"SET", "", "not a number"}, {"HSET", "", "f", "v"}} {
			l := c.CountDownLatch(redistest.Name(t))
			setup[1] = l.Key()
			_, err := b.do(t, setup...)
			require.NoError(t, err)
			_, err = l.TrySetCount(bg, 1)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup[0])
			require.ErrorIs(t, l.CountDown(bg), rlock.ErrWrongType, setup[0])
			_, err = l.Count(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup[0])
			require.ErrorIs(t, l.Await(bg), rlock.ErrWrongType, setup[0])
			_, err = l.Delete(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup[0])
			typ, err := b.do(t, "TYPE", l.Key())
			require.NoError(t, err)
			s, _ := typ.ToString()
			require.Equal(t, map[string]string{"SET": "string", "HSET": "hash"}[setup[0]], s, "left untouched")
		}
		// A latch and a lock of one name exclude each other.
		l := c.CountDownLatch(redistest.Name(t))
		require.True(t, mustSet(t, l, 2))
		require.ErrorIs(t, c.Mutex(l.Name()).Lock(bg), rlock.ErrWrongType)
		require.EqualValues(t, 2, latchCount(t, l))
	})
}

func TestCountDownLatch_badInputAndClosedClient(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	l := c.CountDownLatch("")
	_, err = l.TrySetCount(bg, 1)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, l.CountDown(bg), rlock.ErrInvalid)
	require.ErrorIs(t, l.Await(bg), rlock.ErrInvalid)
	_, err = l.Count(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = l.Delete(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = c.CountDownLatch("x").TryAwait(bg, -time.Second)
	require.ErrorIs(t, err, rlock.ErrInvalid)

	cancelled, cancel := context.WithCancel(bg)
	cancel()
	require.ErrorIs(t, c.CountDownLatch("x").CountDown(cancelled), context.Canceled)

	require.NoError(t, c.Close())
	ok := c.CountDownLatch("x")
	require.ErrorIs(t, ok.CountDown(bg), rlock.ErrClosed)
	require.ErrorIs(t, ok.Await(bg), rlock.ErrClosed)
	_, err = ok.TrySetCount(bg, 1)
	require.ErrorIs(t, err, rlock.ErrClosed)
}

// Many concurrent count-downs from several Clients count exactly.
func TestCountDownLatch_CountDown_concurrentExact(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		clients := []*rlock.Client{b.client(t), b.client(t), b.client(t)}
		const n = 60
		require.True(t, mustSet(t, clients[0].CountDownLatch(name), n+1))
		errs := make(chan error, n)
		for i := 0; i < n; i++ {
			go func(l *rlock.CountDownLatch) { errs <- l.CountDown(bg) }(clients[i%3].CountDownLatch(name))
		}
		for i := 0; i < n; i++ {
			require.NoError(t, await(t, errs, 10*time.Second, "count-down "+strconv.Itoa(i)))
		}
		require.EqualValues(t, 1, latchCount(t, clients[1].CountDownLatch(name)))
	})
}
