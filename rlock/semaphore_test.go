package rlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// semParked waits until a waiter that started on a fresh Client has made its three
// attempts before it parks: the first, one right after it subscribed, and one when Redis
// confirmed the subscription. Its next attempt is then one that a wake-up caused.
func semParked(t *testing.T, sc *scriptCount) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return sc.n.Load() >= 3 })
}

// semCountedClient returns a relock Client whose scripts are counted, so that a test can
// tell when a waiter has made another attempt.
func semCountedClient(t *testing.T, b *backend, opts ...rlock.Option) (*rlock.Client, *scriptCount) {
	t.Helper()
	sc := countScripts(b.rueidis(t))
	c, err := rlock.New(sc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, sc
}

func semAvailable(t *testing.T, s interface {
	AvailablePermits(context.Context) (int, error)
}) int {
	t.Helper()
	n, err := s.AvailablePermits(bg)
	require.NoError(t, err)
	return n
}

func TestSemaphore_basics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		s := b.client(t).Semaphore(redistest.Name(t))
		require.Equal(t, 0, semAvailable(t, s), "a semaphore that does not exist has no permits")

		ok, err := s.TrySetPermits(bg, 3)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TrySetPermits(bg, 5)
		require.NoError(t, err)
		require.False(t, ok, "TrySetPermits succeeds only once")
		require.Equal(t, 3, semAvailable(t, s))

		ok, err = s.TryAcquire(bg, 2, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 1, semAvailable(t, s))
		ok, err = s.TryAcquire(bg, 2, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, 1, semAvailable(t, s), "a refused acquire takes no partial count")

		require.NoError(t, s.Release(bg, 2))
		require.NoError(t, s.Release(bg, 2))
		require.Equal(t, 5, semAvailable(t, s), "Release may go beyond the count first set")

		n, err := s.DrainPermits(bg)
		require.NoError(t, err)
		require.Equal(t, 5, n)
		require.Equal(t, 0, semAvailable(t, s))
		n, err = s.DrainPermits(bg)
		require.NoError(t, err)
		require.Zero(t, n)

		require.NoError(t, s.AddPermits(bg, -5))
		require.Equal(t, -5, semAvailable(t, s), "AddPermits may drive the count below zero")
		ok, err = s.TryAcquire(bg, 1, 0)
		require.NoError(t, err)
		require.False(t, ok)
		n, err = s.DrainPermits(bg)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, -5, semAvailable(t, s), "draining leaves a negative count as it is")
		require.NoError(t, s.AddPermits(bg, 6))
		require.Equal(t, 1, semAvailable(t, s))

		ok, err = s.Delete(bg)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.Delete(bg)
		require.NoError(t, err)
		require.False(t, ok)
		require.False(t, b.exists(t, s.Key()))

		ok, err = s.ReleaseIfExists(bg, 1)
		require.NoError(t, err)
		require.False(t, ok, "ReleaseIfExists on a semaphore that does not exist")
		require.False(t, b.exists(t, s.Key()))
		require.NoError(t, s.Release(bg, 1), "Release without TrySetPermits makes permits")
		ok, err = s.ReleaseIfExists(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, semAvailable(t, s))
		ok, err = s.TrySetPermits(bg, 7)
		require.NoError(t, err)
		require.False(t, ok, "a semaphore made by Release exists")
	})
}

func TestSemaphore_TrySetPermitsTTL(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		s := b.client(t).Semaphore(redistest.Name(t))
		ok, err := s.TrySetPermitsTTL(bg, 2, 400*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TryAcquire(bg, 1, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.Release(bg, 1))
		msg, err := b.do(t, "PTTL", s.Key())
		require.NoError(t, err)
		ttl, _ := msg.AsInt64()
		require.Positive(t, ttl, "acquire and release keep the time to live")
		redistest.WaitFor(t, 5*time.Second, "the semaphore to vanish", func() bool { return !b.exists(t, s.Key()) })
		require.Equal(t, 0, semAvailable(t, s))
		ok, err = s.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
	})
}

// Acquire(2) on a semaphore without permits stays blocked after one release (it is woken, tries
// again and takes nothing), and gets in after the second (Redisson testAcquireAfterAddPermits).
func TestSemaphore_Acquire_waitsForAllPermits(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		releaser := b.client(t).Semaphore(name)
		wc, counter := semCountedClient(t, b)
		waiter := wc.Semaphore(name)
		got := make(chan error, 1)
		go func() { got <- waiter.Acquire(bg, 2) }()
		subscribed(t, b, waiter.Key()+":released", 1)
		semParked(t, counter)

		before := counter.n.Load()
		require.NoError(t, releaser.AddPermits(bg, 1))
		redistest.WaitFor(t, 5*time.Second, "the woken waiter to try again", func() bool { return counter.n.Load() > before })
		select {
		case err := <-got:
			t.Fatalf("Acquire(2) returned (%v) with one permit free", err)
		default:
		}
		require.Equal(t, 1, semAvailable(t, releaser), "the waiter holds no partial count")

		require.NoError(t, releaser.Release(bg, 1))
		require.NoError(t, await(t, got, 10*time.Second, "Acquire(2) after the second release"))
		require.Equal(t, 0, semAvailable(t, releaser))
	})
}

// Acquire(4) gets in only when the fourth single release arrives (Redisson
// testBlockingNAcquire).
func TestSemaphore_Acquire_manyAfterSeveralReleases(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		releaser := b.client(t).Semaphore(name)
		ok, err := releaser.TrySetPermits(bg, 0)
		require.NoError(t, err)
		require.True(t, ok)
		wc, counter := semCountedClient(t, b)
		waiter := wc.Semaphore(name)
		got := make(chan error, 1)
		go func() { got <- waiter.Acquire(bg, 4) }()
		subscribed(t, b, waiter.Key()+":released", 1)
		semParked(t, counter)
		for i := 1; i <= 3; i++ {
			before := counter.n.Load()
			require.NoError(t, releaser.Release(bg, 1))
			redistest.WaitFor(t, 5*time.Second, "the woken waiter to try again", func() bool { return counter.n.Load() > before })
			select {
			case err := <-got:
				t.Fatalf("Acquire(4) returned (%v) with %d permits free", err, i)
			default:
			}
			require.Equal(t, i, semAvailable(t, releaser))
		}
		require.NoError(t, releaser.Release(bg, 1))
		require.NoError(t, await(t, got, 10*time.Second, "Acquire(4) after the fourth release"))
		require.Equal(t, 0, semAvailable(t, releaser))
	})
}

func TestSemaphore_TryAcquire_waitBound(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackend(t, func(t *testing.T, b *backend) {
		s := b.client(t).Semaphore(redistest.Name(t))
		ok, err := s.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = s.TryAcquire(bg, 1, 0)
		require.NoError(t, err)
		require.True(t, ok)

		start := time.Now()
		ok, err = s.TryAcquire(bg, 1, 200*time.Millisecond)
		require.NoError(t, err)
		require.False(t, ok)
		require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "the wait bound is honoured")
		start = time.Now()
		ok, err = s.TryAcquire(bg, 1, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.Less(t, time.Since(start), 2*time.Second, "wait 0 makes one attempt")

		// A release during the wait lets the waiter in before the bound.
		got := make(chan error, 1)
		go func() {
			ok, err := s.TryAcquire(bg, 1, 10*time.Second)
			if err == nil && !ok {
				err = fmt.Errorf("not acquired")
			}
			got <- err
		}()
		subscribed(t, b, s.Key()+":released", 1)
		require.NoError(t, s.Release(bg, 1))
		require.NoError(t, await(t, got, 10*time.Second, "TryAcquire woken by a release"))

		// A ctx that ends first is an error, and takes nothing.
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		defer cancel()
		require.NoError(t, s.Release(bg, 1))
		err = s.Acquire(ctx, 2)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, 1, semAvailable(t, s))
	})
}

// A parked Acquire sends nothing while it waits and is woken by the release's message: its
// own timer would only fire after the watchdog timeout (30s).
func TestSemaphore_Acquire_wakesThroughPubSubNotPolling(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).Semaphore(name)
		ok, err := holder.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, holder.Acquire(bg, 1))
		waiter := b.client(t).Semaphore(name)
		got := make(chan time.Time, 1)
		go func() {
			if err := waiter.Acquire(bg, 1); err == nil {
				got <- time.Now()
			}
			close(got)
		}()
		subscribed(t, b, waiter.Key()+":released", 1)
		wokenByReleaseNotPolling(t, b, got, func() error { return holder.Release(bg, 1) })
		require.Equal(t, 0, semAvailable(t, holder))
	})
}

// The permits in use never exceed the count, under workers on four Clients taking one or two
// permits at a time, and none is lost or made on the way.
func TestSemaphore_permitsNeverExceeded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		const permits = 3
		name := redistest.Name(t)
		clients := []*rlock.Client{b.client(t), b.client(t), b.client(t), b.client(t)}
		ok, err := clients[0].Semaphore(name).TrySetPermits(bg, permits)
		require.NoError(t, err)
		require.True(t, ok)
		permitHammer(t, clients, permits, func(c *rlock.Client, w, i int) (int32, func() error, error) {
			s, k := c.Semaphore(name), 1+(w+i)%2
			if err := s.Acquire(bg, k); err != nil {
				return 0, nil, err
			}
			return int32(k), func() error { return s.Release(bg, k) }, nil
		})
		require.Equal(t, permits, semAvailable(t, clients[0].Semaphore(name)), "permits lost or made")
	})
}

// permitHammer runs 12 workers over clients, 15 cycles each: take(c, w, i) takes k permits
// and returns the release. It checks that the permits in use never exceed permits and that
// several holders got in at once.
func permitHammer(t *testing.T, clients []*rlock.Client, permits int32, take func(c *rlock.Client, w, i int) (k int32, release func() error, err error)) {
	t.Helper()
	const workers, perWorker = 12, 15
	var inUse, most, over atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c := clients[w%len(clients)]
			for i := 0; i < perWorker; i++ {
				k, release, err := take(c, w, i)
				if err != nil {
					errs <- err
					return
				}
				now := inUse.Add(k)
				if now > permits {
					over.Add(1)
				}
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				time.Sleep(200 * time.Microsecond)
				inUse.Add(-k)
				if err := release(); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, over.Load(), "more permits in use than the semaphore has")
	require.GreaterOrEqual(t, most.Load(), int32(2), "the semaphore let several holders in at once")
}

// Every request whose reply is lost is resolved by resending it, and the resend is not
// applied twice.
func TestSemaphore_replayedScriptsApplyOnce(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no time bound
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc)
		require.NoError(t, err)
		defer c.Close()
		s := c.Semaphore(redistest.Name(t))

		lc.drop.Store(1)
		ok, err := s.TrySetPermits(bg, 5)
		require.NoError(t, err)
		require.True(t, ok, "a set whose reply was lost reports that it set")
		require.Equal(t, 5, semAvailable(t, s))

		lc.drop.Store(1)
		require.NoError(t, s.Acquire(bg, 2))
		require.Equal(t, 3, semAvailable(t, s), "a resent acquire must not take twice")

		lc.drop.Store(3) // the reply and two resends' replies lost
		ok, err = s.TryAcquire(bg, 1, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, semAvailable(t, s))

		lc.drop.Store(1)
		require.NoError(t, s.Release(bg, 2))
		require.Equal(t, 4, semAvailable(t, s), "a resent release must not give back twice")

		lc.drop.Store(1)
		require.NoError(t, s.AddPermits(bg, -1))
		require.Equal(t, 3, semAvailable(t, s))

		lc.drop.Store(1)
		ok, err = s.ReleaseIfExists(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 4, semAvailable(t, s))

		lc.drop.Store(2)
		n, err := s.DrainPermits(bg)
		require.NoError(t, err)
		require.Equal(t, 4, n, "a resent drain answers what the first send took")
		require.Equal(t, 0, semAvailable(t, s))
		require.EqualValues(t, -1, lc.drop.Load(), "two replies dropped, then a resend answered")
	})
}

// An acquire granted by a resend after the caller gave up is given back.
func TestSemaphore_ambiguousAcquireOfCancelledCallerIsUndone(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc)
		require.NoError(t, err)
		defer c.Close()
		s := c.Semaphore(redistest.Name(t))
		ok, err := s.TrySetPermits(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		lc.onDrop = cancel // the caller gives up while its acquire is on the wire
		lc.drop.Store(1)
		ok, err = s.TryAcquire(ctx, 2, time.Second)
		require.False(t, ok)
		require.ErrorIs(t, err, context.Canceled)
		lc.onDrop = nil
		require.Equal(t, 2, semAvailable(t, s), "the permits were given back")
	})
}

func TestSemaphore_badInput(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()

	s := c.Semaphore("")
	_, err = s.TrySetPermits(bg, 1)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, s.Acquire(bg, 1), rlock.ErrInvalid)
	require.ErrorIs(t, s.Release(bg, 1), rlock.ErrInvalid)
	_, err = s.AvailablePermits(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = s.DrainPermits(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = s.Delete(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)

	s = c.Semaphore("x")
	for _, n := range []int{0, -1, 1 << 51} {
		require.ErrorIs(t, s.Acquire(bg, n), rlock.ErrInvalid, "Acquire(%d)", n)
		_, err = s.TryAcquire(bg, n, 0)
		require.ErrorIs(t, err, rlock.ErrInvalid, "TryAcquire(%d)", n)
		require.ErrorIs(t, s.Release(bg, n), rlock.ErrInvalid, "Release(%d)", n)
		_, err = s.ReleaseIfExists(bg, n)
		require.ErrorIs(t, err, rlock.ErrInvalid, "ReleaseIfExists(%d)", n)
	}
	_, err = s.TryAcquire(bg, 1, -time.Second)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, s.AddPermits(bg, 0), rlock.ErrInvalid)
	require.ErrorIs(t, s.AddPermits(bg, -(1<<51)), rlock.ErrInvalid)
	_, err = s.TrySetPermits(bg, -1)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = s.TrySetPermitsTTL(bg, 1, 0)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = s.TrySetPermitsTTL(bg, 1, -time.Second)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	var nilCtx context.Context
	require.ErrorIs(t, s.Acquire(nilCtx, 1), rlock.ErrInvalid)
	require.ErrorIs(t, s.Release(nilCtx, 1), rlock.ErrInvalid)

	// Nothing was written by any of them.
	ok, err := s.Delete(bg)
	require.NoError(t, err)
	require.False(t, ok)

	cancelled, cancel := context.WithCancel(bg)
	cancel()
	require.ErrorIs(t, s.Acquire(cancelled, 1), context.Canceled)
	require.NoError(t, s.Release(cancelled, 1), "Release works after the caller's ctx ended")
	require.Equal(t, 1, semAvailable(t, s))

	require.NoError(t, c.Close())
	require.ErrorIs(t, s.Acquire(bg, 1), rlock.ErrClosed)
	require.ErrorIs(t, s.Release(bg, 1), rlock.ErrClosed)
	_, err = s.AvailablePermits(bg)
	require.ErrorIs(t, err, rlock.ErrClosed)
}

// A key of another type at the semaphore's name is reported and left untouched.
func TestSemaphore_wrongType(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		for _, setup := range [][]string{{"HSET", "", "f", "v"}, {"SET", "", "not a number"}, {"SET", "", "1.5"}} {
			s := c.Semaphore(redistest.Name(t))
			setup[1] = s.Key()
			_, err := b.do(t, setup...)
			require.NoError(t, err)
			dump := func() string { return semDumpKey(t, b, s.Key()) }
			before := dump()
			_, err = s.TrySetPermits(bg, 1)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup)
			require.ErrorIs(t, s.Acquire(bg, 1), rlock.ErrWrongType, setup)
			_, err = s.TryAcquire(bg, 1, 0)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup)
			require.ErrorIs(t, s.Release(bg, 1), rlock.ErrWrongType, setup)
			require.ErrorIs(t, s.AddPermits(bg, -1), rlock.ErrWrongType, setup)
			_, err = s.DrainPermits(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup)
			_, err = s.AvailablePermits(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup)
			_, err = s.Delete(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, setup)
			require.Equal(t, before, dump(), "the key was changed")
			require.False(t, b.exists(t, s.Key()+":log"), "nothing was written beside it")
		}
	})
}

// semDumpKey describes a string or hash key and its value, to check that it was left untouched.
func semDumpKey(t *testing.T, b *backend, key string) string {
	t.Helper()
	msg, err := b.do(t, "TYPE", key)
	require.NoError(t, err)
	typ, _ := msg.ToString()
	switch typ {
	case "hash":
		msg, err = b.do(t, "HGETALL", key)
		require.NoError(t, err)
		m, err := msg.AsStrMap()
		require.NoError(t, err)
		return fmt.Sprint(typ, m)
	case "string":
		msg, err = b.do(t, "GET", key)
		require.NoError(t, err)
		v, err := msg.ToString()
		require.NoError(t, err)
		return typ + " " + v
	}
	return typ
}

// One release of several permits lets several waiters of one Client in at once: it wakes
// them all, not one per Client.
func TestSemaphore_Release_wakesEveryWaiter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		releaser := b.client(t).Semaphore(name)
		wc, counter := semCountedClient(t, b)
		got := make(chan error, 3)
		for i := 0; i < 3; i++ {
			go func() { got <- wc.Semaphore(name).Acquire(bg, 1) }()
		}
		subscribed(t, b, releaser.Key()+":released", 1)
		redistest.WaitFor(t, 5*time.Second, "every waiter to try", func() bool { return counter.n.Load() >= 3 })
		time.Sleep(100 * time.Millisecond) // let them park (a release before that is caught anyway)
		released := time.Now()
		require.NoError(t, releaser.Release(bg, 3))
		for i := 0; i < 3; i++ {
			require.NoError(t, await(t, got, 10*time.Second, "every waiter to get in"))
		}
		require.Less(t, time.Since(released), 2*time.Second, "a waiter slept until its own timer")
		require.Equal(t, 0, semAvailable(t, releaser))
	})
}

// semLocker is a one-permit Semaphore seen as a lock, for the shared hammer.
type semLocker struct{ s *rlock.Semaphore }

func (l semLocker) Lock(ctx context.Context) error   { return l.s.Acquire(ctx, 1) }
func (l semLocker) Unlock(ctx context.Context) error { return l.s.Release(ctx, 1) }

// A semaphore of one permit excludes: the shared hammer finds no overlap and no lost update.
func TestSemaphore_onePermitExcludes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		ok, err := b.client(t).Semaphore(name).TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		hammer(t, b, 12, 15, func(c *rlock.Client) locker { return semLocker{c.Semaphore(name)} })
	})
}
