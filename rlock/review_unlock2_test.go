package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A re-entered RedLock whose hold is gone from a majority of the instances (keys deleted,
// before any renewal noticed): the non-last Unlock finds it (ErrNotHeld from those
// instances), yet since ca403d8 answers nil, as if a majority gave it back. A Mutex's
// non-last Unlock in the same spot answers ErrNotHeld.
func TestReview_reentryUnlockWithLostMajority(t *testing.T) {
	for _, lost := range []int{3} {
		t.Run("all", func(t *testing.T) {
			ss := redServers(t, 3)
			cs := redClients(t, []string{ss[0].Addr(), ss[1].Addr(), ss[2].Addr()},
				rlock.WithWatchdogTimeout(10*time.Second))
			name := redistest.Name(t)
			key := redKey(name)
			r := rlock.NewRedLock(name, cs)
			require.NoError(t, r.Lock(bg))
			require.NoError(t, r.Lock(bg))
			settled(t, r)
			for i := 0; i < lost; i++ {
				ss[i].Do(t, "DEL", key)
			}
			err := r.Unlock(bg)
			t.Logf("non-last Unlock: %v; Err after: %v", err, r.Err(bg))
			n, w := rlock.RedInstanceHolds(r, bg)
			for i, c := range cs {
				t.Logf("instance %d: RedLock counts %d, followed %v; Redis holds %d", i, n[c], w[c], ownerHoldsOn(t, ss[i], key))
			}
			time.Sleep(300 * time.Millisecond)
			t.Logf("Err 300ms later: %v", r.Err(bg))
			require.ErrorIs(t, err, rlock.ErrNotHeld, "the hold was gone from a majority")
		})
	}
}

// The same with a Mutex, for comparison.
func TestReview_mutexReentryUnlockLost(t *testing.T) {
	ss := redServers(t, 1)
	cs := redClients(t, []string{ss[0].Addr()}, rlock.WithWatchdogTimeout(10*time.Second))
	name := redistest.Name(t)
	m := cs[0].Mutex(name)
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Lock(bg))
	ss[0].Do(t, "FLUSHALL")
	err := m.Unlock(bg)
	t.Logf("mutex non-last Unlock: %v", err)
	require.ErrorIs(t, err, rlock.ErrNotHeld)
}

// 5ba33a0: a non-last Unlock whose give-back on instance 0 fails leaves the hold to the
// instance's tenure as an orphan; since issue 23 the tenure's first renewal that Redis
// confirms after that gives it back, conditionally (hold.settleOrphans: a RedLock instance's
// orphans as a Mutex's; they rode to the instance's last hold, renewed, before), and it is
// never an error later: a re-entry or the last Unlock then finds nothing more to give back.
func TestReview_nonLastUnlockOrphanLifecycle(t *testing.T) {
	// Serial (its cases side by side): its precondition needs each instance's re-entry
	// grant within the 250 ms instance timeout, which the parallel tests' load missed under
	// -race (2, 2, 1: once in 36 runs beside the explorers).
	for _, then := range []string{"last_unlock", "reenter"} {
		t.Run(then, func(t *testing.T) {
			t.Parallel() // servers of its own: the two cases wait out their leases side by side
			ss := redServers(t, 3)
			const lease = 600 * time.Millisecond
			cs, fs := failingFirstClients(t, ss, rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(100*time.Millisecond))
			name := redistest.Name(t)
			key := redKey(name)
			// An instance timeout that a loaded machine does not outrun: a third instance's
			// grant past the default 90 ms is not needed, given back, and the precondition
			// below fails (1 of 26 runs beside another test).
			r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(250*time.Millisecond))
			require.NoError(t, r.Lock(bg))
			settled(t, r)
			require.NoError(t, r.Lock(bg))
			settled(t, r)
			n0, _ := rlock.RedInstanceHolds(r, bg)
			require.Equal(t, []int{2, 2, 2}, []int{n0[cs[0]], n0[cs[1]], n0[cs[2]]}, "re-entered on every instance")
			fs.armed.Store(true)
			require.NoError(t, r.Unlock(bg), "two of three gave a hold back")
			settled(t, r)
			fs.armed.Store(false)
			n, _ := rlock.RedInstanceHolds(r, bg)
			require.Equal(t, []int{1, 1, 1}, []int{n[cs[0]], n[cs[1]], n[cs[2]]})
			redistest.WaitFor(t, 3*lease, "the orphan given back at the tenure's next renewal", func() bool { return ownerHoldsOn(t, ss[0], key) == 1 })
			time.Sleep(lease)
			require.Equal(t, 1, ownerHoldsOn(t, ss[0], key), "the tenure's own hold renewed")
			require.NoError(t, r.Err(bg))
			if then == "reenter" {
				require.NoError(t, r.Lock(bg))
				settled(t, r)
				redistest.WaitFor(t, 2*time.Second, "the re-entry counted", func() bool { return ownerHoldsOn(t, ss[0], key) == 2 })
				require.NoError(t, r.Unlock(bg))
				settled(t, r)
				time.Sleep(100 * time.Millisecond)
				for i := range ss {
					require.Equal(t, 1, ownerHoldsOn(t, ss[i], key), "server %d", i)
				}
			}
			require.NoError(t, r.Unlock(bg), "the last Unlock")
			settled(t, r)
			redistest.WaitFor(t, lease/2, "released everywhere, the orphan too, before its lease", func() bool { return holdersOn(t, ss, key) == 0 })
			require.ErrorIs(t, r.Unlock(bg), rlock.ErrNotHeld)
		})
	}
}

// With a minority lost before a re-entry (holds 2, 2, 1), a non-last Unlock whose give-back on
// instance 0 fails (its hold left as an orphan, the RedLock's count taken down all the same)
// answers ErrNotHeld ("given back by 1 of 3 instances") though the owner holds the lock on a
// majority (Err nil) and nothing is left for a retry to do.
func TestReview_nonLastUnlockFailedGiveBackSaysNotHeld(t *testing.T) {
	ss := redServers(t, 3)
	const lease = 600 * time.Millisecond
	cs, fs := failingFirstClients(t, ss, rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(100*time.Millisecond))
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs)
	require.NoError(t, r.Lock(bg))
	settled(t, r)
	ss[2].Do(t, "DEL", key)
	redistest.WaitFor(t, 3*lease, "instance 2 lost", func() bool { _, w := rlock.RedInstanceHolds(r, bg); return !w[cs[2]] })
	require.NoError(t, r.Lock(bg))
	settled(t, r)
	n, _ := rlock.RedInstanceHolds(r, bg)
	require.Equal(t, []int{2, 2, 1}, []int{n[cs[0]], n[cs[1]], n[cs[2]]})
	fs.armed.Store(true)
	err := r.Unlock(bg)
	settled(t, r)
	fs.armed.Store(false)
	t.Logf("non-last Unlock: %v; Err: %v", err, r.Err(bg))
	require.NoError(t, r.Err(bg), "held on instances 0 and 1")
	assert.NotErrorIs(t, err, rlock.ErrNotHeld, "the owner holds the lock")
	require.NoError(t, r.Unlock(bg), "the last Unlock")
	settled(t, r)
	redistest.WaitFor(t, lease/2, "released", func() bool { return holdersOn(t, ss, key) == 0 })
}
