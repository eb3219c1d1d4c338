package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// A Semaphore's acquire or drain that took permits after its caller left gives them back in
// the background. When the semaphore was deleted before that give-back (or ran out its TTL),
// the give-back made it anew, without a TTL, with the permits it gave back: a semaphore
// nobody set up, which lived forever. The give-back now adds only to a semaphore that
// exists, as ReleaseIfExists does.
func TestSemaphore_giveBackAfterDeleteMakesNothing(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"Acquire", "DrainPermits"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b *backend) {
				hc, c := hardSetup(t, b)
				s := c.Semaphore(redistest.Name(t))
				ok, err := s.TrySetPermits(bg, 2)
				require.NoError(t, err)
				require.True(t, ok)
				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				var armed atomic.Bool
				gaveBack := make(chan struct{}, 1)
				hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					switch {
					case armed.Load() && (cmd.script == "sem_acquire" || cmd.script == "sem_drain"):
						// Applied; the caller leaves before the reply comes.
						res := call()
						cancel()
						time.Sleep(50 * time.Millisecond)
						return res
					case armed.Load() && cmd.script == "sem_release":
						// The give-back: the semaphore is deleted just before it.
						armed.Store(false)
						deleted, err := s.Delete(bg)
						require.NoError(t, err)
						require.True(t, deleted)
						defer func() { gaveBack <- struct{}{} }() // once the give-back was answered
						return call()
					}
					return call()
				})
				armed.Store(true)
				if op == "Acquire" {
					err = s.Acquire(ctx, 1)
				} else {
					_, err = s.DrainPermits(ctx)
				}
				require.ErrorIs(t, err, context.Canceled)
				within(t, 10*time.Second, "the give-back", gaveBack)
				never(t, func() bool { return b.exists(t, s.Key()) }, 300*time.Millisecond, 20*time.Millisecond,
					"the give-back made the deleted semaphore anew")
			})
		})
	}
}
