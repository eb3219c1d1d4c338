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

// A re-entry whose outcome stays unknown (every reply of its send and of its replays lost
// within the cleanup timeout: ErrUnknownOutcome) may have been applied: Redis then counts a
// hold of the owner that no caller has, and the watchdog renews it with the tenure. HoldCount
// said 2 for the owner's one hold until its last Unlock, however long the tenure lasted (the
// public-API model check's "HoldCount 2 for one hold"), where its godoc promises the first
// renewal Redis confirms. Such a possible hold is now one of the tenure's orphans, given
// back conditionally at that renewal (a hold that was never granted costs nothing).
func TestMutex_unknownReentryIsGivenBackAtTheNextRenewal(t *testing.T) {
	t.Parallel()
	for _, applied := range []bool{true, false} {
		name := map[bool]string{true: "applied", false: "notApplied"}[applied]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, b *backend) {
				// A watchdog timeout and a cleanup timeout that a loaded machine's stalls do
				// not run out (1s and 300ms, as first written, did: the owner's hold expired
				// between renewals, or an Unlock ended with its outcome unknown).
				const watchdogTTL = 3 * time.Second
				hc, c := hardSetup(t, b, rlock.WithWatchdogTimeout(watchdogTTL), rlock.WithCleanupTimeout(2*time.Second))
				m := c.Mutex(redistest.Name(t))
				require.NoError(t, m.Lock(bg))
				var armed atomic.Bool
				hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					if !armed.Load() || cmd.script != "acquire" {
						return call()
					}
					if applied {
						call() // applied, its reply lost
					}
					return rueidis.NewErrorResult(context.DeadlineExceeded)
				})
				armed.Store(true)
				err := m.Lock(bg)
				armed.Store(false)
				require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
				want := 1 // the owner's one hold
				if applied {
					n, err := m.HoldCount(bg)
					require.NoError(t, err)
					require.Equal(t, 2, n, "the re-entry was applied (the test's premise)")
				}
				// The first renewal comes within a third of the watchdog timeout.
				redistest.WaitFor(t, 2*watchdogTTL, "HoldCount to count the owner's one hold", func() bool {
					n, err := m.HoldCount(bg)
					return err == nil && n == want
				})
				never(t, func() bool {
					n, err := m.HoldCount(bg)
					return err != nil || n != want
				}, 500*time.Millisecond, 50*time.Millisecond, "HoldCount moved off the owner's one hold")
				require.NoError(t, m.Err(bg), "the lock is not lost")
				require.NoError(t, m.Unlock(bg))
				require.False(t, b.exists(t, m.Key()), "the last Unlock frees the lock")
			})
		})
	}
}

// A re-entry whose outcome stays unknown counts as a possible orphan of the live tenure
// (hold.unknownAcquire), given back conditionally at the next confirmed renewal
// (settleOrphans). When its first send is still on its way at that renewal (a slower
// connection), the conditional give-back finds nothing beyond the owner's own hold (-4).
// That give-back wrote nothing, so the first send, landing after it, was applied as a
// re-entry that the Client counted nowhere: the watchdog renewed it with the tenure and
// HoldCount said 2 for the owner's one hold until its last Unlock (found in review). The
// give-back now records its sequence number even when it gives nothing back, so the late
// first send is refused as superseded.
func TestMutex_unknownReentryLandingAfterTheSettleIsRefused(t *testing.T) {
	t.Parallel()
	// The backends side by side (servers, Clients and names of their own; no bound below
	// half a second): the longer settings below cost each about 2 s more.
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		// The settings of TestMutex_unknownReentryIsGivenBackAtTheNextRenewal, for the same
		// reasons: with 1s and 300ms, on a loaded machine (the test at nice 10 beside a burner
		// on one core, TestFairMutex_Lock_manyWaitersAllAcquire beside it) the settle's
		// give-back never came within 3 s (4 of 4 runs), and a warm-up Unlock ran out of its
		// cleanup timeout. What it checks does not depend on either: the settle comes after
		// the re-entry's resolution, whatever its length, and the first send waits for it.
		const watchdogTTL = 3 * time.Second
		hc, c := hardSetup(t, b, rlock.WithWatchdogTimeout(watchdogTTL), rlock.WithCleanupTimeout(2*time.Second))
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

		// The next confirmed renewal (within a third of the watchdog timeout) settles the
		// possible orphan: Redis counts nothing beyond the owner's one hold yet.
		redistest.WaitFor(t, 2*watchdogTTL, "the settle's conditional give-back (-4)", func() bool { return kepts.Load() > 0 })

		// The first send arrives now: refused, superseded by the give-back.
		vals, err := (<-kept)(context.Background()).AsIntSlice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 0}, vals, "the late first send is refused (superseded), not a re-entry")
		never(t, func() bool {
			n, err := m.HoldCount(bg)
			return err != nil || n != 1
		}, time.Second, 20*time.Millisecond, "HoldCount left the owner's one hold")

		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()), "the last Unlock frees the lock")
	})
}
