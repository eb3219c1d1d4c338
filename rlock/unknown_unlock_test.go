package rlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestUnlock_unknownOutcomeKeepsCountsAgreed: an Unlock whose give-back got no answer within
// the cleanup timeout (ErrUnknownOutcome) leaves the Client's count and Redis's agreeing once
// Redis answers again, whether the give-back was applied or not, with one hold or two: the
// Client counts the hold as given back (do not call Unlock again), an orphan of the owner's
// other holds given back at the first renewal Redis confirms, or, for the last, left to expire
// with its lease, unrenewed. Before, the Client kept counting it: when the give-back had been
// applied, it stayed one hold above Redis until the tenure ended as lost under the owner's
// remaining hold (the drift hunt, seed 1796319277327231215: "the HoldContext ... ended (rlock:
// not held) while it holds 3"), and a last hold that had not been given back was renewed for
// ever.
func TestUnlock_unknownOutcomeKeepsCountsAgreed(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	for _, holds := range []int{1, 2} {
		for _, applied := range []bool{true, false} {
			t.Run(fmt.Sprintf("holds=%d/applied=%v", holds, applied), func(t *testing.T) {
				t.Parallel()
				const lease = 900 * time.Millisecond
				hc, c := hardSetup(t, realBackend(t), rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(300*time.Millisecond))
				m := c.Mutex(redistest.Name(t))
				for range holds {
					require.NoError(t, m.Lock(bg))
				}
				hctx, stop := m.HoldContext(bg)
				defer stop()
				var storm atomic.Bool
				var sends atomic.Int32
				storm.Store(true)
				hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					if cmd.script != "release" || !storm.Load() {
						return call()
					}
					if sends.Add(1) == 1 && applied {
						_ = call() // the first send is applied; its reply and every replay's are lost
					}
					return hardLost()
				})
				err := m.Unlock(bg)
				storm.Store(false)
				require.ErrorIs(t, err, rlock.ErrUnknownOutcome)

				if holds == 1 {
					// The last hold: no longer renewed; Redis frees it (at once if the give-back
					// was applied, else when its lease ends), and no loss is told.
					redistest.WaitFor(t, 3*lease, "the lock free in Redis", func() bool {
						locked, err := m.IsLocked(bg)
						return err == nil && !locked
					})
					require.ErrorIs(t, m.Err(bg), rlock.ErrNotHeld)
					require.NotErrorIs(t, context.Cause(hctx), rlock.ErrLockLost, "the owner gave it back: no loss")
					return
				}
				// Another hold stays: Redis's count is the owner's own (1) once a renewal is
				// confirmed, and the last Unlock frees the lock.
				redistest.WaitFor(t, 3*lease, "Redis to count the owner's one hold", func() bool {
					n, err := m.HoldCount(bg)
					return err == nil && n == 1
				})
				require.Equal(t, 1, rlock.ModelMutexHold(m, bg).Count, "the Client counts what Redis does")
				require.NoError(t, m.Err(bg), "the owner still holds one hold")
				time.Sleep(lease) // renewals go on: the hold is not reported lost
				require.NoError(t, m.Err(bg))
				require.NoError(t, m.Unlock(bg))
				locked, err := m.IsLocked(bg)
				require.NoError(t, err)
				require.False(t, locked, "the owner's last Unlock freed it")
				require.NotErrorIs(t, context.Cause(hctx), rlock.ErrLockLost)
			})
		}
	}
}
