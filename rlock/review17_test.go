package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// Review 17. d680f2d made the work a handed-over PermitSemaphore acquire is left to spend the
// permit id when that send is refused by the script ('+' refusal). It is not called when the
// send fails definitively without an answer from the script: a refused dial (nothing sent),
// or an error reply in which Redis declines to run it (BUSY, LOADING, OOM: definitive, so
// semAcquire's handed work neither replays it nor calls left; resolvedLeft drops it). The
// id, loose since an earlier send's reply was lost, is then spent by nobody (acquireAs skips
// spend for a handed request), and that earlier send, landing once a permit is free, takes
// it for nobody for its lease. As the nextAttempt case of
// TestGhost_permitLateFirstSendAfterCancelDuringARefusedSend, the held send failing with a
// refused dial instead of reaching Redis.
func TestReview17_permitHandedSendRefusedDialLeavesIdUnspent(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackend(t, func(t *testing.T, b *backend) {
		sc := countScripts(b.rueidis(t))
		hc := keepSend(sc) // keeps the first send; its reply lost, the caller stays
		gc := &hookClient{Client: hc}
		var armed atomic.Bool
		held, open := make(chan struct{}), make(chan struct{})
		gc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if !cmd.multi && armed.CompareAndSwap(true, false) {
				close(held)
				<-open
				return refusedResult() // a refused dial: nothing sent
			}
			return call()
		})
		p := onePermitOn(t, gc, rlock.WithObserver(&rlock.Observer{Replay: func(e rlock.ReplayInfo) {
			if e.Op == "acquire" && e.Err == nil {
				armed.Store(true) // the resend was refused: hold the next script (the next attempt's send)
			}
		}}))
		q, holder := permitHeldElsewhere(t, b, p)

		hc.armed.Store(true)
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		go func() {
			select {
			case <-held:
				cancel() // the caller leaves while the send is held
			case <-time.After(10 * time.Second):
			}
		}()
		_, err := p.Acquire(ctx, time.Minute)
		select {
		case <-held:
		default:
			t.Fatal("no send of the permit id was held (the test's premise)")
		}
		require.ErrorIs(t, err, context.Canceled)
		sent := sc.n.Load()
		close(open) // the held send fails: a refused dial
		// Time for the background work to spend the id (a script through sc), if it does.
		time.Sleep(500 * time.Millisecond)
		t.Logf("scripts sent by the background work after the refused dial: %d", sc.n.Load()-sent)
		require.NoError(t, q.Release(bg, holder.ID))

		hc.deliver(t) // the first send arrives last

		require.Eventually(t, func() bool {
			n, err := p.AvailablePermits(bg)
			return err == nil && n == 1
		}, 3*time.Second, 10*time.Millisecond, "the late first send took a permit for a call that ended without one")
	})
}
