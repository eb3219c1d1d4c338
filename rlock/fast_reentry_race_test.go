package rlock_test

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A re-entry of a tenure held in the fast form (fast.go) whose grant finds an orphan (Redis
// counts a hold more than the Client: an earlier re-entry whose replies were all lost) hands
// h.op to the orphan's give-back (Mutex.grant -> later) before it returns; the owner's next
// call, on another goroutine of the shared handle, takes h.op from the give-back and reads
// the tenure's form (attempt: within.fast). The conversion the re-entry's script made must
// be recorded before grant, under h.op: written after it (fastRecord, before cd16ffd) it
// raced that read, a data race the race detector found in model runs
// (TestModel under -race, 240 s and 300 s runs). The test makes the interleaving
// the detector needs, with no happens-before edge from the read to the write but the one the
// fix adds: the give-back is held (a hook) until the next call waits for h.op; the Client's
// mutex (rlock.LockClient) then holds the give-back between its h.op and its end
// (Client.unref, then the re-entry's return) until the next call has read the form and sent;
// that send is held (a hook) until the re-entry has returned. After the read the test only
// reads goroutine stacks, which orders nothing for the detector. Under -race it fails at
// 172cde0 (the race reported) and passes since cd16ffd; without -race it checks the counts.
func TestFastReentry_conversionRecordedBeforeOrphanGiveBack(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	hc, c := hardSetup(t, b, rlock.WithCleanupTimeout(200*time.Millisecond))
	m := c.Mutex(redistest.Name(t))
	const lease = time.Minute // fixed: no renewal gives the orphan back first (settleOrphans)

	const (
		pass        = iota
		loseAcquire // the orphan: every acquire applied, its reply lost (replays' too)
		holdGive    // the re-entry's orphan give-back waits for giveBack
		holdNext    // the next call's acquire waits for next
	)
	var phase atomic.Int32
	atGive := make(chan struct{}, 1)
	giveBack, next := make(chan struct{}), make(chan struct{})
	open := func(gate chan struct{}) {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}
	t.Cleanup(func() { open(giveBack); open(next) }) // a test that failed midway still closes
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		switch p := phase.Load(); {
		case p == loseAcquire && cmd.script == "acquire":
			_ = call()
			return hardLost()
		case p == holdGive && cmd.script == "release":
			select {
			case atGive <- struct{}{}:
			default:
			}
			<-giveBack
		case p == holdNext && cmd.script == "acquire":
			// After the read of the tenure's form: nothing here may be seen by the give-back
			// or the re-entry (a receive only).
			<-next
		}
		return call()
	})

	// The tenure in the fast form: the handle's second Lock within the fence counter's life.
	require.NoError(t, m.LockLease(bg, lease))
	require.NoError(t, m.Unlock(bg))
	require.NoError(t, m.LockLease(bg, lease))
	f := tokenField(t, b, m.Key())
	require.True(t, strings.HasPrefix(f, "~h:"), "the fast form: %q", f)

	// The orphan: a re-entry applied (it converts the form in Redis), its outcome never
	// learnt. Redis counts 2 holds, the Client 1 (and its tenure still in the fast form).
	phase.Store(loseAcquire)
	require.Error(t, m.LockLease(bg, lease), "the re-entry's outcome is unknown")
	n, err := m.HoldCount(bg)
	require.NoError(t, err)
	require.Equal(t, 2, n, "Redis counts the orphan")

	// The re-entry: granted with Redis counting 3 holds where the Client counts 2, it gives
	// the orphan back in the background, holding h.op.
	phase.Store(holdGive)
	reentry := make(chan error, 1)
	go func() { reentry <- m.LockLease(bg, lease) }()
	within(t, 10*time.Second, "the orphan's give-back", atGive)
	phase.Store(holdNext)

	// The owner's next call, from another goroutine: it waits for h.op.
	// Stacks are told apart from other tests' by this test's closures (the goroutine's, the
	// hook's) in them.
	mine := "rlock_test." + t.Name() + ".func"
	nextDone := make(chan error, 1)
	go func() { nextDone <- m.LockLease(bg, lease) }()
	redistest.WaitFor(t, 10*time.Second, "the next call to wait for h.op", func() bool {
		return goroutineWith(mine, "rlock.(*hold).lockOp(", "rlock.(*Mutex).attempt(")
	})

	unlock := rlock.LockClient(c)
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	open(giveBack) // the give-back ends; its h.op goes to the next call, then it waits for c.mu
	redistest.WaitFor(t, 10*time.Second, "the next call to read the form and send", func() bool {
		return goroutineWith(mine, "rlock_test.(*hookClient).do(", "rlock.(*Mutex).attempt(")
	})
	locked = false
	unlock() // the give-back ends (Client.unref): the re-entry returns
	require.NoError(t, await(t, reentry, 10*time.Second, "the re-entry"))
	open(next)
	require.NoError(t, await(t, nextDone, 10*time.Second, "the next call"))
	phase.Store(pass)

	// The Client's count is Redis's again: three Unlocks free the lock.
	n, err = m.HoldCount(bg)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the orphan given back")
	for i := 0; i < 3; i++ {
		require.NoError(t, m.Unlock(bg))
	}
	require.False(t, b.exists(t, m.Key()), "free after the owner's last Unlock")
}

// goroutineStacks is the stack trace of every goroutine, one each.
func goroutineStacks() [][]byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Split(buf[:n], []byte("\n\n"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineWith reports whether the stack of some goroutine holds every one of parts. Reading
// stacks orders nothing for the race detector.
func goroutineWith(parts ...string) bool {
next:
	for _, g := range goroutineStacks() {
		for _, p := range parts {
			if !bytes.Contains(g, []byte(p)) {
				continue next
			}
		}
		return true
	}
	return false
}
