package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// setPermits sets the permits of p (a Semaphore or a PermitSemaphore), which must be unset.
func setPermits(t *testing.T, p interface {
	TrySetPermits(context.Context, int) (bool, error)
}, n int) {
	t.Helper()
	ok, err := p.TrySetPermits(bg, n)
	require.NoError(t, err)
	require.True(t, ok, "the permits were set already")
}

// onePermitOn is a PermitSemaphore of one permit on a new Client over rc made with opts
// (closed when the test ends).
func onePermitOn(t *testing.T, rc rueidis.Client, opts ...rlock.Option) *rlock.PermitSemaphore {
	t.Helper()
	c, err := rlock.New(rc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	p := c.PermitSemaphore(redistest.Name(t))
	setPermits(t, p, 1)
	return p
}

// permitHeldElsewhere takes a permit of p, for a minute, through another Client of b, and
// returns that Client's handle on p and the permit.
func permitHeldElsewhere(t *testing.T, b *backend, p *rlock.PermitSemaphore) (*rlock.PermitSemaphore, rlock.Permit) {
	t.Helper()
	q := b.client(t).PermitSemaphore(p.Name())
	held, ok, err := q.TryAcquire(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "another Client takes a permit")
	return q, held
}

func semAcquired(t *testing.T, p *rlock.PermitSemaphore) int {
	t.Helper()
	n, err := p.AcquiredPermits(bg)
	require.NoError(t, err)
	return n
}

func TestPermitSemaphore_basics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		p := b.client(t).PermitSemaphore(redistest.Name(t))
		ok, err := p.TrySetPermits(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = p.TrySetPermits(bg, 5)
		require.NoError(t, err)
		require.False(t, ok, "TrySetPermits succeeds only once")
		n, err := p.Permits(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, 2, semAvailable(t, p))

		start := time.Now()
		a, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		require.NotEmpty(t, a.ID)
		require.WithinDuration(t, start.Add(time.Minute), a.Expires, time.Second)
		c, ok, err := p.TryAcquire(bg, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.NotEqual(t, a.ID, c.ID)
		none, ok, err := p.TryAcquire(bg, 0, time.Minute)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, rlock.Permit{}, none)
		require.Equal(t, 0, semAvailable(t, p))
		require.Equal(t, 2, semAcquired(t, p))

		ttl, err := p.TTL(bg, a.ID)
		require.NoError(t, err)
		require.Greater(t, ttl, 50*time.Second)
		require.LessOrEqual(t, ttl, time.Minute)

		require.NoError(t, p.Release(bg, a.ID))
		require.ErrorIs(t, p.Release(bg, a.ID), rlock.ErrNotHeld, "a second release")
		require.ErrorIs(t, p.Release(bg, "no-such-permit"), rlock.ErrNotHeld)
		require.ErrorIs(t, p.Extend(bg, "no-such-permit", time.Second), rlock.ErrNotHeld)
		_, err = p.TTL(bg, a.ID)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.Equal(t, 1, semAvailable(t, p))

		require.NoError(t, p.AddPermits(bg, 3))
		n, err = p.Permits(bg)
		require.NoError(t, err)
		require.Equal(t, 5, n)
		require.NoError(t, p.AddPermits(bg, -5))
		require.Equal(t, -1, semAvailable(t, p), "fewer permits than are held")
		_, ok, err = p.TryAcquire(bg, 0, time.Minute)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, p.Release(bg, c.ID), "a permit held when the number fell is still released")
		require.Equal(t, 0, semAvailable(t, p))

		ok, err = p.Delete(bg)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = p.Delete(bg)
		require.NoError(t, err)
		require.False(t, ok)
		require.False(t, b.exists(t, p.Key()))
		require.ErrorIs(t, p.Release(bg, "x"), rlock.ErrNotHeld, "release on a semaphore that does not exist")
		require.Equal(t, 0, semAvailable(t, p))
	})
}

// A permit whose holder never releases it comes back when its lease ends: a blocked Acquire
// gets in then, with no message, and the holder's late Release reports ErrNotHeld (Redisson
// testExpire).
func TestPermitSemaphore_expiredPermitComesBack(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		p := onePermitOn(t, b.rueidis(t))
		// Long enough for the waiter to be seen subscribed before the lease ends: at 400ms,
		// on a loaded machine (-parallel 10), its first attempt came after the lease's end and
		// took the permit at once, never subscribing, and subscribed waited out its 5 s.
		const lease = time.Second
		start := time.Now()
		held, err := p.Acquire(bg, lease)
		require.NoError(t, err)

		waiter := b.client(t).PermitSemaphore(p.Name())
		got := make(chan error, 1)
		var mine rlock.Permit
		go func() {
			var err error
			mine, err = waiter.Acquire(bg, time.Minute)
			got <- err
		}()
		subscribed(t, b, p.Key()+":released", 1)
		if b.srv != nil {
			b.srv.ResetStats(t)
		}
		require.NoError(t, await(t, got, 10*time.Second, "the waiter to get the expired permit"))
		elapsed := time.Since(start)
		require.GreaterOrEqual(t, elapsed, lease-lease/10, "granted before the holder's lease ended")
		require.Less(t, elapsed, lease+3*time.Second, "the waiter slept past the lease end")
		if b.srv != nil {
			require.Zero(t, b.srv.CommandStats(t)["publish"], "nobody published: the waiter timed the lease end")
		}

		err = p.Release(bg, held.ID)
		require.ErrorIs(t, err, rlock.ErrNotHeld, "the late release of an expired permit reports it")
		require.Equal(t, 1, semAcquired(t, p), "the late release did not touch the new holder's permit")
		require.Equal(t, 0, semAvailable(t, p))
		require.NoError(t, waiter.Release(bg, mine.ID))
		require.Equal(t, 1, semAvailable(t, p))
		require.Equal(t, 0, semAcquired(t, p))

		// Expired but not yet purged (nobody acquired since, and a longer lease keeps the
		// leases key): still not releasable.
		require.NoError(t, p.AddPermits(bg, 1))
		long, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		short, err := p.Acquire(bg, 50*time.Millisecond)
		require.NoError(t, err)
		redistest.WaitFor(t, 5*time.Second, "the lease to end", func() bool {
			_, err := p.TTL(bg, short.ID)
			return err != nil
		})
		require.ErrorIs(t, p.Release(bg, short.ID), rlock.ErrNotHeld)
		require.ErrorIs(t, p.Extend(bg, short.ID, time.Second), rlock.ErrNotHeld)
		require.Equal(t, 1, semAvailable(t, p))
		require.NoError(t, p.Release(bg, long.ID))
		require.Equal(t, 2, semAvailable(t, p))
	})
}

func TestPermitSemaphore_Extend(t *testing.T) {
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		p := onePermitOn(t, b.rueidis(t))
		a, err := p.Acquire(bg, 300*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, p.Extend(bg, a.ID, 5*time.Second))
		time.Sleep(500 * time.Millisecond) // past the first lease
		ttl, err := p.TTL(bg, a.ID)
		require.NoError(t, err, "the extended permit outlived its first lease")
		require.Greater(t, ttl, 3*time.Second)
		_, ok, err := p.TryAcquire(bg, 0, time.Second)
		require.NoError(t, err)
		require.False(t, ok)

		// Shortening the lease wakes a waiter timing the old end.
		waiter := b.client(t).PermitSemaphore(p.Name())
		got := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(bg, time.Minute)
			got <- err
		}()
		subscribed(t, b, p.Key()+":released", 1)
		shortened := time.Now()
		require.NoError(t, p.Extend(bg, a.ID, 50*time.Millisecond))
		require.NoError(t, await(t, got, 10*time.Second, "the waiter after the shortened lease"))
		require.Less(t, time.Since(shortened), 2500*time.Millisecond, "the waiter slept until the old lease end")

		require.ErrorIs(t, p.Extend(bg, a.ID, time.Minute), rlock.ErrNotHeld, "an expired permit cannot be extended")
		require.ErrorIs(t, p.Release(bg, a.ID), rlock.ErrNotHeld)
	})
}

// A parked Acquire sends nothing while the holder's long lease runs, and is woken by the
// release's message.
func TestPermitSemaphore_Acquire_wakesThroughPubSubNotPolling(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		p := onePermitOn(t, b.rueidis(t))
		held, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		waiter := b.client(t).PermitSemaphore(p.Name())
		got := make(chan time.Time, 1)
		go func() {
			if _, err := waiter.Acquire(bg, time.Minute); err == nil {
				got <- time.Now()
			}
			close(got)
		}()
		subscribed(t, b, p.Key()+":released", 1)
		wokenByReleaseNotPolling(t, b, got, func() error { return p.Release(bg, held.ID) })
	})
}

// Holders never outnumber the permits, under workers on four Clients, and every permit is
// back at the end.
func TestPermitSemaphore_permitsNeverExceeded(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		const permits = 3
		name := redistest.Name(t)
		clients := []*rlock.Client{b.client(t), b.client(t), b.client(t), b.client(t)}
		setPermits(t, clients[0].PermitSemaphore(name), permits)
		permitHammer(t, clients, permits, func(c *rlock.Client, _, _ int) (int32, func() error, error) {
			p := c.PermitSemaphore(name)
			permit, err := p.Acquire(bg, 10*time.Second)
			if err != nil {
				return 0, nil, err
			}
			return 1, func() error { return p.Release(bg, permit.ID) }, nil
		})
		p := clients[0].PermitSemaphore(name)
		require.Equal(t, permits, semAvailable(t, p), "permits lost or made")
		require.Equal(t, 0, semAcquired(t, p))
	})
}

func TestPermitSemaphore_replayedScriptsApplyOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc)
		require.NoError(t, err)
		defer c.Close()
		p := c.PermitSemaphore(redistest.Name(t))

		lc.drop.Store(1)
		ok, err := p.TrySetPermits(bg, 3)
		require.NoError(t, err)
		require.True(t, ok, "a set whose reply was lost reports that it set")

		lc.drop.Store(1)
		a, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		require.Equal(t, 1, semAcquired(t, p), "a resent acquire must not grant twice")

		lc.drop.Store(3)
		c2, ok, err := p.TryAcquire(bg, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 2, semAcquired(t, p))

		lc.drop.Store(1)
		require.NoError(t, p.Release(bg, a.ID), "a release whose reply was lost is a success")
		require.Equal(t, 1, semAcquired(t, p))

		lc.drop.Store(1)
		require.NoError(t, p.AddPermits(bg, 1))
		n, err := p.Permits(bg)
		require.NoError(t, err)
		require.Equal(t, 4, n, "a resent AddPermits must not add twice")

		lc.drop.Store(1)
		require.NoError(t, p.Extend(bg, c2.ID, 2*time.Minute))
		ttl, err := p.TTL(bg, c2.ID)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Minute)
		require.NoError(t, p.Release(bg, c2.ID))
		require.Equal(t, 0, semAcquired(t, p))
	})
}

func TestPermitSemaphore_ambiguousAcquireOfCancelledCallerIsUndone(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		p := onePermitOn(t, lc)
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		lc.onDrop = cancel
		lc.drop.Store(1)
		_, ok, err := p.TryAcquire(ctx, time.Second, time.Minute)
		require.False(t, ok)
		require.ErrorIs(t, err, context.Canceled)
		lc.onDrop = nil
		require.Equal(t, 0, semAcquired(t, p), "the permit was given back")
	})
}

func TestPermitSemaphore_badInput(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()

	p := c.PermitSemaphore("")
	_, err = p.TrySetPermits(bg, 1)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = p.Acquire(bg, time.Second)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, p.Release(bg, "id"), rlock.ErrInvalid)
	_, err = p.AvailablePermits(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)

	p = c.PermitSemaphore("x")
	for _, lease := range []time.Duration{0, -time.Second, 500 * time.Microsecond} {
		_, err = p.Acquire(bg, lease)
		require.ErrorIs(t, err, rlock.ErrInvalid, "lease %v", lease)
		_, _, err = p.TryAcquire(bg, 0, lease)
		require.ErrorIs(t, err, rlock.ErrInvalid, "lease %v", lease)
		require.ErrorIs(t, p.Extend(bg, "id", lease), rlock.ErrInvalid, "lease %v", lease)
	}
	_, _, err = p.TryAcquire(bg, -time.Second, time.Second)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, p.Release(bg, ""), rlock.ErrInvalid)
	require.ErrorIs(t, p.Extend(bg, "", time.Second), rlock.ErrInvalid)
	_, err = p.TTL(bg, "")
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = p.TrySetPermits(bg, -1)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, p.AddPermits(bg, 0), rlock.ErrInvalid)
	var nilCtx context.Context
	_, err = p.Acquire(nilCtx, time.Second)
	require.ErrorIs(t, err, rlock.ErrInvalid)

	ok, err := p.Delete(bg)
	require.NoError(t, err)
	require.False(t, ok, "nothing was written")

	require.NoError(t, c.Close())
	_, err = p.Acquire(bg, time.Second)
	require.ErrorIs(t, err, rlock.ErrClosed)
	require.ErrorIs(t, p.Release(bg, "id"), rlock.ErrClosed)
}

// A key of another type at the semaphore's name (a string, or a lock's hash) is reported and
// left untouched.
func TestPermitSemaphore_wrongType(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		// A lock of the same name: a hash that is not a permit semaphore.
		lockName := redistest.Name(t)
		require.NoError(t, c.Mutex(lockName).Lock(bg))
		str := c.PermitSemaphore(redistest.Name(t))
		_, err := b.do(t, "SET", str.Key(), "3")
		require.NoError(t, err)
		for _, p := range []*rlock.PermitSemaphore{c.PermitSemaphore(lockName), str} {
			before := semDumpKey(t, b, p.Key())
			_, err := p.TrySetPermits(bg, 1)
			require.ErrorIs(t, err, rlock.ErrWrongType)
			require.ErrorIs(t, p.AddPermits(bg, 1), rlock.ErrWrongType)
			_, err = p.Acquire(bg, time.Second)
			require.ErrorIs(t, err, rlock.ErrWrongType)
			require.ErrorIs(t, p.Release(bg, "id"), rlock.ErrWrongType)
			require.ErrorIs(t, p.Extend(bg, "id", time.Second), rlock.ErrWrongType)
			_, err = p.AvailablePermits(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType)
			_, err = p.Delete(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType)
			require.Equal(t, before, semDumpKey(t, b, p.Key()), "the key was changed")
			require.False(t, b.exists(t, p.Key()+":leases"), "nothing was written beside it")
		}

		// A leases key of another type fails before anything is written.
		p := c.PermitSemaphore(redistest.Name(t))
		_, err = b.do(t, "SET", p.Key()+":leases", "x")
		require.NoError(t, err)
		setPermits(t, p, 1)
		_, err = p.Acquire(bg, time.Second)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		require.Equal(t, "string x", semDumpKey(t, b, p.Key()+":leases"))
	})
}

// AddPermits wakes every waiter of a Client, not one.
func TestPermitSemaphore_AddPermits_wakesEveryWaiter(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		p := b.client(t).PermitSemaphore(name)
		wc, counter := semCountedClient(t, b)
		got := make(chan error, 3)
		for i := 0; i < 3; i++ {
			go func() {
				_, err := wc.PermitSemaphore(name).Acquire(bg, time.Minute)
				got <- err
			}()
		}
		subscribed(t, b, p.Key()+":released", 1)
		redistest.WaitFor(t, 5*time.Second, "every waiter to try", func() bool { return counter.n.Load() >= 3 })
		time.Sleep(100 * time.Millisecond) // let them park (a release before that is caught anyway)
		added := time.Now()
		require.NoError(t, p.AddPermits(bg, 3))
		for i := 0; i < 3; i++ {
			require.NoError(t, await(t, got, 10*time.Second, "every waiter to get in"))
		}
		require.Less(t, time.Since(added), 2*time.Second, "a waiter slept until its own timer")
		require.Equal(t, 3, semAcquired(t, p))
	})
}

// permitLocker is a one-permit PermitSemaphore seen as a lock, for the shared hammer (one per
// worker: it remembers the permit it holds).
type permitLocker struct {
	p  *rlock.PermitSemaphore
	id string
}

func (l *permitLocker) Lock(ctx context.Context) error {
	permit, err := l.p.Acquire(ctx, 10*time.Second)
	l.id = permit.ID
	return err
}

func (l *permitLocker) Unlock(ctx context.Context) error { return l.p.Release(ctx, l.id) }

func TestPermitSemaphore_onePermitExcludes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		setPermits(t, b.client(t).PermitSemaphore(name), 1)
		hammer(t, b, 12, 15, func(c *rlock.Client) locker { return &permitLocker{p: c.PermitSemaphore(name)} })
	})
}

// On Redis Cluster every script of both semaphores runs (its keys share one slot, whatever
// the name's shape), and a waiter is woken by a release.
func TestSemaphores_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("long: Redis Cluster topology (run without -short)")
	}
	b, rc := clusterBackend(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	for _, name := range []string{"}x", "{user}:pool", "a{b", redistest.Name(t)} {
		s := c.Semaphore(name)
		ok, err := s.TrySetPermits(bg, 1)
		require.NoError(t, err, name)
		require.True(t, ok, name)
		require.NoError(t, s.Acquire(bg, 1), name)
		got := make(chan error, 1)
		go func() { got <- c2.Semaphore(name).Acquire(bg, 1) }()
		subscribed(t, b, s.Key()+":released", 1)
		require.NoError(t, s.Release(bg, 1), name)
		require.NoError(t, await(t, got, 10*time.Second, "semaphore waiter not woken on Cluster"), name)
		require.NoError(t, s.AddPermits(bg, 2), name)
		n, err := s.DrainPermits(bg)
		require.NoError(t, err, name)
		require.Equal(t, 2, n, name)
		_, err = s.Delete(bg)
		require.NoError(t, err, name)

		p := c.PermitSemaphore(name)
		ok, err = p.TrySetPermits(bg, 1)
		require.NoError(t, err, name)
		require.True(t, ok, name)
		held, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err, name)
		require.NoError(t, p.Extend(bg, held.ID, 2*time.Minute), name)
		pgot := make(chan error, 1)
		go func() {
			permit, err := c2.PermitSemaphore(name).Acquire(bg, time.Minute)
			if err == nil {
				err = p.Release(bg, permit.ID)
			}
			pgot <- err
		}()
		subscribed(t, b, p.Key()+":released", 1)
		require.NoError(t, p.Release(bg, held.ID), name)
		require.NoError(t, await(t, pgot, 10*time.Second, "permit waiter not woken on Cluster"), name)
		require.NoError(t, p.AddPermits(bg, 1), name)
		require.Equal(t, 2, semAvailable(t, p), name)
		_, err = p.Delete(bg)
		require.NoError(t, err, name)
	}
}
