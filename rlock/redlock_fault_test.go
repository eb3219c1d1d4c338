package rlock_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A round that a majority refuses is decided by the instances that answer: with 2 of 5
// servers paused, an acquire refused by the other 3 does not wait for the silent two up to
// the instance timeout. (An acquire that the 3 grant is decided by them at once: see
// TestRedLock_slowMinorityNotWaitedFor.)
func TestRedLock_silentMinorityNotWaitedFor(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses servers")
	}
	ss := redServers(t, 5)
	const tmo, lease = time.Second, 20 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	other := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(tmo))
	o := rlock.NewRedLock(name, other, rlock.WithInstanceTimeout(tmo))
	for _, x := range []*rlock.RedLock{r, o} { // the scripts loaded, the servers checked
		require.NoError(t, x.Lock(bg))
		require.NoError(t, x.Unlock(bg))
	}
	settled(t, r, o) // no grant or give-back still on its way to a server about to pause
	ss[0].Pause(t)
	ss[1].Pause(t)
	defer func() {
		for _, s := range ss {
			s.Resume(t)
		}
	}()

	start := time.Now()
	ok, err := r.TryLock(bg, 0, lease)
	took := time.Since(start)
	require.NoError(t, err)
	require.True(t, ok, "granted by the 3 that answer")
	ttl, err := r.TTL(bg)
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, lease-took, "validity reduced by the time spent")

	start = time.Now()
	ok, err = o.TryLock(bg, 0, lease)
	took = time.Since(start)
	require.NoError(t, err)
	require.False(t, ok, "refused by the 3 that answer")
	require.Less(t, took, tmo*3/4, "a refusal by a majority decides the round without the silent two")

	require.NoError(t, r.Unlock(bg))
	require.Equal(t, 0, holdersOn(t, ss[2:], redKey(name)))
}

// A round that a majority answered without a majority granting it (a split: two of the
// three live instances granted, the third refused) does not wait the whole instance timeout
// for two paused instances that could still make it a win, once their servers let a
// request's timeout run out: they get the straggler's bound, as in a lost round. Waiting
// longer held the two grants all that time, refusing every other contender, whose rounds
// then split in turn: with 2 of 5 servers paused, 6 contenders took a few dozen grants in
// 2.5s instead of hundreds. The first round after the pause waits for them (they may be
// healthy and far away: TestRedLock_splitRoundWaitsForAnsweringSlowInstance). The grants are
// given back, and so are the paused instances' grants when they resume.
func TestRedLock_splitRoundNotHeldForSilentMinority(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("pauses servers")
	}
	ss := redServers(t, 5)
	const tmo, lease = time.Second, 20 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	other := redClients(t, []string{ss[4].Addr()})[0]
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(tmo))
	require.NoError(t, r.Lock(bg)) // the scripts loaded, the servers checked
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
	m := other.Mutex(name) // another owner holds the lock's key on one live server
	ok, err := m.TryLock(bg, 0, lease)
	require.NoError(t, err)
	require.True(t, ok)
	defer func() { require.NoError(t, m.Unlock(bg)) }()
	p0, p1 := newPauser(t, ss[0]), newPauser(t, ss[1])
	defer p0.resume()
	defer p1.resume()
	p0.pause()
	p1.pause()

	// The first split round waits for the paused two until the instance timeout, which
	// tells that their servers are silent.
	ok, err = r.TryLock(bg, 0, lease)
	require.NoError(t, err)
	require.False(t, ok, "granted by 2 of the 3 that answer")
	require.Equal(t, 0, holdersOn(t, ss[2:4], key), "the split round's grants given back")

	// The caller's deadline is shorter than the instance timeout: a round that waited for
	// the paused two would end with it.
	ctx, cancel := context.WithTimeout(bg, tmo*3/4)
	defer cancel()
	ok, err = r.TryLock(ctx, 0, lease)
	require.NoError(t, err, "the split round is decided by the 3 that answered, before the caller's deadline")
	require.False(t, ok, "granted by 2 of the 3 that answer")
	require.Equal(t, 0, holdersOn(t, ss[2:4], key), "the split round's grants given back")

	p0.resume()
	p1.resume()
	redistest.WaitFor(t, 10*time.Second, "the paused instances' late grants to be given back", func() bool {
		return holdersOn(t, ss[:2], key) == 0
	})
}

// A split round waits, up to the instance timeout, for a silent instance whose server
// answers: it may be healthy and far away, and its grant makes the round a win. N=3:
// instance 0 grants at once, instance 1 refuses (another owner's key there), instance 2 is
// 70ms away (timeout 200ms). Deciding the split at the straggler's bound (50ms) lost every
// round, and a Lock retried until the other key expired (found in review).
func TestRedLock_splitRoundWaitsForAnsweringSlowInstance(t *testing.T) {
	ss := redServers(t, 3)
	px := proxyTo(t, ss[2])
	addrs := addrsOf(ss)
	addrs[2] = px.Addr()
	cs := redClients(t, addrs)
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(200*time.Millisecond))
	require.NoError(t, r.Lock(bg)) // the scripts loaded, the servers checked
	require.NoError(t, r.Unlock(bg))
	settled(t, r)

	other := redClients(t, []string{ss[1].Addr()})[0]
	m := other.Mutex(name)
	ok, err := m.TryLock(bg, 0, 20*time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	defer func() { require.NoError(t, m.Unlock(bg)) }()

	px.SetLatency(35*time.Millisecond, 35*time.Millisecond)
	ok, err = r.TryLock(bg, 0, 10*time.Second)
	require.NoError(t, err)
	require.True(t, ok, "instances 0 and 2 (70ms away, timeout 200ms) are a majority that grants")
	require.NoError(t, r.Unlock(bg))
	settled(t, r)

	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	require.NoError(t, r.Lock(ctx), "a Lock that kept losing split rounds would end with its ctx")
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
}

// A failed round's grants are given back before the next round, but the caller does not wait
// for an instance that granted and then went silent: its give-back goes on in the background
// (within the Client's cleanup timeout), and the call returns. Waiting for it cost a caller
// the whole fault (a server killed right after it granted: its give-back answered when the
// server came back, nearly 4s later) or the cleanup timeout.
func TestRedLock_failedRoundGiveBackNotWaitedFor(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a server")
	}
	ss := redServers(t, 5)
	const lease = 20 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(30*time.Second))
	name := redistest.Name(t)
	key := redKey(name)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(200*time.Millisecond))
	require.NoError(t, r.Lock(bg)) // the scripts loaded, the servers checked
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
	// Another owner holds the lock's key on three servers: the round is lost, granted by
	// the other two.
	for i, c := range redClients(t, addrsOf(ss[2:])) {
		ok, err := c.Mutex(name).TryLock(bg, 0, lease)
		require.NoError(t, err)
		require.True(t, ok, "server %d", 2+i)
	}
	server := map[*rlock.Client]int{}
	for i, c := range cs {
		server[c] = i
	}
	var once sync.Once
	paused := -1
	var p *pauser
	defer func() {
		if p != nil {
			p.resume()
		}
	}()
	defer rlock.OnRoundGiveBack(func(n string, granted []*rlock.Client) {
		if n != name {
			return
		}
		once.Do(func() { // one of the two that granted stops answering before its give-back
			paused = server[granted[0]]
			p = newPauser(t, ss[paused])
			p.pause()
		})
	})()

	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := r.TryLock(bg, 0, lease)
		done <- result{ok, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		p.resume()
		<-done
		t.Fatal("TryLock waited for the give-back to the paused instance")
	}
	require.NoError(t, res.err)
	require.False(t, res.ok)
	require.NotEqual(t, -1, paused, "the round was lost with grants to give back")
	require.Positive(t, rlock.RedInFlight(r), "the paused instance's give-back goes on in the background")
	require.Equal(t, 0, holdersOn(t, ss[1-paused:2-paused], key), "the other grant given back")

	p.resume()
	settled(t, r)
	require.Equal(t, 0, holdersOn(t, ss[:2], key), "the paused instance's grant given back when it resumes")
}

// A failed round's give-back to an instance that went silent goes on in the background
// while the owner goes on: its next acquire wins on the live instances, and the hold stays
// consistent with Redis whether that give-back later succeeds (the instance resumes) or fails
// at the cleanup timeout (the instance's hold abandoned); then Unlock and a fresh Lock over
// all five leave nothing (found in review of the round changes).
func TestRedLock_pendingRoundGiveBackThenNextAcquire(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a server")
	}
	t.Parallel()
	for _, resumeFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "giveBackSucceeds", false: "giveBackFails"}[resumeFirst], func(t *testing.T) {
			t.Parallel()
			ss := redServers(t, 5)
			const lease = 3 * time.Second
			cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(time.Second))
			name := redistest.Name(t)
			key := redKey(name)
			r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(200*time.Millisecond))
			require.NoError(t, r.Lock(bg))
			require.NoError(t, r.Unlock(bg))
			settled(t, r)
			var ms []*rlock.Mutex // another owner holds the key on servers 2-4
			for i, c := range redClients(t, addrsOf(ss[2:])) {
				m := c.Mutex(name)
				ok, err := m.TryLock(bg, 0, 20*time.Second)
				require.NoError(t, err)
				require.True(t, ok, "server %d", 2+i)
				ms = append(ms, m)
			}
			server := map[*rlock.Client]int{}
			for i, c := range cs {
				server[c] = i
			}
			var once sync.Once
			paused := -1
			var p *pauser
			defer func() {
				if p != nil {
					p.resume()
				}
			}()
			restore := rlock.OnRoundGiveBack(func(n string, granted []*rlock.Client) {
				if n != name {
					return
				}
				once.Do(func() { // one of the two that granted stops answering before its give-back
					paused = server[granted[0]]
					p = newPauser(t, ss[paused])
					p.pause()
				})
			})
			ok, err := r.TryLock(bg, 0, lease)
			restore()
			require.NoError(t, err)
			require.False(t, ok)
			require.NotEqual(t, -1, paused, "the round was lost with grants to give back")
			require.Positive(t, rlock.RedInFlight(r), "the give-back to the paused instance goes on")
			for _, m := range ms {
				require.NoError(t, m.Unlock(bg))
			}
			// The next acquire while that give-back is pending: a majority of the 4 live ones.
			// Its request to the paused instance waits for the give-back's turn there and
			// gives up at its instance timeout, unsent.
			second := time.Now()
			ok, err = r.TryLock(bg, 0, lease)
			require.NoError(t, err)
			require.True(t, ok)
			if !resumeFirst { // the give-back fails at its cleanup timeout
				redistest.WaitFor(t, 10*time.Second, "the give-back to end", func() bool { return rlock.RedInFlight(r) == 0 })
			}
			p.resume()
			settled(t, r)
			require.NoError(t, r.Err(bg), "the hold survives the give-back's outcome")
			n, _ := rlock.RedInstanceHolds(r, bg)
			switch held := existsOn(t, ss[paused], key); {
			case resumeFirst:
				// The give-back was answered; the next acquire's request there went on
				// after it, within its instance timeout, and joined the hold if granted.
				require.Equal(t, map[bool]int{true: 1, false: 0}[held], n[cs[paused]], "the paused instance counted iff it holds")
			default:
				// The next acquire's request there waited for the give-back's turn for its
				// whole instance timeout and was never sent.
				require.Zero(t, n[cs[paused]], "the paused instance granted nothing to the next acquire")
				if held {
					// Only the first round's grant, abandoned when its give-back failed:
					// never renewed, it expires with its lease (the wait for every key
					// below). Whether the give-back's sends are applied when the server
					// resumes is the network's affair: at dbd496b CI saw them not applied,
					// and this test read the abandoned grant as one of the next acquire.
					ms := time.Since(second).Milliseconds()
					require.Less(t, pttlOn(t, ss[paused], key), lease.Milliseconds()-ms, "granted before the next acquire, not renewed")
				}
			}
			require.NoError(t, r.Unlock(bg))
			settled(t, r)
			redistest.WaitFor(t, 2*lease, "every key gone", func() bool { return holdersOn(t, ss, key) == 0 })
			require.NoError(t, r.Lock(bg), "a fresh Lock over all five, the paused one included")
			require.NoError(t, r.Unlock(bg))
			settled(t, r)
			require.Equal(t, 0, holdersOn(t, ss, key))
		})
	}
}

// A RedLock acquire whose ctx ends while a lost round's grants are given back waits for them
// at most returnGrace in all (README guarantee 6: within 100 ms of the ctx's end), also when
// the give-back must first wait for its instance hold's operation lock (busy with a request
// of the owner there) and the instance then does not answer: the two waits share one grace.
// Each alone was returnGrace (80 ms), so the call outlived its ctx by about 160 ms. Timing on
// a shared machine: the best of three tries must be under 140 ms (the old way could not be).
func TestRedLock_cancelDuringRoundGiveBackWithinOneGrace(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a server")
	}
	t.Parallel()
	ss := redServers(t, 5)
	const lease = 20 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	server := map[*rlock.Client]int{}
	for i, c := range cs {
		server[c] = i
	}
	best := time.Hour
	for try := 0; try < 3 && best >= 140*time.Millisecond; try++ {
		name := redistest.Name(t) + "-" + strconv.Itoa(try)
		key := redKey(name)
		r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(200*time.Millisecond))
		require.NoError(t, r.Lock(bg))
		require.NoError(t, r.Unlock(bg))
		settled(t, r)
		// Another owner holds the key on three servers: every round is lost, granted by two.
		var others []*rlock.Mutex
		for i, c := range redClients(t, addrsOf(ss[2:])) {
			m := c.Mutex(name)
			ok, err := m.TryLock(bg, 0, lease)
			require.NoError(t, err)
			require.True(t, ok, "server %d", 2+i)
			others = append(others, m)
		}
		ctx, cancel := context.WithCancel(bg)
		var once sync.Once
		var cancelled time.Time
		var release func()
		var p *pauser
		restore := rlock.OnRoundGiveBack(func(n string, granted []*rlock.Client) {
			if n != name {
				return
			}
			once.Do(func() {
				p = newPauser(t, ss[server[granted[0]]])
				p.pause() // its give-back is not answered
				var ok bool
				release, ok = rlock.HoldRedInstanceOp(r, granted[0]) // and must wait for the op first
				require.True(t, ok, "the instance hold of a grant")
				cancelled = time.Now()
				cancel()
			})
		})
		_, err := r.TryLock(ctx, time.Minute, lease)
		took := time.Since(cancelled)
		restore()
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, cancelled.IsZero(), "a round was lost with grants to give back")
		t.Logf("try %d: returned %v after the cancel", try, took)
		best = min(best, took)
		release()
		p.resume()
		settled(t, r)
		require.Equal(t, 0, holdersOn(t, ss[:2], key), "the grants given back")
		for _, m := range others {
			require.NoError(t, m.Unlock(bg))
		}
	}
	require.Less(t, best, 140*time.Millisecond, "the acquire outlived its ctx by two graces")
}

// A RedLock wait that rode out instances that cannot be reached and then ends at ctx's end
// reports ctx's error joined with the last round's failure, as a Mutex's wait does
// (TestWait_ctxEndSeenByAnAttemptKeepsThePassingFailure): the caller learns why it waited.
// Before, the round's failure was dropped: the error was ctx's alone.
func TestRedLock_ctxEndKeepsTheLastRoundsFailure(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 3)
	cs := redClients(t, addrsOf(ss))
	r := rlock.NewRedLock(redistest.Name(t), cs)
	require.NoError(t, r.Lock(bg)) // the scripts loaded, the servers checked
	require.NoError(t, r.Unlock(bg))
	settled(t, r)
	ss[0].Stop(t)
	ss[1].Stop(t)
	ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	err := r.Lock(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "1 of 3 instances answered", "the last round's failure is not in the error")
}

// The duplicate-server check's steps are bounded by the instance timeout (NewRedLock's
// godoc) also when the silent instance's connection holds requests of the owner's other work:
// with one of 3 servers paused from the set's first acquire on, every acquire runs the check
// again, and each TryLock with wait 0 returns within about the instance timeout. Before, the
// check's probe SET went straight to rueidis, which on a connection with other requests
// waiting heeds no deadline but a lone request's: one acquire in five waited until the
// background give-back to the paused server timed out (the cleanup timeout: 2 s of a 2 s
// cleanup timeout, 3 of 3 runs).
func TestRedLock_duplicateCheckOnASilentServerBoundedByTheInstanceTimeout(t *testing.T) {
	t.Parallel() // its own servers and Clients; it waits out instance timeouts
	if testing.Short() {
		t.Skip("pauses a server")
	}
	ss := redServers(t, 3)
	const tmo, cleanup = 200 * time.Millisecond, 3 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(cleanup))
	r := rlock.NewRedLock(redistest.Name(t), cs, rlock.WithInstanceTimeout(tmo))
	ss[2].Pause(t)
	defer ss[2].Resume(t)
	for i := range 6 {
		start := time.Now()
		ok, err := r.TryLock(bg, 0, 10*time.Second)
		took := time.Since(start)
		require.NoError(t, err)
		require.True(t, ok, "granted by the two that answer")
		// tmo for the check's write, tmo at most for the round; the rest is slack for a
		// loaded machine, far below the cleanup timeout the check waited before.
		require.Less(t, took, 2*tmo+time.Second, "acquire %d waited past the instance timeout", i)
		require.NoError(t, r.Unlock(bg))
	}
}
