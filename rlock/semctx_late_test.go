package rlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Found in review of e16af31 (the semreview helper).
//
// TestSemaphore_DrainPermits_lateFirstSendAfterZeroResendDrainsNothing: a DrainPermits whose first send is
// kept back (keepSend: rueidis spreads a Client's commands over several connections, so
// nothing orders a resend after the send it replays) is resent and answered 0 (no permit
// free then). sem_drain.lua remembers no answer of 0, and the drain's id is not marked
// (mark -1), so the first send, reaching Redis once permits are back, drains them: for a
// caller that left, nobody gives them back (a Semaphore's permits never expire); for a
// caller that waited, it was told 0 (a defect before e16af31 too). Now the resend marks the
// id and sem_drain remembers its 0. An Acquire has the same story covered
// (TestGhost_semaphoreLateFirstSendAfterRefusedReplay: its resend's refusal is remembered).
func TestSemaphore_DrainPermits_lateFirstSendAfterZeroResendDrainsNothing(t *testing.T) {
	for _, left := range []bool{true, false} {
		name := "callerWaits"
		if left {
			name = "callerLeft"
		}
		t.Run(name, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				hc := keepSend(b.rueidis(t))
				resolved := make(chan struct{}, 4)
				c, err := rlock.New(hc, rlock.WithObserver(&rlock.Observer{Replay: func(e rlock.ReplayInfo) {
					if e.Op == "drain" && e.Err == nil {
						resolved <- struct{}{}
					}
				}}))
				require.NoError(t, err)
				t.Cleanup(func() { _ = c.Close() })
				s := c.Semaphore(redistest.Name(t))
				setPermits(t, s, 1)
				n, err := s.DrainPermits(bg) // the script loaded
				require.NoError(t, err)
				require.Equal(t, 1, n)
				require.NoError(t, s.AddPermits(bg, 1))
				q := b.client(t).Semaphore(s.Name())
				ok, err := q.TryAcquire(bg, 1, 0) // held elsewhere: none free
				require.NoError(t, err)
				require.True(t, ok)

				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				if left {
					hc.cancel = cancel
				}
				hc.armed.Store(true)
				n, err = s.DrainPermits(ctx)
				if left {
					require.ErrorIs(t, err, context.Canceled)
				} else {
					require.NoError(t, err)
					require.Equal(t, 0, n, "the resend found none free")
				}
				select { // the resend answered (0)
				case <-resolved:
				case <-time.After(10 * time.Second):
					t.Fatal("the drain's resend did not answer")
				}
				require.NoError(t, q.Release(bg, 1))
				require.Equal(t, 1, semAvailable(t, s))

				hc.deliver(t) // the first send arrives last

				require.Equal(t, 1, semAvailable(t, s), "the late first send drained a permit nobody was told of (drain told %d, err %v)", n, err)
			})
		})
	}
}

// TestSemaphores_writesLeftToTheBackgroundTellNothingAfterClose: a write whose caller left (a cancel on a paused Redis)
// was finished by semRun's aside goroutine, which Close neither waited for nor ended: once its
// first send's cleanup timeout runs out, its replay (cut short at once, ctx having ended)
// reports a Replay event, after Close returned. The Observer's guarantee: "Once
// Client.Close has returned, no hook is called, except the AcquireDone or ReleaseDone of a
// call that was under way when Close began"; here no call was under way.
func TestSemaphores_writesLeftToTheBackgroundTellNothingAfterClose(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis (run without -short)")
	}
	t.Parallel() // servers and Clients of its own
	const cleanup = time.Second
	writes := []struct {
		name  string
		write func(ctx context.Context, c *rlock.Client, name string) error
	}{
		{"Semaphore.TrySetPermits", func(ctx context.Context, c *rlock.Client, n string) error {
			_, err := c.Semaphore(n).TrySetPermits(ctx, 1)
			return err
		}},
		{"CountDownLatch.CountDown", func(ctx context.Context, c *rlock.Client, n string) error {
			return c.CountDownLatch(n).CountDown(ctx)
		}},
	}
	for _, wr := range writes {
		t.Run(wr.name, func(t *testing.T) {
			t.Parallel()
			b := realBackend(t)
			hc := watchNextSend(b.rueidis(t))
			var closed atomic.Bool
			var mu sync.Mutex
			var late []rlock.ReplayInfo
			c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup), rlock.WithObserver(&rlock.Observer{Replay: func(e rlock.ReplayInfo) {
				if closed.Load() {
					mu.Lock()
					late = append(late, e)
					mu.Unlock()
				}
			}}))
			require.NoError(t, err)
			t.Cleanup(func() { b.srv.Resume(t) })
			name := redistest.Name(t)
			_ = wr.write(bg, c, name) // the script loaded, a connection up
			b.srv.Pause(t)
			ctx, cancel := context.WithCancel(bg)
			hc.armed.Store(true)
			got := make(chan error, 1)
			go func() { got <- wr.write(ctx, c, name) }()
			within(t, 10*time.Second, "the write to be sent", hc.sent)
			cancel()
			err = await(t, got, 30*time.Second, "the write to return")
			require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
			began := time.Now()
			require.NoError(t, c.Close())
			closed.Store(true)
			took := time.Since(began)
			t.Logf("Close took %v", took.Round(time.Millisecond))
			// The left write's send is on the wire: Close waits for it within the cleanup
			// timeout (rueidis heeds only its deadline).
			require.Less(t, took, 3*cleanup)
			time.Sleep(3 * cleanup)
			mu.Lock()
			defer mu.Unlock()
			require.Empty(t, late, "hooks called after Close returned")
		})
	}
}
