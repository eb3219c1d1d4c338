package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Review tests on a real 3+3 Redis Cluster (skipped under -short).

// An Unlock while the lock's slot is being migrated, before any key moved: every key is on
// the source, which serves single-key scripts and multi-key scripts whose keys all exist.
// The plain Mutex's release was fixed for this (126aa20: its first send carries the lock's
// key alone), but the FairMutex's and RWMutex's releases still carry their request's release
// record (a key that exists nowhere yet), so the source answers TRYAGAIN for as long as the
// migration lasts: execServed resends until the cleanup timeout and the Unlock fails. So
// does the plain Mutex's release that hands the lock to a parked waiter of the same Client
// (KEYS lock, forced record, fence).
func TestReviewCluster_unlockWhileSlotMigrates(t *testing.T) {
	skipShortCluster(t)
	cl := redistest.StartCluster(t)
	rc := cl.Client(t)
	const cleanup = 2 * time.Second
	c, err := rlock.New(rc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	names, slot := sameSlotNames(t, c, 5)

	plain := c.Mutex(names[4]) // the control: a plain release (fixed by 126aa20)
	fair := c.FairMutex(names[1])
	rw := c.RWMutex(names[2])
	rd := c.RWMutex(names[3])
	for i, lock := range []func() (bool, error){
		func() (bool, error) { return plain.TryLock(bg, 0, time.Minute) },
		func() (bool, error) { return fair.TryLock(bg, 0, time.Minute) },
		func() (bool, error) { return rw.TryLock(bg, 0, time.Minute) },
		func() (bool, error) { return rd.TryRLock(bg, 0, time.Minute) },
	} {
		ok, err := lock()
		require.NoError(t, err, "lock #%d", i)
		require.True(t, ok, "lock #%d", i)
	}

	// A second Mutex handle of the same Client waits on names[0]: parked, it is the
	// successor a release hands the lock to.
	hand := c.Mutex(names[0])
	hold := c.Mutex(names[0])
	ok, err := hold.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	got := make(chan error, 1)
	hctx, hcancel := context.WithCancel(bg)
	defer hcancel()
	go func() {
		ok, err := hand.TryLock(hctx, 30*time.Second, time.Minute)
		if err == nil && !ok {
			err = errors.New("not acquired within the wait")
		}
		got <- err
	}()
	redistest.WaitFor(t, 10*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, hand) == 1 })

	src := cl.MasterOf(t, plain.Key())
	mig := cl.BeginMigration(t, slot, otherMaster(t, cl, src))
	finished := false
	defer func() {
		if !finished {
			mig.Finish(t)
		}
	}()

	var failed []string
	for what, unlock := range map[string]func() error{
		"Mutex.Unlock (control)":                  func() error { return plain.Unlock(bg) },
		"FairMutex.Unlock":                        func() error { return fair.Unlock(bg) },
		"RWMutex.Unlock":                          func() error { return rw.Unlock(bg) },
		"RWMutex.RUnlock":                         func() error { return rd.RUnlock(bg) },
		"Mutex.Unlock handing to a parked waiter": func() error { return hold.Unlock(bg) },
	} {
		start := time.Now()
		if err := unlock(); err != nil {
			failed = append(failed, fmt.Sprintf("%s after %v: %v", what, time.Since(start).Round(time.Millisecond), err))
		}
	}
	mig.Finish(t)
	finished = true
	for _, f := range failed {
		t.Errorf("refused while the slot migrates (no key has moved): %s", f)
	}
	if len(failed) == 0 {
		require.NoError(t, await(t, got, 30*time.Second, "the parked waiter"))
		require.NoError(t, hand.Unlock(bg))
		return
	}
	hcancel() // a refused hand-off leaves the lock held until its lease ends
	<-got
}

// reviewAttempts is a client that counts the lock attempts sent through it (EVALSHA or EVAL
// answered otherwise than NOSCRIPT).
type reviewAttempts struct {
	rueidis.Client
	n *atomic.Int64
}

func (c reviewAttempts) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cs := cmd.Commands()
	script := len(cs) > 0 && (cs[0] == "EVALSHA" || cs[0] == "EVAL")
	res := c.Client.Do(ctx, cmd)
	if script {
		if re, ok := rueidis.IsRedisErr(res.Error()); !ok || !re.IsNoScript() {
			c.n.Add(1)
		}
	}
	return res
}

// A waiter asleep on a lock whose keys have moved to the target of a migration in progress
// (the slot is still the source's: CLUSTER SLOTS, and so the Subscriber, say so, and the
// source serves SSUBSCRIBE until SETSLOT NODE). The holder's release is served on the target
// (ASK), and its SPUBLISH goes to the target's subscribers: none. The waiter is not woken; it
// sleeps until the holder's lease would have ended (or until the migration finishes and the
// source ends the subscription). Expected: woken by the release, as on a slot at rest.
func TestReviewCluster_wakeUpLostWhileSlotMigrates(t *testing.T) {
	skipShortCluster(t)
	cl := redistest.StartCluster(t)
	holderC, err := rlock.New(cl.Client(t))
	require.NoError(t, err)
	defer holderC.Close()
	var attempts atomic.Int64
	waiterC, err := rlock.New(reviewAttempts{Client: cl.Client(t), n: &attempts})
	require.NoError(t, err)
	defer waiterC.Close()

	name := redistest.Name(t)
	holder := holderC.Mutex(name)
	ok, err := holder.TryLock(bg, 0, time.Minute) // a fixed lease: no renewals
	require.NoError(t, err)
	require.True(t, ok)

	src := cl.MasterOf(t, holder.Key())
	mig := cl.BeginMigration(t, redistest.Slot(holder.Key()), otherMaster(t, cl, src))
	finished := false
	defer func() {
		if !finished {
			mig.Finish(t)
		}
	}()
	mig.MoveKeys(t) // every key of the slot (the lock and its fence) is on the target now

	waiter := waiterC.Mutex(name)
	got := make(chan error, 1)
	go func() {
		ok, err := waiter.TryLock(bg, 40*time.Second, time.Minute)
		if err == nil && !ok {
			err = errors.New("not acquired within the wait")
		}
		got <- err
	}()
	// The waiter's wait: an attempt, the Watch, an attempt (the mark predates the channel),
	// the subscription's confirmation wakes it, an attempt; then it sleeps (the holder's lease
	// is about a minute).
	redistest.WaitFor(t, 10*time.Second, "the waiter to subscribe and make its three attempts", func() bool {
		return rlock.ChannelLive(waiterC, waiter) && attempts.Load() >= 3
	})
	require.EqualValues(t, 3, attempts.Load())

	released := time.Now()
	require.NoError(t, holder.Unlock(bg), "the release (served on the target through ASK)")
	select {
	case err := <-got:
		require.NoError(t, err)
		t.Logf("acquired %v after the release", time.Since(released))
		require.NoError(t, waiter.Unlock(bg))
	case <-time.After(5 * time.Second):
		mig.Finish(t)
		finished = true
		err := await(t, got, 40*time.Second, "the waiter after the migration finished")
		t.Logf("woken only when the migration finished, %v after the release: %v", time.Since(released), err)
		if err == nil {
			require.NoError(t, waiter.Unlock(bg))
		}
		t.Fatalf("the waiter was not woken by the release within 5 s (attempts: %d)", attempts.Load())
	}
}
