package rlock_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Review 17. A re-entry whose outcome stays unknown counts as a possible orphan of the live
// tenure (hold.unknownAcquire), given back conditionally at the next confirmed renewal
// (settleOrphans). When its first send is still on its way (a slower connection: keptSend's
// premise) at that renewal, the conditional give-back finds nothing beyond the owner's own
// hold (-4, nothing written), settleOrphans sets orphans to 0, and the first send then lands
// and is applied as a re-entry (no later operation of the owner was applied to supersede
// it). From then on Redis counts a hold the Client counts nowhere (count 1, orphans 0): the
// watchdog renews it with the tenure and HoldCount says 2 for the owner's one hold until its
// last Unlock, against HoldCount's godoc (the first renewal Redis confirms) and DESIGN 4's
// invariant 1 (Redis's count is count + orphans, an acquire of unknown outcome within a
// live tenure counted among its orphans).
func TestReview17_unknownReentryLandingAfterTheSettleStaysCounted(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		hc, c := hardSetup(t, b, rlock.WithWatchdogTimeout(time.Second), rlock.WithCleanupTimeout(300*time.Millisecond))
		m := c.Mutex(redistest.Name(t))
		require.NoError(t, m.Lock(bg))
		var armed atomic.Bool
		kept := make(chan func(context.Context) rueidis.RedisResult, 1)
		var kepts atomic.Int32 // conditional give-backs that found nothing to give back (-4)
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			switch {
			case cmd.script == "acquire" && armed.Load():
				// args: numkeys, lock, fence, lease, owner, request, ...
				if !strings.HasPrefix(cmd.args[5], "+") {
					kept <- cmd.sendWith // the first send: on a slow connection, delivered below
				}
				// Its reply, and every replay's, lost: the replays never reach Redis.
				return rueidis.NewErrorResult(context.DeadlineExceeded)
			case cmd.script == "release":
				res := call()
				if n, err := res.AsInt64(); err == nil && n == -4 {
					kepts.Add(1)
				}
				return res
			}
			return call()
		})
		armed.Store(true)
		err := m.Lock(bg)
		armed.Store(false)
		require.ErrorIs(t, err, rlock.ErrUnknownOutcome)

		// The next confirmed renewal settles the possible orphan: Redis counts nothing beyond
		// the owner's one hold yet.
		redistest.WaitFor(t, 3*time.Second, "the settle's conditional give-back (-4)", func() bool { return kepts.Load() > 0 })

		// The first send arrives now, and is applied.
		require.NoError(t, (<-kept)(context.Background()).Error())
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n, "premise: the late first send re-entered")

		// Several renewals (one every ~333 ms) within 2 s: the Client gives back what Redis
		// counts beyond the owner's one hold at one of them, as for an orphan.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if n, err = m.HoldCount(bg); err == nil && n == 1 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, err)
		require.Equal(t, 1, n, "HoldCount, 2 s (6 renewals) after the late re-entry landed: a hold nobody took, renewed with the tenure")

		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()), "the last Unlock frees the lock")
	})
}

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
