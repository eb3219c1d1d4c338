package rlock_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strconv"
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
//
// The Client's mutex is taken while the wait sleeps (its goroutine parked in waitLoop's
// select, seen with the mutex held): whatever wakes it then stops it in isClosed. Taken once
// the count of sends said the wait had begun, it could come as the wait, woken by the
// subscription's confirmation, had passed isClosed for its next attempt: that attempt then
// waited for the mutex itself (a Semaphore's lateBegin) and the test waited 10 s for a stop
// that never came (a loaded CI run), or it went out and took the released permit. And the
// stop is this wait's own (its goroutine's id): any goroutine's stop in isClosed counted, a
// parallel subtest's included, and the cancel then came while this wait's attempt was on
// its way, which handed it over and spent its permit id (an acquire script sent after ctx's
// end, for a PermitSemaphore: 3 of 720 subtests pinned beside a burner).
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
			var waiter atomic.Int64 // the wait's goroutine
			go func() {
				waiter.Store(goroutineID())
				got <- tc.acq(ctx, c, name)
			}()
			// The first attempt, refused, and the one at the subscription's confirmation: the
			// wait has begun.
			redistest.WaitFor(t, 10*time.Second, "two refused attempts", func() bool { return sends.Load() >= 2 })
			var unlock func()
			redistest.WaitFor(t, 10*time.Second, "the wait to sleep, the Client's mutex held", func() bool {
				unlock = rlock.LockClient(c)
				if goroutineAt(waiter.Load(), "select", "rlock.(*Client).waitLoop(") {
					return true
				}
				unlock() // the wait is between its wake-up and its sleep: let it go on
				return false
			})
			locked := true
			defer func() {
				if locked {
					unlock()
				}
			}()
			release() // publishes: the wait wakes (or the subscription's confirmation does)
			redistest.WaitFor(t, 10*time.Second, "the woken wait to stop before its next attempt", func() bool {
				return goroutineAt(waiter.Load(), "sync.Mutex.Lock", "rlock.(*Client).isClosed(", "rlock.(*Client).waitLoop(")
			})
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

// goroutineID is the id of the calling goroutine, as its stack trace gives it.
func goroutineID() int64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf) // "goroutine", id, "[running]:", ...
	id, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		panic(fmt.Sprintf("goroutine id in %q: %v", buf, err))
	}
	return id
}

// goroutineAt reports whether goroutine id is parked in state (its stack trace's wait
// reason: "select", "sync.Mutex.Lock") with frames (prefixes, innermost first) as the
// innermost frames of relock's functions on its stack. Reading stacks orders nothing for the
// race detector.
func goroutineAt(id int64, state string, frames ...string) bool {
	head := fmt.Sprintf("goroutine %d [", id)
	for _, g := range goroutineStacks() {
		rest, ok := bytes.CutPrefix(g, []byte(head))
		if !ok {
			continue
		}
		// The wait reason, then ", N minutes" when long, then "]:".
		if !bytes.HasPrefix(rest, []byte(state+"]")) && !bytes.HasPrefix(rest, []byte(state+",")) {
			return false
		}
		i := 0
		for _, line := range bytes.Split(rest, []byte("\n")) {
			fn, ok := bytes.CutPrefix(line, []byte("github.com/relock-go/relock/"))
			if !ok {
				continue
			}
			if i == len(frames) || !bytes.HasPrefix(fn, []byte(frames[i])) {
				return i == len(frames)
			}
			i++
		}
		return i == len(frames)
	}
	return false
}
