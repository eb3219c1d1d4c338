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

// TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld: a MultiLock's round took member 0,
// could not have member 1 (held by another), and gave member 0 back while Redis refused every
// send for longer than the cleanup timeout (a give-back Redis cannot serve is sent again
// with backoff within it: Unlock's godoc, case 2). TryLock returns false with that error.
// MultiLock's godoc: "A failure ... gives back everything the round took before it returns: a
// MultiLock never leaves part of itself held"; TryLock's: "In every case but (true, nil)
// nothing it took is left held". So once Redis answers again, member 0 must not stay held:
// the Client must not count it (Err, HoldCount) nor renew it, and Redis must let it go
// within its lease.
func TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld(t *testing.T) {
	t.Parallel() // its own servers and hooks
	srv := redistest.Start(t)
	var refuse atomic.Bool
	hc := &hookClient{Client: srv.Client(t)}
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if refuse.Load() && cmd.script == "release" {
			return rueidis.NewErrorResult(errDriftDial)
		}
		return call()
	})
	const watchdog = time.Second
	c, err := rlock.New(hc, rlock.WithWatchdogTimeout(watchdog), rlock.WithCleanupTimeout(150*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	other, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer other.Close()

	name := redistest.Name(t)
	m0, m1 := c.SpinMutex(name+"-a"), c.SpinMutex(name+"-b")
	require.NoError(t, other.SpinMutex(name+"-b").Lock(bg))
	ml := rlock.NewMultiLock(m0, m1)

	refuse.Store(true)
	ok, err := ml.TryLock(bg, 0, 0)
	refuse.Store(false)
	t.Logf("TryLock -> %v, %v", ok, err)
	require.False(t, ok)

	// Redis answers again. Within the lease (and a renewal or two), member 0 must be free.
	time.Sleep(2 * watchdog)
	hcount, herr := m0.HoldCount(bg)
	pm := srv.Do(t, "PTTL", m0.Key())
	pttl, _ := pm.AsInt64()
	t.Logf("2 leases later: member 0 HoldCount %d (%v), Err %v, IsLocked pttl %dms", hcount, herr, m0.Err(bg), pttl)
	require.ErrorIs(t, m0.Err(bg), rlock.ErrNotHeld, "the Client still holds the member the failed TryLock took")
	require.Equal(t, 0, hcount, "Redis still counts the member the failed TryLock took (renewed)")
}

type busyKey struct{}

// TestMultiLock_giveBackBusyBehindOwnersOtherCall: a context owner's MultiLock round took
// member A and could not have B; its give-back of A waited for the owner's other call on A
// (another goroutine's re-entry, whose reply is slow) for the whole cleanup timeout, and gave
// up (Unlock's godoc, case 4: nothing sent). The MultiLock returned the error. The other
// goroutine's re-entry is granted meanwhile. What must hold (Mutex's and MultiLock's
// godoc): that goroutine holds A until its Unlock, which returns nil; after it, nothing is
// held by the Client, and Redis lets A go within its lease, nobody renewing it.
func TestMultiLock_giveBackBusyBehindOwnersOtherCall(t *testing.T) {
	t.Parallel() // its own servers and hooks
	srv := redistest.Start(t)
	name := redistest.Name(t)
	keyA, keyB := "", ""
	bSent := make(chan struct{}, 1)
	hc := &hookClient{Client: srv.Client(t)}
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" || len(cmd.args) < 2 {
			return call()
		}
		switch {
		case ctx.Value(busyKey{}) == "g2" && cmd.args[1] == keyB:
			select {
			case bSent <- struct{}{}:
			default:
			}
			res := call()
			time.Sleep(100 * time.Millisecond)
			return res
		case ctx.Value(busyKey{}) == "g1" && cmd.args[1] == keyA:
			res := call()
			time.Sleep(700 * time.Millisecond)
			return res
		}
		return call()
	})
	const watchdog = time.Second
	c, err := rlock.New(hc, rlock.WithWatchdogTimeout(watchdog), rlock.WithCleanupTimeout(150*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	other, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer other.Close()
	a, b := c.SpinMutex(name+"-a"), c.SpinMutex(name+"-b")
	keyA, keyB = a.Key(), b.Key()
	require.NoError(t, other.SpinMutex(name+"-b").Lock(bg))
	owner := rlock.WithOwner(bg, "X")

	g1 := make(chan error, 1)
	go func() {
		<-bSent
		ok, err := a.TryLock(context.WithValue(owner, busyKey{}, "g1"), 0, 0)
		if err == nil && !ok {
			err = errors.New("not granted")
		}
		g1 <- err
	}()
	ok, err := rlock.NewMultiLock(a, b).TryLock(context.WithValue(owner, busyKey{}, "g2"), 300*time.Millisecond, 0)
	t.Logf("MultiLock TryLock -> %v, %v", ok, err)
	require.False(t, ok)
	require.NoError(t, <-g1, "the other goroutine's re-entry")
	hcount, _ := a.HoldCount(owner)
	t.Logf("after both: Err %v, HoldCount (Redis) %d", a.Err(owner), hcount)
	require.NoError(t, a.Err(owner), "the other goroutine holds A")
	time.Sleep(2 * watchdog)
	require.NoError(t, a.Err(owner), "the other goroutine holds A two leases on")
	hcount, _ = a.HoldCount(owner)
	t.Logf("two leases on: HoldCount (Redis) %d", hcount)
	require.GreaterOrEqual(t, hcount, 1, "A is renewed for the other goroutine")
	require.NoError(t, a.Unlock(owner))
	require.ErrorIs(t, a.Err(owner), rlock.ErrNotHeld, "after the other goroutine's Unlock")
	time.Sleep(watchdog + 500*time.Millisecond)
	hcount, _ = a.HoldCount(owner)
	pm := srv.Do(t, "PTTL", keyA)
	pttl, _ := pm.AsInt64()
	t.Logf("a lease after the Unlock: HoldCount (Redis) %d, pttl %dms", hcount, pttl)
	require.Equal(t, 0, hcount, "A left held in Redis after every Unlock")
}

// TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld_rw is
// TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld with a read-write lock's two sides as
// members (RWMutex.giveBackTaken and ReadLocker.giveBackTaken): the round takes the write
// side of one lock and the read side of another, held for writing by another Client.
func TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld_rw(t *testing.T) {
	t.Parallel() // its own servers and hooks
	for _, readFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "write", true: "read"}[readFirst], func(t *testing.T) {
			srv := redistest.Start(t)
			var refuse atomic.Bool
			hc := &hookClient{Client: srv.Client(t)}
			hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if refuse.Load() && cmd.script == "rw_release" {
					return rueidis.NewErrorResult(errDriftDial)
				}
				return call()
			})
			const watchdog = time.Second
			c, err := rlock.New(hc, rlock.WithWatchdogTimeout(watchdog), rlock.WithCleanupTimeout(150*time.Millisecond))
			require.NoError(t, err)
			defer c.Close()
			other, err := rlock.New(srv.Client(t))
			require.NoError(t, err)
			defer other.Close()
			name := redistest.Name(t)
			first, second := c.RWMutex(name+"-a"), c.RWMutex(name+"-b")
			require.NoError(t, other.RWMutex(name+"-b").Lock(bg))
			var m0 rlock.Locker = first
			held := func() (int, error) { return first.WriteHoldCount(bg) }
			if readFirst {
				m0 = first.RLocker()
				held = func() (int, error) { return first.ReadHoldCount(bg) }
			}
			refuse.Store(true)
			ok, err := rlock.NewMultiLock(m0, second.RLocker()).TryLock(bg, 0, 0)
			refuse.Store(false)
			t.Logf("TryLock -> %v, %v", ok, err)
			require.False(t, ok)
			require.Error(t, err)
			time.Sleep(2 * watchdog)
			n, herr := held()
			require.NoError(t, herr)
			require.Equal(t, 0, n, "Redis still counts the member the failed TryLock took (renewed)")
		})
	}
}
