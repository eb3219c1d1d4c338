package rlock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// A tenure's end cancels its HoldContexts before it closes Done: a caller woken by Done finds
// the cause set. (TestMutex_LockLease_blocksThenHoldsForTheFixedLease failed under load: Done
// closed at the end of the fixed lease, and context.Cause of the HoldContext read nil, the
// contexts being cancelled only after the channel was closed.)
func TestTenure_finishCancelsHoldContextsBeforeDone(t *testing.T) {
	tn := &tenure{}
	done := tn.doneCh()
	hctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	closedFirst := false
	stop := tn.subscribe(func(cause error) {
		// Neither the channel a caller already has nor one it asks for now is closed yet.
		for _, ch := range []<-chan struct{}{done, tn.doneCh()} {
			select {
			case <-ch:
				closedFirst = true
			default:
			}
		}
		cancel(cause)
	})
	defer stop()
	tn.finish(ErrLeaseExpired)
	<-done
	<-tn.doneCh()
	require.False(t, closedFirst, "Done was closed before the HoldContext was cancelled")
	require.ErrorIs(t, context.Cause(hctx), ErrLeaseExpired)
}

// A RedLock tenure's end, like a Mutex's, cancels its HoldContexts before it closes Done: a
// caller woken by Done finds the cause set. (finishLocked closed Done first.)
func TestRedHold_finishCancelsHoldContextsBeforeDone(t *testing.T) {
	rh := &redHold{count: 1, n: make([]int, 3), watched: make([]bool, 3), stops: make([]func(), 3),
		subs: make(map[*func(error)]struct{}), quorum: 2}
	done := make(chan struct{})
	rh.done = done
	hctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	closedFirst := false
	f := func(cause error) {
		select {
		case <-done:
			closedFirst = true
		default:
		}
		cancel(cause)
	}
	rh.subs[&f] = struct{}{}
	rh.mu.Lock()
	rh.ended = ErrLeaseExpired
	rh.finishLocked() // unlocks rh.mu
	<-done
	require.False(t, closedFirst, "Done was closed before the HoldContext was cancelled")
	require.ErrorIs(t, context.Cause(hctx), ErrLeaseExpired)
}
