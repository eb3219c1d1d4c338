package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A fast grant whose INCR gives no token (the fence holds spent records: INCR refuses it) is
// followed at once by acquire.lua under the same number, which converts the fast form the
// transaction wrote. When that follow-up cannot be sent (a refused dial: "nothing was
// applied", by itself) the transaction's fast form is in Redis all the same: the acquire's
// outcome is unknown, and its replay resolves it. Taken for a definitive failure, the call
// returned the dial's error and left the fast form held for the owner, counted by HoldCount
// and nobody's, until its lease ran out (the drift hunt in a CI run: seed 1796446476413351497
// trial 35, "HoldCount 1, booked 0").
func TestFastGrant_followUpRefusedLeavesNoHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		m, refused := followUpSetup(t, b, func(context.Context) rueidis.RedisResult {
			return hardRefused()
		})
		// One attempt (a Lock would try again after the refused dial, and its next attempt
		// find the form).
		ok, err := m.TryLock(bg, 0, 0)
		require.True(t, refused.Load(), "the follow-up was sent and refused")
		n, herr := m.HoldCount(bg)
		require.NoError(t, herr)
		if ok {
			require.Equal(t, 1, n, "the Lock's hold")
			require.NoError(t, m.Unlock(bg))
		} else {
			require.Zero(t, n, "TryLock failed (%v), but Redis counts a hold of the owner", err)
		}
		require.False(t, b.exists(t, m.Key()), "the lock is left held")
	})
}

// followUpSetup returns a Mutex of a Client of b whose fast grants' follow-up script
// (acquire.lua after the transaction) is answered once by reply, on a name whose fence holds
// a spent record (a replay's), which INCR refuses, so that the next fresh acquire's
// transaction writes the fast form and needs the follow-up; hit reports that it was sent.
func followUpSetup(t *testing.T, b *backend, reply func(context.Context) rueidis.RedisResult) (*rlock.Mutex, *atomic.Bool) {
	t.Helper()
	hc := &hookClient{Client: b.rueidis(t)}
	var armed, hit atomic.Bool
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if armed.Load() && cmd.script == "acquire" && !cmd.fast && hit.CompareAndSwap(false, true) {
			return reply(ctx)
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithWatchdogTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	rlock.SetFastAlways(c, true)
	m := c.Mutex(redistest.Name(t))
	_, err = b.do(t, "SET", m.Key()+":fence", "1796446491015580/x.1/99999999999999", "PX", "60000")
	require.NoError(t, err)
	armed.Store(true)
	return m, &hit
}

// A fast grant's follow-up script (acquire.lua after an INCR that gave no token) that Redis
// declines to run (an OOM reply: the server filled after the transaction; a refused command)
// wrote nothing, and the transaction's fast form is held for nobody: the acquire returns the
// error, and the form must not stay held until its lease runs out.
func TestFastGrant_followUpDeclinedLeavesNoHold(t *testing.T) {
	b := realBackend(t)
	raw := b.rueidis(t)
	m, declined := followUpSetup(t, b, func(ctx context.Context) rueidis.RedisResult {
		// A real error reply, as Redis sends it.
		return raw.Do(ctx, raw.B().Eval().Script("return redis.error_reply('OOM command not allowed when used memory > maxmemory')").Numkeys(0).Build())
	})
	ok, err := m.TryLock(bg, 0, 0)
	require.True(t, declined.Load(), "the follow-up was sent and declined")
	require.False(t, ok)
	require.ErrorContains(t, err, "OOM")
	n, herr := m.HoldCount(bg)
	require.NoError(t, herr)
	require.Zero(t, n, "TryLock failed, but Redis counts a hold of the owner")
	require.False(t, b.exists(t, m.Key()), "the lock is left held (for the minute of its lease)")
}
