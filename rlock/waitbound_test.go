package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A TryLock whose first attempt is answered (refused) only after its wait ran out makes no
// other attempt: wait bounds when attempts begin (TryLock's godoc; the request in flight as
// it ends is seen to its outcome, and that is all). Before, the wait's second attempt, the
// one made after subscribing to the release channel (wait.go: a release may have been
// published between the refusal and the subscription), began with no look at the bound:
// with the holder gone meanwhile, TryLock(100ms wait) took the lock 300 ms in and returned
// (true, nil), for Mutex and FairMutex on both backends (found by TestExplore_WaitBound,
// seed 1796360510691437660). SpinMutex, whose wait has no such step, is the control.
func TestMutex_TryLock_firstReplyAfterWaitMakesNoOtherAttempt(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	kinds := []struct {
		name string
		mk   func(c *rlock.Client, name string) *rlock.Mutex
	}{
		{"Mutex", func(c *rlock.Client, n string) *rlock.Mutex { return c.Mutex(n) }},
		{"FairMutex", func(c *rlock.Client, n string) *rlock.Mutex { return c.FairMutex(n).Mutex }},
		{"SpinMutex", func(c *rlock.Client, n string) *rlock.Mutex { return c.SpinMutex(n).Mutex }},
	}
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, k := range kinds {
			t.Run(k.name, func(t *testing.T) {
				hc, c := hardSetup(t, b)
				name := redistest.Name(t)
				holder := k.mk(b.client(t), name)
				require.NoError(t, holder.Lock(bg))
				waiter := k.mk(c, name)
				_, _ = waiter.TryLock(bg, 0, 0) // the script is loaded: the next send is the attempt

				const wait, delay = 100 * time.Millisecond, 300 * time.Millisecond
				var sends atomic.Int32
				released := make(chan error, 1)
				hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
					if cmd.script != "acquire" && cmd.script != "fair_acquire" {
						return call()
					}
					if sends.Add(1) > 1 {
						return call()
					}
					// The first attempt is refused at once, and its reply comes back after the
					// wait has run out; the holder has given the lock back meanwhile.
					res := call()
					released <- holder.Unlock(bg)
					time.Sleep(delay)
					return res
				})
				start := time.Now()
				ok, err := waiter.TryLock(bg, wait, 0)
				took := time.Since(start)
				hc.set(nil)
				require.NoError(t, <-released)
				t.Logf("TryLock(%v): %v, %v after %v; %d attempts", wait, ok, err, took.Round(time.Millisecond), sends.Load())
				require.NoError(t, err)
				require.False(t, ok, "the lock was taken after the wait bound")
				require.EqualValues(t, 1, sends.Load(), "an attempt began after the wait bound")
				require.False(t, b.exists(t, waiter.Key()))
			})
		}
	})
}

// README guarantee 6 when the first send's reply is lost and Redis then stops answering: a
// Lock (or a TryLock) whose ctx ends while the acquire's replay waits on a paused Redis
// returns within 100 ms of the ctx's end (more room here for a loaded machine, far below
// the cleanup timeout), the replaying left to the background.
func TestMutex_Lock_replayOnPausedRedisHeedsCtx(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses Redis (run without -short)")
	}
	t.Parallel() // its own server, Clients and names: it runs beside the others
	const cleanup = 3 * time.Second
	const bound = 100*time.Millisecond + 400*time.Millisecond
	for _, method := range []string{"Lock", "TryLock"} {
		t.Run(method, func(t *testing.T) {
			b := realBackend(t)
			hc, c := hardSetup(t, b, rlock.WithCleanupTimeout(cleanup))
			name := redistest.Name(t)
			holder := b.client(t).Mutex(name)
			require.NoError(t, holder.Lock(bg))
			waiter := c.Mutex(name)
			_, _ = waiter.TryLock(bg, 0, 0) // the script is loaded: the next send is the attempt

			var armed atomic.Bool
			armed.Store(true)
			hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if cmd.script != "acquire" || !armed.CompareAndSwap(true, false) {
					return call()
				}
				// The first attempt runs (refused); its reply is lost, and Redis stops
				// answering: the replay that follows is never answered.
				res := call()
				_ = res
				b.srv.Pause(t)
				return hardLost()
			})
			t.Cleanup(func() { b.srv.Resume(t) })
			ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
			defer cancel()
			var err error
			switch method {
			case "Lock":
				err = waiter.Lock(ctx)
			default:
				_, err = waiter.TryLock(ctx, time.Second, 0)
			}
			late := time.Since(deadlineOf(ctx))
			t.Logf("%s: %v, %v after the ctx's deadline", method, err, late.Round(time.Millisecond))
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, late, bound, "the call outlived its ctx")
		})
	}
}

// deadlineOf is ctx's deadline.
func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}

// README guarantee 6 with WithReplicaAck: a Lock whose first reply is lost learns from its
// replay that it granted afresh, and then waits for the replicas' acknowledgements after
// touching the lease (ackAfterTouch); the replica has stopped, so that WAIT lasts the ack
// timeout. A Lock whose ctx is cancelled meanwhile returns within a second of the cancel
// (the guarantee's 100 ms with room for a loaded machine, less this process's stalls), and
// the grant is given back once the WAIT is over. Before, the WAIT ran on the caller's
// goroutine under the cleanup context, which no cancel of ctx ends: Lock outlived its ctx by
// the ack timeout.
func TestMutex_Lock_ackAfterReplayHeedsCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a master and a replica, the replica paused (run without -short)")
	}
	t.Parallel()
	const ackTimeout = 3 * time.Second
	const bound = time.Second
	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithReplicaOf(master))
	b := &backend{name: "redis", srv: master}
	master.WaitReplicaOnline(t, 10*time.Second)
	t.Cleanup(func() { replica.Resume(t) }) // before Close (cleanups run last first)

	var touching atomic.Bool // set once the touch and its WAIT are sent
	onTouch := make(chan struct{})
	hc := &hookClient{Client: b.rueidis(t), every: func(cmds [][]string, multi bool) {
		if multi && len(cmds) == 2 && cmds[0][0] == "PEXPIRE" && cmds[1][0] == "WAIT" && touching.CompareAndSwap(false, true) {
			close(onTouch)
		}
	}}
	c, err := rlock.New(hc, rlock.WithReplicaAck(1, ackTimeout), rlock.WithCleanupTimeout(2*ackTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	hardWarm(t, c)
	m := c.Mutex(redistest.Name(t))

	var sends atomic.Int32
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" {
			return call()
		}
		switch sends.Add(1) {
		case 1: // granted afresh, its reply lost (its WAIT goes on alone, answered at once)
			call()
			return hardLost()
		case 2: // the replay learns of the grant; the replica stops before the touch
			res := call()
			replica.Pause(t)
			return res
		}
		return call()
	})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- m.Lock(ctx) }()
	within(t, 10*time.Second, "the touch and its WAIT to be sent", onTouch)
	stalled := watchStalls(nil)
	cancel()
	ended := time.Now()
	err = await(t, got, 3*ackTimeout, "Lock to return")
	took := time.Since(ended)
	stall := stalled(ended, time.Now())
	t.Logf("Lock: %v, %v after the cancel (the process stalled %v of it)", err, took.Round(time.Millisecond), stall.Round(time.Millisecond))
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, took-stall, bound, "Lock outlived its cancelled ctx (ack timeout %v)", ackTimeout)

	replica.Resume(t)
	redistest.WaitFor(t, 3*ackTimeout, "the grant to be given back", func() bool { return !b.exists(t, m.Key()) })
}

// A TryLock whose attempt waits for its turn behind another call of its owner on the lock
// (goroutines that share a handle, or a context owner, take turns: the owner's operation
// lock) waits for it only within wait, and sends nothing once wait has run out: wait bounds
// when attempts begin (TryLock's godoc, DESIGN 7). Before, the turn was awaited with no look
// at the bound: behind a sibling's attempt whose send took 400 ms, TryLock(100ms wait) sent
// its attempt 400 ms in and returned then, for every kind on both backends. The model test
// met it, RWMutex seed 10071870183985473747 (replies-lost: g5's TryLock[w] with a 53 ms wait
// waited 500 ms behind its sibling g4's attempt, which replayed for the cleanup timeout, then
// replayed its own for another, then waited for its claim's withdrawal behind g4's next
// call: it returned 1.45 s past its bound). A re-entry still waits for its turn (within ctx)
// and is granted: the owner holds the lock, and (false, nil) would tell otherwise.
func TestMutex_TryLock_ownersOtherCallBoundedByWait(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	type locker interface {
		Lock(ctx context.Context) error
		TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
		Unlock(ctx context.Context) error
	}
	kinds := []struct {
		name     string
		mk       func(c *rlock.Client, name string) locker
		writeOut bool // the holder takes the write hold of the RWMutex (a reader would share)
	}{
		{"Mutex", func(c *rlock.Client, n string) locker { return c.Mutex(n) }, false},
		{"FairMutex", func(c *rlock.Client, n string) locker { return c.FairMutex(n).Mutex }, false},
		{"SpinMutex", func(c *rlock.Client, n string) locker { return c.SpinMutex(n).Mutex }, false},
		{"RWMutex", func(c *rlock.Client, n string) locker { return c.RWMutex(n) }, false},
		{"RWMutex.RLocker", func(c *rlock.Client, n string) locker { return c.RWMutex(n).RLocker() }, true},
	}
	acquires := map[string]bool{"acquire": true, "fair_acquire": true, "rw_acquire": true}
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, k := range kinds {
			for _, reentry := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/reentry=%v", k.name, reentry), func(t *testing.T) {
					hc, c := hardSetup(t, b)
					name := redistest.Name(t)
					shared := k.mk(c, name) // one handle, two goroutines
					var holder locker       // another owner, holding the lock throughout
					if reentry {
						require.NoError(t, shared.Lock(bg))
					} else {
						holder = k.mk(b.client(t), name)
						if k.writeOut {
							holder = b.client(t).RWMutex(name)
						}
						require.NoError(t, holder.Lock(bg))
						_, _ = shared.TryLock(bg, 0, 0) // the script is loaded: the next send is the attempt
					}

					const wait, gate = 100 * time.Millisecond, 400 * time.Millisecond
					// The sibling's attempt: its send takes gate (or until the TryLock under
					// test returned), its call holding the owner's turn meanwhile.
					sends, held, done := gateFirstSend(hc, func(script string) bool { return acquires[script] }, gate)
					first := make(chan error, 1)
					go func() {
						_, err := shared.TryLock(bg, 0, 0)
						first <- err
					}()
					<-held
					stalled := watchStalls(nil)
					start := time.Now()
					ok, err := shared.TryLock(bg, wait, 0)
					now := time.Now()
					took, stall := now.Sub(start), stalled(start, now)
					close(done)
					require.NoError(t, await(t, first, 10*time.Second, "the sibling's TryLock"))
					hc.set(nil)
					t.Logf("TryLock(%v) behind the sibling's %v send: %v, %v after %v; %d attempts sent", wait, gate, ok, err, took.Round(time.Millisecond), sends.Load())
					require.NoError(t, err)
					if reentry {
						require.True(t, ok, "a re-entry waits for its turn and is granted")
						require.EqualValues(t, 2, sends.Load())
						for range 3 {
							require.NoError(t, shared.Unlock(bg))
						}
						require.ErrorIs(t, shared.Unlock(bg), rlock.ErrNotHeld, "three holds, given back")
						return
					}
					require.False(t, ok)
					require.EqualValues(t, 1, sends.Load(), "an attempt began after the wait bound")
					// Less what this process stalled meanwhile (other packages' tests share the
					// cores under go test ./... -race).
					require.Less(t, took-stall, wait+200*time.Millisecond, "TryLock outlived its wait bound waiting for its sibling's call (took %v, the process stalled %v of it)",
						took.Round(time.Millisecond), stall.Round(time.Millisecond))
					require.NoError(t, holder.Unlock(bg))
					ok, err = shared.TryLock(bg, 0, 0)
					require.NoError(t, err)
					require.True(t, ok, "nothing of the owner's is left in the way")
					require.NoError(t, shared.Unlock(bg))
				})
			}
		}
	})
}

// A writer's read acquire is sure to be granted (the write hold admits the owner's read
// holds), so, like a re-entry, it waits for its turn behind another call of the owner on the
// read side within ctx only, and is granted: (false, nil) would tell a writer that its read
// was refused. Before, only a hold of the read side itself counted: behind a sibling's read
// acquire whose send took 400 ms, the writer's TryRLock with a 100 ms wait returned (false,
// nil) at its bound (the model test, RWMutex seed 5722753596065657270, met it with wait 0 on
// a branch that bounded wait 0's turn too: g1 held the write hold, its TryLock[r] returned
// false while g2's read acquire had the turn). wait 0 waits for its turn in any case.
func TestRWMutex_TryRLock_writersReadWaitsForItsTurn(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, wait := range []time.Duration{0, 100 * time.Millisecond} {
			t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
				hc, c := hardSetup(t, b)
				shared := c.RWMutex(redistest.Name(t)) // one handle, two goroutines
				require.NoError(t, shared.Lock(bg))
				const gate = 400 * time.Millisecond
				// The sibling's read acquire: its send takes gate (or until the call under
				// test returned), its call holding the read side's turn.
				sends, held, done := gateFirstSend(hc, func(script string) bool { return script == "rw_acquire" }, gate)
				first := make(chan error, 1)
				go func() {
					ok, err := shared.TryRLock(bg, 0, 0)
					if err == nil && !ok {
						err = errors.New("the sibling's read acquire was refused")
					}
					first <- err
				}()
				<-held
				ok, err := shared.TryRLock(bg, wait, 0)
				close(done)
				require.NoError(t, await(t, first, 10*time.Second, "the sibling's TryRLock"))
				hc.set(nil)
				require.NoError(t, err)
				require.True(t, ok, "a writer's read acquire waits for its turn and is granted")
				require.EqualValues(t, 2, sends.Load())
				require.NoError(t, shared.RUnlock(bg))
				require.NoError(t, shared.RUnlock(bg))
				require.NoError(t, shared.Unlock(bg))
				require.ErrorIs(t, shared.Unlock(bg), rlock.ErrNotHeld)
			})
		}
	})
}

// gateFirstSend sets hc's hook so that the first script call (not in a pipeline) that match
// names is held up to gate, or until done is closed, before it is sent; held is closed as it
// is held, and sends counts the matching calls.
func gateFirstSend(hc *hookClient, match func(script string) bool, gate time.Duration) (sends *atomic.Int32, held, done chan struct{}) {
	sends = new(atomic.Int32)
	held, done = make(chan struct{}), make(chan struct{})
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.multi || !match(cmd.script) {
			return call()
		}
		if sends.Add(1) == 1 {
			close(held)
			select {
			case <-time.After(gate):
			case <-done:
			}
		}
		return call()
	})
	return sends, held, done
}
