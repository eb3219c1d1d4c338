package rlock_test

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A semaphore's wait woken by a release as its ctx ends sends no attempt past ctx's end, as a
// Mutex's does (Mutex.attempt). Before, the attempt went out all the same: its send was
// handed over to the background at once, and the permit it took given back there. The
// wait is held, woken, before its next attempt (rlock.LockClient), while ctx is cancelled;
// no acquire script may go out after that.
func TestSemaphores_wakeAfterCancelSendsNoAttempt(t *testing.T) {
	t.Parallel()
	// take has holder take the one permit and returns its release.
	type take func(t *testing.T, holder *rlock.Client, name string) (release func())
	semTake := func(t *testing.T, holder *rlock.Client, name string) func() {
		s := holder.Semaphore(name)
		require.NoError(t, s.Acquire(bg, 1))
		return func() { require.NoError(t, s.Release(bg, 1)) }
	}
	psemTake := func(t *testing.T, holder *rlock.Client, name string) func() {
		p := holder.PermitSemaphore(name)
		permit, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		return func() { require.NoError(t, p.Release(bg, permit.ID)) }
	}
	takes := map[string]take{"sem_acquire": semTake, "psem_acquire": psemTake}
	for _, tc := range semAcquireCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := realBackend(t)
			hc, c := hardSetup(t, b)
			holder := b.client(t)
			name := redistest.Name(t)
			tc.setup(t, c, name)
			release := takes[tc.script](t, holder, name)

			var sends atomic.Int64
			hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if !cmd.multi && cmd.script == tc.script {
					sends.Add(1)
				}
				return call()
			})
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			got := make(chan error, 1)
			go func() { got <- tc.acq(ctx, c, name) }()
			// The first attempt, refused, and the one after the subscription (not live yet):
			// the wait has begun.
			redistest.WaitFor(t, 10*time.Second, "two refused attempts", func() bool { return sends.Load() >= 2 })
			unlock := rlock.LockClient(c)
			locked := true
			defer func() {
				if locked {
					unlock()
				}
			}()
			release() // publishes: the wait wakes (or the subscription's confirmation woke it)
			redistest.WaitFor(t, 10*time.Second, "the woken wait to stop before its next attempt", waitHeldBeforeAttempt)
			before := sends.Load()
			cancel()
			locked = false
			unlock()
			err := await(t, got, 10*time.Second, "the acquire to return")
			require.ErrorIs(t, err, context.Canceled)
			// A send handed over to the background goes out after the call returned: give it
			// time to show.
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end) && sends.Load() == before; {
				time.Sleep(5 * time.Millisecond)
			}
			require.Equal(t, before, sends.Load(), "an acquire script went out after ctx's end")
			redistest.WaitFor(t, 10*time.Second, "no permit left taken", func() bool { return tc.taken(t, c, name) == 0 })
		})
	}
}

// waitHeldBeforeAttempt reports whether a goroutine waits, in waitLoop, for the Client's
// mutex (isClosed, asked after a wake-up and before the next attempt).
func waitHeldBeforeAttempt() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("rlock.(*Client).isClosed")) && bytes.Contains(g, []byte("rlock.(*Client).waitLoop")) {
			return true
		}
	}
	return false
}
