package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A hand-off that a release of this Client began during a TryLock's wait, whose grant comes
// back after the wait bound and after the TryLock's fixed lease ran out, is given back, and
// the call ends there: no attempt begins after the wait bound, and the error wraps
// ErrLeaseExpired (TryLock's godoc: wait bounds when attempts begin; a grant that comes back
// after its fixed lease ran out is given back, and if wait ends that way, the error wraps
// ErrLeaseExpired). Before, the wait went on to one more attempt after the late grant, past
// its bound: TryLock took the lock 2.3 s into a 2 s wait and returned (true, nil).
func TestMutex_lateHandoffAtWaitEndIsLeaseExpired(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	eachBackend(t, func(t *testing.T, b *backend) {
		hc, c := hardSetup(t, b)
		name := redistest.Name(t)
		holder, waiter := c.Mutex(name), c.Mutex(name)
		require.NoError(t, holder.Lock(bg))
		hardSubscribe(t, c, name)

		const wait, lease = 2 * time.Second, 50 * time.Millisecond
		start := time.Now()
		type result struct {
			ok  bool
			err error
		}
		got := make(chan result, 1)
		go func() {
			ok, err := waiter.TryLock(bg, wait, lease)
			got <- result{ok, err}
		}()
		redistest.WaitFor(t, wait/2, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })

		// The holder's release with a successor (three keys) passes the lock on in Redis at
		// once; its reply reaches the Client only after the TryLock's wait has ended, long
		// after the 50 ms lease the hand-off granted.
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			if cmd.script != "release" || len(cmd.args) == 0 || cmd.args[0] != "3" {
				return call()
			}
			res := call()
			time.Sleep(time.Until(start.Add(wait + 300*time.Millisecond)))
			return res
		})
		require.NoError(t, holder.Unlock(bg))
		r := <-got
		t.Logf("TryLock: %v, %v after %v", r.ok, r.err, time.Since(start))
		require.False(t, r.ok)
		require.ErrorIs(t, r.err, rlock.ErrLeaseExpired, "the late hand-off was dropped without a word")
		hc.set(nil)
		redistest.WaitFor(t, 5*time.Second, "the late grant to be given back", func() bool { return !b.exists(t, waiter.Key()) })
		ok, err := waiter.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, waiter.Unlock(bg))
	})
}

// A TryLock whose sleep ends at its wait bound makes its last attempt then: a lock freed
// without a word (its key deleted: no release publishes, as when the holder's lease ran out)
// is taken at the bound. 96fb301 ended such a wait without that attempt, together with the
// waits that had awaited a hand-off past their bound.
func TestMutex_tryLockMakesItsLastAttemptAtTheBound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca, cb := b.client(t), b.client(t)
		name := redistest.Name(t)
		holder, waiter := ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, holder.Lock(bg)) // the watchdog's 30 s lease: the waiter sleeps to its bound
		type result struct {
			ok  bool
			err error
		}
		got := make(chan result, 1)
		start := time.Now()
		go func() {
			ok, err := waiter.TryLock(bg, time.Second, 0)
			got <- result{ok, err}
		}()
		redistest.WaitFor(t, 900*time.Millisecond, "the waiter's first attempt to be refused", func() bool {
			n, err := b.do(t, "HEXISTS", holder.Key(), "w") // the refusal's mark: the waiter waits
			require.NoError(t, err)
			v, err := n.AsInt64()
			require.NoError(t, err)
			return v == 1
		})
		_, err := b.do(t, "DEL", holder.Key()) // freed, and nobody told
		require.NoError(t, err)
		r := <-got
		t.Logf("TryLock: %v, %v after %v", r.ok, r.err, time.Since(start))
		require.NoError(t, r.err)
		require.True(t, r.ok, "the wait ended at its bound without its last attempt")
		require.NoError(t, waiter.Unlock(bg))
	})
}
