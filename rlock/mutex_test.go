package rlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/rlock"
)

func TestMutex_Lock_reentrant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Zero(t, n)

		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Lock(bg))
		ok, err := m.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.True(t, ok)
		n, err = m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		other := c.Mutex(m.Name())
		ok, err = other.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok, "another handle is another owner")

		for want := 2; want >= 0; want-- {
			require.NoError(t, m.Unlock(bg))
			n, err = m.HoldCount(bg)
			require.NoError(t, err)
			require.Equal(t, want, n)
			locked, err := m.IsLocked(bg)
			require.NoError(t, err)
			require.Equal(t, want > 0, locked)
		}
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)
		ok, err = other.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, other.Unlock(bg))
	})
}

func TestMutex_Lock_contextOwnerReentersAcrossHandles(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		ctx := c.WithNewOwner(bg)
		outer, inner := c.Mutex(name), c.Mutex(name)
		require.NoError(t, outer.Lock(ctx))
		// A nested call makes its own handle: with the context's owner it re-enters.
		ok, err := inner.TryLock(ctx, 0, 0)
		require.NoError(t, err)
		require.True(t, ok)
		n, err := inner.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		// Without the owner, the handle is an owner of its own and is refused.
		ok, err = inner.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.ErrorIs(t, inner.Unlock(bg), rlock.ErrNotHeld)

		require.NoError(t, inner.Unlock(ctx))
		require.NoError(t, outer.Unlock(ctx))
		locked, err := outer.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)

		// An explicit id is shared across Clients (and processes): one can unlock what
		// another locked.
		c2 := b.client(t)
		octx := rlock.WithOwner(bg, "job-"+name)
		require.NoError(t, c.Mutex(name).Lock(octx))
		require.NoError(t, c2.Mutex(name).Unlock(octx))
		locked, err = outer.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
	})
}

func TestMutex_Unlock_onlyOwner(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld, "unlock without lock")
		require.NoError(t, m.Lock(bg))
		require.ErrorIs(t, c.Mutex(name).Unlock(bg), rlock.ErrNotHeld, "unlock by another handle")
		require.ErrorIs(t, b.client(t).Mutex(name).Unlock(bg), rlock.ErrNotHeld, "unlock by another client")
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked)
		require.NoError(t, m.Unlock(bg))
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld, "unlock twice")
	})
}

func TestMutex_Unlock_cancelledContextStillReleases(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, m.Lock(bg))
		ctx, cancel := context.WithCancel(bg)
		cancel()
		require.NoError(t, m.Unlock(ctx))
		require.False(t, b.exists(t, m.Key()))
	})
}

func TestMutex_ForceUnlock_freesAndWakes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		holder := c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		got := make(chan error, 1)
		go func() { got <- b.client(t).Mutex(name).Lock(bg) }()
		time.Sleep(50 * time.Millisecond) // let the waiter park (it waits 30 s on the holder's TTL otherwise)

		freed, err := c.Mutex(name).ForceUnlock(bg)
		require.NoError(t, err)
		require.True(t, freed)
		require.NoError(t, await(t, got, 5*time.Second, "waiter not woken by ForceUnlock"))
		// The former holder learns of the loss at its next renewal at the latest.
		freed, err = c.Mutex(redistest.Name(t)).ForceUnlock(bg)
		require.NoError(t, err)
		require.False(t, freed)
	})
}

func TestMutex_TryLock_fixedLeaseExpiresWithoutPublish(t *testing.T) {
	t.Parallel() // it waits out a lease (bounds of a second and more); its own servers and names
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).Mutex(name)
		ok, err := holder.TryLock(bg, 0, 300*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		ttl, err := holder.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		require.LessOrEqual(t, ttl, 300*time.Millisecond)

		done := holder.Done(bg)
		hctx, cancel := holder.HoldContext(bg)
		defer cancel()

		waiter := b.client(t).Mutex(name)
		start := time.Now()
		require.NoError(t, waiter.Lock(bg)) // woken by the TTL timer: expiry publishes nothing
		took := time.Since(start)
		require.Less(t, took, 5*time.Second)

		within(t, time.Second, "the end of the holder's lease", done)
		require.ErrorIs(t, context.Cause(hctx), rlock.ErrLeaseExpired)
		require.ErrorIs(t, holder.Err(bg), rlock.ErrNotHeld)
		require.ErrorIs(t, holder.Unlock(bg), rlock.ErrNotHeld)
		require.NoError(t, waiter.Unlock(bg))
	})
}

func TestMutex_Lock_watchdogKeepsLockPastTimeout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: holds a lock across several watchdog leases (run without -short)")
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		// A 2 s lease renewed every third of it: a renewal has 1.3 s to land, which a
		// loaded 2-core machine under -race has been seen to need more than 667 ms of.
		c := b.client(t, rlock.WithWatchdogTimeout(2*time.Second))
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		other := b.client(t).Mutex(name)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			ok, err := other.TryLock(bg, 0, 0)
			require.NoError(t, err)
			require.False(t, ok, "the watchdog must keep the lock")
			require.NoError(t, m.Err(bg))
			time.Sleep(200 * time.Millisecond)
		}
		ttl, err := m.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, 200*time.Millisecond)
		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()))
		// No renewal after Unlock: a lock re-created under the same key by someone else is
		// not extended by us.
		ok, err := other.TryLock(bg, 0, 500*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		time.Sleep(1200 * time.Millisecond)
		require.False(t, b.exists(t, m.Key()), "a fixed lease of another owner ran out: nothing renewed it")
	})
}

func TestMutex_Lock_crashedHolderFreesWithinWatchdogTimeout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a 1 s watchdog lease (run without -short)")
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c, err := rlock.New(b.rueidis(t), rlock.WithWatchdogTimeout(time.Second))
		require.NoError(t, err)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		done := m.Done(bg)
		require.NoError(t, c.Close()) // crash: no Unlock
		within(t, time.Second, "Done after Close", done)
		require.ErrorIs(t, m.Lock(bg), rlock.ErrClosed)

		start := time.Now()
		require.NoError(t, b.client(t).Mutex(name).Lock(bg))
		require.Less(t, time.Since(start), 3*time.Second)
	})
}

func TestMutex_TryLock_waitBound(t *testing.T) {
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		require.NoError(t, b.client(t).Mutex(name).Lock(bg))
		m := b.client(t).Mutex(name)
		const wait = 500 * time.Millisecond
		start := time.Now()
		ok, err := m.TryLock(bg, wait, 0)
		took := time.Since(start)
		require.NoError(t, err)
		require.False(t, ok)
		require.GreaterOrEqual(t, took, wait, "returned early")
		require.Less(t, took, wait+time.Second, "returned far late")
	})
}

func TestMutex_Lock_cancelledWaiterLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).Mutex(name)
		require.NoError(t, holder.Lock(bg))
		c := b.client(t)
		m := c.Mutex(name)
		ctx, cancel := context.WithCancel(bg)
		got := make(chan error, 1)
		go func() { got <- m.Lock(ctx) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		require.ErrorIs(t, await(t, got, time.Second, "a cancelled waiter must return at once"), context.Canceled)
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Zero(t, n)
		msg, err := b.do(t, "HLEN", holder.Key())
		require.NoError(t, err)
		fields, _ := msg.AsInt64()
		require.EqualValues(t, 4, fields, "only the holder's count, request and token fields, and the waiter's mark")

		// Already cancelled: nothing is sent.
		require.ErrorIs(t, m.Lock(ctx), context.Canceled)
		_, err = m.TryLock(ctx, time.Second, 0)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestMutex_Token_risesPerFreshGrant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		c1, c2 := b.client(t), b.client(t)
		var last int64
		for i := 0; i < 5; i++ {
			m := c1.Mutex(name)
			if i%2 == 1 {
				m = c2.Mutex(name)
			}
			require.NoError(t, m.Lock(bg))
			tok, err := m.Token(bg)
			require.NoError(t, err)
			require.Greater(t, tok, last)
			require.NoError(t, m.Lock(bg))
			again, err := m.Token(bg)
			require.NoError(t, err)
			require.Equal(t, tok, again, "re-entry keeps the token")
			last = tok
			require.NoError(t, m.Unlock(bg))
			require.NoError(t, m.Unlock(bg))
			_, err = m.Token(bg)
			require.ErrorIs(t, err, rlock.ErrNotHeld)
		}
	})
}

func TestMutex_HoldContext_cancelledOnLoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t, rlock.WithWatchdogTimeout(300*time.Millisecond))
		m := c.Mutex(redistest.Name(t))
		hctx, cancel := m.HoldContext(bg)
		defer cancel()
		require.ErrorIs(t, context.Cause(hctx), rlock.ErrNotHeld)

		require.NoError(t, m.Lock(bg))
		hctx, cancel2 := m.HoldContext(bg)
		defer cancel2()
		require.NoError(t, hctx.Err())
		// Someone deletes the lock behind the holder's back.
		_, err := b.do(t, "DEL", m.Key())
		require.NoError(t, err)
		within(t, 2*time.Second, "loss notice", hctx.Done())
		require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
		require.ErrorIs(t, m.Err(bg), rlock.ErrLockLost)
		// Never silently re-taken: the owner must unlock first.
		require.ErrorIs(t, m.Lock(bg), rlock.ErrLockLost)
		err = m.Unlock(bg)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.ErrorIs(t, err, rlock.ErrLockLost)
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Unlock(bg))
	})
}

func TestMutex_badInput(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		_, err := rlock.New(nil)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		rc := b.rueidis(t)
		for _, opt := range []rlock.Option{
			rlock.WithWatchdogTimeout(0), rlock.WithWatchdogTimeout(-time.Second),
			rlock.WithRenewFraction(0), rlock.WithRenewFraction(1),
			rlock.WithKeyPrefix("a{b"), rlock.WithCleanupTimeout(0), rlock.WithSubscriptionLinger(-1),
		} {
			_, err := rlock.New(rc, opt)
			require.ErrorIs(t, err, rlock.ErrInvalid)
		}
		c := b.client(t)
		empty := c.Mutex("")
		require.ErrorIs(t, empty.Lock(bg), rlock.ErrInvalid)
		_, err = empty.TryLock(bg, 0, 0)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.ErrorIs(t, empty.Unlock(bg), rlock.ErrInvalid)
		_, err = empty.IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrInvalid)

		m := c.Mutex(redistest.Name(t))
		_, err = m.TryLock(bg, -time.Second, 0)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		_, err = m.TryLock(bg, 0, time.Microsecond)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.ErrorIs(t, m.Lock(rlock.WithOwner(bg, "")), rlock.ErrInvalid)
		require.False(t, b.exists(t, m.Key()))
	})
}

func TestMutex_wrongTypeKeyIsAClearErrorAndUntouched(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		_, err := b.do(t, "SET", m.Key(), "user data")
		require.NoError(t, err)

		require.ErrorIs(t, m.Lock(bg), rlock.ErrWrongType)
		_, err = m.TryLock(bg, time.Second, 0)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrWrongType)
		_, err = m.ForceUnlock(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		_, err = m.IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		_, err = m.HoldCount(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		_, err = m.TTL(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)

		msg, err := b.do(t, "GET", m.Key())
		require.NoError(t, err)
		v, _ := msg.ToString()
		require.Equal(t, "user data", v)

		// The fencing counter of another type fails the acquire before the lock is written.
		m2 := c.Mutex(redistest.Name(t))
		_, err = b.do(t, "SET", m2.Key()+":fence", "x")
		require.NoError(t, err)
		require.ErrorIs(t, m2.Lock(bg), rlock.ErrWrongType)
		require.False(t, b.exists(t, m2.Key()))
	})
}

func TestMutex_closedClient(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, err := rlock.New(b.rueidis(t))
		require.NoError(t, err)
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, c.Close())
		require.NoError(t, c.Close())
		require.ErrorIs(t, m.Lock(bg), rlock.ErrClosed)
		_, err = m.TryLock(bg, 0, 0)
		require.True(t, errors.Is(err, rlock.ErrClosed))
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrClosed)
	})
}

func TestMutex_Lock_reentryAfterUnnoticedLossIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t) // 30 s watchdog: no renewal will notice the loss during the test
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, m.Lock(bg))
		tok, err := m.Token(bg)
		require.NoError(t, err)
		_, err = b.do(t, "DEL", m.Key()) // behind the holder's back
		require.NoError(t, err)

		err = m.Lock(bg) // meant as a re-entry: Redis would grant afresh
		require.ErrorIs(t, err, rlock.ErrLockLost)
		require.False(t, b.exists(t, m.Key()), "the fresh grant is given back")
		within(t, time.Second, "the loss notice", m.Done(bg))
		require.ErrorIs(t, m.Err(bg), rlock.ErrLockLost)
		require.ErrorIs(t, m.Lock(bg), rlock.ErrLockLost)

		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)
		require.NoError(t, m.Lock(bg))
		tok2, err := m.Token(bg)
		require.NoError(t, err)
		require.Greater(t, tok2, tok)
		require.NoError(t, m.Unlock(bg))
	})
}

func TestMutex_Lock_redisDownFailsFastAndClose(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a stopped redis-server (5 s) (run without -short)")
	}
	b := realBackend(t)
	c := b.client(t)
	name := redistest.Name(t)
	holder := b.client(t).Mutex(name)
	require.NoError(t, holder.Lock(bg))

	// A waiter blocked in Lock returns ErrClosed when its Client closes.
	got := make(chan error, 1)
	go func() { got <- c.Mutex(name).Lock(bg) }()
	parked(t, b, holder, 1)
	require.NoError(t, c.Close())
	require.ErrorIs(t, await(t, got, 5*time.Second, "a waiter must return when its Client closes"), rlock.ErrClosed)

	// With Redis down, Lock keeps trying until its context ends, then reports the failure
	// (here the first send died with its connection: its outcome is unknown).
	m := b.client(t).Mutex(name)
	b.srv.Kill(t)
	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	start := time.Now()
	err := m.Lock(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(start), 3*time.Second, "Lock must not outlive its context by the cleanup timeout")
	ok, err := m.TryLock(bg, 0, 0) // one attempt: a refused dial is reported at once
	require.False(t, ok)
	require.Error(t, err)
}

// TestMutex_ownerIDsNeverNameAnotherField: context owner ids are user text. Owner "a:r" must
// not be taken for owner "a"'s request record (or any other field of the lock's hash): each
// is its own owner, with exact hold counts.
func TestMutex_ownerIDsNeverNameAnotherField(t *testing.T) {
	for _, kind := range []struct {
		name  string
		mutex func(c *rlock.Client, name string) *rlock.Mutex
	}{
		{"mutex", (*rlock.Client).Mutex},
		{"fair", func(c *rlock.Client, n string) *rlock.Mutex { return c.FairMutex(n).Mutex }},
	} {
		t.Run(kind.name, func(t *testing.T) { testOwnerIDsNeverNameAnotherField(t, kind.mutex) })
	}
}

func testOwnerIDsNeverNameAnotherField(t *testing.T, mutex func(c *rlock.Client, name string) *rlock.Mutex) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := mutex(c, redistest.Name(t))
		a, ar := rlock.WithOwner(bg, "a"), rlock.WithOwner(bg, "a:r")
		holds := func(ctx context.Context, want int) {
			t.Helper()
			n, err := m.HoldCount(ctx)
			require.NoError(t, err)
			require.Equal(t, want, n)
		}
		try := func(ctx context.Context, want bool) {
			t.Helper()
			ok, err := m.TryLock(ctx, 0, 0)
			require.NoError(t, err)
			require.Equal(t, want, ok)
		}

		require.NoError(t, m.Lock(a))
		try(ar, false) // contention, not a re-entry nor an error
		holds(a, 1)
		holds(ar, 0)
		try(a, true)
		try(ar, false)
		holds(a, 2)
		holds(ar, 0)
		require.NoError(t, m.Unlock(a))
		holds(a, 1)
		require.ErrorIs(t, m.Unlock(ar), rlock.ErrNotHeld)
		require.NoError(t, m.Unlock(a))
		holds(a, 0)

		// The other way round.
		require.NoError(t, m.Lock(ar))
		try(a, false)
		try(ar, true)
		holds(ar, 2)
		holds(a, 0)
		require.NoError(t, m.Unlock(ar))
		require.NoError(t, m.Unlock(ar))
		require.False(t, b.exists(t, m.Key()))
	})
}

// TestMutex_Token_fenceExpiresYetTokensRise: the fencing counter is not kept forever (one key
// per name ever locked would leak): every fresh grant, by an acquire or by a direct hand-off,
// sets it to live lua.FenceTTL. Tokens keep rising when it is gone, since they follow the
// server's clock.
func TestMutex_Token_fenceExpiresYetTokensRise(t *testing.T) {
	type fenced interface {
		Lock(ctx context.Context) error
		Unlock(ctx context.Context) error
		Token(ctx context.Context) (int64, error)
		Key() string
	}
	for _, kind := range []struct {
		name string
		lock func(c *rlock.Client, name string) fenced
	}{
		{"mutex", func(c *rlock.Client, n string) fenced { return c.Mutex(n) }},
		{"fair", func(c *rlock.Client, n string) fenced { return c.FairMutex(n) }},
		{"spin", func(c *rlock.Client, n string) fenced { return c.SpinMutex(n) }},
		{"rw", func(c *rlock.Client, n string) fenced { return c.RWMutex(n) }},
	} {
		t.Run(kind.name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				c := b.client(t)
				name := redistest.Name(t)
				fence := kind.lock(c, name).Key() + ":fence"
				fenceTTL := func() int64 {
					t.Helper()
					msg, err := b.do(t, "PTTL", fence)
					require.NoError(t, err)
					ttl, err := msg.AsInt64()
					require.NoError(t, err)
					return ttl
				}
				var last int64
				for i := 0; i < 4; i++ {
					m := kind.lock(c, name)
					require.NoError(t, m.Lock(bg))
					tok, err := m.Token(bg)
					require.NoError(t, err)
					require.Greater(t, tok, last, "grant %d", i)
					last = tok
					ttl := fenceTTL()
					require.Greater(t, ttl, int64(0), "the fence must expire")
					require.LessOrEqual(t, ttl, lua.FenceTTL.Milliseconds())
					if i%2 == 0 {
						_, err := b.do(t, "DEL", fence) // behind relock's back
						require.NoError(t, err)
					}
					require.NoError(t, m.Lock(bg)) // a re-entry keeps the token
					again, err := m.Token(bg)
					require.NoError(t, err)
					require.Equal(t, tok, again)
					require.NoError(t, m.Unlock(bg))
					require.NoError(t, m.Unlock(bg))
				}
			})
		})
	}
}

// TestMutex_Token_handOffSetsTheFence: a direct hand-off is a fresh grant too: it sets the
// fence, with its TTL, to the successor's token.
func TestMutex_Token_handOffSetsTheFence(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		holder, waiter := c.Mutex(name), c.Mutex(name)
		fence := holder.Key() + ":fence"
		require.NoError(t, holder.Lock(bg))
		tok, err := holder.Token(bg)
		require.NoError(t, err)
		_, err = b.do(t, "DEL", fence)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "the waiter parked", func() bool { return rlock.ParkedCandidates(c, waiter) == 1 })
		require.NoError(t, holder.Unlock(bg))
		require.NoError(t, await(t, got, 5*time.Second, "the hand-off"))
		next, err := waiter.Token(bg)
		require.NoError(t, err)
		require.Greater(t, next, tok)
		msg, err := b.do(t, "GET", fence)
		require.NoError(t, err)
		v, _ := msg.ToString()
		require.Equal(t, strconv.FormatInt(next, 10), v, "the fence holds the successor's token")
		msg, err = b.do(t, "PTTL", fence)
		require.NoError(t, err)
		ttl, _ := msg.AsInt64()
		require.Greater(t, ttl, int64(0))
		require.LessOrEqual(t, ttl, lua.FenceTTL.Milliseconds())
		require.NoError(t, waiter.Unlock(bg))
	})
}
