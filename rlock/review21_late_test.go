package rlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Review21: hold.released (84da436) reads Redis's -1 under a live tenure as a loss and keeps
// the other holds counted, lost. A fixed-lease tenure whose end the Client's watchdog has not
// acted on yet (its goroutine late: here a HoldEnd hook of another lock's lease end, which
// the observer's godoc lets ask the lock over the network; equally a starved CPU, the drift
// allowance being lease/100 + 2ms) gets -1 from an Unlock that reached Redis after the
// lease's end there: the tenure ran its course, nothing was lost, yet the owner's Lock is now
// refused with ErrLockLost until another Unlock (before 84da436 the first Unlock cleared it).
// Expected: the lease's end is told as ErrLeaseExpired (or at worst ErrNotHeld), and the
// next TryLock is not refused.
func TestReview21_unlockAfterFixedLeaseEndWithLateWatchdogIsNotALoss(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	nameA, nameB := redistest.Name(t)+"-a", redistest.Name(t)+"-b"
	caughtUp := make(chan struct{}) // closed when the hook lets the watchdog's goroutine go
	obs := &rlock.Observer{HoldEnd: func(e rlock.HoldEndInfo) {
		if e.Name == nameB {
			time.Sleep(600 * time.Millisecond) // holds the watchdog's goroutine
			close(caughtUp)
		}
	}}
	c := b.client(t, rlock.WithObserver(obs))
	ma, mb := c.Mutex(nameA), c.Mutex(nameB)
	start := time.Now()
	for i := 0; i < 2; i++ {
		if err := ma.LockLease(bg, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := mb.LockLease(bg, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// A's lease over in Redis too: waited for, not slept for (a stall that delayed the
	// re-entry's send, which extends the lease, kept the key past a fixed 420ms on a loaded
	// machine). The hook holds the watchdog until about 700ms.
	redistest.WaitFor(t, 5*time.Second, "premise: A's key to end with its lease in Redis", func() bool { return !b.exists(t, ma.Key()) })
	t.Logf("A's key gone %v after the first LockLease", time.Since(start).Round(time.Millisecond))
	uerr := ma.Unlock(bg)
	t.Logf("first Unlock after the lease's end: %v", uerr)
	within(t, 5*time.Second, "the hook to let the watchdog go", caughtUp)
	time.Sleep(300 * time.Millisecond) // the watchdog has caught up
	eerr := ma.Err(bg)
	t.Logf("Err: %v", eerr)
	ok, terr := ma.TryLock(bg, 0, time.Second)
	if errors.Is(eerr, rlock.ErrLockLost) || !ok {
		t.Fatalf("a fixed lease that ran its course is told as a loss: Unlock %v, Err %v, TryLock (%v, %v)", uerr, eerr, ok, terr)
	}
	_ = ma.Unlock(bg)
}
