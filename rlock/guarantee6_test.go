package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// README guarantee 6 whatever ends the context: every acquire returns within 100 ms of its
// context's end even while Redis does not answer, for a context cancelled with no deadline
// (a request handler's), one cancelled before its deadline, and one ended by its deadline.
// The Client sends its requests one at a time here, so rueidis sends a request that has a
// deadline on the caller's goroutine, heeding only that deadline: an acquire that gave a
// context without one the cleanup timeout as a deadline (to keep rueidis on that path)
// returned when the cleanup timeout ran out, seconds after the cancel, and so did one whose
// context was cancelled before its own deadline.
func TestGuarantee6_contextEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis (run without -short)")
	}
	// Beside the other tests: Redis is paused, so the bound is the Client's own, and it
	// subtracts this process's stalls (watchStalls).
	t.Parallel()
	const cleanup = 4 * time.Second
	// The guarantee's 100 ms, and room for a loaded machine: far below the cleanup timeout.
	const bound = 100*time.Millisecond + 400*time.Millisecond
	type acquire struct {
		name string
		// warm takes and gives back once (the script is loaded, the Client's connection has
		// served one request at a time); acq is the acquire under test.
		warm func(c *rlock.Client, name string) error
		acq  func(ctx context.Context, c *rlock.Client, name string) error
	}
	lockUnlock := func(lock func(context.Context) error, unlock func(context.Context) error) error {
		if err := lock(bg); err != nil {
			return err
		}
		return unlock(bg)
	}
	cases := []acquire{
		{"Mutex",
			func(c *rlock.Client, n string) error { m := c.Mutex(n); return lockUnlock(m.Lock, m.Unlock) },
			func(ctx context.Context, c *rlock.Client, n string) error { return c.Mutex(n).Lock(ctx) }},
		{"FairMutex",
			func(c *rlock.Client, n string) error { m := c.FairMutex(n); return lockUnlock(m.Lock, m.Unlock) },
			func(ctx context.Context, c *rlock.Client, n string) error { return c.FairMutex(n).Lock(ctx) }},
		{"SpinMutex",
			func(c *rlock.Client, n string) error { m := c.SpinMutex(n); return lockUnlock(m.Lock, m.Unlock) },
			func(ctx context.Context, c *rlock.Client, n string) error { return c.SpinMutex(n).Lock(ctx) }},
		{"RWMutex.Lock",
			func(c *rlock.Client, n string) error { m := c.RWMutex(n); return lockUnlock(m.Lock, m.Unlock) },
			func(ctx context.Context, c *rlock.Client, n string) error { return c.RWMutex(n).Lock(ctx) }},
		{"RWMutex.RLock",
			func(c *rlock.Client, n string) error { m := c.RWMutex(n); return lockUnlock(m.RLock, m.RUnlock) },
			func(ctx context.Context, c *rlock.Client, n string) error { return c.RWMutex(n).RLock(ctx) }},
		{"MultiLock",
			func(c *rlock.Client, n string) error {
				m := c.MultiLock(n+"-a", n+"-b")
				return lockUnlock(m.Lock, m.Unlock)
			},
			func(ctx context.Context, c *rlock.Client, n string) error {
				return c.MultiLock(n+"-a", n+"-b").Lock(ctx)
			}},
		{"Semaphore",
			func(c *rlock.Client, n string) error {
				s := c.Semaphore(n)
				if _, err := s.TrySetPermits(bg, 1); err != nil {
					return err
				}
				if err := s.Acquire(bg, 1); err != nil {
					return err
				}
				return s.Release(bg, 1)
			},
			func(ctx context.Context, c *rlock.Client, n string) error { return c.Semaphore(n).Acquire(ctx, 1) }},
		{"PermitSemaphore",
			func(c *rlock.Client, n string) error {
				s := c.PermitSemaphore(n)
				if _, err := s.TrySetPermits(bg, 1); err != nil {
					return err
				}
				p, err := s.Acquire(bg, time.Minute)
				if err != nil {
					return err
				}
				return s.Release(bg, p.ID)
			},
			func(ctx context.Context, c *rlock.Client, n string) error {
				_, err := c.PermitSemaphore(n).Acquire(ctx, time.Minute)
				return err
			}},
		{"CountDownLatch",
			func(c *rlock.Client, n string) error {
				l := c.CountDownLatch(n)
				if _, err := l.TrySetCount(bg, 1); err != nil {
					return err
				}
				_, err := l.Count(bg)
				return err
			},
			func(ctx context.Context, c *rlock.Client, n string) error { return c.CountDownLatch(n).Await(ctx) }},
	}
	// The contexts: cancelled with no deadline; cancelled long before its deadline; ended by
	// its deadline.
	ends := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc, time.Duration)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc, time.Duration) {
			ctx, cancel := context.WithCancel(bg)
			return ctx, cancel, 50 * time.Millisecond
		}, context.Canceled},
		{"cancelBeforeDeadline", func() (context.Context, context.CancelFunc, time.Duration) {
			ctx, cancel := context.WithTimeout(bg, time.Minute)
			return ctx, cancel, 50 * time.Millisecond
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc, time.Duration) {
			ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
			return ctx, cancel, 300 * time.Millisecond
		}, context.DeadlineExceeded},
	}
	for _, tc := range cases {
		for _, end := range ends {
			t.Run(tc.name+"/"+end.name, func(t *testing.T) {
				// A server of its own: the 27 subtests overlap (up to -parallel at once).
				t.Parallel()
				b := realBackend(t)
				c := b.client(t, rlock.WithCleanupTimeout(cleanup))
				name := redistest.Name(t)
				require.NoError(t, tc.warm(c, name))
				b.srv.Pause(t) // SIGSTOP: what is sent now is never answered
				t.Cleanup(func() { b.srv.Resume(t) })
				ctx, cancel, after := end.ctx()
				defer cancel()
				start := time.Now()
				got := make(chan error, 1)
				var returned atomic.Int64 // UnixNano of the acquire's return
				go func() {
					err := tc.acq(ctx, c, name)
					returned.Store(time.Now().UnixNano())
					got <- err
				}()
				time.Sleep(after - 30*time.Millisecond) // the request is on the wire
				select {
				case err := <-got:
					// A return at or after the ctx's deadline is no early return: this
					// goroutine's sleep ended late, past the deadline (a loaded machine; flake29
					// r3: the "deadline" case of CountDownLatch failed here with the
					// acquire's own context deadline exceeded). The bound below then holds at
					// once; the error is still checked.
					dl, ok := ctx.Deadline()
					if !ok || time.Unix(0, returned.Load()).Before(dl) {
						t.Fatalf("precondition: the acquire returned before its ctx ended, Redis paused: %v", err)
					}
					t.Logf("the acquire returned %v past its deadline, before this goroutine woke from its sleep: its bound is not measured",
						time.Unix(0, returned.Load()).Sub(dl).Round(time.Millisecond))
					got <- err
				default:
				}
				stalled := watchStalls(nil)
				time.Sleep(time.Until(start.Add(after)))
				if end.want == context.Canceled {
					cancel()
				} else {
					<-ctx.Done() // ended by its deadline
				}
				ended := time.Now()
				err := await(t, got, 3*cleanup, "the acquire to return")
				took := time.Since(ended)
				stall := stalled(ended, time.Now())
				require.Less(t, took-stall, bound, "the acquire returned %v after its ctx ended (the process stalled %v of it; cleanup timeout %v): %v",
					took.Round(time.Millisecond), stall.Round(time.Millisecond), cleanup, err)
				require.True(t, errors.Is(err, end.want), "want %v, got %v", end.want, err)
			})
		}
	}
}

// Guarantee 6 for a RedLock: with every instance paused, Lock returns within 100 ms of its
// context's end, whatever ends it; the instances' requests are left to the round's workers.
func TestGuarantee6_redLock(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis (run without -short)")
	}
	t.Parallel() // servers of its own, paused: the bound is the Client's own and subtracts this process's stalls
	const bound = 100*time.Millisecond + 400*time.Millisecond
	for _, end := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(bg) }, context.Canceled},
		{"cancelBeforeDeadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(bg, time.Minute) }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(bg, 300*time.Millisecond) }, context.DeadlineExceeded},
	} {
		t.Run(end.name, func(t *testing.T) {
			ss := redServers(t, 3)
			cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(4*time.Second))
			r := rlock.NewRedLock(redistest.Name(t), cs)
			require.NoError(t, r.Lock(bg)) // scripts loaded, connections up
			require.NoError(t, r.Unlock(bg))
			for _, s := range ss {
				s.Pause(t)
			}
			t.Cleanup(func() {
				for _, s := range ss {
					s.Resume(t)
				}
			})
			ctx, cancel := end.ctx()
			defer cancel()
			got := make(chan error, 1)
			stalled := watchStalls(nil)
			go func() { got <- r.Lock(ctx) }()
			var ended time.Time
			if end.want == context.Canceled {
				time.Sleep(100 * time.Millisecond)
				select {
				case err := <-got:
					t.Fatalf("precondition: Lock returned before the cancel, every instance paused: %v", err)
				default:
				}
				cancel()
				ended = time.Now()
			} else {
				<-ctx.Done()
				ended = time.Now()
			}
			err := await(t, got, 20*time.Second, "Lock to return")
			took := time.Since(ended)
			stall := stalled(ended, time.Now())
			require.Less(t, took-stall, bound, "RedLock.Lock returned %v after its ctx ended (the process stalled %v of it): %v",
				took.Round(time.Millisecond), stall.Round(time.Millisecond), err)
			require.ErrorIs(t, err, end.want)
		})
	}
}
