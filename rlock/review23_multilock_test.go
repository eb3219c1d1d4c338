package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// countedMutex is a user's Locker that embeds a *rlock.Mutex and keeps state of its own
// across TryLock and Unlock (a local count, standing for a metric, a local mutex, a lease
// registry...). Locker's godoc: a MultiLock gives back what it took with Unlock.
type countedMutex struct {
	*rlock.Mutex
	held atomic.Int64
}

func (m *countedMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	ok, err := m.Mutex.TryLock(ctx, wait, lease)
	if ok {
		m.held.Add(1)
	}
	return ok, err
}

func (m *countedMutex) Unlock(ctx context.Context) error {
	m.held.Add(-1)
	return m.Mutex.Unlock(ctx)
}

// TestMultiLock_roundGiveBackCallsForeignLockersUnlock: a failed round must give back a
// foreign Locker's hold through that Locker's Unlock (Locker's godoc; MultiLock's: "another
// Locker's is left as its Unlock leaves it"), even when the Locker embeds a lock of this
// package: the promoted unexported giveBackTaken must not bypass the user's Unlock.
func TestMultiLock_roundGiveBackCallsForeignLockersUnlock(t *testing.T) {
	t.Parallel() // its own servers and hooks
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	other, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer other.Close()
	name := redistest.Name(t)
	a := &countedMutex{Mutex: c.Mutex(name + "-a")}
	b := c.Mutex(name + "-b")
	require.NoError(t, other.Mutex(name+"-b").Lock(bg))
	ok, err := rlock.NewMultiLock(a, b).TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, a.Err(bg), rlock.ErrNotHeld, "member a given back in Redis")
	require.Equal(t, int64(0), a.held.Load(), "the user's Locker was given back without its Unlock")
}

// TestMultiLock_redLockMemberGiveBackBusyBehindOwnersOtherCall is
// TestMultiLock_giveBackBusyBehindOwnersOtherCall with a RedLock member: the round took the
// RedLock, could not have B, and its give-back of the RedLock waited for the owner's other
// call on it (another goroutine's re-entry, whose replies are slow) for the whole cleanup
// timeout: RedLock.Unlock's case 5, nothing sent, "the hold is still counted". MultiLock's
// godoc: a failure "gives back everything the round took before it returns: a MultiLock
// never leaves part of itself held"; a member of this package whose give-back failed stops
// being counted, or is given back once the other call is done. After the other goroutine's
// Unlock, nothing must be held, and the background give-back is told to the Observer
// (GiveBack, GiveBackCanceled), as a Mutex member's is. It failed before RedLock.giveBackTaken:
// the RedLock stayed held on all 3 instances, renewed.
func TestMultiLock_redLockMemberGiveBackBusyBehindOwnersOtherCall(t *testing.T) {
	t.Parallel() // its own servers and hooks
	testRedLockMemberBusyGiveBack(t, false)
}

// TestMultiLock_redLockMemberGiveBackBusyOutlivesCloseOfItsWaiter: as
// TestMultiLock_redLockMemberGiveBackBusyBehindOwnersOtherCall, with the Close of the Client
// whose background waits for the owner's other call (the first by id) while that call still
// runs: the RedLock goes on on the other two instances, and so must the wait for its
// give-back (RedLock.giveBackAfter hands it to the next open Client). Ended at that Close,
// the RedLock stayed held on the other two, renewed.
func TestMultiLock_redLockMemberGiveBackBusyOutlivesCloseOfItsWaiter(t *testing.T) {
	t.Parallel() // its own servers and hooks
	testRedLockMemberBusyGiveBack(t, true)
}

// testRedLockMemberBusyGiveBack runs the two tests above; closeWaiter closes the first
// Client by id once the MultiLock's TryLock has returned, before the other call is done.
func testRedLockMemberBusyGiveBack(t *testing.T, closeWaiter bool) {
	const lease = 900 * time.Millisecond
	var gaveBack atomic.Int64
	obs := &rlock.Observer{GiveBack: func(e rlock.GiveBackInfo) {
		if e.Kind == rlock.KindRedLock && e.Reason == rlock.GiveBackCanceled && e.Holds == 1 && e.Err == nil {
			gaveBack.Add(1)
		}
	}}
	ss := redServers(t, 3)
	var gate atomic.Bool
	open := make(chan struct{})
	bSent := make(chan struct{}, 1)
	keyB := ""
	cs := make([]*rlock.Client, 3)
	for i, s := range ss {
		hc := &hookClient{Client: s.Client(t)}
		hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script == "acquire" && keyB != "" && len(cmd.args) > 1 && cmd.args[1] == keyB {
				select {
				case bSent <- struct{}{}:
				default:
				}
			}
			if cmd.script == "acquire" && gate.Load() && len(cmd.args) > 1 && cmd.args[1] != keyB {
				res := cmd.sendWith(context.WithoutCancel(ctx))
				<-open
				return res
			}
			return call()
		})
		c, err := rlock.New(hc, rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(150*time.Millisecond),
			rlock.WithObserver(obs))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	other, err := rlock.New(ss[0].Client(t))
	require.NoError(t, err)
	defer other.Close()
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(500*time.Millisecond))
	b := cs[0].Mutex(name + "-b")
	keyB = b.Key()
	require.NoError(t, other.Mutex(name+"-b").Lock(bg))

	g1 := make(chan error, 1)
	go func() {
		<-bSent
		gate.Store(true)
		ok, err := r.TryLock(bg, 0, 0) // a re-entry: the round holds the RedLock
		if err == nil && !ok {
			err = errors.New("not granted")
		}
		g1 <- err
	}()
	ok, err := rlock.NewMultiLock(r, b).TryLock(bg, 300*time.Millisecond, 0)
	t.Logf("MultiLock TryLock -> %v, %v", ok, err)
	require.False(t, ok)
	closed := make(chan struct{})
	if closeWaiter {
		first := cs[0]
		for _, c := range cs {
			if c.ID() < first.ID() {
				first = c
			}
		}
		go func() { first.Close(); close(closed) }() // it waits for the re-entry's request
		time.Sleep(50 * time.Millisecond)
	} else {
		close(closed)
	}
	gate.Store(false)
	close(open)
	<-closed
	require.NoError(t, <-g1, "the other goroutine's re-entry")
	require.NoError(t, r.Unlock(bg), "the other goroutine's Unlock")
	t.Logf("after the other goroutine's Unlock: Err %v, holders %d", r.Err(bg), holdersOn(t, ss, key))
	time.Sleep(2 * lease)
	n := holdersOn(t, ss, key)
	t.Logf("two leases on: Err %v, instances holding %d", r.Err(bg), n)
	require.ErrorIs(t, r.Err(bg), rlock.ErrNotHeld, "the RedLock the failed round took is still counted")
	require.Equal(t, 0, n, "the RedLock the failed round took is still held (renewed) in Redis")
	if !closeWaiter { // else the observer's Client (the first by id) is closed: nothing is told
		require.Equal(t, int64(1), gaveBack.Load(), "the background give-back told as GiveBack (canceled)")
	}
}

// TestMultiLock_nestedGiveBackOfARoundIsObserved: a nested MultiLock that a failed round
// took is given back by the round: at 0b0288b through its Unlock, reported (ReleaseStart,
// ReleaseDone of kind multi_lock) as its TryLock was (AcquireDone, acquired); the round's
// Mutex members' give-backs are still reported as releases (Mutex.unlockObserved).
func TestMultiLock_nestedGiveBackOfARoundIsObserved(t *testing.T) {
	t.Parallel() // its own servers and hooks
	srv := redistest.Start(t)
	var acquired, released atomic.Int64
	obs := &rlock.Observer{
		AcquireDone: func(_ context.Context, e rlock.AcquireDoneInfo) {
			if e.Kind == rlock.KindMultiLock && e.Err == nil && e.Outcome == rlock.OutcomeAcquired {
				acquired.Add(1)
			}
		},
		ReleaseDone: func(_ context.Context, e rlock.ReleaseDoneInfo) {
			if e.Kind == rlock.KindMultiLock {
				released.Add(1)
			}
		},
	}
	c, err := rlock.New(srv.Client(t), rlock.WithObserver(obs))
	require.NoError(t, err)
	defer c.Close()
	other, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer other.Close()
	name := redistest.Name(t)
	inner := rlock.NewMultiLock(c.Mutex(name+"-a1"), c.Mutex(name+"-a2"))
	b := c.Mutex(name + "-b")
	require.NoError(t, other.Mutex(name+"-b").Lock(bg))
	outer := rlock.NewMultiLock(inner, b)
	ok, err := outer.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok)
	t.Logf("multi_lock acquired %d (the inner's), multi_lock releases %d", acquired.Load(), released.Load())
	require.Equal(t, int64(1), acquired.Load(), "precondition: the inner MultiLock's TryLock is reported acquired")
	require.Equal(t, int64(1), released.Load(), "the inner MultiLock's give-back is not reported")
}
