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

// The tests of this file run on a real Redis Cluster of three masters and three replicas
// (redistest.StartCluster): slot migration, failover and a master killed.

func skipShortCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	if !fullRun() {
		t.Skip("a real 3-master, 3-replica Redis Cluster: run with " + envFull + "=1 (.ci/run does)")
	}
}

// sameSlotNames returns n lock names whose keys (prefix as the Client's default) share a
// hash slot, and that slot.
func sameSlotNames(t *testing.T, c *rlock.Client, n int) ([]string, int) {
	t.Helper()
	base := redistest.Name(t)
	bySlot := make(map[int][]string)
	for i := 0; i < 1_000_000; i++ {
		name := fmt.Sprintf("%s-%d", base, i)
		s := redistest.Slot(c.Mutex(name).Key())
		bySlot[s] = append(bySlot[s], name)
		if len(bySlot[s]) == n {
			return bySlot[s], s
		}
	}
	t.Fatal("no names found that share a slot")
	return nil, 0
}

// otherMaster is a master of cl other than m.
func otherMaster(t *testing.T, cl *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	for _, s := range cl.Masters(t) {
		if s != m {
			return s
		}
	}
	t.Fatal("no other master")
	return nil
}

// Locks held in watchdog mode survive a slot migration that keeps their keys split between
// two nodes for several leases: the slot's batched renewal (one script for both locks) is
// refused with TRYAGAIN while one lock's key has moved and the other's has not, and the
// renewal falls back to a script per lock, which each node serves (the moved key through
// ASK). Before, the batch was sent again as it was until the leases ran out: both locks
// were lost. A waiter parked on one of them is woken by its release after the migration.
func TestCluster_heldLocksSurviveSlotMigration(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	const lease = 600 * time.Millisecond
	c, err := rlock.New(rc, rlock.WithWatchdogTimeout(lease))
	require.NoError(t, err)
	defer c.Close()
	names, slot := sameSlotNames(t, c, 2)
	a, b := c.Mutex(names[0]), c.Mutex(names[1])
	require.NoError(t, a.Lock(bg))
	require.NoError(t, b.Lock(bg))

	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	got := make(chan error, 1)
	wctx, wcancel := context.WithTimeout(bg, 30*time.Second)
	defer wcancel()
	waiter := c2.Mutex(names[0])
	go func() { got <- waiter.Lock(wctx) }()

	src := cl.MasterOf(t, a.Key())
	mig := cl.BeginMigration(t, slot, otherMaster(t, cl, src))
	mig.MoveKeys(t, a.Key()) // a's lock on the target, b's (and both fences) on the source
	// Keys split for five leases: every renewal of the pair as one script meets TRYAGAIN.
	deadline := time.Now().Add(5 * lease)
	for time.Now().Before(deadline) {
		require.NoError(t, a.Err(bg), "a lost while its slot migrates")
		require.NoError(t, b.Err(bg), "b lost while its slot migrates")
		time.Sleep(lease / 6)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter got %v while the lock was held", err)
	default:
	}
	mig.Finish(t)
	require.NoError(t, a.Err(bg))
	require.NoError(t, b.Err(bg))
	require.NoError(t, a.Unlock(bg))
	require.NoError(t, await(t, got, 20*time.Second, "the waiter to be woken after the migration"))
	require.NoError(t, waiter.Unlock(bg))
	require.NoError(t, b.Unlock(bg))
}

// A renewal round of locks spread over hundreds of slots costs one pipeline (one round trip
// per node), not one round trip per slot: the scripts of all slots go out in one DoMulti.
func TestCluster_renewalRoundIsOnePipeline(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	var do, multi, scripts atomic.Int64
	// The calls made: Do, DoMulti and the commands of every DoMulti.
	rc := &hookClient{Client: cl.Client(t), every: func(cmds [][]string, m bool) {
		if m {
			multi.Add(1)
			scripts.Add(int64(len(cmds)))
		} else {
			do.Add(1)
		}
	}}
	const lease = 900 * time.Millisecond
	c, err := rlock.New(rc, rlock.WithWatchdogTimeout(lease))
	require.NoError(t, err)
	defer c.Close()
	base := redistest.Name(t)
	const n = 300
	locks := make([]*rlock.Mutex, n)
	slots := make(map[int]bool)
	for i := range locks {
		locks[i] = c.Mutex(fmt.Sprintf("%s-%d", base, i))
		slots[redistest.Slot(locks[i].Key())] = true
	}
	// Taken all at once, so that their leases fall due close together, even on a loaded
	// machine (taken one after another, they spread over the renewal period and the batches
	// shrink: a fresh-clone .ci/run saw 7 scripts a pipeline).
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = locks[i].Lock(bg)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// 300 names land on about 297 slots on average, but CRC16 is linear: names that differ
	// only in their last digits can collide more, depending on the random base (a CI run saw
	// 244). What the test needs is many slots per round, not a number of them.
	require.Greater(t, len(slots), 150, "the names span many slots")
	// The first round loads the renew script on the nodes (NOSCRIPT, then EVAL: a second
	// pipeline); count from the next.
	redistest.WaitFor(t, 10*time.Second, "a first renewal round", func() bool { return scripts.Load() >= int64(len(slots)) })
	// Count the calls of the renewals alone: from one renewal to the next two, nothing else
	// is sent.
	do.Store(0)
	multi.Store(0)
	scripts.Store(0)
	redistest.WaitFor(t, 10*time.Second, "two renewal rounds", func() bool { return scripts.Load() >= 2*int64(len(slots)) })
	require.Zero(t, do.Load(), "renewals sent one script at a time")
	// The watchdog sends the leases due together in one batch; how many are due together
	// depends on how fast the locks were taken, so the batches are not counted exactly:
	// each is one pipeline of the scripts of all its slots (before, one round trip each).
	// One round trip per script (before the pipelined renewals) would be 1 script a pipeline.
	require.LessOrEqual(t, 4*multi.Load(), scripts.Load(), "%d pipelines for %d renew scripts", multi.Load(), scripts.Load())
	for _, m := range locks {
		require.NoError(t, m.Err(bg))
		require.NoError(t, m.Unlock(bg))
	}
}

// An Unlock after the lock's master was killed and its replica promoted reaches the new
// master: a lock whose lease outlived the outage is given back there (the replica had it),
// one whose lease ran out in the outage is reported not held. Before, a Client that had sent
// nothing since the crash still pointed at the dead node, and its Unlock returned the
// refused dial ("connection refused"), a refused dial counting as a request with no effect
// that is not sent again.
func TestCluster_unlockAfterMasterKilled(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	c, err := rlock.New(rc, rlock.WithCleanupTimeout(20*time.Second))
	require.NoError(t, err)
	defer c.Close()
	names, _ := sameSlotNames(t, c, 2)
	long, short := c.Mutex(names[0]), c.Mutex(names[1])
	ok, err := long.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = short.TryLock(bg, 0, 1500*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	master := cl.MasterOf(t, long.Key())
	// The replica has both locks before the kill; else the long one dies with the master and
	// its Unlock rightly says not held. (A WAIT sent here did not ensure it: it counts acks
	// of the admin connection's own last write, and that connection wrote nothing.)
	cl.WaitReplicated(t, master, 20*time.Second)
	cl.KillMaster(t, master) // promotion takes longer than the short lease

	err = short.Unlock(bg)
	require.ErrorIs(t, err, rlock.ErrNotHeld, "the short lease ran out in the outage")
	require.NoError(t, long.Unlock(bg), "the long lease outlived the outage: given back on the new master")
	held, err := c.Mutex(names[0]).IsLocked(bg)
	require.NoError(t, err)
	require.False(t, held)
}

// An acquire whose keys are split by a migration in progress (the lock moved, its fence not)
// is refused with TRYAGAIN, which it rides out within its wait; it gets the lock once the
// migration ends. A single attempt (wait 0) reports the refusal instead of waiting.
func TestCluster_acquireDuringMigration(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	name := redistest.Name(t)
	holder := c.Mutex(name)
	ok, err := holder.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, holder.Unlock(bg)) // the fence stays, the lock goes
	ok, err = holder.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	src := cl.MasterOf(t, holder.Key())
	mig := cl.BeginMigration(t, redistest.Slot(holder.Key()), otherMaster(t, cl, src))
	mig.MoveKeys(t, holder.Key()) // the lock on the target, the fence on the source
	require.NoError(t, holder.Unlock(bg), "a release of the moved key (ASK)")

	other := c.Mutex(name)
	_, err = other.TryLock(bg, 0, time.Minute)
	require.Error(t, err, "one attempt while the lock's keys are split")
	require.Contains(t, err.Error(), "TRYAGAIN")

	got := make(chan error, 1)
	go func() {
		ok, err := other.TryLock(bg, 20*time.Second, time.Minute)
		if err == nil && !ok {
			err = fmt.Errorf("not acquired within the wait")
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("acquired (or failed: %v) while the keys were split", err)
	case <-time.After(500 * time.Millisecond):
	}
	mig.Finish(t)
	require.NoError(t, await(t, got, 20*time.Second, "the acquire after the migration"))
	require.NoError(t, other.Unlock(bg))
}
