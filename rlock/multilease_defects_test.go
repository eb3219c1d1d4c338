package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestMultiLock_twoHandlesOfOneReadWriteLockAreRefused: NewMultiLock's godoc refuses "two
// handles of one Client on one lock name"; for a Mutex-family lock it does
// (TestMultiLock_badInput), for an RWMutex (write side) or its ReadLocker it must too.
func TestMultiLock_twoHandlesOfOneReadWriteLockAreRefused(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	for what, ml := range map[string]*rlock.MultiLock{
		"two RWMutex handles": rlock.NewMultiLock(c.RWMutex("a"), c.RWMutex("a")),
		"two ReadLockers":     rlock.NewMultiLock(c.RWMutex("a").RLocker(), c.RWMutex("a").RLocker()),
		"ReadLocker twice":    rlock.NewMultiLock(c.RWMutex("a").RLocker(), c.RWMutex("b"), c.RWMutex("a").RLocker()),
	} {
		ok, err := ml.TryLock(bg, 0, time.Second)
		if ok {
			_ = ml.Unlock(bg)
		}
		require.ErrorIs(t, err, rlock.ErrInvalid, what)
	}
}

// TestMultiLock_bothSidesOfOneReadWriteLockAreRefused: an RWMutex handle and its own
// ReadLocker are one lock of one Client too.
func TestMultiLock_bothSidesOfOneReadWriteLockAreRefused(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	rw := c.RWMutex("a")
	for what, ml := range map[string]*rlock.MultiLock{
		"write then read": rlock.NewMultiLock(rw, rw.RLocker()),
		"read then write": rlock.NewMultiLock(rw.RLocker(), rw),
		"mutex and rw":    rlock.NewMultiLock(c.Mutex("a"), c.RWMutex("a")),
		"zero ReadLocker": rlock.NewMultiLock(c.Mutex("b"), (*rlock.RWMutex)(nil).RLocker()),
	} {
		require.ErrorIs(t, ml.Lock(bg), rlock.ErrInvalid, what)
	}
	// One name on a Client's RWMutex and another name's: two locks.
	ml := rlock.NewMultiLock(c.RWMutex("a").RLocker(), c.RWMutex("b"))
	require.NoError(t, ml.Lock(bg))
	require.NoError(t, ml.Unlock(bg))
}

// TestMultiLock_roundsGiveBackOfAnExpiredFixedLeaseIsNoFailure: a round that takes a member
// with a short fixed lease and then cannot have the next in time gives the first back; if
// its lease ran out meanwhile, that give-back finds nothing held (ErrLeaseExpired): nothing is
// left held, so the round failed for contention only, and TryLock must go on waiting within
// its wait (MultiLock.TryLock's godoc: (false, nil) when wait ran out, errors only for ctx's
// end, a member's non-contention error, or a give-back that failed), not return the
// give-back's ErrLeaseExpired at once. Found by TestSpinMultiHunt_leases (seed
// 1796456118734302388 trial 29: "acquire failed with ... unlock ...: not held: its fixed
// lease ran out" 32 ms into a 66 ms wait).
func TestMultiLock_roundsGiveBackOfAnExpiredFixedLeaseIsNoFailure(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	name := redistest.Name(t)
	other := c.Mutex(name + "-b")
	require.NoError(t, other.Lock(bg))
	release := time.AfterFunc(150*time.Millisecond, func() { _ = other.Unlock(bg) })
	defer release.Stop()
	// Keys sort "-a" first: each round takes a (lease 10ms), then waits 10-20ms for b.
	ml := rlock.NewMultiLock(c.Mutex(name+"-a"), c.Mutex(name+"-b"))
	start := time.Now()
	ok, err := ml.TryLock(bg, 2*time.Second, 10*time.Millisecond)
	t.Logf("TryLock(wait 2s, lease 10ms) after %v: %v, %v", time.Since(start).Round(time.Millisecond), ok, err)
	require.NoError(t, err)
	require.True(t, ok)
}

// TestMultiLock_failedWatchdogRoundTurnsHeldMembersToWatchdogMode: the behaviour the Mutex and
// MultiLock godoc state for a round that fails after re-entering members the owner holds with
// a fixed lease: each re-entry in watchdog mode turned the watchdog on for the rest of that
// member's tenure, though the round gave its hold back, so the earlier hold is renewed past
// its fixed lease until its Unlock (TestSpinMultiHunt_leases, seed 1796457983141400584
// trial 11, booked such members as ended). A change to it is a change of the documented
// contract.
func TestMultiLock_failedWatchdogRoundTurnsHeldMembersToWatchdogMode(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t), rlock.WithWatchdogTimeout(time.Second))
	require.NoError(t, err)
	defer c.Close()
	name := redistest.Name(t)
	a, b, busy := c.Mutex(name+"-a"), c.Mutex(name+"-b"), c.Mutex(name+"-c")
	require.NoError(t, c.Mutex(name+"-c").Lock(bg)) // another handle: another owner
	const lease = 300 * time.Millisecond
	for _, m := range []*rlock.Mutex{a, b} {
		ok, err := m.TryLock(bg, 0, lease)
		require.NoError(t, err)
		require.True(t, ok)
	}
	taken := time.Now()
	ml := rlock.NewMultiLock(a, b, busy)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, ml.Lock(ctx), context.DeadlineExceeded)
	time.Sleep(time.Until(taken.Add(2 * lease)))
	for _, m := range []*rlock.Mutex{a, b} {
		require.NoError(t, m.Err(bg), "the fixed lease's end passed: the hold lives on in watchdog mode")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the round's re-entry was given back; the earlier hold remains")
		ttl, err := m.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, lease, "renewed to the watchdog timeout")
		require.NoError(t, m.Unlock(bg))
		ex := srv.Do(t, "EXISTS", m.Key())
		n64, _ := ex.AsInt64()
		require.Zero(t, n64, "its Unlock frees it")
	}
}

// TestReadLocker_keyAndName: a ReadLocker has the Key and Name of its RWMutex (MultiLock
// orders members by Key: without it, a MultiLock with a ReadLocker member kept the given
// order), and a nil one answers "" rather than panic.
func TestReadLocker_keyAndName(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	rw := c.RWMutex("a")
	require.Equal(t, rw.Key(), rw.RLocker().Key())
	require.Equal(t, "a", rw.RLocker().Name())
	var nilRL *rlock.ReadLocker
	require.Equal(t, "", nilRL.Key())
	require.Equal(t, "", nilRL.Name())
	require.Equal(t, "", (*rlock.RWMutex)(nil).RLocker().Key())
}

// TestMultiLock_lockInANestedMultiLockAndBesideItIsRefused: NewMultiLock refuses the same lock
// twice; a lock listed both inside a nested MultiLock and beside it is the same lock twice
// (before, accepted: taken twice by one owner, a re-entry for a Mutex, ErrUpgrade every round
// for a read side then the write side).
func TestMultiLock_lockInANestedMultiLockAndBesideItIsRefused(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	a, b := c.Mutex("a"), c.Mutex("b")
	rw := c.RWMutex("rw")
	inner := rlock.NewMultiLock(a, b)
	for what, ml := range map[string]*rlock.MultiLock{
		"handle inside and beside":       rlock.NewMultiLock(inner, a),
		"handle beside and inside":       rlock.NewMultiLock(b, inner),
		"another handle of the name":     rlock.NewMultiLock(inner, c.Mutex("a")),
		"two levels deep":                rlock.NewMultiLock(rlock.NewMultiLock(inner, c.Mutex("x")), c.SpinMutex("b")),
		"read side inside, write beside": rlock.NewMultiLock(rlock.NewMultiLock(rw.RLocker(), a), rw),
		"one nested MultiLock twice":     rlock.NewMultiLock(inner, inner),
		"two nested sharing one lock":    rlock.NewMultiLock(inner, rlock.NewMultiLock(c.Mutex("y"), c.Mutex("b"))),
	} {
		require.ErrorIs(t, ml.Lock(bg), rlock.ErrInvalid, what)
	}
	ml := rlock.NewMultiLock(inner, c.Mutex("z"))
	require.NoError(t, ml.Lock(bg), "disjoint members")
	require.NoError(t, ml.Unlock(bg))
}
