package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// requireOnePrefix fails t unless every line of err's text (an errors.Join has one error per
// line) carries exactly one "rlock: " prefix, at its start, and no other package's.
func requireOnePrefix(t *testing.T, err error, sentinel error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, sentinel)
	for _, line := range strings.Split(err.Error(), "\n") {
		require.True(t, strings.HasPrefix(line, "rlock: "), "%q", line)
		require.Equal(t, 1, strings.Count(line, "rlock:"), "%q", line)
		require.NotContains(t, line, "watchdog:", "%q", line)
	}
}

func TestErrorText_onePrefixPerLayer(t *testing.T) {
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		// A 1 s lease: a third of it (333 ms) for each renewal of the held locks to land
		// beside the parallel tests.
		c := b.client(t, rlock.WithWatchdogTimeout(time.Second))
		name := redistest.Name(t)
		m := c.Mutex(name)

		// Loss: Err, a Lock refused until Unlock, and the Unlock.
		require.NoError(t, m.Lock(bg))
		_, err := b.do(t, "DEL", m.Key())
		require.NoError(t, err)
		within(t, 2*time.Second, "loss notice", m.Done(bg))
		requireOnePrefix(t, m.Err(bg), rlock.ErrLockLost)
		require.Equal(t, "rlock: lock lost: lease gone", m.Err(bg).Error())
		err = m.Lock(bg)
		requireOnePrefix(t, err, rlock.ErrLockLost)
		require.Equal(t, fmt.Sprintf("rlock: lock %q: lock lost: lease gone", name), err.Error())
		err = m.Unlock(bg)
		requireOnePrefix(t, err, rlock.ErrNotHeld)
		requireOnePrefix(t, err, rlock.ErrLockLost)

		// Not held; a token without a hold; a fixed lease run out.
		requireOnePrefix(t, m.Unlock(bg), rlock.ErrNotHeld)
		require.Equal(t, fmt.Sprintf("rlock: unlock %q: not held", name), m.Unlock(bg).Error())
		_, err = m.Token(bg)
		requireOnePrefix(t, err, rlock.ErrNotHeld)
		require.NoError(t, m.LockLease(bg, 20*time.Millisecond))
		within(t, 2*time.Second, "the end of the fixed lease", m.Done(bg))
		requireOnePrefix(t, m.Err(bg), rlock.ErrLeaseExpired)
		requireOnePrefix(t, m.Unlock(bg), rlock.ErrLeaseExpired)

		// A key of another type.
		wrong := c.Mutex(name + "-string")
		_, err = b.do(t, "SET", wrong.Key(), "x")
		require.NoError(t, err)
		requireOnePrefix(t, wrong.Lock(bg), rlock.ErrWrongType)
		_, err = wrong.IsLocked(bg)
		requireOnePrefix(t, err, rlock.ErrWrongType)
		_, err = c.Semaphore(name + "-string").AvailablePermits(bg)
		requireOnePrefix(t, err, rlock.ErrWrongType)

		// Invalid input.
		requireOnePrefix(t, c.Mutex("").Lock(bg), rlock.ErrInvalid)
		_, err = m.TryLock(bg, 0, time.Microsecond)
		requireOnePrefix(t, err, rlock.ErrInvalid)
		requireOnePrefix(t, m.LockLease(bg, 0), rlock.ErrInvalid)
		_, err = rlock.New(b.rueidis(t), rlock.WithRenewFraction(2))
		requireOnePrefix(t, err, rlock.ErrInvalid)
		requireOnePrefix(t, rlock.NewMultiLock().Lock(bg), rlock.ErrInvalid)

		// A ctx that times out while waiting.
		holder := c.Mutex(name + "-held")
		require.NoError(t, holder.Lock(bg))
		ctx, cancel := context.WithTimeout(bg, 30*time.Millisecond)
		defer cancel()
		err = c.Mutex(holder.Name()).Lock(ctx)
		requireOnePrefix(t, err, context.DeadlineExceeded)
		require.Equal(t, fmt.Sprintf("rlock: lock %q: context deadline exceeded", holder.Name()), err.Error())
		_, err = c.Semaphore(name+"-sem").TryAcquire(ctx, 1, time.Second)
		requireOnePrefix(t, err, context.DeadlineExceeded)

		// Layers: a multi-lock's member, Do's joined loss.
		ml := rlock.NewMultiLock(c.Mutex(name+"-a"), c.Mutex(name+"-b"))
		err = ml.Unlock(bg)
		requireOnePrefix(t, err, rlock.ErrNotHeld)
		require.Contains(t, err.Error(), fmt.Sprintf("rlock: multi-lock member 0: unlock %q: not held", name+"-a"))
		err = rlock.Do(bg, c.Mutex(name+"-do"), func(ctx context.Context) error {
			_, _ = c.Mutex(name + "-do").ForceUnlock(bg)
			<-ctx.Done()
			return errors.New("rlock: work stopped") // a line of its own in the joined error
		})
		requireOnePrefix(t, err, rlock.ErrLockLost)
		err = c.PermitSemaphore(name+"-permits").Release(bg, "nope")
		requireOnePrefix(t, err, rlock.ErrNotHeld)

		// Closed.
		require.NoError(t, holder.Unlock(bg))
		_ = c.Close()
		requireOnePrefix(t, m.Lock(bg), rlock.ErrClosed)
	})
}

// The sentinels read well alone, each with the package prefix.
func TestErrorText_sentinelsAlone(t *testing.T) {
	for _, err := range []error{
		rlock.ErrNotHeld, rlock.ErrLockLost, rlock.ErrLeaseExpired, rlock.ErrClosed, rlock.ErrWrongType,
		rlock.ErrUnknownOutcome, rlock.ErrNoReplicaAck, rlock.ErrInvalid, rlock.ErrUpgrade, rlock.ErrNoPermission,
	} {
		requireOnePrefix(t, err, err)
	}
	require.Equal(t, "rlock: not held: its fixed lease ran out", rlock.ErrLeaseExpired.Error())
	require.ErrorIs(t, rlock.ErrLeaseExpired, rlock.ErrNotHeld)
}
