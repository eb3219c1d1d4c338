package rlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// failingScripts is a rueidis client whose scripts, once armed, pass through pass more
// and then fail without being sent, as if the server could not be reached: the Client
// cannot tell whether they were applied. It is a hookClient (its hook: failingScripts.hook);
// the scripts of a pipeline go straight on.
type failingScripts struct {
	*hookClient
	armed atomic.Bool
	pass  atomic.Int32
}

func (f *failingScripts) hook(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
	if !f.armed.Load() || cmd.multi {
		return call()
	}
	if f.pass.Load() <= 0 {
		return rueidis.NewErrorResult(context.DeadlineExceeded)
	}
	res := call()
	if re, ok := rueidis.IsRedisErr(res.Error()); !ok || !re.IsNoScript() {
		f.pass.Add(-1) // a NOSCRIPT answer is followed by the script itself: not counted
	}
	return res
}

// A grant that a failed RedLock round gives back, and whose give-back fails, is nobody's:
// the RedLock does not count it and nothing will give it back. It must not be renewed: it
// expires with its lease, and the instance is free again. Before the fix the instance's
// Mutex kept the hold and the watchdog renewed it for as long as the Client lived, so the
// instance stayed locked for good (and a few such rounds could lock a majority).
func TestRedLock_failedGiveBackIsNotRenewed(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 3)
	// The cleanup timeout bounds the failing instance's replays, and every other request's
	// too: 100 ms once ran out on a loaded machine while a live instance's connection was being
	// dialled again ("given back by 1 of 3 instances ... dial tcp: i/o timeout", a CI proof
	// beside a helper's explorers). The lease outlasts the failing replays with room.
	const lease = 3 * time.Second
	opts := []rlock.Option{rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(500 * time.Millisecond)}
	cs, fs := failingFirstClients(t, ss, opts...)
	name := redistest.Name(t)
	key := redKey(name)
	// Another owner holds the name on instances 1 and 2: a round can win only instance 0.
	others := redClients(t, addrsOf(ss[1:]), opts...)
	for _, c := range others {
		require.NoError(t, c.Mutex(name).Lock(bg))
	}

	r := rlock.NewRedLock(name, cs)
	fs.pass.Store(1) // the acquire on instance 0 goes through; its give-back fails
	fs.armed.Store(true)
	ok, err := r.TryLock(bg, 0, 0)
	// A grant that came after the round's decision is given back in the background: it fails
	// too, the hook still armed (disarmed at once, that give-back went through on a loaded
	// machine, at -parallel 10, and the key was gone).
	settled(t, r)
	fs.armed.Store(false)
	require.NoError(t, err)
	require.False(t, ok, "a round granted by 1 of 3 instances")
	require.True(t, existsOn(t, ss[0], key), "the grant on instance 0 was not given back (its give-back failed)")

	// Nothing renews it now: it is gone within its lease (and its drift allowance).
	require.Eventually(t, func() bool { return !existsOn(t, ss[0], key) }, 5*lease, 20*time.Millisecond,
		"instance 0 still holds the grant a failed round could not give back: it is being renewed")
	// And the instance is anyone's again.
	m := cs[0].Mutex(name)
	ok, err = m.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, m.Unlock(bg))
}

// The same after the owner's last Unlock: an instance whose give-back failed is forgotten by
// the RedLock (a majority freed the lock, Unlock succeeded), so its hold must not be renewed.
func TestRedLock_failedUnlockIsNotRenewed(t *testing.T) {
	t.Parallel() // its own servers; it waits out leases
	ss := redServers(t, 3)
	// The cleanup timeout bounds the failing instance's replays, and every other request's
	// too: 100 ms once ran out on a loaded machine while a live instance's connection was being
	// dialled again ("given back by 1 of 3 instances ... dial tcp: i/o timeout", a CI proof
	// beside a helper's explorers). The lease outlasts the failing replays with room.
	const lease = 3 * time.Second
	opts := []rlock.Option{rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(500 * time.Millisecond)}
	cs, fs := failingFirstClients(t, ss, opts...)
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs)
	require.NoError(t, r.Lock(bg))
	// Lock returns at a majority: the third grant may still be on its way (a loaded machine:
	// the check below once found 2 instances, fasttests's run at 01d527c).
	settled(t, r)
	require.NoError(t, r.Lock(bg)) // a re-entry: the instance's give-back is of two holds
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
	require.Equal(t, 3, holdersOn(t, ss, key))

	fs.armed.Store(true) // every script to instance 0 fails from now on
	require.NoError(t, r.Unlock(bg), "two of three instances freed it")
	settled(t, r) // Unlock returns at a majority: instance 0's give-back fails too
	fs.armed.Store(false)
	require.True(t, existsOn(t, ss[0], key), "instance 0's give-back failed")
	require.Eventually(t, func() bool { return !existsOn(t, ss[0], key) }, 5*lease, 20*time.Millisecond,
		"instance 0 still holds what a failed Unlock could not give back: it is being renewed")
	ok, err := r.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, r.Unlock(bg))
}

// failingFirstClients returns a Client per server, the first one's scripts going through a
// failingScripts (returned).
func failingFirstClients(t *testing.T, ss []*redistest.Server, opts ...rlock.Option) ([]*rlock.Client, *failingScripts) {
	t.Helper()
	fs := &failingScripts{}
	cs := make([]*rlock.Client, len(ss))
	for i, s := range ss {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		var inner rueidis.Client = rc
		if i == 0 {
			fs.hookClient = &hookClient{Client: rc}
			fs.set(fs.hook)
			inner = fs
		}
		c, err := rlock.New(inner, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs, fs
}

// A give-back that failed abandons the holds it was for and no other: the owner's next grant
// on that instance, which can come as soon as the failed give-back lets the instance's hold
// go, is the RedLock's, and stays counted and renewed. Before the fix the give-back abandoned
// after it had let the hold go (Mutex.Unlock, then abandonFailed): a Lock of the owner right
// after an Unlock that returned at a majority was granted on the instance in between, and the
// abandon ended that new tenure: nothing renewed the hold the RedLock counted there, and Redis
// counted 2 holds of the owner where the Client counted none.
func TestRedLock_failedGiveBackSparesNextGrant(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 3)
	// 3 s, not 1: the check below that instance 0's hold stays renewed for 2 leases gives
	// each renewal a third of the lease to land, which one late renewal on a loaded machine
	// missed by a 1 s lease's margin (as 8b693d8 found for the watchdog tests; the issue's
	// "RedLock give-back set's unnamed failure", not reproduced in 12 loaded runs). The
	// cleanup timeout bounds instance 0's failing replays, and every Unlock's give-back too:
	// 100 ms ran out on instances 1 and 2 on a machine at a load of 13-18 on 2 cores ("two of
	// three instances freed it"), as it had for TestRedLock_failedGiveBackIsNotRenewed.
	const lease = 3 * time.Second
	opts := []rlock.Option{rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(2 * time.Second)}
	cs, fs := failingFirstClients(t, ss, opts...)
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(5*time.Second))
	require.NoError(t, r.Lock(bg))
	settled(t, r)

	// Instance 0's give-back fails, and then waits (the hook) before it abandons the hold.
	failed, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer rlock.OnGiveBackFailed(func(n string) {
		if n != name {
			return
		}
		once.Do(func() { close(failed) })
		select {
		case <-proceed:
		case <-time.After(10 * time.Second):
		}
	})()
	defer func() {
		select {
		case <-proceed:
		default:
			close(proceed)
		}
	}()
	fs.armed.Store(true) // every script to instance 0 fails
	require.NoError(t, r.Unlock(bg), "two of three instances freed it")
	select {
	case <-failed:
	case <-time.After(10 * time.Second): // its replays last the cleanup timeout
		t.Fatal("instance 0's give-back did not fail")
	}
	fs.armed.Store(false)

	// The owner locks again at once. Instance 0's grant must wait for the failed give-back
	// to be done with the old hold; before the fix it came in between (given up to 500 ms).
	require.NoError(t, r.Lock(bg), "instances 1 and 2 grant it")
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n, _ := rlock.RedInstanceHolds(r, bg); n[cs[0]] == 1 {
			break
		}
	}
	close(proceed)
	settled(t, r)

	n, w := rlock.RedInstanceHolds(r, bg)
	require.Equal(t, 1, n[cs[0]], "the RedLock counts instance 0's grant")
	assert.True(t, w[cs[0]], "instance 0's tenure ended under the RedLock that counts it")
	assert.Equal(t, 1, hashHolds(t, ss[:1], cs[0], name), "Redis counts on instance 0 what its Client counts")
	never(t, func() bool { return !existsOn(t, ss[0], key) }, 2*lease, 50*time.Millisecond,
		"instance 0's hold is not renewed")
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
	require.Equal(t, 0, holdersOn(t, ss, key), "every instance freed it")
}

// A failed re-entry round gives back the grant it got; a give-back that Redis refuses for want
// of rights (ErrNoPermission) abandons that one hold and no other: it becomes an orphan of the
// instance's tenure, which goes on for the RedLock's first hold (renewed, and given back with
// it by the last Unlock). Before the fix the hold was abandoned twice, by the instance's
// Unlock and again by the round's give-back: the second took the RedLock's own hold, ending
// the instance's tenure under the RedLock, and Redis kept 2 holds that nothing renewed.
func TestRedLock_refusedGiveBackAbandonsOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses servers")
	}
	ss := redServers(t, 3)
	c0 := aclUser(t, ss[0], "red0", "")
	cs := append([]*rlock.Client{c0}, redClients(t, addrsOf(ss[1:]))...)
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(300*time.Millisecond))
	require.NoError(t, r.Lock(bg))
	settled(t, r)

	p1, p2 := newPauser(t, ss[1]), newPauser(t, ss[2])
	defer p1.resume()
	defer p2.resume()
	p1.pause()
	p2.pause()
	done := make(chan bool, 1)
	go func() {
		ok, _ := r.TryLock(bg, 0, 0) // instances 1 and 2 are silent: an error or a refusal
		done <- ok
	}()
	redistest.WaitFor(t, 5*time.Second, "instance 0's re-entry grant", func() bool {
		return hashHolds(t, ss[:1], c0, name) == 2
	})
	// From now on instance 0 refuses every give-back (HINCRBY); the renewals go on.
	ss[0].Do(t, "ACL", "SETUSER", "red0", "-hincrby")
	select {
	case ok := <-done:
		require.False(t, ok, "a re-entry granted by 1 of 3 instances")
	case <-time.After(5 * time.Second):
		t.Fatal("TryLock did not return")
	}
	require.Equal(t, 2, hashHolds(t, ss[:1], c0, name), "instance 0 refused the give-back")
	ss[0].Do(t, "ACL", "SETUSER", "red0", "+hincrby")
	p1.resume()
	p2.resume()
	settled(t, r)

	n, w := rlock.RedInstanceHolds(r, bg)
	require.Equal(t, 1, n[c0], "the RedLock counts its first hold on instance 0")
	require.True(t, w[c0], "instance 0's tenure ended under the RedLock that counts it")
	require.NoError(t, r.Err(bg))
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
	require.Equal(t, 0, holdersOn(t, ss, key), "the last Unlock gave back the orphan with the hold")
}
