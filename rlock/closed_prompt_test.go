package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A Lock parked as a hand-off candidate, claimed by a release of the same Client whose first
// send is on the wire to a Redis that does not answer, waits for that release's outcome. The
// release's first send is bounded by the cleanup timeout alone, which Close does not bring
// forward (rueidis sends a lone request with a deadline on the caller's goroutine and heeds
// only the deadline). Close must still end the claimed Lock at once with ErrClosed, and
// must not wait for that send either (README guarantee 6). Before the fix, the claimed Lock
// waited out the release's cleanup timeout: after Close the work that awaited the claim's
// outcome ran on the caller's goroutine (Client.background runs work inline once closed),
// past returnGrace, so a Lock whose ctx ended after Close outlived it by up to the cleanup
// timeout (the closed-prompt check of TestModel); and a Close after the caller had gone
// waited for that work.
func TestClosedPrompt_claimedWaiter(t *testing.T) {
	if testing.Short() {
		t.Skip("long: pauses Redis for ~4 s (run without -short)")
	}
	// Beside the other tests: Redis is paused, so the bounds are the Client's own, and they
	// subtract this process's stalls (watchStalls).
	t.Parallel()
	// The release's first send waits this long: far longer than Close takes here (rueidis
	// gives the subscription connection a second to answer as Close closes it).
	const cleanup = 4 * time.Second
	const slack = 100*time.Millisecond + 150*time.Millisecond // returnGrace + a loaded machine

	// setup parks a waiter behind a holder of the same Client, pauses Redis and has the
	// holder's Unlock claim the waiter: the release is on the wire when it returns.
	setup := func(t *testing.T, wctx context.Context) (c *rlock.Client, got, unlocked chan error) {
		b := realBackend(t)
		hc := watchNextSend(b.rueidis(t))
		c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		hardWarm(t, c)
		name := redistest.Name(t)
		holder, waiter := c.Mutex(name), c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		hardSubscribe(t, c, name) // the subscription is up before Redis pauses
		got = make(chan error, 1)
		go func() { got <- waiter.Lock(wctx) }()
		redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
		b.srv.Pause(t) // SIGSTOP: the release is sent, no reply comes
		t.Cleanup(func() { b.srv.Resume(t) })
		unlocked = make(chan error, 1)
		hc.armed.Store(true)                          // the Client's next command is the release
		go func() { unlocked <- holder.Unlock(bg) }() // claims the waiter: a hand-off
		redistest.WaitFor(t, 5*time.Second, "the release to claim the waiter", func() bool { return rlock.ParkedCandidates(c, holder) == 0 })
		// The release is on the wire: sent (a fixed 20ms after the claim was not always
		// enough beside the other tests), and written out.
		within(t, 5*time.Second, "the release to be sent", hc.sent)
		time.Sleep(20 * time.Millisecond)
		return c, got, unlocked
	}
	onWire := func(t *testing.T, unlocked chan error, when string) {
		t.Helper()
		select {
		case err := <-unlocked:
			t.Fatalf("precondition: the release ended %s: %v", when, err)
		default:
		}
	}

	// Each subtest has a server of its own and mostly waits on it paused: the three overlap.
	t.Run("closeEndsTheWait", func(t *testing.T) {
		t.Parallel()
		c, got, unlocked := setup(t, bg) // the waiter's ctx never ends
		stalled := watchStalls(nil)
		closeStart := time.Now()
		closed := make(chan struct{})
		go func() { _ = c.Close(); close(closed) }()
		err := await(t, got, 20*time.Second, "the waiter's Lock to return")
		took := time.Since(closeStart)
		stall := stalled(closeStart, time.Now())
		onWire(t, unlocked, "before the waiter's Lock returned")
		require.Less(t, took-stall, slack, "the claimed Lock returned %v after Close began (the process stalled %v of it): %v",
			took.Round(time.Millisecond), stall.Round(time.Millisecond), err)
		require.ErrorIs(t, err, rlock.ErrClosed)
		<-closed
		onWire(t, unlocked, "before Close returned")
		_ = await(t, unlocked, 20*time.Second, "Unlock to return")
	})

	t.Run("ctxEndsAfterClose", func(t *testing.T) {
		t.Parallel()
		wctx, cancel := context.WithCancel(bg)
		defer cancel()
		c, got, unlocked := setup(t, wctx)
		require.NoError(t, c.Close())
		onWire(t, unlocked, "before Close returned")
		stalled := watchStalls(nil)
		ended := time.Now()
		cancel()
		err := await(t, got, 20*time.Second, "the waiter's Lock to return")
		late := time.Since(ended)
		stall := stalled(ended, time.Now())
		require.Less(t, late-stall, slack, "Lock outlived its ctx by %v (the process stalled %v of it; returnGrace is 50ms): %v",
			late.Round(time.Millisecond), stall.Round(time.Millisecond), err)
		require.Error(t, err)
		_ = await(t, unlocked, 20*time.Second, "Unlock to return")
	})

	t.Run("closeAfterTheCallerLeft", func(t *testing.T) {
		t.Parallel()
		wctx, cancel := context.WithCancel(bg)
		defer cancel()
		c, got, unlocked := setup(t, wctx)
		stalled := watchStalls(nil)
		ended := time.Now()
		cancel()
		err := await(t, got, 20*time.Second, "the waiter's Lock to return")
		late := time.Since(ended)
		stall := stalled(ended, time.Now())
		require.Less(t, late-stall, slack, "Lock outlived its ctx by %v (the process stalled %v of it; returnGrace is 50ms): %v",
			late.Round(time.Millisecond), stall.Round(time.Millisecond), err)
		require.ErrorIs(t, err, context.Canceled)
		// The claim's outcome is awaited in the background; Close ends that wait rather than
		// wait out the release's cleanup timeout.
		closeStart := time.Now()
		require.NoError(t, c.Close())
		took := time.Since(closeStart)
		select {
		case err := <-unlocked:
			t.Fatalf("Close took %v: it waited for the release on the wire (%v)", took.Round(time.Millisecond), err)
		default:
		}
		require.Less(t, took, cleanup/2, "Close took %v: it waited for the release on the wire", took.Round(time.Millisecond))
		_ = await(t, unlocked, 20*time.Second, "Unlock to return")
	})
}
