package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A waiter whose wait registered it in Redis (a fair queue's place, a writer's claim) leaves
// when its ctx ends; while Redis does not answer, that leave must not hold the caller for the
// cleanup timeout: the family's Lock returns within its ctx + 100ms like the Mutex's (issue
// 9, defect 9; the leave ran synchronously under the 5 s cleanup timeout).
func TestHardening_queuedWaiterLeavesWithoutOutlivingCtx(t *testing.T) {
	if testing.Short() {
		t.Skip("long: pauses Redis, ~1 s (run without -short)")
	}
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	for _, kind := range []string{"fair", "rw"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel() // a server of its own
			b := realBackend(t)
			name := redistest.Name(t)
			holder, c := b.client(t), b.client(t)
			lock := func(c *rlock.Client, ctx context.Context) error {
				if kind == "fair" {
					return c.FairMutex(name).Lock(ctx)
				}
				return c.RWMutex(name).Lock(ctx)
			}
			require.NoError(t, lock(holder, bg))
			ctx, cancel := context.WithTimeout(bg, 400*time.Millisecond)
			defer cancel()
			got := make(chan error, 1)
			go func() { got <- lock(c, ctx) }()
			// The waiter has made its attempt (and taken its place) once the key beside the
			// lock that records it exists.
			queueKey := c.FairMutex(name).Key() + ":queue"
			if kind == "rw" {
				queueKey = c.RWMutex(name).Key() + ":writers"
			}
			redistest.WaitFor(t, 5*time.Second, "the waiter to take its place", func() bool { return b.exists(t, queueKey) })
			b.srv.Pause(t)
			paused := true
			defer func() {
				if paused {
					b.srv.Resume(t)
				}
			}()
			start := time.Now()
			err := await(t, got, 20*time.Second, "Lock to return")
			elapsed := time.Since(start)
			b.srv.Resume(t)
			paused = false
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, elapsed, time.Second, "Lock returned %v after Redis paused, its ctx ending within 400ms", elapsed.Round(time.Millisecond))
			// Once Redis answers again, the place is withdrawn (by the leave left to the
			// background) or runs out with the waiter timeout.
			redistest.WaitFor(t, 15*time.Second, "the waiter's place to go", func() bool { return !b.exists(t, queueKey) })
			require.NoError(t, c.Close())
		})
	}
}
