package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// README guarantee 6 promises a return within 100 ms of ctx's end while Redis does not
// answer. A caller that leaves an unanswered first send waits returnGrace for its resolution
// before it returns: at 100 ms (when this test was written) it returned 100 ms after ctx's
// end at the earliest, the guarantee never met, only the test's 500 ms bound was (50 ms now). The fastest of a few runs, on a
// quiet or noisy machine, must stay under the promised 100 ms.
func TestGuarantee6_margin(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis (run without -short)")
	}
	cases := []struct {
		name string
		warm func(c *rlock.Client, n string) error
		acq  func(ctx context.Context, c *rlock.Client, n string) error
	}{
		{"Mutex",
			func(c *rlock.Client, n string) error {
				m := c.Mutex(n)
				if err := m.Lock(bg); err != nil {
					return err
				}
				return m.Unlock(bg)
			},
			func(ctx context.Context, c *rlock.Client, n string) error { return c.Mutex(n).Lock(ctx) }},
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
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // servers of its own; the test itself stays serial, beside no other test
			fastest := time.Hour
			for i := 0; i < 3; i++ {
				b := realBackend(t)
				c := b.client(t, rlock.WithCleanupTimeout(4*time.Second))
				name := redistest.Name(t)
				require.NoError(t, tc.warm(c, name))
				b.srv.Pause(t)
				ctx, cancel := context.WithCancel(bg)
				got := make(chan error, 1)
				go func() { got <- tc.acq(ctx, c, name) }()
				time.Sleep(50 * time.Millisecond) // the request is on the wire
				cancel()
				ended := time.Now()
				<-got
				if took := time.Since(ended); took < fastest {
					fastest = took
				}
				b.srv.Resume(t)
			}
			require.Less(t, fastest, 100*time.Millisecond, "the fastest of 3 acquires returned %v after its ctx ended", fastest.Round(time.Millisecond))
		})
	}
}
