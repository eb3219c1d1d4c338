package rlock_test

// Defects of bad or extreme input found by the boundshunt survey (bounds_hunt_test.go), each
// reduced to one test. Each failed at 115c23d.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// noPanic runs f and fails t with the panic's value, if any.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("%s panicked: %v", what, p)
		}
	}()
	f()
}

// New and Dial with a nil Option (a variadic slice built by hand, an option helper that
// returns nil) panic in buildOptions (opt.apply on a nil interface): the otel module's
// Observer returns ErrInvalid for the same input.
func TestBoundsHunt_nilOptionIsInvalid(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	noPanic(t, "New(rc, nil)", func() {
		c, err := rlock.New(rc, nil)
		if c != nil {
			c.Close()
		}
		require.ErrorIs(t, err, rlock.ErrInvalid)
	})
	noPanic(t, "New(rc, valid, nil)", func() {
		c, err := rlock.New(rc, rlock.WithWatchdogTimeout(time.Second), nil)
		if c != nil {
			c.Close()
		}
		require.ErrorIs(t, err, rlock.ErrInvalid)
	})
}

// A cleanup timeout that reaches past 2262 (about 236 years from now) is accepted by New, but
// every first send made on the caller's behalf gets a deadline already past (deadlines.at
// buckets by t.UnixNano(), undefined there, and negative in practice): Unlock fails at once
// with ErrUnknownOutcome, and the lock stays held until its lease ends, never given back.
func TestBoundsHunt_hugeCleanupTimeoutUnlock(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t), rlock.WithCleanupTimeout(250*365*24*time.Hour))
	require.NoError(t, err) // accepted: then it must work
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Unlock(bg))
	msg := srv.Do(t, "EXISTS", m.Key())
	n, _ := msg.AsInt64()
	require.Zero(t, n, "the lock is still held after Unlock")
}

// WithInstanceTimeout's godoc: "A d below 1ms makes the RedLock invalid (ErrInvalid)". 0 is
// taken silently for the default instead (redlock.go: r.timeout != 0 && ...).
func TestBoundsHunt_redLockInstanceTimeoutZero(t *testing.T) {
	var cs []*rlock.Client
	for range 3 {
		_, rc := redistest.Miniredis(t)
		c, err := rlock.New(rc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	r := rlock.NewRedLock("x", cs, rlock.WithInstanceTimeout(0))
	ok, err := r.TryLock(bg, 0, time.Second)
	if ok {
		_ = r.Unlock(bg)
	}
	require.ErrorIs(t, err, rlock.ErrInvalid, "WithInstanceTimeout(0) is below 1ms")
}

// A nil RedLockOption was skipped silently, where New refuses a nil Option (ErrInvalid).
func TestBoundsHunt_redLockNilOption(t *testing.T) {
	var cs []*rlock.Client
	for range 3 {
		_, rc := redistest.Miniredis(t)
		c, err := rlock.New(rc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	for _, opts := range [][]rlock.RedLockOption{{nil}, {rlock.WithInstanceTimeout(50 * time.Millisecond), nil}} {
		r := rlock.NewRedLock("x", cs, opts...)
		ok, err := r.TryLock(bg, 0, time.Second)
		if ok {
			_ = r.Unlock(bg)
		}
		require.ErrorIs(t, err, rlock.ErrInvalid, "a nil RedLockOption")
		require.ErrorContains(t, err, "is nil")
	}
}

// OwnerFrom(nil) panics (a nil dereference), where every method of a handle returns
// ErrInvalid for a nil ctx. A nil ctx carries no owner.
func TestBoundsHunt_ownerFromNilCtx(t *testing.T) {
	var nilCtx context.Context
	noPanic(t, "OwnerFrom(nil)", func() {
		id, ok := rlock.OwnerFrom(nilCtx)
		require.False(t, ok)
		require.Empty(t, id)
	})
}

// Client.WithNewOwner(nil) and WithOwner(nil, id) panic (context.WithValue: "cannot create
// context from nil parent"), where every method of a handle returns ErrInvalid for a nil ctx.
// What they should return instead is for the team to choose; this test asks for a context
// whose every operation returns ErrInvalid, as WithNewOwner of a nil Client gives.
func TestBoundsHunt_withOwnerNilCtx(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	var nilCtx context.Context
	noPanic(t, "WithOwner(nil, id)", func() {
		ctx := rlock.WithOwner(nilCtx, "id")
		require.ErrorIs(t, c.Mutex("x").Lock(ctx), rlock.ErrInvalid)
	})
	noPanic(t, "Client.WithNewOwner(nil)", func() {
		ctx := c.WithNewOwner(nilCtx)
		require.ErrorIs(t, c.Mutex("x").Lock(ctx), rlock.ErrInvalid)
	})
}

// What WithOwner(nil, id) and WithNewOwner(nil) return (TestBoundsHunt_withOwnerNilCtx): a
// done context on Background, no owner id, and every call that takes it, or a context derived
// from it, fails with ErrInvalid naming the cause, whatever the family; nothing is written.
func TestBoundsHunt_withOwnerNilCtxEveryCall(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	var nilCtx context.Context
	var nilClient *rlock.Client
	for _, tc := range []struct {
		what string
		ctx  context.Context
	}{
		{"WithOwner", rlock.WithOwner(nilCtx, "id")},
		{"WithNewOwner", c.WithNewOwner(nilCtx)},
		{"WithNewOwner", nilClient.WithNewOwner(nilCtx)},
	} {
		what, ctx := tc.what, tc.ctx
		want := what + ": nil parent context"
		require.Error(t, ctx.Err(), what)
		require.ErrorIs(t, context.Cause(ctx), rlock.ErrInvalid, what)
		_, ok := rlock.OwnerFrom(ctx)
		require.False(t, ok, what)
		derived, cancel := context.WithTimeout(ctx, time.Second)
		for _, cx := range []context.Context{ctx, derived} {
			name := redistest.Name(t)
			for op, err := range map[string]error{
				"Mutex.Lock":        c.Mutex(name).Lock(cx),
				"Mutex.Unlock":      c.Mutex(name).Unlock(cx),
				"RWMutex.RLock":     c.RWMutex(name).RLock(cx),
				"Semaphore.Release": c.Semaphore(name).Release(cx, 1),
				"Latch.CountDown":   c.CountDownLatch(name).CountDown(cx),
			} {
				require.ErrorIs(t, err, rlock.ErrInvalid, "%s: %s", what, op)
				require.ErrorContains(t, err, want, "%s: %s", what, op)
			}
			_, err := c.Inspect(cx, name)
			require.ErrorIs(t, err, rlock.ErrInvalid, what)
			require.ErrorContains(t, err, want)
		}
		cancel()
	}
	msg := srv.Do(t, "DBSIZE")
	n, _ := msg.AsInt64()
	require.Zero(t, n, "keys written")
}

// Each count is bounded by 2^50, but the semaphore's count is not: nine Releases of 2^50 and
// one of 1 make 9*2^50+1, which sem_drain.lua reads as a Lua number (2^53 and beyond are not
// exact) and DECRBYs: DrainPermits returns 9*2^50 and leaves 1 permit behind.
func TestBoundsHunt_drainPermitsBeyond2p53(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	s := c.Semaphore(redistest.Name(t))
	const maxPermits = 1 << 50
	for range 9 {
		require.NoError(t, s.Release(bg, maxPermits))
	}
	require.NoError(t, s.Release(bg, 1))
	before, err := s.AvailablePermits(bg)
	require.NoError(t, err)
	drained, err := s.DrainPermits(bg)
	require.NoError(t, err)
	after, err := s.AvailablePermits(bg)
	require.NoError(t, err)
	require.Equal(t, before, drained, "DrainPermits' count")
	require.Zero(t, after, "permits left after DrainPermits (drained %d of %d)", drained, before)
}

// WithRenewFraction has no lower bound: 1e-300 (or any f with f*lease below a round trip)
// makes the watchdog renew back to back, each renewal sent as soon as the last is confirmed:
// thousands of renew scripts a second for one lock held, where the default sends none in
// 300ms. Proposed: refuse a fraction whose renewal point is below some floor (ErrInvalid).
func TestBoundsHunt_tinyRenewFractionStorm(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t), rlock.WithRenewFraction(1e-300))
	if errors.Is(err, rlock.ErrInvalid) {
		return // refused: fine
	}
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.Lock(bg))
	defer m.Unlock(bg)
	srv.ResetStats(t)
	time.Sleep(300 * time.Millisecond)
	st := srv.CommandStats(t)
	require.Less(t, st["evalsha"]+st["eval"], int64(30), "scripts run in 300ms of one lock held in watchdog mode (30 s lease): %v", st)
}

// WithReplicaAck has no upper bound on its timeout. The WAIT goes on a dedicated rueidis
// connection, which a caller's cancellation does not free: every acquire whose ctx ends while
// its WAIT waits (no replica) leaves one connection blocked in WAIT for the whole timeout, past
// Client.Close (forever, near math.MaxInt64). A timeout beyond the lease serves nothing: a grant
// acknowledged after its lease ran out is not held. Proposed: refuse a timeout above the
// watchdog timeout (ErrInvalid).
func TestBoundsHunt_replicaAckHugeTimeoutLeaksConns(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t), rlock.WithReplicaAck(1, 24*time.Hour))
	if errors.Is(err, rlock.ErrInvalid) {
		return // refused: fine
	}
	require.NoError(t, err)
	name := redistest.Name(t)
	for range 5 {
		ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
		_ = c.Mutex(name).Lock(ctx)
		cancel()
	}
	require.NoError(t, c.Close())
	time.Sleep(200 * time.Millisecond)
	msg := srv.Do(t, "CLIENT", "LIST")
	list, _ := msg.ToString()
	require.Zero(t, strings.Count(list, "flags=bt"), "connections still blocked (in WAIT) after 5 cancelled Locks and Close:\n%s", list)
}
