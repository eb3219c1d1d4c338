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

// unkeyed is a Locker without a Key method: a MultiLock of such takes its members in the
// given order, so that tests can make MultiLocks clash.
type unkeyed struct{ m *rlock.Mutex }

func (u unkeyed) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return u.m.TryLock(ctx, wait, lease)
}
func (u unkeyed) Unlock(ctx context.Context) error { return u.m.Unlock(ctx) }

// multiOf returns a MultiLock of c's locks called names, in that order if keyed is false.
func multiOf(c *rlock.Client, keyed bool, names ...string) *rlock.MultiLock {
	locks := make([]rlock.Locker, len(names))
	for i, n := range names {
		locks[i] = c.Mutex(n)
		if !keyed {
			locks[i] = unkeyed{c.Mutex(n)}
		}
	}
	return rlock.NewMultiLock(locks...)
}

// names returns n unique lock names for t.
func names(t *testing.T, n int) []string {
	base := redistest.Name(t)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return out
}

// requireFree fails t unless none of the locks called names is held on b.
func requireFree(t *testing.T, b *backend, c *rlock.Client, names ...string) {
	t.Helper()
	for _, n := range names {
		locked, err := c.Mutex(n).IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked, "%s is left held", n)
		require.False(t, b.exists(t, c.Mutex(n).Key()))
	}
}

// Of 10 goroutines (each its own owner) trying the same multi-lock at once, exactly one
// wins; once it unlocks, exactly one wins again.
func TestMultiLock_TryLock_exactlyOneWins(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ns := names(t, 3)
		ml := c.MultiLock(ns...)
		for round := 0; round < 3; round++ {
			var wins atomic.Int32
			var winner atomic.Value
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 10)
			for g := 0; g < 10; g++ {
				wg.Add(1)
				ctx := c.WithNewOwner(bg)
				go func() {
					defer wg.Done()
					<-start
					ok, err := ml.TryLock(ctx, 200*time.Millisecond, 10*time.Second)
					if err != nil {
						errs <- err
					}
					if ok {
						wins.Add(1)
						winner.Store(ctx)
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			require.EqualValues(t, 1, wins.Load(), "round %d", round)
			ctx := winner.Load().(context.Context)
			for _, n := range ns {
				holds, err := c.Mutex(n).HoldCount(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, holds, "the winner holds every member once")
			}
			require.NoError(t, ml.Unlock(ctx))
			requireFree(t, b, c, ns...)
		}
	})
}

// The shared hammer: multi-locks over three names, each worker's members listed in a
// rotated order and taken in that order (so that they clash), never overlap.
func TestMultiLock_mutualExclusion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ns := names(t, 3)
		var k atomic.Int32
		hammer(t, b, 6, 8, func(c *rlock.Client) locker {
			r := int(k.Add(1))
			return multiOf(c, false, ns[r%3], ns[(r+1)%3], ns[(r+2)%3])
		})
	})
}

// Members with keys are taken in key order, whatever the order given: here the first key's
// lock is held elsewhere, so the other was never even taken (its fencing counter, made by
// its first grant, does not exist).
func TestMultiLock_takesMembersInKeyOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ns := names(t, 2) // ns[0] < ns[1]
		require.NoError(t, b.client(t).Mutex(ns[0]).Lock(bg))
		ok, err := c.MultiLock(ns[1], ns[0]).TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.False(t, b.exists(t, c.Mutex(ns[1]).Key()+":fence"), "the later key was taken first")
		// Without keys, the given order.
		ok, err = multiOf(c, false, ns[1], ns[0]).TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.True(t, b.exists(t, c.Mutex(ns[1]).Key()+":fence"))
		requireFree(t, b, c, ns[1])
	})
}

// A member held by someone else makes TryLock fail and leaves nothing held; once it is free,
// Lock takes all, and Unlock gives all back.
func TestMultiLock_TryLock_allOrNothing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ns := names(t, 3)
		other := b.client(t).Mutex(ns[1])
		require.NoError(t, other.Lock(bg))
		ml := c.MultiLock(ns...)
		for _, wait := range []time.Duration{0, 200 * time.Millisecond} {
			for _, lease := range []time.Duration{0, 5 * time.Second} {
				ok, err := ml.TryLock(bg, wait, lease)
				require.NoError(t, err)
				require.False(t, ok, "wait %v lease %v", wait, lease)
				requireFree(t, b, c, ns[0], ns[2])
			}
		}
		// A cancelled Lock leaves nothing either.
		ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, ml.Lock(ctx), context.DeadlineExceeded)
		requireFree(t, b, c, ns[0], ns[2])

		// Lock blocks until the member is free, then holds all.
		got := make(chan error, 1)
		go func() { got <- ml.Lock(bg) }()
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, other.Unlock(bg))
		require.NoError(t, await(t, got, 10*time.Second, "Lock to take every member"))
		for _, n := range ns {
			locked, err := c.Mutex(n).IsLocked(bg)
			require.NoError(t, err)
			require.True(t, locked, n)
		}
		ok, err := other.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, ml.Unlock(bg))
		requireFree(t, b, c, ns...)
		require.ErrorIs(t, ml.Unlock(bg), rlock.ErrNotHeld, "nothing held: each member says so")
	})
}

// A member lost while held: Unlock still gives back the others and reports the loss.
func TestMultiLock_Unlock_releasesAllAndJoinsErrors(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ns := names(t, 3)
		ml := c.MultiLock(ns...)
		require.NoError(t, ml.Lock(bg))
		_, err := c.Mutex(ns[1]).ForceUnlock(bg)
		require.NoError(t, err)
		err = ml.Unlock(bg)
		require.ErrorIs(t, err, rlock.ErrNotHeld)
		require.ErrorContains(t, err, "member 1")
		requireFree(t, b, c, ns...)
	})
}

// A member error other than contention gives back what was taken and is reported.
func TestMultiLock_memberErrorLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ns := names(t, 3)
		_, err := b.do(t, "SET", c.Mutex(ns[2]).Key(), "not a lock")
		require.NoError(t, err)
		ok, err := c.MultiLock(ns...).TryLock(bg, time.Second, 0)
		require.False(t, ok)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		requireFree(t, b, c, ns[0], ns[1])
	})
}

// Two multi-locks listing shared members in opposite orders, under contention, both finish:
// taken in the given orders (they clash) and in key order.
func TestMultiLock_oppositeOrdersNoDeadlock(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		t.Run("given order", func(t *testing.T) { oppositeOrders(t, b, false) })
		t.Run("key order", func(t *testing.T) { oppositeOrders(t, b, true) })
	})
}

func oppositeOrders(t *testing.T, b *backend, keyed bool) {
	ns := names(t, 3)
	clients := []*rlock.Client{b.client(t), b.client(t)}
	cs := &critical{tokens: map[string][]int64{}}
	const workers, perWorker = 4, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		c := clients[w%2]
		ml := multiOf(c, keyed, ns[0], ns[1], ns[2])
		if w%2 == 1 {
			ml = multiOf(c, keyed, ns[2], ns[1], ns[0])
		}
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				if err := ml.Lock(bg); err != nil {
					errs <- err
					return
				}
				cs.leave(cs.enter(id, int64(i)))
				if err := ml.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
		}(fmt.Sprint(w))
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	within(t, 60*time.Second, "both orders to finish (a deadlock would hang)", finished)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	cs.tokens = nil
	cs.check(t, workers*perWorker)
}

// Three independent redis-servers, one Client each per process: multi-locks over one lock
// on each server, in rotated orders, contend with each other and with plain holders of
// single members. No member is ever held by two at once.
func TestMultiLock_independentServers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: multi-node topology: three redis-servers (run without -short)")
	}
	servers := []*backend{realBackend(t), realBackend(t), realBackend(t)}
	name := redistest.Name(t)
	// procs[p][s] is process p's Client on server s.
	const procs = 3
	clients := make([][]*rlock.Client, procs)
	for p := range clients {
		for _, srv := range servers {
			clients[p] = append(clients[p], srv.client(t))
		}
	}
	// members[s] is the critical section of server s's lock.
	members := []*critical{{}, {}, {}}
	for _, cs := range members {
		cs.tokens = map[string][]int64{}
	}
	var entries [3]atomic.Int64
	enterAll := func(id string, which []int) {
		starts := make([]time.Time, len(which))
		for k, s := range which {
			starts[k] = members[s].enter(id, 0)
			entries[s].Add(1)
		}
		for k, s := range which {
			members[s].leave(starts[k])
		}
	}
	const multiWorkers, singleWorkers, perWorker = 6, 3, 8
	var wg sync.WaitGroup
	errs := make(chan error, multiWorkers+singleWorkers)
	for w := 0; w < multiWorkers; w++ {
		cs := clients[w%procs]
		order := []int{w % 3, (w + 1) % 3, (w + 2) % 3}
		if w%2 == 1 {
			order[1], order[2] = order[2], order[1]
		}
		ml := rlock.NewMultiLock(cs[order[0]].Mutex(name), cs[order[1]].Mutex(name), cs[order[2]].Mutex(name))
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				ok, err := ml.TryLock(bg, 30*time.Second, 0)
				if err == nil && !ok {
					err = fmt.Errorf("worker %s: TryLock timed out", id)
				}
				if err != nil {
					errs <- err
					return
				}
				enterAll(id, []int{0, 1, 2})
				if err := ml.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
		}(fmt.Sprint("multi", w))
	}
	for w := 0; w < singleWorkers; w++ {
		m := clients[w%procs][w].Mutex(name)
		wg.Add(1)
		go func(id string, s int) {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				if err := m.Lock(bg); err != nil {
					errs <- err
					return
				}
				enterAll(id, []int{s})
				if err := m.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
		}(fmt.Sprint("single", w), w)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	within(t, 60*time.Second, "every worker to finish", finished)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for s, cs := range members {
		cs.tokens = nil
		cs.check(t, entries[s].Load())
		require.EqualValues(t, multiWorkers*perWorker+perWorker, entries[s].Load())
	}

	// A member held elsewhere on one server: TryLock fails and nothing is left held on the
	// other two.
	other := clients[1][1].Mutex(name + "-held")
	require.NoError(t, other.Lock(bg))
	cs := clients[0]
	ml := rlock.NewMultiLock(cs[0].Mutex(name+"-held"), cs[1].Mutex(name+"-held"), cs[2].Mutex(name+"-held"))
	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		ok, err := ml.TryLock(bg, wait, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.False(t, servers[0].exists(t, cs[0].Mutex(name+"-held").Key()), "left held on server 0")
		require.False(t, servers[2].exists(t, cs[2].Mutex(name+"-held").Key()), "left held on server 2")
	}
	require.NoError(t, other.Unlock(bg))
	ok, err := ml.TryLock(bg, time.Second, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, ml.Unlock(bg))
	for s, srv := range servers {
		require.False(t, srv.exists(t, cs[s].Mutex(name+"-held").Key()))
	}
}

func TestMultiLock_badInput(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	_, rc2 := redistest.Miniredis(t)
	c2, err := rlock.New(rc2)
	require.NoError(t, err)
	defer c2.Close()
	m := c.Mutex("a")
	var nilMutex *rlock.Mutex
	for what, ml := range map[string]*rlock.MultiLock{
		"no member":             rlock.NewMultiLock(),
		"nil member":            rlock.NewMultiLock(m, nil),
		"nil *Mutex":            rlock.NewMultiLock(m, nilMutex),
		"same handle twice":     rlock.NewMultiLock(m, c.Mutex("b"), m),
		"one lock, two handles": rlock.NewMultiLock(m, c.Mutex("a")),
		"mutex and spin mutex":  rlock.NewMultiLock(m, c.SpinMutex("a")),
		"no name":               c.MultiLock(),
		"empty name":            c.MultiLock("a", ""),
		"name twice":            c.MultiLock("a", "b", "a"),
		"zero SpinMutex":        rlock.NewMultiLock(m, &rlock.SpinMutex{}),
	} {
		require.ErrorIs(t, ml.Lock(bg), rlock.ErrInvalid, what)
		_, err := ml.TryLock(bg, 0, 0)
		require.ErrorIs(t, err, rlock.ErrInvalid, what)
		require.ErrorIs(t, ml.Unlock(bg), rlock.ErrInvalid, what)
	}
	_, err = c.MultiLock("a", "b").TryLock(bg, -time.Second, 0)
	require.ErrorIs(t, err, rlock.ErrInvalid)

	// One name on two Clients (two servers) is two locks.
	ml := rlock.NewMultiLock(c.Mutex("a"), c2.Mutex("a"))
	require.NoError(t, ml.Lock(bg))
	require.NoError(t, ml.Unlock(bg))
}

// A MultiLock is reentrant as its members are.
func TestMultiLock_Lock_reentrant(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		ns := names(t, 2)
		ml := c.MultiLock(ns...)
		require.NoError(t, ml.Lock(bg))
		require.NoError(t, ml.Lock(bg))
		require.NoError(t, ml.Unlock(bg))
		ok, err := c.MultiLock(ns...).TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok, "still held after one of two unlocks")
		require.NoError(t, ml.Unlock(bg))
		requireFree(t, b, c, ns...)
	})
}
