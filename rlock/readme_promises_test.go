package rlock_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/rlock"
)

// README guarantee 6: an Unlock works on a cancelled context, and its give-back is bounded by
// the cleanup timeout instead; one that Redis does not answer (the server paused: the request
// is sent, no reply comes) returns an error wrapping ErrUnknownOutcome (Unlock's godoc, case 3)
// within it. Before this test, only the semaphores' releases
// (TestSemaphores_release_boundedByOneCleanupTimeoutOnPausedRedis) and an Unlock waiting for
// its turn (TestMutex_Unlock_waitingOutTheOwnersOtherCallGivesUpWithItsHoldKept) asserted it;
// this covers the give-back of each lock kind, the Mutex's fast form and its full one.
func TestGuarantee6_unlockBoundedByTheCleanupTimeoutOnPausedRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis (run without -short)")
	}
	t.Parallel() // servers and Clients of its own
	const cleanup = 2 * time.Second
	const slack = 700 * time.Millisecond
	// A handle is an owner: each kind makes one and locks and unlocks through it.
	type lockKind struct {
		name   string
		handle func(c *rlock.Client, name string) (lock func() error, unlock func(ctx context.Context) error)
	}
	kinds := []lockKind{
		{"Mutex (fast form)", func(c *rlock.Client, n string) (func() error, func(context.Context) error) {
			m := c.Mutex(n)
			return func() error { return m.Lock(bg) }, m.Unlock
		}},
		{"FairMutex", func(c *rlock.Client, n string) (func() error, func(context.Context) error) {
			m := c.FairMutex(n)
			return func() error { return m.Lock(bg) }, m.Unlock
		}},
		{"SpinMutex", func(c *rlock.Client, n string) (func() error, func(context.Context) error) {
			m := c.SpinMutex(n)
			return func() error { return m.Lock(bg) }, m.Unlock
		}},
		{"RWMutex.Unlock", func(c *rlock.Client, n string) (func() error, func(context.Context) error) {
			m := c.RWMutex(n)
			return func() error { return m.Lock(bg) }, m.Unlock
		}},
		{"RWMutex.RUnlock", func(c *rlock.Client, n string) (func() error, func(context.Context) error) {
			m := c.RWMutex(n)
			return func() error { return m.RLock(bg) }, m.RUnlock
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel() // a server of its own
			b := realBackend(t)
			c, err := rlock.New(b.rueidis(t), rlock.WithCleanupTimeout(cleanup))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			t.Cleanup(func() { b.srv.Resume(t) }) // before Close
			lock, unlock := k.handle(c, redistest.Name(t))
			// One cycle first: the scripts are loaded, a connection is up, and the Mutex's
			// next Lock is a fast grant.
			require.NoError(t, lock())
			require.NoError(t, unlock(bg))
			require.NoError(t, lock())
			b.srv.Pause(t)
			ctx, cancel := context.WithCancel(bg)
			cancel() // Unlock works on a cancelled ctx
			stalled := watchStalls(nil)
			start := time.Now()
			err = unlock(ctx)
			took := time.Since(start)
			stall := stalled(start, time.Now())
			t.Logf("%s: %v after %v (the process stalled %v of it)", k.name, err, took.Round(time.Millisecond), stall.Round(time.Millisecond))
			require.ErrorIs(t, err, rlock.ErrUnknownOutcome, "the give-back was sent and not answered")
			require.Less(t, took-stall, cleanup+slack, "the Unlock outlived its cleanup timeout")
		})
	}
}

// README ("How it works", and the relock-alone table), doc.go and docs/DESIGN.md section 16:
// an uncontended Lock+Unlock of a handle on a name it did not lock within the last second is
// two scripts and 8 server calls (acquire EVALSHA, EXISTS, INCR, HSET, PEXPIRE; release
// EVALSHA, HMGET, DEL) while the name's fence counter lives (another handle locked the name
// within its second), and 10 when the counter is seeded from the server's clock (TIME, SET).
// TestMutex_uncontendedCycleIsTwoScripts asserts the fast cycle's 7 and a never-locked name's
// 10; this asserts the 8: a fresh handle each cycle on one name.
func TestMutex_uncontendedCycleOfAnotherHandleIsEightCalls(t *testing.T) {
	b := realBackend(t)
	c := b.client(t)
	name := redistest.Name(t)
	for range 2 { // load the scripts (and seed the name's fence)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Unlock(bg))
	}
	const cycles = 50
	b.srv.ResetStats(t)
	start := time.Now()
	for range cycles {
		m := c.Mutex(name) // a handle is an owner: never the fast form's
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Unlock(bg))
	}
	took := time.Since(start)
	stats := b.srv.CommandStats(t)
	seeds := stats["time"] // the fence counter ran out (it lives lua.CounterTTL) and was seeded
	require.LessOrEqual(t, seeds, int64(took/lua.CounterTTL)+1, "seeds in %v", took)
	want := map[string]int64{"evalsha": 2, "exists": 1, "incr": 1, "hset": 1, "pexpire": 1, "hmget": 1, "del": 1}
	seed := map[string]int64{"time": 1, "set": 1}
	calls := int64(0)
	for cmd, n := range stats {
		switch cmd {
		case "info", "config|resetstat", "hello", "client|setinfo", "client|tracking":
			continue // the test's and a connection's, not the cycles'
		}
		calls += n
		if w := want[cmd]*cycles + seed[cmd]*seeds; w != n {
			t.Errorf("%s x%d in %d cycles (%d seeds), want %d", cmd, n, cycles, seeds, w)
		}
	}
	require.EqualValues(t, 8*cycles+2*seeds, calls, "server calls in %d cycles (%d seeds)", cycles, seeds)
}

// README guarantee 7 (and the supported-versions table): on Redis 7, release and renewal work
// on a server out of memory (maxmemory, noeviction), for the family as for the Mutex
// (TestMutex_releaseAndRenewalWorkWhenRedisIsFull): the release scripts and the read-write
// lock's renewals run with allow-oom (lua's TestScripts_haveHeaders checks the flags), and the
// plain lock's renewal (FairMutex, SpinMutex) uses only commands a full server accepts. This
// holds a FairMutex, a SpinMutex, an RWMutex's write hold and another's read hold in watchdog
// mode, a Semaphore's and a PermitSemaphore's permits and a latch's count, fills the server,
// lets the watchdog renew the leases there for two leases (no round failing), and gives each
// back.
func TestGuarantee7_familyReleasesAndRenewsOnAFullServer(t *testing.T) {
	t.Parallel() // a server of its own
	b := realBackend(t, redistest.WithArgs("--maxmemory-policy", "noeviction"))
	const lease = time.Second
	rounds := make(chan rlock.RenewalRoundInfo, 64)
	c, err := rlock.New(b.rueidis(t), rlock.WithWatchdogTimeout(lease), rlock.WithObserver(&rlock.Observer{
		RenewalRound: func(e rlock.RenewalRoundInfo) {
			select {
			case rounds <- e:
			default:
			}
		},
	}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	name := redistest.Name(t)
	fair, spin := c.FairMutex(name+"-fair"), c.SpinMutex(name+"-spin")
	w, r := c.RWMutex(name+"-w"), c.RWMutex(name+"-r")
	sem, ps, latch := c.Semaphore(name+"-sem"), c.PermitSemaphore(name+"-psem"), c.CountDownLatch(name+"-latch")
	require.NoError(t, fair.Lock(bg))
	require.NoError(t, spin.Lock(bg))
	require.NoError(t, w.Lock(bg))
	require.NoError(t, r.RLock(bg))
	ok, err := sem.TrySetPermits(bg, 2)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, sem.Acquire(bg, 2))
	ok, err = ps.TrySetPermits(bg, 1)
	require.NoError(t, err)
	require.True(t, ok)
	p, err := ps.Acquire(bg, time.Minute)
	require.NoError(t, err)
	ok, err = latch.TrySetCount(bg, 2)
	require.NoError(t, err)
	require.True(t, ok)

	info, err := b.do(t, "INFO", "memory")
	require.NoError(t, err)
	text, _ := info.ToString()
	var used int64
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	require.Positive(t, used)
	_, err = b.do(t, "CONFIG", "SET", "maxmemory", strconv.FormatInt(used/2, 10))
	require.NoError(t, err)
	defer b.do(t, "CONFIG", "SET", "maxmemory", "0")
	_, err = b.do(t, "SET", name, "x")
	require.ErrorContains(t, err, "OOM", "the server must be full for this test")
	require.ErrorContains(t, c.Mutex(name+"-new").Lock(bg), "OOM", "acquiring fails with a clear error")

	// Renewal rounds over two leases of a full server, none failing: every lease (1 s) was
	// renewed there, or it would have run out (the rounds merge the leases due, so a round
	// need not renew all four).
	full := time.Now()
	for len(rounds) > 0 {
		<-rounds
	}
	leases := 0
	for time.Since(full) < 2*lease || leases < 8 {
		select {
		case e := <-rounds:
			require.Zero(t, e.Failures, "a renewal round on a full server: %+v", e)
			leases += e.Leases
		case <-time.After(10 * lease):
			t.Fatalf("no renewal round within %v (%d leases renewed since the server was full)", 10*lease, leases)
		}
	}
	for _, l := range []interface{ Err(context.Context) error }{fair, spin, w} {
		require.NoError(t, l.Err(bg))
	}
	require.NoError(t, r.RLocker().Err(bg))

	require.NoError(t, fair.Unlock(bg))
	require.NoError(t, spin.Unlock(bg))
	require.NoError(t, w.Unlock(bg))
	require.NoError(t, r.RUnlock(bg))
	require.NoError(t, sem.Release(bg, 2))
	require.NoError(t, ps.Release(bg, p.ID))
	require.NoError(t, latch.CountDown(bg))
	require.NoError(t, latch.CountDown(bg))
	for _, key := range []string{fair.Key(), spin.Key(), w.Key(), r.Key()} {
		require.False(t, b.exists(t, key), "%s freed", key)
	}
	n, err := sem.AvailablePermits(bg)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = ps.AvailablePermits(bg)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	left, err := latch.Count(bg)
	require.NoError(t, err)
	require.Zero(t, left)
}

// README, "Beside go-redis": a Client made by rlock.Dial opens 2 connections to a standalone
// server, and a third (the shared pub/sub connection) once a Lock has had to wait, however
// many goroutines lock through it; 0 are left after Close. TestDial asserts only more than
// none and none after Close.
func TestDial_connectionsPerClient(t *testing.T) {
	t.Parallel() // a server of its own
	b := realBackend(t)
	clients := func() int {
		msg := b.srv.Do(t, "CLIENT", "LIST")
		s, _ := msg.ToString()
		return strings.Count(s, "\n") // one line per connection
	}
	before := clients() // the test's own
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	name := redistest.Name(t)
	m := c.Mutex(name)
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Unlock(bg))
	// rueidis may still be opening the second connection as the cycle returns (the CI
	// proof of session 29 counted 1): awaited, not read once; a third still fails.
	redistest.WaitFor(t, 5*time.Second, "2 connections after one cycle", func() bool { return clients()-before == 2 })

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex(fmt.Sprintf("%s-%d", name, i)) // uncontended: nobody waits
			for range 200 {
				if err := m.Lock(bg); err != nil {
					errs <- err
					return
				}
				if err := m.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 2, clients()-before, "after 64 goroutines x 200 cycles")

	require.NoError(t, m.Lock(bg))
	waiter := make(chan error, 1)
	go func() {
		w := c.Mutex(name) // another handle: another owner, which waits
		if err := w.Lock(bg); err != nil {
			waiter <- err
			return
		}
		waiter <- w.Unlock(bg)
	}()
	redistest.WaitFor(t, 5*time.Second, "a third connection for the waiter", func() bool { return clients()-before == 3 })
	require.NoError(t, m.Unlock(bg))
	require.NoError(t, await(t, waiter, 10*time.Second, "the waiter"))
	require.Equal(t, 3, clients()-before, "with a waiter (the pub/sub connection stays)")

	require.NoError(t, c.Close())
	redistest.WaitFor(t, 5*time.Second, "Dial's connections to close", func() bool { return clients() == before })
}

// README, "Coming from Redisson": Mutex.TTL is 0 when the lock is not locked, -1ms when its
// key has no expiry (not set by relock), else the remaining lease: Redisson's
// remainTimeToLive gives -2 and -1 for the first two.
func TestMutex_TTL_asRedissonsRemainTimeToLive(t *testing.T) {
	t.Parallel() // a server of its own
	b := realBackend(t)
	c := b.client(t)
	m := c.Mutex(redistest.Name(t))
	ttl, err := m.TTL(bg)
	require.NoError(t, err)
	require.Zero(t, ttl, "not locked")
	require.NoError(t, m.Lock(bg)) // the handle's next Lock within a second is a fast grant
	require.NoError(t, m.Unlock(bg))
	for _, form := range []struct{ name, keyType string }{{"fast form", "string"}, {"full form", "hash"}} {
		const lease = 10 * time.Second
		require.NoError(t, m.LockLease(bg, lease))
		if form.name == "full form" {
			require.NoError(t, m.LockLease(bg, lease)) // a re-entry writes the full form
		}
		typ, err := b.do(t, "TYPE", m.Key())
		require.NoError(t, err)
		got, _ := typ.ToString()
		require.Equal(t, form.keyType, got, form.name)
		ttl, err = m.TTL(bg)
		require.NoError(t, err)
		require.Greater(t, ttl, time.Duration(0), form.name)
		require.LessOrEqual(t, ttl, lease, form.name)
		_, err = b.do(t, "PERSIST", m.Key()) // as if not set by relock
		require.NoError(t, err)
		ttl, err = m.TTL(bg)
		require.NoError(t, err)
		require.Equal(t, -time.Millisecond, ttl, "%s with no expiry", form.name)
		_, err = b.do(t, "DEL", m.Key())
		require.NoError(t, err)
		ttl, err = m.TTL(bg)
		require.NoError(t, err)
		require.Zero(t, ttl, "gone")
		_ = m.Unlock(bg) // the hold is gone: ErrNotHeld, or the loss
	}
}

// README, "Hooks and logs": hooks run "without the Client's internal locks (a hook may ask
// the lock its Err or TTL)". The Observer's godoc promises it of HoldEnd
// (TestReviewOps_holdEndCallingTheLockDeadlocks covers HoldEnd at an Unlock); this asks the
// lock its Err, TTL and IsLocked from every hook the lock's life calls: AcquireStart and
// AcquireDone (a grant, a wait, a hand-off), ReleaseStart and ReleaseDone, RenewalRound, and
// HoldEnd at an Unlock, at a loss the watchdog finds, at a fixed lease's end and at Close.
// Every step must end within a bound: a hook that deadlocked on an internal lock would stall it.
func TestObserver_hooksMayAskTheLock(t *testing.T) {
	t.Parallel() // a server of its own
	b := realBackend(t)
	const lease = time.Second
	var (
		mu      sync.Mutex
		handles []*rlock.Mutex
		asked   = map[string]int{}
	)
	ask := func(hook string) {
		mu.Lock()
		hs := append([]*rlock.Mutex(nil), handles...)
		mu.Unlock()
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		defer cancel()
		for _, m := range hs {
			_ = m.Err(ctx)
			_, _ = m.TTL(ctx)
			_, _ = m.IsLocked(ctx)
		}
		mu.Lock()
		asked[hook]++
		mu.Unlock()
	}
	c, err := rlock.New(b.rueidis(t), rlock.WithWatchdogTimeout(lease), rlock.WithObserver(&rlock.Observer{
		AcquireStart: func(ctx context.Context, _ rlock.AcquireStartInfo) context.Context {
			ask("AcquireStart")
			return ctx
		},
		AcquireDone:  func(context.Context, rlock.AcquireDoneInfo) { ask("AcquireDone") },
		ReleaseStart: func(ctx context.Context, _ rlock.ReleaseStartInfo) context.Context { ask("ReleaseStart"); return ctx },
		ReleaseDone:  func(context.Context, rlock.ReleaseDoneInfo) { ask("ReleaseDone") },
		HoldEnd:      func(e rlock.HoldEndInfo) { ask("HoldEnd " + string(e.Cause)) },
		RenewalRound: func(rlock.RenewalRoundInfo) { ask("RenewalRound") },
	}))
	require.NoError(t, err)
	name := redistest.Name(t)
	a, w := c.Mutex(name), c.Mutex(name)
	mu.Lock()
	handles = append(handles, a, w)
	mu.Unlock()
	step := func(what string, f func() error) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			require.NoError(t, err, what)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return within 10s: a hook asking the lock stalled it", what)
		}
	}
	step("Lock", func() error { return a.Lock(bg) })
	waiter := make(chan error, 1)
	go func() { waiter <- w.Lock(bg) }() // waits, then is handed the lock
	redistest.WaitFor(t, 5*time.Second, "the waiter to wait", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return asked["AcquireStart"] >= 2
	})
	redistest.WaitFor(t, 5*lease, "a renewal round", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return asked["RenewalRound"] > 0
	})
	step("Unlock (a hand-off to the waiter)", func() error { return a.Unlock(bg) })
	step("the waiter's Lock", func() error { return <-waiter })
	step("Unlock", func() error { return w.Unlock(bg) })
	step("a loss the watchdog finds", func() error {
		if err := a.Lock(bg); err != nil {
			return err
		}
		if _, err := b.do(t, "DEL", a.Key()); err != nil {
			return err
		}
		<-a.Done(bg)
		return nil
	})
	_ = a.Unlock(bg) // ErrNotHeld with the loss
	step("a fixed lease's end", func() error {
		if err := a.LockLease(bg, 50*time.Millisecond); err != nil {
			return err
		}
		<-a.Done(bg)
		return nil
	})
	_ = a.Unlock(bg) // ErrLeaseExpired
	step("Close", func() error {
		if err := a.Lock(bg); err != nil {
			return err
		}
		return c.Close()
	})
	mu.Lock()
	defer mu.Unlock()
	for _, hook := range []string{"AcquireStart", "AcquireDone", "ReleaseStart", "ReleaseDone", "RenewalRound",
		"HoldEnd unlock", "HoldEnd lost", "HoldEnd lease_expired", "HoldEnd closed"} {
		require.Positive(t, asked[hook], "%s asked the lock (%v)", hook, asked)
	}
}
