package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// fairPlace reports whether owner (an id given with rlock.WithOwner) has a place in the fair
// lock's queue and a life record for it.
func fairPlace(t *testing.T, b *backend, m *rlock.FairMutex, owner string) (queued, alive bool) {
	t.Helper()
	has := func(key string) bool {
		msg, err := b.do(t, "ZSCORE", key, "u:"+owner)
		if rueidis.IsRedisNil(err) || msg.IsNil() {
			return false
		}
		require.NoError(t, err)
		return true
	}
	return has(m.Key() + ":queue"), has(m.Key() + ":alive")
}

// awaitFairPlace waits until owner has a place in the queue.
func awaitFairPlace(t *testing.T, b *backend, m *rlock.FairMutex, owner string) {
	t.Helper()
	redistest.WaitFor(t, 5*time.Second, owner+" to queue", func() bool {
		q, _ := fairPlace(t, b, m, owner)
		return q
	})
}

// requireNoFairPlace fails unless owner has neither a place nor a life record.
func requireNoFairPlace(t *testing.T, b *backend, m *rlock.FairMutex, owner, why string) {
	t.Helper()
	q, a := fairPlace(t, b, m, owner)
	require.False(t, q, "%s: %s still queued", why, owner)
	require.False(t, a, "%s: %s's life record is left", why, owner)
}

func TestFairMutex_basics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		m := c.FairMutex(name)
		require.Equal(t, name, m.Name())

		// A single attempt on a free lock succeeds; the holder re-enters.
		ok, err := m.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, m.Lock(bg), "reentrant")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n)

		// A single attempt on a held lock fails without queuing.
		other := b.client(t).FairMutex(name)
		ctx := rlock.WithOwner(bg, "single")
		ok, err = other.TryLock(ctx, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.False(t, b.exists(t, m.Key()+":queue"), "a single attempt queued")
		require.ErrorIs(t, other.Unlock(ctx), rlock.ErrNotHeld)
		n, err = other.HoldCount(ctx)
		require.NoError(t, err)
		require.Zero(t, n)

		// A Mutex of the same name is the same lock.
		ok, err = c.Mutex(name).TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)

		require.NoError(t, m.Unlock(bg))
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked, "one hold left")
		require.NoError(t, m.Unlock(bg))
		locked, err = m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrNotHeld)

		// A single attempt never passes a waiter: with a (live) place ahead, a free lock is
		// not taken.
		now := time.Now()
		_, err = b.do(t, "ZADD", m.Key()+":queue", strconv.FormatInt(now.UnixMicro(), 10), "u:ahead")
		require.NoError(t, err)
		_, err = b.do(t, "ZADD", m.Key()+":alive", strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10), "u:ahead")
		require.NoError(t, err)
		ok, err = other.TryLock(ctx, 0, 0)
		require.NoError(t, err)
		require.False(t, ok, "a single attempt passed a waiter")
		ok, err = other.TryLock(rlock.WithOwner(bg, "ahead"), 0, 0)
		require.NoError(t, err)
		require.True(t, ok, "the head takes the free lock")
		requireNoFairPlace(t, b, other, "ahead", "served")
		require.NoError(t, other.Unlock(rlock.WithOwner(bg, "ahead")))
	})
}

// Eight waiters on three Clients, arriving 50ms apart, acquire in arrival order, whether
// they wait with Lock or with TryLock.
func TestFairMutex_Lock_arrivalOrder(t *testing.T) {
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		clients := []*rlock.Client{b.client(t), b.client(t), b.client(t)}
		name := redistest.Name(t)
		holder := clients[0].FairMutex(name)
		require.NoError(t, holder.Lock(bg))
		const waiters = 8
		order := make(chan int, waiters)
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			m := clients[i%len(clients)].FairMutex(name)
			owner := fmt.Sprint("w", i)
			ctx := rlock.WithOwner(bg, owner)
			go func() {
				var err error
				if i%2 == 0 {
					var ok bool
					ok, err = m.TryLock(ctx, 20*time.Second, 5*time.Second)
					if err == nil && !ok {
						err = errors.New("TryLock gave up")
					}
				} else {
					err = m.Lock(ctx)
				}
				if err == nil {
					order <- i
					err = m.Unlock(ctx)
				}
				errs <- err
			}()
			awaitFairPlace(t, b, holder, owner)
			time.Sleep(50 * time.Millisecond)
		}
		require.NoError(t, holder.Unlock(bg))
		for i := 0; i < waiters; i++ {
			require.NoError(t, await(t, errs, 20*time.Second, "the waiters"))
		}
		close(order)
		var got []int
		for i := range order {
			got = append(got, i)
		}
		require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, got)
		require.False(t, b.exists(t, holder.Key()+":queue"), "the queue is empty")
	})
}

// Holds with a fixed lease that nobody unlocks hand over in order as each lease runs out,
// each head taking the lock at once (not a heartbeat later).
func TestFairMutex_TryLock_leaseExpiryHandsOverInOrder(t *testing.T) {
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		clients := []*rlock.Client{b.client(t), b.client(t)}
		name := redistest.Name(t)
		const lease = 150 * time.Millisecond
		holder := clients[0].FairMutex(name)
		ok, err := holder.TryLock(bg, 0, lease)
		require.NoError(t, err)
		require.True(t, ok)
		const waiters = 4
		type grant struct {
			i  int
			at time.Time
		}
		grants := make(chan grant, waiters)
		errs := make(chan error, waiters)
		for i := 0; i < waiters; i++ {
			m := clients[i%2].FairMutex(name)
			owner := fmt.Sprint("w", i)
			go func() {
				ok, err := m.TryLock(rlock.WithOwner(bg, owner), 20*time.Second, lease)
				if err == nil && !ok {
					err = errors.New("TryLock gave up")
				}
				if err == nil {
					grants <- grant{i, time.Now()}
				}
				errs <- err
			}()
			awaitFairPlace(t, b, holder, owner)
		}
		for i := 0; i < waiters; i++ {
			require.NoError(t, await(t, errs, 20*time.Second, "the waiters"))
		}
		close(grants)
		var prev time.Time
		i := 0
		for g := range grants {
			require.Equal(t, i, g.i, "out of order")
			if i > 0 {
				// The default heartbeat is 3.3s: a head that slept it through would show.
				require.Less(t, g.at.Sub(prev), 1500*time.Millisecond, "hand-over %d waited past the lease", i)
			}
			prev = g.at
			i++
		}
	})
}

// 500 waiters over four Clients all get the lock.
func TestFairMutex_Lock_manyWaitersAllAcquire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		// Heartbeats every 20s (none in a normal run) and a long cleanup timeout: on a loaded
		// machine under -race, 500 waiters' heartbeats every 3.3s can swamp miniredis.
		opts := []rlock.Option{rlock.WithWaiterTimeout(time.Minute), rlock.WithCleanupTimeout(30 * time.Second)}
		waiters := 500
		if b.mr != nil {
			// miniredis compiles every script it runs anew (a Lua state per call), under the
			// process's -race. On a loaded machine (the test at nice 10 beside a burner on
			// one core) 500 waiters' first attempts, and the second each makes at once while
			// its subscription is not yet live, queued about 1,000 scripts answered more than
			// a second late, and the first holder's Unlock, behind them on its connection,
			// ran out of its 30-s cleanup timeout; rueidis also cut connections whose
			// replies were 10 s late (ConnWriteTimeout: i/o timeouts on 550 acquires, no
			// waiter served for 160 s). Here 150 waiters (500 on redis-server, where a
			// script costs little), on connections that wait for slow replies.
			waiters = 150
			b.mrWriteTimeout = 2 * time.Minute
		}
		clients := []*rlock.Client{b.client(t, opts...), b.client(t, opts...), b.client(t, opts...), b.client(t, opts...)}
		name := redistest.Name(t)
		var inside, served atomic.Int32
		errs := make(chan error, waiters)
		var wg sync.WaitGroup
		for i := range waiters {
			m := clients[i%len(clients)].FairMutex(name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
				defer cancel()
				if err := m.Lock(ctx); err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					errs <- errors.New("two holders")
				}
				inside.Add(-1)
				served.Add(1)
				if err := m.Unlock(ctx); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, waiters, served.Load())
		require.False(t, b.exists(t, clients[0].FairMutex(name).Key()+":queue"), "the queue is empty")
	})
}

// A waiter that gives up (its wait bound, its ctx) removes its place before it returns, and
// the waiter behind a head that gave up is told at once that its turn is near.
func TestFairMutex_givingUpLeavesTheQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("long: waits out bounds and a 900 ms lease, ~1 s (run without -short)")
	}
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).FairMutex(name)
		require.NoError(t, holder.Lock(bg))
		w := b.client(t).FairMutex(name)

		// The wait bound runs out.
		ok, err := w.TryLock(rlock.WithOwner(bg, "bounded"), 200*time.Millisecond, 0)
		require.NoError(t, err)
		require.False(t, ok)
		requireNoFairPlace(t, b, w, "bounded", "after its wait ran out")

		// The ctx is cancelled.
		ctx, cancel := context.WithCancel(rlock.WithOwner(bg, "cancelled"))
		got := make(chan error, 1)
		go func() { got <- w.Lock(ctx) }()
		awaitFairPlace(t, b, w, "cancelled")
		cancel()
		require.ErrorIs(t, await(t, got, 5*time.Second, "the cancelled waiter"), context.Canceled)
		requireNoFairPlace(t, b, w, "cancelled", "after its ctx ended")
		require.NoError(t, holder.Unlock(bg))

		// The head gives up while the lock has 500ms of lease left: the waiter behind is
		// woken, learns the lease, and takes the lock when it ends, not a heartbeat (3.3s)
		// later.
		ok, err = holder.TryLock(bg, 0, 900*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		start := time.Now()
		headDone := make(chan error, 1)
		go func() {
			ok, err := w.TryLock(rlock.WithOwner(bg, "head"), 400*time.Millisecond, 0)
			if ok {
				err = errors.New("the head got the lock")
			}
			headDone <- err
		}()
		awaitFairPlace(t, b, w, "head")
		next := b.client(t).FairMutex(name)
		nextCtx := rlock.WithOwner(bg, "next")
		go func() { got <- next.Lock(nextCtx) }()
		awaitFairPlace(t, b, w, "next")
		require.NoError(t, await(t, headDone, 5*time.Second, "the head to give up"))
		requireNoFairPlace(t, b, w, "head", "after its wait ran out")
		require.NoError(t, await(t, got, 10*time.Second, "the next waiter"))
		require.Less(t, time.Since(start), 2600*time.Millisecond, "the next waiter slept past the lease")
		require.NoError(t, next.Unlock(nextCtx))
	})
}

// A waiter that can no longer refresh or remove its place (its Redis connection refuses
// everything, as for a dead or cut-off process) stops blocking the waiters behind it once
// its place's life (the waiter timeout) has run out.
func TestFairMutex_deadWaiterDoesNotStallTheQueue(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		const waiterTimeout = 400 * time.Millisecond
		name := redistest.Name(t)
		holder := b.client(t, rlock.WithWaiterTimeout(waiterTimeout)).FairMutex(name)
		require.NoError(t, holder.Lock(bg))

		rc := refuseSends(b.rueidis(t))
		dc, err := rlock.New(rc, rlock.WithWaiterTimeout(waiterTimeout))
		require.NoError(t, err)
		defer dc.Close()
		deadCtx, cancel := context.WithCancel(rlock.WithOwner(bg, "dead"))
		defer cancel()
		deadDone := make(chan error, 1)
		go func() { deadDone <- dc.FairMutex(name).Lock(deadCtx) }()
		awaitFairPlace(t, b, holder, "dead")

		live := b.client(t, rlock.WithWaiterTimeout(waiterTimeout)).FairMutex(name)
		liveCtx := rlock.WithOwner(bg, "live")
		got := make(chan error, 1)
		go func() { got <- live.Lock(liveCtx) }()
		awaitFairPlace(t, b, holder, "live")

		// The dead head's place runs out a waiter timeout after its last refresh at the
		// latest; the live waiter, which tries again every heartbeat (a third of the waiter
		// timeout) with no wake-up needed, takes the lock by its next attempt. Beyond that,
		// a margin for the round trips, and whatever this process stalled meanwhile (a
		// loaded machine: the test ran once beside a 60 s model run and every parallel test,
		// and its fixed 10 s wait ran out). The guard only ends a hang.
		const bound = waiterTimeout + waiterTimeout/3 + 2*time.Second
		stalled := watchStalls(nil)
		t.Cleanup(func() { stalled(time.Time{}, time.Time{}) }) // stops it, if the wait fails
		// The dead waiter's Redis is gone from now on. An attempt of its heartbeat sent just
		// before could still reach Redis after the Unlock below and take the lock, for its
		// Client's 30 s lease (the live waiter got it after 30.0 s once, in a full -race run
		// beside .ci/run): refuseAll waits it out.
		rc.refuseAll(t)
		released := time.Now()
		require.NoError(t, holder.Unlock(bg)) // wakes the dead head, which cannot take it
		err = await(t, got, bound+30*time.Second, "the live waiter behind a dead one (a hang)")
		took := time.Since(released)
		stall := stalled(released, time.Now())
		require.NoError(t, err)
		require.Less(t, took-stall, bound, "stalled beyond the waiter timeout and a heartbeat (took %v, of which the process stalled %v)", took, stall)
		requireNoFairPlace(t, b, holder, "dead", "after its place ran out")
		require.NoError(t, live.Unlock(liveCtx))

		cancel()
		require.Error(t, await(t, deadDone, 10*time.Second, "the dead waiter to give up"))
	})
}

// A release wakes the queue's head alone: the other waiters, on other Clients, make no
// attempt.
func TestFairMutex_Unlock_wakesOnlyTheHead(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).FairMutex(name)
		require.NoError(t, holder.Lock(bg))
		const waiters = 4
		counters := make([]*scriptCount, waiters) // the scripts each waiter's Client sends
		handles := make([]*rlock.FairMutex, waiters)
		got := make([]chan error, waiters)
		for i := range waiters {
			counters[i] = countScripts(b.rueidis(t))
			c, err := rlock.New(counters[i], rlock.WithWaiterTimeout(30*time.Second)) // heartbeat 10s
			require.NoError(t, err)
			defer c.Close()
			handles[i] = c.FairMutex(name)
			got[i] = make(chan error, 1)
			go func() { got[i] <- handles[i].Lock(rlock.WithOwner(bg, fmt.Sprint("w", i))) }()
			awaitFairPlace(t, b, holder, fmt.Sprint("w", i))
		}
		parked(t, b, holder.Mutex, waiters)
		counts := func() []int64 {
			out := make([]int64, waiters)
			for i, c := range counters {
				out[i] = c.n.Load()
			}
			return out
		}
		// Wait until every waiter has settled (its attempts after subscribing are done).
		var quiet []int64
		redistest.WaitFor(t, 5*time.Second, "the waiters to settle", func() bool {
			before := counts()
			time.Sleep(100 * time.Millisecond)
			quiet = counts()
			return fmt.Sprint(before) == fmt.Sprint(quiet)
		})
		unlock := holder.Unlock
		for head := 0; head < waiters; head++ {
			require.NoError(t, unlock(bg))
			require.NoError(t, await(t, got[head], 10*time.Second, "the head to be woken"))
			time.Sleep(150 * time.Millisecond) // room for any wrongly woken waiter to try
			now := counts()
			require.Equal(t, quiet[head]+1, now[head], "the head takes the lock in one attempt")
			for i := head + 1; i < waiters; i++ {
				require.Equal(t, quiet[i], now[i], "waiter %d was woken by the release to %d", i, head)
			}
			ctx := rlock.WithOwner(bg, fmt.Sprint("w", head))
			unlock = func(context.Context) error { return handles[head].Unlock(ctx) }
			quiet = now
			quiet[head]++ // its unlock
		}
		require.NoError(t, unlock(bg))
	})
}

// ForceUnlock wakes the waiters; the head takes the lock.
func TestFairMutex_ForceUnlock_wakesTheHead(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		holder := b.client(t).FairMutex(name) // watchdog mode: 30s lease
		require.NoError(t, holder.Lock(bg))
		w := b.client(t).FairMutex(name)
		got := make(chan error, 1)
		go func() { got <- w.Lock(rlock.WithOwner(bg, "w")) }()
		awaitFairPlace(t, b, w, "w")
		parked(t, b, w.Mutex, 1)
		ok, err := b.client(t).FairMutex(name).ForceUnlock(bg)
		require.NoError(t, err)
		require.True(t, ok)
		start := time.Now()
		require.NoError(t, await(t, got, 10*time.Second, "the head after a force unlock"))
		require.Less(t, time.Since(start), 2*time.Second, "woken by the force unlock, not its heartbeat")
		require.NoError(t, w.Unlock(rlock.WithOwner(bg, "w")))
	})
}

func TestFairMutex_mutualExclusion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		name := redistest.Name(t)
		hammer(t, b, 12, 15, func(c *rlock.Client) locker { return c.FairMutex(name) })
	})
}

func TestFairMutex_replayedScriptsApplyOnce(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no time bound
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc)
		require.NoError(t, err)
		defer c.Close()
		m := c.FairMutex(redistest.Name(t))
		holds := func() int {
			n, err := m.HoldCount(bg)
			require.NoError(t, err)
			return n
		}
		lc.drop.Store(1) // fresh acquire applied, reply lost
		require.NoError(t, m.Lock(bg))
		require.Equal(t, 1, holds())
		lc.drop.Store(2) // re-entry applied, two replies lost
		require.NoError(t, m.Lock(bg))
		require.Equal(t, 2, holds())
		lc.drop.Store(1)
		require.NoError(t, m.Unlock(bg))
		require.Equal(t, 1, holds())
		lc.drop.Store(1)
		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()))
	})
}

func TestFairMutex_badInput(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	require.ErrorIs(t, c.FairMutex("").Lock(bg), rlock.ErrInvalid)
	require.ErrorIs(t, c.FairMutex("").Unlock(bg), rlock.ErrInvalid)
	_, err = c.FairMutex("x").TryLock(bg, -time.Second, 0)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = c.FairMutex("x").TryLock(bg, time.Second, time.Microsecond)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorIs(t, c.FairMutex("x").Lock(rlock.WithOwner(bg, "")), rlock.ErrInvalid)
}

// A key of another type at the lock's name, or at its queue's, fails with ErrWrongType and
// is left as it was.
func TestFairMutex_wrongType(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		for _, suffix := range []string{"", ":queue", ":alive"} {
			m := c.FairMutex(redistest.Name(t))
			key := m.Key() + suffix
			_, err := b.do(t, "SET", key, "v")
			require.NoError(t, err)
			require.ErrorIs(t, m.Lock(bg), rlock.ErrWrongType, suffix)
			_, err = m.TryLock(bg, 0, 0)
			require.ErrorIs(t, err, rlock.ErrWrongType, suffix)
			msg, err := b.do(t, "GET", key)
			require.NoError(t, err)
			s, _ := msg.ToString()
			require.Equal(t, "v", s, "%s was changed", key)
			if suffix != "" {
				require.False(t, b.exists(t, m.Key()), "the lock was taken")
			}
		}
	})
}
