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

// A waiter whose Client has no subscription to the lock's channel yet makes its first
// attempt, subscribes, and attempts again when Redis confirms the subscription (which wakes
// every waiter registered on the channel), then at the release's wake-up: three acquire
// scripts for the whole Lock, at most (two when the confirmation's wake-up and the
// release's coincide). Before, it also attempted right after subscribing, while the
// confirmation was still to come: four (note26: that doubled the start-up burst of 500
// waiters).
func TestWait_newSubscriptionCostsNoExtraAttempt(t *testing.T) {
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		holder := b.client(t)
		whc := &hookClient{Client: b.rueidis(t)}
		var sends atomic.Int64
		whc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script == "acquire" {
				sends.Add(1)
			}
			return call()
		})
		c, err := rlock.New(whc)
		require.NoError(t, err)
		defer c.Close()
		name := redistest.Name(t)
		hm := holder.Mutex(name)
		require.NoError(t, hm.Lock(bg))
		m := c.Mutex(name)
		var waiter atomic.Int64
		got := make(chan error, 1)
		go func() {
			waiter.Store(goroutineID())
			got <- m.Lock(bg)
		}()
		redistest.WaitFor(t, 10*time.Second, "the waiter parked on a live subscription", func() bool {
			return rlock.ChannelLive(c, m) && goroutineAt(waiter.Load(), "select", "rlock.(*Client).waitLoop(")
		})
		require.NoError(t, hm.Unlock(bg))
		require.NoError(t, await(t, got, 10*time.Second, "the waiter's Lock"))
		require.LessOrEqual(t, sends.Load(), int64(3), "acquire scripts of one waited Lock on a new subscription")
		require.NoError(t, m.Unlock(bg))
	})
}
