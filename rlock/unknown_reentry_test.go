package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A re-entry whose outcome stays unknown (every reply of its send and of its replays lost
// within the cleanup timeout: ErrUnknownOutcome) may have been applied: Redis then counts a
// hold of the owner that no caller has, and the watchdog renews it with the tenure. HoldCount
// said 2 for the owner's one hold until its last Unlock, however long the tenure lasted (the
// public-API model check's "HoldCount 2 for one hold"), where its godoc promises the first
// renewal Redis confirms. Such a possible hold is now one of the tenure's orphans, given
// back conditionally at that renewal (a hold that was never granted costs nothing).
func TestMutex_unknownReentryIsGivenBackAtTheNextRenewal(t *testing.T) {
	t.Parallel()
	for _, applied := range []bool{true, false} {
		name := map[bool]string{true: "applied", false: "notApplied"}[applied]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b *backend) {
				hc, c := hardSetup(t, b, rlock.WithWatchdogTimeout(time.Second), rlock.WithCleanupTimeout(300*time.Millisecond))
				m := c.Mutex(redistest.Name(t))
				require.NoError(t, m.Lock(bg))
				var armed atomic.Bool
				hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					if !armed.Load() || cmd.script != "acquire" {
						return call()
					}
					if applied {
						call() // applied, its reply lost
					}
					return rueidis.NewErrorResult(context.DeadlineExceeded)
				})
				armed.Store(true)
				err := m.Lock(bg)
				armed.Store(false)
				require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
				want := 1 // the owner's one hold
				if applied {
					n, err := m.HoldCount(bg)
					require.NoError(t, err)
					require.Equal(t, 2, n, "the re-entry was applied (the test's premise)")
				}
				// The first renewal comes within a third of the watchdog timeout.
				redistest.WaitFor(t, 3*time.Second, "HoldCount to count the owner's one hold", func() bool {
					n, err := m.HoldCount(bg)
					return err == nil && n == want
				})
				require.Never(t, func() bool {
					n, err := m.HoldCount(bg)
					return err != nil || n != want
				}, 500*time.Millisecond, 50*time.Millisecond, "HoldCount moved off the owner's one hold")
				require.NoError(t, m.Err(bg), "the lock is not lost")
				require.NoError(t, m.Unlock(bg))
				require.False(t, b.exists(t, m.Key()), "the last Unlock frees the lock")
			})
		})
	}
}
