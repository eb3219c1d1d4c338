package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// HoldContext: "When the owner holds no hold, the context is already cancelled, with the
// reason [Mutex.Err] gives as cause." After Client.Close, Err gives ErrClosed (mutex.go Err
// checks isClosed); HoldContext asks the hold table alone (Mutex.tenure), which Close leaves
// with every tenure ended, and so gives ErrNotHeld (or ErrLeaseExpired), not Err's reason.
// Walked across the lock kinds, for an owner that held the lock when Close came, one whose
// fixed lease had run out before, and one that never held it.
func TestContracts_holdContextAfterCloseHasErrsCause(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, k := range contractKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			for _, state := range []string{"held", "leaseEnded", "neverHeld"} {
				c := b.client(t)
				l := k.make(c, redistest.Name(t)+"-"+state)
				var before context.Context
				switch state {
				case "held":
					require.NoError(t, l.Lock(bg))
					var cancel context.CancelFunc
					before, cancel = l.HoldContext(bg)
					defer cancel()
				case "leaseEnded":
					require.NoError(t, l.LockLease(bg, 30*time.Millisecond))
					within(t, 5*time.Second, "the fixed lease to end", l.Done(bg))
					require.ErrorIs(t, l.Err(bg), rlock.ErrLeaseExpired)
				}
				require.NoError(t, c.Close())
				if before != nil {
					within(t, time.Second, "the HoldContext taken before Close", before.Done())
					require.ErrorIs(t, context.Cause(before), rlock.ErrClosed, state)
				}
				within(t, time.Second, "Done after Close", l.Done(bg))
				errNow := l.Err(bg)
				require.ErrorIs(t, errNow, rlock.ErrClosed, state)
				hctx, cancel := l.HoldContext(bg)
				cause := context.Cause(hctx)
				cancel()
				t.Logf("%s: Err %v; HoldContext's cause %v", state, errNow, cause)
				assert.ErrorIs(t, cause, rlock.ErrClosed, "%s: HoldContext's cause is not the reason Err gives", state)
			}
		})
	}
}

// A call blocked waiting when its Client closes returns ErrClosed (each waiting call's godoc
// lists [ErrClosed] "after [Client.Close]"; Semaphore: "an Acquire still waiting ... when
// Close comes returns ErrClosed"), walked across every primitive that waits.
func TestContracts_waiterEndsWithClose(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	type waiter struct {
		name  string
		block func(t *testing.T, other *rlock.Client, name string) // makes the wait block
		wait  func(c *rlock.Client, name string) error
	}
	var waiters []waiter
	for _, k := range contractKinds {
		waiters = append(waiters, waiter{
			name: k.name,
			block: func(t *testing.T, other *rlock.Client, name string) {
				if k.name == "RWMutex.read" {
					require.NoError(t, other.RWMutex(name).Lock(bg))
					return
				}
				require.NoError(t, k.make(other, name).Lock(bg))
			},
			wait: func(c *rlock.Client, name string) error { return k.make(c, name).Lock(bg) },
		})
	}
	waiters = append(waiters,
		waiter{"Semaphore", func(*testing.T, *rlock.Client, string) {},
			func(c *rlock.Client, name string) error { return c.Semaphore(name).Acquire(bg, 1) }},
		waiter{"PermitSemaphore", func(*testing.T, *rlock.Client, string) {},
			func(c *rlock.Client, name string) error {
				_, err := c.PermitSemaphore(name).Acquire(bg, time.Second)
				return err
			}},
		waiter{"CountDownLatch", func(t *testing.T, other *rlock.Client, name string) {
			ok, err := other.CountDownLatch(name).TrySetCount(bg, 1)
			require.NoError(t, err)
			require.True(t, ok)
		}, func(c *rlock.Client, name string) error { return c.CountDownLatch(name).Await(bg) }},
	)
	for _, w := range waiters {
		t.Run(w.name, func(t *testing.T) {
			t.Parallel()
			name := redistest.Name(t)
			w.block(t, b.client(t), name)
			c := b.client(t)
			got := make(chan error, 1)
			go func() { got <- w.wait(c, name) }()
			time.Sleep(200 * time.Millisecond) // waiting
			select {
			case err := <-got:
				t.Fatalf("the wait ended before Close: %v", err)
			default:
			}
			closed := time.Now()
			require.NoError(t, c.Close())
			require.ErrorIs(t, await(t, got, 3*time.Second, "the waiter to end with Close"), rlock.ErrClosed)
			require.Less(t, time.Since(closed), 2*time.Second)
		})
	}
}
