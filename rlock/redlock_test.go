package rlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// redServers starts n independent redis-servers (no persistence, no replication).
func redServers(t *testing.T, n int) []*redistest.Server { return redistest.StartN(t, n) }

// redClients returns one Client per address, closed at cleanup.
func redClients(t *testing.T, addrs []string, opts ...rlock.Option) []*rlock.Client {
	t.Helper()
	cs := make([]*rlock.Client, len(addrs))
	for i, a := range addrs {
		c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true},
			opts...)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

func addrsOf(ss []*redistest.Server) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.Addr()
	}
	return out
}

// exists reports whether key exists on s.
func existsOn(t *testing.T, s *redistest.Server, key string) bool {
	msg := s.Do(t, "EXISTS", key)
	n, err := msg.AsInt64()
	require.NoError(t, err)
	return n == 1
}

// holdersOn counts the servers of ss (running ones only) that have key.
func holdersOn(t *testing.T, ss []*redistest.Server, key string) int {
	n := 0
	for _, s := range ss {
		if s.Running() && existsOn(t, s, key) {
			n++
		}
	}
	return n
}

const redKeyPrefix = "relock:"

func redKey(name string) string { return "{" + redKeyPrefix + name + "}" }

// seed returns the seed of a randomized test: RELOCK_SEED when set, else a fresh one,
// logged so that a failure can be replayed.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("RELOCK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		return v
	}
	v := rand.Uint64()
	t.Logf("seed %d (replay with RELOCK_SEED=%d)", v, v)
	return v
}

func TestRedLock_invalid(t *testing.T) {
	ss := redServers(t, 3)
	cs := redClients(t, addrsOf(ss))
	for name, r := range map[string]*rlock.RedLock{
		"two clients":   rlock.NewRedLock("x", cs[:2]),
		"same client":   rlock.NewRedLock("x", []*rlock.Client{cs[0], cs[1], cs[0]}),
		"nil client":    rlock.NewRedLock("x", []*rlock.Client{cs[0], cs[1], nil}),
		"empty name":    rlock.NewRedLock("", cs),
		"tiny timeout":  rlock.NewRedLock("x", cs, rlock.WithInstanceTimeout(time.Microsecond)),
		"nil handle":    nil,
		"zero handle":   new(rlock.RedLock),
		"same server":   rlock.NewRedLock("x", append(cs[:2:2], redClients(t, []string{ss[0].Addr()})...)),
		"via 2 proxies": rlock.NewRedLock("x", append(cs[:2:2], redClients(t, []string{proxyTo(t, ss[1]).Addr()})...)),
	} {
		t.Run(name, func(t *testing.T) {
			err := r.Lock(bg)
			require.ErrorIs(t, err, rlock.ErrInvalid)
			t.Log(err)
			require.ErrorIs(t, r.Unlock(bg), rlock.ErrInvalid)
			_, err = r.TryLock(bg, 0, 0)
			require.ErrorIs(t, err, rlock.ErrInvalid)
			select {
			case <-r.Done(bg):
			default:
				t.Fatal("Done of an invalid handle is open")
			}
			require.ErrorIs(t, r.Err(bg), rlock.ErrInvalid)
		})
	}
	// A Cluster or Sentinel client is refused at once (Mode()), without a round trip.
	if !testing.Short() {
		cl := startCluster(t)
		cc, err := rlock.New(cl.Client(t))
		require.NoError(t, err)
		defer cc.Close()
		err = rlock.NewRedLock("x", []*rlock.Client{cs[0], cs[1], cc}).Lock(bg)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.ErrorContains(t, err, "cluster client")
	}
}

func proxyTo(t *testing.T, s *redistest.Server) *faultproxy.Proxy {
	p, err := faultproxy.New(s.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// Test 1: all up: held, the hash on every instance, tokens rise per fresh grant, re-entry
// (the handle, and a context owner across handles), Done/Err/HoldContext/TTL.
func TestRedLock_allUp(t *testing.T) {
	t.Parallel() // servers of its own, a 1 s lease, no bound below half a second
	ss := redServers(t, 5)
	cs := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(time.Second))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs)
	var last int64
	for round := 0; round < 3; round++ {
		require.NoError(t, r.Lock(bg))
		require.GreaterOrEqual(t, holdersOn(t, ss, redKey(name)), 3)
		tok, err := r.Token(bg)
		require.NoError(t, err)
		require.Greater(t, tok, last, "tokens rise per fresh grant")
		last = tok
		// The minority's grants come after Lock returned; a re-entry adds a hold on the
		// instances the hold has when it starts (RedLock.reenter), so one whose grant came
		// later would count one hold (a full -race run, 1 of 5 instances).
		settled(t, r)
		require.NoError(t, r.Lock(bg)) // re-entry
		tok2, err := r.Token(bg)
		require.NoError(t, err)
		require.Equal(t, tok, tok2, "re-entry keeps the token")
		settled(t, r) // the minority's grants of the re-entry
		for _, c := range cs {
			// Each instance's hash counts two holds of the one owner id.
			require.Equal(t, 2, hashHolds(t, ss, c, name))
		}
		require.NoError(t, r.Err(bg))
		ttl, err := r.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, 500*time.Millisecond)
		require.LessOrEqual(t, ttl, time.Second)
		locked, err := r.IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked)
		done := r.Done(bg)
		hctx, cancel := r.HoldContext(bg)
		require.NoError(t, r.Unlock(bg))
		select {
		case <-done:
			t.Fatal("done after the first of two unlocks")
		default:
		}
		require.NoError(t, r.Unlock(bg))
		<-done
		<-hctx.Done()
		require.ErrorIs(t, context.Cause(hctx), rlock.ErrNotHeld)
		cancel()
		settled(t, r) // the minority's give-backs go on after Unlock returned
		require.Equal(t, 0, holdersOn(t, ss, redKey(name)))
		require.ErrorIs(t, r.Unlock(bg), rlock.ErrNotHeld)
		require.ErrorIs(t, r.Err(bg), rlock.ErrNotHeld)
	}
	// The watchdog keeps it past its lease.
	require.NoError(t, r.Lock(bg))
	select {
	case <-r.Done(bg):
		t.Fatal("lost")
	case <-time.After(2500 * time.Millisecond):
	}
	require.NoError(t, r.Err(bg))
	require.NoError(t, r.Unlock(bg))

	// A context owner re-enters across handles; another owner is excluded.
	ctx := cs[0].WithNewOwner(bg)
	r1, r2 := rlock.NewRedLock(name, cs), rlock.NewRedLock(name, []*rlock.Client{cs[4], cs[3], cs[2], cs[1], cs[0]})
	require.NoError(t, r1.Lock(ctx))
	ok, err := r2.TryLock(ctx, 0, 0)
	require.NoError(t, err)
	require.True(t, ok, "the context owner re-enters through another handle")
	ok, err = r2.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok, "another owner is excluded")
	require.NoError(t, r2.Unlock(ctx))
	require.NoError(t, r1.Err(ctx))
	require.NoError(t, r1.Unlock(ctx))
	settled(t, r1, r2)
	require.Equal(t, 0, holdersOn(t, ss, redKey(name)))
	freed, err := r1.ForceUnlock(bg)
	require.NoError(t, err)
	require.False(t, freed)
}

// settled waits until every instance request of the RedLocks rs has settled: Lock and
// Unlock return once a majority answered, and the rest (a late grant adopted or given back,
// a give-back) go on in the background.
func settled(t *testing.T, rs ...*rlock.RedLock) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, "the instances' requests to settle", func() bool {
		for _, r := range rs {
			if rlock.RedInFlight(r) != 0 {
				return false
			}
		}
		return true
	})
}

// hashHolds is the hold count of the only owner in the lock's hash on c's server.
func hashHolds(t *testing.T, ss []*redistest.Server, c *rlock.Client, name string) int {
	for _, s := range ss {
		msg := s.Do(t, "HGETALL", redKey(name))
		m, err := msg.AsStrMap()
		require.NoError(t, err)
		for k, v := range m {
			if len(k) > 2 && (k[:2] == "h:" || k[:2] == "u:") {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
	}
	return -1
}

// Test 1: exclusion hammer: 3 Clients per server (3 sets of 5), 2 owners per set, each
// locking and unlocking; a counter incremented non-atomically under the lock ends exact and
// no two critical sections overlap.
func TestRedLock_exclusionHammer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long")
	}
	ss := redServers(t, 5)
	name := redistest.Name(t)
	const sets, owners, iters = 3, 2, 25
	var counter int
	var inside atomic.Int32
	var overlaps atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, sets*owners)
	var rs []*rlock.RedLock
	for s := 0; s < sets; s++ {
		cs := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(2*time.Second))
		r := rlock.NewRedLock(name, cs)
		rs = append(rs, r)
		for o := 0; o < owners; o++ {
			ctx := cs[0].WithNewOwner(bg)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters; i++ {
					wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
					err := r.Lock(wctx)
					cancel()
					if err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := counter
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					counter = v + 1
					inside.Add(-1)
					if err := r.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, overlaps.Load())
	require.Equal(t, sets*owners*iters, counter)
	settled(t, rs...)
	require.Equal(t, 0, holdersOn(t, ss, redKey(name)))
}

// Test 2: 2 of 5 killed before the acquire, and 2 of 5 killed while held: acquired, renewed
// on the other 3, Unlock succeeds (promptly); after the 2 restart empty, another contender
// still cannot take it.
func TestRedLock_killMinority(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out leases")
	}
	t.Parallel() // servers of its own, a 2 s lease, bounds of a second
	ss := redServers(t, 5)
	// With 2 of 5 down the hold rests on all 3 others: one renewal that lands after its
	// lease ends loses it. A renewal is sent at two thirds of the lease and must be
	// confirmed before the lease less its drift ends: 321ms with a 1 s lease, which a loaded
	// machine under -race overran once ("lost after 2 of 5 killed, under load"). 2 s leaves
	// 645ms, as the watchdog tests' (8b693d8); the waits below still span 3 renewals or more.
	const lease = 2 * time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(2*time.Second))
	other := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(lease))
	name := redistest.Name(t)
	r, o := rlock.NewRedLock(name, cs), rlock.NewRedLock(name, other)

	t.Run("before", func(t *testing.T) {
		ss[0].Kill(t)
		ss[1].Kill(t)
		ok, err := r.TryLock(bg, 5*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, 3, holdersOn(t, ss, redKey(name)))
		ok, err = o.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		select {
		case <-r.Done(bg):
			t.Fatalf("lost: %v", r.Err(bg))
		case <-time.After(2 * lease):
		}
		start := time.Now()
		require.NoError(t, r.Unlock(bg))
		require.Less(t, time.Since(start), time.Second, "Unlock does not wait for the dead")
		require.Equal(t, 0, holdersOn(t, ss, redKey(name)))
		ss[0].Restart(t)
		ss[1].Restart(t)
	})
	t.Run("whileHeld", func(t *testing.T) {
		// The hold must be on all 5 before 2 are killed, or the kill takes a majority of
		// what it rests on. Lock returns at a majority, and an instance's grant that comes
		// after the instance timeout (a tenth of the lease) is given back, not joined: the
		// 2 servers just restarted are reached again and sent the script anew (NOSCRIPT)
		// first, which under load took longer (1 in 8 runs beside 4 busy loops, with a 1 s
		// lease, held on 4 instances: the kill then left 2 or 3 of them). The restarted
		// instances are warmed first, and a hold on fewer than 5 is given back and taken
		// again.
		for _, c := range cs[:2] {
			m := c.Mutex(name + "-warm")
			require.NoError(t, m.Lock(bg))
			require.NoError(t, m.Unlock(bg))
		}
		for try := 0; ; try++ {
			require.NoError(t, r.Lock(bg))
			settled(t, r)
			_, w := rlock.RedInstanceHolds(r, bg)
			followed := 0
			for _, c := range cs {
				if w[c] {
					followed++
				}
			}
			if followed == 5 {
				break
			}
			require.Less(t, try, 5, "the hold is on %d of 5 instances, 5 tries running", followed)
			t.Logf("try %d: the hold is on %d of 5 instances: taken again", try, followed)
			require.NoError(t, r.Unlock(bg))
			settled(t, r)
		}
		ss[2].Kill(t)
		ss[3].Kill(t)
		select {
		case <-r.Done(bg):
			t.Fatalf("lost: %v", r.Err(bg))
		case <-time.After(3 * lease): // renewed on the other 3 across 3 leases
		}
		require.NoError(t, r.Err(bg))
		ttl, err := r.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0))
		ss[2].Restart(t) // empty: no persistence
		ss[3].Restart(t)
		ok, err := o.TryLock(bg, 300*time.Millisecond, 0)
		require.NoError(t, err)
		require.False(t, ok, "2 empty + 3 held: no majority for another")
		start := time.Now()
		require.NoError(t, r.Unlock(bg))
		require.Less(t, time.Since(start), 3*time.Second)
		ok, err = o.TryLock(bg, 5*time.Second, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, o.Unlock(bg))
	})
}

// Test 3: 3 of 5 killed: an acquire fails within its bound with an error and leaves
// nothing on the live servers; a held lock is reported lost by its conservative deadline
// (less what this process stalled meanwhile: it runs beside the parallel tests).
func TestRedLock_killMajority(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out leases")
	}
	t.Parallel()
	ss := redServers(t, 5)
	const lease = time.Second
	cs := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(time.Second))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs)

	require.NoError(t, r.Lock(bg))
	hctx, cancel := r.HoldContext(bg)
	defer cancel()
	stalled := watchStalls(nil)
	t.Cleanup(func() { stalled(time.Time{}, time.Time{}) }) // stops it, if the wait fails
	killed := time.Now()
	for _, s := range ss[:3] {
		s.Kill(t)
	}
	select {
	case <-r.Done(bg):
	case <-time.After(lease + 5*time.Second): // a hang guard; the bound is below
		t.Fatal("loss of the majority not told")
	}
	told := time.Since(killed)
	stall := stalled(killed, time.Now())
	t.Logf("loss told %v after the kill (the process stalled %v of it)", told, stall)
	require.LessOrEqual(t, told-stall, lease+500*time.Millisecond)
	<-hctx.Done()
	require.ErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
	require.ErrorIs(t, r.Err(bg), rlock.ErrLockLost)
	_, err := r.TryLock(bg, 0, 0)
	require.ErrorIs(t, err, rlock.ErrLockLost, "a lost lock is not silently taken again")
	require.ErrorIs(t, r.Unlock(bg), rlock.ErrNotHeld)
	require.Eventually(t, func() bool { return holdersOn(t, ss, redKey(name)) == 0 }, 5*time.Second, 10*time.Millisecond)

	start := time.Now()
	ok, err := r.TryLock(bg, 500*time.Millisecond, 0)
	require.False(t, ok)
	require.Error(t, err, "too few instances answer: an error")
	t.Log(err)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Equal(t, 0, holdersOn(t, ss, redKey(name)), "nothing left on the live servers")
	ctx, cancel2 := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel2()
	require.ErrorIs(t, r.Lock(ctx), context.DeadlineExceeded)
	require.Equal(t, 0, holdersOn(t, ss, redKey(name)))
}

// Test 4: 2 of 5 SIGSTOPped longer than the per-instance timeout: acquired on the other 3,
// with the validity reduced by the time spent; on SIGCONT the late grants are undone.
func TestRedLock_pauseMinority(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses servers")
	}
	ss := redServers(t, 5)
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(5*time.Second))
	name := redistest.Name(t)
	const tmo, lease = 200 * time.Millisecond, 10 * time.Second
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(tmo))
	require.NoError(t, r.Lock(bg)) // learn the run ids while all answer
	require.NoError(t, r.Unlock(bg))
	// Lock returned at a majority: the other grants may still be on their way, and their
	// give-backs after them. Paused mid-way, a server would apply such a grant when it
	// resumes, after its give-back had run out of cleanup time: a hold of the watchdog's
	// lease that nobody gives back (failed 1 in ~15 under load).
	settled(t, r)
	ss[0].Pause(t)
	ss[1].Pause(t)
	start := time.Now()
	ok, err := r.TryLock(bg, 0, lease)
	require.NoError(t, err)
	require.True(t, ok)
	took := time.Since(start) // decided by the 3 that answer: the paused 2 are not waited for
	ttl, err := r.TTL(bg)
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, lease-took, "validity reduced by the time spent")
	require.Greater(t, ttl, lease-took-2*time.Second)
	settled(t, r) // paused longer than the timeout: the two requests were cut by it
	ss[0].Resume(t)
	ss[1].Resume(t)
	// The late grants are undone: the resumed servers end without the key while the
	// lock stays held on the other 3.
	redistest.WaitFor(t, 10*time.Second, "late grants undone", func() bool {
		return !existsOn(t, ss[0], redKey(name)) && !existsOn(t, ss[1], redKey(name))
	})
	require.Equal(t, 3, holdersOn(t, ss, redKey(name)))
	require.NoError(t, r.Err(bg))
	require.NoError(t, r.Unlock(bg))
	require.Equal(t, 0, holdersOn(t, ss, redKey(name)))
}

// Test 5: two contenders behind fault proxies, each reaching a subset of the five
// instances (first one 2 and the other 3, then random subsets, seeded): at most one holds,
// ever. A cut link is a proxy closed after the Client dialled through it (its connections
// reset, new ones refused): a blackhole would lose bytes mid-stream, which desynchronizes
// rueidis's pipeline when the link heals.
func TestRedLock_partitionedContenders(t *testing.T) {
	if testing.Short() {
		t.Skip("partitions")
	}
	t.Parallel()
	ss := redServers(t, 5)
	name := redistest.Name(t)
	rng := rand.New(rand.NewPCG(seed(t), 0))
	var holders atomic.Int32
	for step := 0; step < 8; step++ {
		var sets [2][]bool
		var rs [2]*rlock.RedLock
		for k := range rs {
			sets[k] = make([]bool, 5)
			var addrs []string
			var px []*faultproxy.Proxy
			for i, s := range ss {
				if step == 0 {
					sets[k][i] = (i < 2) == (k == 0) // A reaches {0,1}, B {2,3,4}
				} else {
					sets[k][i] = rng.IntN(2) == 0
				}
				p := proxyTo(t, s)
				px = append(px, p)
				addrs = append(addrs, p.Addr())
			}
			cs := redClients(t, addrs, rlock.WithWatchdogTimeout(2*time.Second), rlock.WithCleanupTimeout(time.Second))
			rs[k] = rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(100*time.Millisecond))
			for i, p := range px {
				if !sets[k][i] {
					p.Close()
				}
			}
		}
		var got [2]bool
		var wg sync.WaitGroup
		for k := range rs {
			wait := 300 * time.Millisecond
			if step == 0 && k == 1 {
				// B must win: its rounds go on until it does (on a loaded machine a fresh
				// Client's first rounds, dialling and loading scripts through the proxies,
				// may run past the 100-ms instance timeout: "B reaches 3 of 5" failed once
				// in a CI proof beside a helper's explorers).
				wait = 5 * time.Second
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, _ := rs[k].TryLock(bg, wait, 3*time.Second)
				if ok {
					if holders.Add(1) > 1 {
						t.Errorf("step %d: two holders (reach %v)", step, sets)
					}
					got[k] = true
					time.Sleep(20 * time.Millisecond)
					holders.Add(-1)
				}
			}()
		}
		wg.Wait()
		t.Logf("step %d: reach %v, held %v", step, sets, got)
		if step == 0 {
			require.False(t, got[0], "A reaches 2 of 5")
			require.True(t, got[1], "B reaches 3 of 5")
		}
		for k := range rs {
			if got[k] {
				require.NoError(t, rs[k].Unlock(bg))
			}
		}
		redistest.WaitFor(t, 10*time.Second, "all free", func() bool { return holdersOn(t, ss, redKey(name)) == 0 })
	}
}

// Test 6: every instance slower than the lease allows (elapsed > lease - drift): not
// acquired, and nothing left anywhere.
func TestRedLock_validityRunsOut(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow proxies")
	}
	ss := redServers(t, 5)
	name := redistest.Name(t)
	var addrs []string
	var px []*faultproxy.Proxy
	for _, s := range ss {
		p := proxyTo(t, s)
		px = append(px, p)
		addrs = append(addrs, p.Addr())
	}
	cs := redClients(t, addrs)
	const lease = 60 * time.Millisecond
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(time.Second))
	for _, p := range px {
		p.SetLatency(40*time.Millisecond, 50*time.Millisecond) // a round trip > lease - drift
	}
	ok, err := r.TryLock(bg, 0, lease)
	require.False(t, ok)
	t.Log(err)
	require.True(t, err == nil || errors.Is(err, rlock.ErrLeaseExpired), "%v", err)
	require.ErrorIs(t, r.Err(bg), rlock.ErrNotHeld)
	for _, p := range px {
		p.SetLatency(0, 0)
	}
	redistest.WaitFor(t, 5*time.Second, "released everywhere", func() bool { return holdersOn(t, ss, redKey(name)) == 0 })
}
