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
	obs := &rlock.Observer{HoldEnd: func(e rlock.HoldEndInfo) {
		if e.Name == nameB {
			time.Sleep(600 * time.Millisecond) // holds the watchdog's goroutine
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
	time.Sleep(time.Until(start.Add(420 * time.Millisecond))) // A's lease over in Redis too
	if b.exists(t, ma.Key()) {
		t.Fatal("premise: A's key outlived its lease in Redis")
	}
	uerr := ma.Unlock(bg)
	t.Logf("first Unlock after the lease's end: %v", uerr)
	time.Sleep(time.Until(start.Add(900 * time.Millisecond))) // the watchdog has caught up
	eerr := ma.Err(bg)
	t.Logf("Err: %v", eerr)
	ok, terr := ma.TryLock(bg, 0, time.Second)
	if errors.Is(eerr, rlock.ErrLockLost) || !ok {
		t.Fatalf("a fixed lease that ran its course is told as a loss: Unlock %v, Err %v, TryLock (%v, %v)", uerr, eerr, ok, terr)
	}
	_ = ma.Unlock(bg)
}
