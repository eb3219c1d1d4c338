package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Semaphore: "ErrWrongType when the key holds another kind of value (it is left untouched)",
// for strings that are not a count though Lua's tonumber reads them as a whole number
// ("5.0", "0x10", "1e2", " 3"): AvailablePermits says ErrWrongType for them (strconv), and
// every write must too, writing nothing.
func TestContracts_semaphoreNumericLookingStringIsWrongType(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c := b.client(t)
	for _, val := range []string{"5.0", "0x10", "1e2", " 3"} {
		t.Run(val, func(t *testing.T) {
			s := c.Semaphore(redistest.Name(t))
			_, err := b.do(t, "SET", s.Key(), val)
			require.NoError(t, err)
			dump := func() string { return semDumpKey(t, b, s.Key()) }
			before := dump()
			_, err = s.AvailablePermits(bg)
			require.ErrorIs(t, err, rlock.ErrWrongType, "AvailablePermits")
			check := func(op string, err error) {
				t.Helper()
				assert.ErrorIs(t, err, rlock.ErrWrongType, "%s on %q", op, val)
				assert.Equal(t, before, dump(), "%s on %q changed the key", op, val)
			}
			ok, err := s.TryAcquire(bg, 1, 0)
			check("TryAcquire", err)
			assert.False(t, ok)
			check("Release", s.Release(bg, 1))
			_, err = s.ReleaseIfExists(bg, 1)
			check("ReleaseIfExists", err)
			check("AddPermits(-1)", s.AddPermits(bg, -1))
			n, err := s.DrainPermits(bg)
			check("DrainPermits", err)
			assert.Zero(t, n)
			_, err = s.TrySetPermits(bg, 1)
			check("TrySetPermits", err)
			_, err = s.Delete(bg)
			check("Delete", err)
		})
	}
}

// PermitSemaphore.Delete: "removes the semaphore and every permit held from it ... Holders
// learn of it when their Release or Extend reports [ErrNotHeld]; waiters keep waiting (a
// semaphore that does not exist has no permits)". And TrySetPermits "Setting n > 0 wakes the
// waiters of an Acquire that began before the semaphore existed" (here: again).
func TestContracts_permitSemaphoreDeleteWithHoldersAndWaiters(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	name := redistest.Name(t)
	p := b.client(t).PermitSemaphore(name)
	ok, err := p.TrySetPermits(bg, 1)
	require.NoError(t, err)
	require.True(t, ok)
	held, err := p.Acquire(bg, time.Minute)
	require.NoError(t, err)
	waiter := b.client(t).PermitSemaphore(name)
	got := make(chan error, 1)
	var mine rlock.Permit
	go func() {
		var err error
		mine, err = waiter.Acquire(bg, time.Minute)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	ok, err = p.Delete(bg)
	require.NoError(t, err)
	require.True(t, ok)
	require.ErrorIs(t, p.Extend(bg, held.ID, time.Minute), rlock.ErrNotHeld)
	_, err = p.TTL(bg, held.ID)
	require.ErrorIs(t, err, rlock.ErrNotHeld)
	require.ErrorIs(t, p.Release(bg, held.ID), rlock.ErrNotHeld)
	n, err := p.AcquiredPermits(bg)
	require.NoError(t, err)
	require.Zero(t, n)
	require.False(t, b.exists(t, p.Key()), "Release of a deleted semaphore's permit made it anew")
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("the waiter ended after Delete: %v", err)
	default:
	}
	start := time.Now()
	ok, err = p.TrySetPermits(bg, 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, await(t, got, 5*time.Second, "the waiter, woken by TrySetPermits"))
	require.Less(t, time.Since(start), time.Second)
	require.NoError(t, waiter.Release(bg, mine.ID))
}
