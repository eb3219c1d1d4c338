package rlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/rlock"
)

// Review 20: the first send's inflight in the acquisition's memory (attemptBuf.first) and the
// transaction's commands in it (inflight.cmds). Fast grants whose callers leave before the
// transaction is answered (it is delayed, then sent on without the caller's cancel), from
// several goroutines sharing one handle, under -race: the background resolution reads the
// left send's memory while the handle's next calls run. At the end the lock is free and a
// Lock+Unlock works.
func TestReview20_leftFastSendsUnderRace(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	hc := &hookClient{Client: b.rueidis(t)}
	var left, delayed, got atomic.Int32
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if !cmd.fast {
			return call()
		}
		delayed.Add(1)
		time.Sleep(3 * time.Millisecond)
		return cmd.sendWith(context.WithoutCancel(ctx))
	})
	c, err := rlock.New(hc)
	require.NoError(t, err)
	defer c.Close()
	rlock.SetFastAlways(c, true)
	m := c.Mutex(t.Name())
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				ctx, cancel := context.WithTimeout(bg, time.Duration(i%8)*time.Millisecond+500*time.Microsecond)
				ok, err := m.TryLock(ctx, time.Second, 0)
				cancel()
				switch {
				case ok:
					got.Add(1)
					require.NoError(t, m.Unlock(bg))
				case errors.Is(err, context.DeadlineExceeded):
					left.Add(1)
				}
			}
		}(g)
	}
	wg.Wait()
	require.Eventually(t, func() bool { return !b.exists(t, m.Key()) }, 10*time.Second, 10*time.Millisecond,
		"every left grant given back")
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Unlock(bg))
	t.Logf("%d transactions delayed, %d callers left, %d granted", delayed.Load(), left.Load(), got.Load())
	require.Greater(t, left.Load(), int32(0))
}

// Review 20: tenure.relSC is taken by the first give-back of a tenure; a give-back of the same
// tenure retried after a definitive failure (an error reply) takes the fallback (a sendCtx of
// its own). Both tenure forms: a fast grant's (fast_release) and a script's (release).
func TestReview20_unlockRetriedOnSameTenure(t *testing.T) {
	t.Parallel()
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "script"}[fast], func(t *testing.T) {
			b := realBackend(t)
			rc := b.rueidis(t)
			replyErr := rc.Do(bg, rc.B().Eval().Script("return redis.error_reply('ERR injected')").Numkeys(0).Build()).Error()
			_, isReply := rueidis.IsRedisErr(replyErr)
			require.True(t, isReply, "%v", replyErr)
			hc := &hookClient{Client: rc}
			var refuse atomic.Int32
			var releases atomic.Int32
			hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if cmd.script == "release" || cmd.script == "fast_release" {
					releases.Add(1)
					if refuse.Add(-1) >= 0 {
						return rueidis.NewErrorResult(replyErr)
					}
				}
				return call()
			})
			c, err := rlock.New(hc)
			require.NoError(t, err)
			defer c.Close()
			m := c.Mutex(t.Name())
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			if fast {
				// The fence made: the next fresh grant is a fast one. (The first is acquire.lua's.)
				require.NoError(t, m.Lock(ctx))
				require.NoError(t, m.Unlock(ctx))
			}
			require.NoError(t, m.Lock(ctx))
			refuse.Store(1)
			err = m.Unlock(ctx)
			require.Error(t, err)
			t.Logf("first Unlock: %v", err)
			require.True(t, b.exists(t, m.Key()), "nothing given back")
			err = m.Unlock(ctx)
			t.Logf("second Unlock: %v (%d release sends)", err, releases.Load())
			require.NoError(t, err)
			require.False(t, b.exists(t, m.Key()))
			require.NoError(t, m.Lock(ctx))
			require.NoError(t, m.Unlock(ctx))
		})
	}
}

// Review 20: leaseLost is given the lease that was lost, also a re-entry's that replaced the
// tenure's first lease (a fixed lease turned to the watchdog: a lease of its own, not
// &tenure.first). The key deleted behind the Client's back: the renewal finds it gone, and
// the hold ends as lost (Done closes, Err wraps ErrLockLost).
func TestReview20_reentryLeaseLossSeen(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}}, rlock.WithWatchdogTimeout(600*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(t.Name())
	require.NoError(t, m.LockLease(bg, time.Minute)) // the tenure's first lease: fixed
	require.NoError(t, m.Lock(bg))                   // re-entry: the watchdog's lease replaces it
	done := m.Done(bg)
	b.srv.Do(t, "DEL", m.Key())
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the loss of the re-entry's lease was not seen")
	}
	require.ErrorIs(t, m.Err(bg), rlock.ErrLockLost)
}
