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

// A TryLock whose first attempt is answered (refused) only after its wait ran out makes no
// other attempt: wait bounds when attempts begin (TryLock's godoc; the request in flight as
// it ends is seen to its outcome, and that is all). Before, the wait's second attempt, the
// one made after subscribing to the release channel (wait.go: a release may have been
// published between the refusal and the subscription), began with no look at the bound:
// with the holder gone meanwhile, TryLock(100ms wait) took the lock 300 ms in and returned
// (true, nil), for Mutex and FairMutex on both backends (found by TestExplore_WaitBound,
// seed 1796360510691437660). SpinMutex, whose wait has no such step, is the control.
func TestMutex_TryLock_firstReplyAfterWaitMakesNoOtherAttempt(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	kinds := []struct {
		name string
		mk   func(c *rlock.Client, name string) *rlock.Mutex
	}{
		{"Mutex", func(c *rlock.Client, n string) *rlock.Mutex { return c.Mutex(n) }},
		{"FairMutex", func(c *rlock.Client, n string) *rlock.Mutex { return c.FairMutex(n).Mutex }},
		{"SpinMutex", func(c *rlock.Client, n string) *rlock.Mutex { return c.SpinMutex(n).Mutex }},
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				hc, c := hardSetup(t, b)
				name := redistest.Name(t)
				holder := k.mk(b.client(t), name)
				require.NoError(t, holder.Lock(bg))
				waiter := k.mk(c, name)
				_, _ = waiter.TryLock(bg, 0, 0) // the script is loaded: the next send is the attempt

				const wait, delay = 100 * time.Millisecond, 300 * time.Millisecond
				var sends atomic.Int32
				released := make(chan error, 1)
				hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					if cmd.script != "acquire" && cmd.script != "fair_acquire" {
						return call()
					}
					if sends.Add(1) > 1 {
						return call()
					}
					// The first attempt is refused at once, and its reply comes back after the
					// wait has run out; the holder has given the lock back meanwhile.
					res := call()
					released <- holder.Unlock(bg)
					time.Sleep(delay)
					return res
				})
				start := time.Now()
				ok, err := waiter.TryLock(bg, wait, 0)
				took := time.Since(start)
				hc.set(nil)
				require.NoError(t, <-released)
				t.Logf("TryLock(%v): %v, %v after %v; %d attempts", wait, ok, err, took.Round(time.Millisecond), sends.Load())
				require.NoError(t, err)
				require.False(t, ok, "the lock was taken after the wait bound")
				require.EqualValues(t, 1, sends.Load(), "an attempt began after the wait bound")
				require.False(t, b.exists(t, waiter.Key()))
			})
		}
	})
}
