package rlock_test

import (
	"context"
	"testing"
	"time"

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
