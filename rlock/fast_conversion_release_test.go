package rlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestFastReentry_unlockReplayAfterAnUnlearntConversionFreesTheLock: a tenure that began as a
// fast grant (fast.go) is converted by the owner's re-entry (acquire.lua writes the tenure's
// token), and the Client does not learn it when the re-entry's caller has gone before its
// reply came: the background give-back of that hold leaves the tenure converted, the Client
// still naming it by its fast form. The last Unlock's fast_release finds it held otherwise
// (-5), and its release script's first send gets no answer; the replay named the tenure by its
// form alone, release.lua took the converted tenure for one that had ended (-2), and the
// Client for one its first send had freed: Unlock returned nil with the lock still held for
// the rest of its lease, by nobody (the drift hunt, seed 1796460893863681573 trial 15, CI at
// 928b729). The replay now names the tenure by its token, and by its form as a force records
// it (release.lua ARGV[9]).
func TestFastReentry_unlockReplayAfterAnUnlearntConversionFreesTheLock(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	hc, c := hardSetup(t, b, rlock.WithCleanupTimeout(time.Second))
	rlock.SetFastAlways(c, true)
	m := c.Mutex(redistest.Name(t))
	const lease = time.Minute // fixed: no renewal meets the tenure

	const (
		pass         = iota
		delayAcquire // the re-entry is applied; its reply comes after its caller has gone
		loseRelease  // the release script's first send is lost (not applied)
	)
	var phase atomic.Int32
	var lost atomic.Int32
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		switch phase.Load() {
		case delayAcquire:
			if cmd.script == "acquire" {
				res := call()
				<-ctx.Done()
				return res
			}
		case loseRelease:
			if cmd.script == "release" && lost.Add(1) == 1 {
				return hardLost()
			}
		}
		return call()
	})

	// The tenure in the fast form: a Lock once the fence exists (the first one makes it).
	require.NoError(t, m.LockLease(bg, lease))
	require.NoError(t, m.Unlock(bg))
	require.NoError(t, m.LockLease(bg, lease))
	require.True(t, strings.HasPrefix(tokenField(t, b, m.Key()), "~h:"), "the fast form: %q", tokenField(t, b, m.Key()))

	phase.Store(delayAcquire)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	err := m.LockLease(ctx, lease)
	cancel()
	require.True(t, errors.Is(err, context.DeadlineExceeded), "the re-entry's caller gone: %v", err)
	redistest.WaitFor(t, 10*time.Second, "the re-entry's hold given back in the background", func() bool {
		n, err := m.HoldCount(bg)
		return err == nil && n == 1
	})
	phase.Store(pass)
	require.False(t, strings.HasPrefix(tokenField(t, b, m.Key()), "~"), "the re-entry converted the form: %q", tokenField(t, b, m.Key()))

	phase.Store(loseRelease)
	require.NoError(t, m.Unlock(bg))
	require.GreaterOrEqual(t, lost.Load(), int32(2), "the release's first send was lost and replayed")
	require.False(t, b.exists(t, m.Key()), "Unlock returned nil: the lock is free, not held for the rest of its lease")
}
