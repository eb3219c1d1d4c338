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

// The give-back of a declined follow-up's fast form (above) tells the waiters that marked the
// lock meanwhile: a waiter of another Client that met the form, marked it and parked must be
// woken when it goes, not left to wait out the form's lease (a minute here). Before, the
// give-back published on no channel.
func TestFastGrant_followUpDeclinedWakesMarkedWaiter(t *testing.T) {
	b := realBackend(t)
	raw := b.rueidis(t)
	// The waiter's Client counts its acquires' answers: its first marks the lock, and a
	// second follows its subscription's confirmation (which wakes it: section 7 of the
	// design); after that it sleeps until a wake-up or the form's lease.
	whc := &hookClient{Client: b.rueidis(t)}
	answered := make(chan struct{}, 16)
	whc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		r := call()
		if cmd.script == "acquire" {
			answered <- struct{}{}
		}
		return r
	})
	other, err := rlock.New(whc, rlock.WithWatchdogTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = other.Close() })
	var waiter *rlock.Mutex
	waited := make(chan error, 1)
	m, declined := followUpSetup(t, b, func(ctx context.Context) rueidis.RedisResult {
		// The form is in Redis (the transaction wrote it): a waiter meets it, marks it and
		// parks.
		go func() {
			ctx, cancel := context.WithTimeout(bg, 20*time.Second)
			defer cancel()
			err := waiter.Lock(ctx)
			if err == nil {
				err = waiter.Unlock(bg)
			}
			waited <- err
		}()
		for i := 0; i < 2; i++ {
			select {
			case <-answered:
			case <-time.After(10 * time.Second):
				t.Errorf("the waiter's attempt %d was not answered", i+1)
			}
		}
		w, err := raw.Do(ctx, raw.B().Hexists().Key(waiter.Key()).Field("w").Build()).AsBool()
		require.NoError(t, err)
		require.True(t, w, "the waiter did not mark the lock")
		return raw.Do(ctx, raw.B().Eval().Script("return redis.error_reply('OOM command not allowed when used memory > maxmemory')").Numkeys(0).Build())
	})
	waiter = other.Mutex(m.Name())
	ok, err := m.TryLock(bg, 0, 0)
	require.True(t, declined.Load(), "the follow-up was sent and declined")
	require.False(t, ok)
	require.ErrorContains(t, err, "OOM")
	start := time.Now()
	select {
	case err := <-waited:
		require.NoError(t, err, "the waiter's Lock")
	case <-time.After(15 * time.Second):
		t.Fatalf("the marked waiter was not woken by the give-back (waited %v; the form's lease is a minute)", time.Since(start))
	}
}
