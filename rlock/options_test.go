package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestNew_renewFractionMustLeaveTimeToRenew: a renewal due so late in the lease that it could
// not be confirmed before the holder's conservative deadline (lease - drift) would lose every
// lock after one lease. New refuses it, naming the fraction and the lease.
func TestNew_renewFractionMustLeaveTimeToRenew(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	for _, tc := range []struct {
		lease time.Duration
		f     float64
	}{
		{500 * time.Millisecond, 0.99}, // renewal at 495ms, deadline at 493ms
		{500 * time.Millisecond, 0.95}, // renewal at 475ms: 18ms left for the round trip
		{30 * time.Second, 0.95},
		{10 * time.Millisecond, 0.8}, // renewal at 8ms, deadline at 7.9ms
	} {
		_, err := rlock.New(rc, rlock.WithWatchdogTimeout(tc.lease), rlock.WithRenewFraction(tc.f))
		require.ErrorIs(t, err, rlock.ErrInvalid, "lease %v, fraction %v", tc.lease, tc.f)
		require.ErrorContains(t, err, tc.lease.String())
	}
	for _, tc := range []struct {
		lease time.Duration
		f     float64
	}{
		{rlock.DefaultWatchdogTimeout, rlock.DefaultRenewFraction},
		{10 * time.Millisecond, rlock.DefaultRenewFraction}, // the shortest lease, the default fraction
		{500 * time.Millisecond, 0.88},
		{30 * time.Second, 0.88},
	} {
		c, err := rlock.New(rc, rlock.WithWatchdogTimeout(tc.lease), rlock.WithRenewFraction(tc.f))
		require.NoError(t, err, "lease %v, fraction %v", tc.lease, tc.f)
		require.NoError(t, c.Close())
	}
}

// TestMutex_Lock_lateRenewFractionStillKeepsTheLock: a late fraction that New accepts keeps
// a lock held across several leases. (0.8 of 1s leaves 188ms for each renewal; the latest
// fraction accepted, 0.888, leaves 100ms, which timers on a loaded test machine can overrun.)
func TestMutex_Lock_lateRenewFractionStillKeepsTheLock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: holds a lock across several watchdog leases (run without -short)")
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		// Renewed at 80% of the lease: each renewal has a fifth of it (400 ms) to land; with
		// a 1 s lease (200 ms) a loaded 2-core machine under -race lost it once.
		const lease = 2 * time.Second
		c := b.client(t, rlock.WithWatchdogTimeout(lease), rlock.WithRenewFraction(0.8))
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, m.Lock(bg))
		select {
		case <-m.Done(bg):
			t.Fatalf("lock lost: %v", m.Err(bg))
		case <-time.After(2*lease + lease/2): // three renewals
		}
		require.NoError(t, m.Err(bg))
		require.NoError(t, m.Unlock(bg))
	})
}

// TestNew_cleanupTimeoutBelowOneMillisecond: the scripts take periods derived from the cleanup
// timeout in whole milliseconds (a release is remembered for twice it); below 1ms they would
// be 0, which Redis refuses (PEXPIRE 0 deletes the key). New refuses it.
func TestNew_cleanupTimeoutBelowOneMillisecond(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	for _, d := range []time.Duration{-time.Second, 0, time.Nanosecond, 500 * time.Microsecond, time.Millisecond - 1} {
		_, err := rlock.New(rc, rlock.WithCleanupTimeout(d))
		require.ErrorIs(t, err, rlock.ErrInvalid, "cleanup timeout %v", d)
	}
	c, err := rlock.New(rc, rlock.WithCleanupTimeout(time.Millisecond))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// WithRenewFraction's lower bound, 0.1 (twice the watchdog's merge window): below it New
// refuses, naming the fraction; at it New accepts (TestBoundsHunt_tinyRenewFractionStorm).
func TestOptions_renewFractionLowerBound(t *testing.T) {
	_, rc := redistest.Miniredis(t)
	for _, f := range []float64{0.0999, 0.05, 1e-300} {
		_, err := rlock.New(rc, rlock.WithRenewFraction(f))
		require.ErrorIs(t, err, rlock.ErrInvalid, "fraction %v", f)
		require.ErrorContains(t, err, "below 0.1")
	}
	c, err := rlock.New(rc, rlock.WithRenewFraction(0.1))
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
