package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relock-go/relock/rlock"
)

// unlockTimeout bounds the Unlock that ends a term, run even after Run's ctx ended.
const unlockTimeout = 5 * time.Second

// Term describes one term of leadership, for the notices a Leader gives.
type Term struct {
	// Token is the tenure's fencing token: it rises with every term, whoever holds it. Pass
	// it to what the job writes, so that a former leader's late write can be refused.
	Token int64
	// Cause is why the term ended (set only in the end notice): an error wrapping
	// rlock.ErrLockLost when the lock was lost, the cause of Run's ctx (context.Canceled)
	// on a shutdown.
	Cause error
}

// Leader runs a periodic job on the one replica that holds a lock. Every replica runs a
// Leader on a handle of the same lock name; a handle is an owner of its own, so a replica
// never re-enters a term it already has. The fields are read by Run and must not change
// while it runs.
type Leader struct {
	Mutex  *rlock.Mutex                    // the lock that makes the leader; required
	Period time.Duration                   // how often Job runs while held; required, > 0
	Job    func(ctx context.Context) error // runs under the hold's context; required
	// RetryAfterLoss is how long a replica that lost the lock waits before it competes
	// again (0: at once), so that one whose renewals failed (a slow link, a paused
	// process) leaves the lock to the others rather than taking it straight back.
	RetryAfterLoss time.Duration
	// OnErr, if set, is told of Job's errors; they do not end the term.
	OnErr func(error)
	// Started and Ended, if set, are told of each term as it begins and ends.
	Started, Ended func(Term)
}

// Run is the leader loop. It blocks for the lock (Lock), then runs Job at once and every
// Period under the hold's context (HoldContext): a lost lock cancels the Job that runs and
// stops the ticks. Then the replica steps down: it gives back what is left of the hold
// (Unlock, which after a loss clears the loss so the lock can be taken again), waits
// RetryAfterLoss after a loss, and competes for the lock again. The notices and Job run on
// Run's goroutine.
//
// Run returns nil when ctx ends, after giving the lock back if it held it, so that a
// waiting replica takes over at once instead of after the lease. It returns an error
// wrapping rlock.ErrInvalid for a missing field or a Period <= 0, and the error of Lock or
// Unlock for any other failure (the Client closed, Redis refused).
func (l *Leader) Run(ctx context.Context) error {
	switch {
	case l.Mutex == nil || l.Job == nil:
		return fmt.Errorf("leader: Mutex and Job are required: %w", rlock.ErrInvalid)
	case l.Period <= 0:
		return fmt.Errorf("leader: Period %v is not positive: %w", l.Period, rlock.ErrInvalid)
	}
	for {
		if err := l.Mutex.Lock(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		term := Term{}
		term.Token, _ = l.Mutex.Token(ctx) // held; it fails only if the Client closed since, and 0 will do
		if l.Started != nil {
			l.Started(term)
		}
		hctx, cancel := l.Mutex.HoldContext(ctx)
		l.serve(hctx)
		term.Cause = context.Cause(hctx)
		cancel()

		uctx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		err := l.Mutex.Unlock(uctx) // after a loss: ErrNotHeld, and the loss is cleared
		cancelUnlock()
		if l.Ended != nil {
			l.Ended(term)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !errors.Is(err, rlock.ErrNotHeld):
			return fmt.Errorf("leader: step down: %w", err)
		}
		if errors.Is(term.Cause, rlock.ErrLockLost) && l.RetryAfterLoss > 0 {
			t := time.NewTimer(l.RetryAfterLoss)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// serve runs Job now and every Period until ctx ends.
func (l *Leader) serve(ctx context.Context) {
	tick := time.NewTicker(l.Period)
	defer tick.Stop()
	for {
		if err := l.Job(ctx); err != nil && l.OnErr != nil && ctx.Err() == nil {
			l.OnErr(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
