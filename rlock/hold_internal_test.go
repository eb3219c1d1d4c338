package rlock

import (
	"container/list"
	"context"
	"fmt"
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

// The Client's record of holds whose fixed lease ended (Client.ended) keeps the latest
// endedCap, by lock and owner: one recorded again moves to the newest, one put back into the
// table leaves it, and the oldest goes first, so that a program that never Unlocks such
// holds keeps a bounded number.
func TestClient_endedHoldsBounded(t *testing.T) {
	c := &Client{holds: make(map[holdKey]*hold), ended: make(map[holdKey]*list.Element)}
	v := &variant{}
	mk := func(i int) *hold {
		return &hold{c: c, keys: lockKeys{lock: fmt.Sprintf("k%d", i)}, v: v, owner: "u:o", expired: true, endedHolds: 1}
	}
	hs := make([]*hold, endedCap+10)
	for i := range hs {
		hs[i] = mk(i)
		c.keepEndedLocked(hs[i].key(), hs[i])
		if i == 0 {
			c.keepEndedLocked(hs[0].key(), hs[0]) // again: still one entry
		}
	}
	require.Len(t, c.ended, endedCap)
	require.Equal(t, endedCap, c.endedOrder.Len())
	require.Nil(t, c.takeEndedLocked(hs[9].key()), "the oldest went first")
	require.False(t, hs[9].expired, "forgotten by the handles that keep it too")
	require.True(t, hs[10].expired)
	require.Same(t, hs[10], c.takeEndedLocked(hs[10].key()))
	require.Nil(t, c.takeEndedLocked(hs[10].key()), "taken once")
	require.Len(t, c.ended, endedCap-1)
	c.keepEndedLocked(hs[11].key(), hs[11]) // moves to the newest
	c.keepEndedLocked(hs[0].key(), hs[0])
	c.keepEndedLocked(mk(-1).key(), mk(-1))
	require.NotNil(t, c.ended[hs[11].key()], "recorded again, so not the oldest")
	require.Nil(t, c.ended[hs[12].key()])
	require.Len(t, c.ended, endedCap)
}
