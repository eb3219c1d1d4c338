package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Unlock's godoc, case 4: an Unlock that waits for another call of the same owner on the lock
// (two goroutines sharing a handle) for the whole cleanup timeout gives up, sending nothing:
// its error wraps context.DeadlineExceeded, and the hold is still counted, by the Client and
// by Redis, so that Unlock again gives it back. (The model test met it, FairMutex seed
// 9007142354052241084: one goroutine's Unlock replayed through refused dials and LOADING
// for the whole cleanup timeout while its sibling's waited.)
func TestMutex_Unlock_waitingOutTheOwnersOtherCallGivesUpWithItsHoldKept(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	b := realBackend(t)
	const cleanup = 500 * time.Millisecond
	var armed atomic.Bool
	release := make(chan struct{})
	hc := &hookClient{Client: b.rueidis(t)}
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script == "release" && armed.CompareAndSwap(true, false) {
			// The first Unlock's give-back hangs until the test lets it go, past its own
			// deadline, then goes through.
			<-release
			return cmd.sendWith(context.Background())
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Lock(bg)) // two holds of the handle's owner
	armed.Store(true)
	first := make(chan error, 1)
	go func() { first <- m.Unlock(bg) }()
	redistest.WaitFor(t, 5*time.Second, "the first Unlock to send", func() bool { return !armed.Load() })
	start := time.Now()
	err = m.Unlock(bg)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the second Unlock, after %v", took)
	require.Less(t, took, cleanup+time.Second, "Unlock is bounded by the cleanup timeout")
	n, err := m.HoldCount(bg)
	require.NoError(t, err)
	require.Equal(t, 2, n, "Redis counts both holds: the first Unlock hangs, the second sent nothing")
	close(release)
	// The first Unlock's send was held past its own cleanup timeout: it may report the
	// outcome unknown (its replays had no time left), though Redis applied it.
	if err := await(t, first, 10*time.Second, "the first Unlock"); !errors.Is(err, rlock.ErrUnknownOutcome) {
		require.NoError(t, err)
	}
	require.NoError(t, m.Unlock(bg), "the second hold, given back again")
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked)
}

// An Unlock that waited for another call of the same owner on the lock, and got its turn
// before the cleanup timeout ran out, sends its give-back with a whole cleanup timeout of its
// own. Before, the wait and the give-back shared one cleanup timeout: an Unlock whose turn came
// late had a few milliseconds left for its send, so a Redis that answered it in good time, but
// not in those, left it ErrUnknownOutcome (the hold abandoned, expiring with its lease while
// nobody held it). The drift hunt met it under CI load (seed 1796514798708505306 trial 10: the
// final Unlock, behind a background give-back that ran its cleanup timeout out, got its turn
// with 2 ms left).
func TestMutex_Unlock_afterWaitingForItsTurnSendsWithAWholeCleanupTimeout(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; bounds of hundreds of milliseconds
	b := realBackend(t)
	// The bounds leave a loaded machine (CI: -race, two cores) most of a second each: the
	// second Unlock's turn comes 0.8 s before its wait's cleanup timeout ends, and its slow
	// give-back is answered 0.8 s inside its own; with the timeout it shared, at most
	// cleanup-letGo = 0.8 s was left for an answer that takes 1.2 s.
	const (
		cleanup = 2 * time.Second
		letGo   = 1200 * time.Millisecond // the first Unlock lets go this long after the second began
		slow    = 1200 * time.Millisecond // the second's give-back takes this long to answer
	)
	var first, second atomic.Bool
	release := make(chan struct{})
	hc := &hookClient{Client: b.rueidis(t)}
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "release" {
			return call()
		}
		if first.CompareAndSwap(true, false) {
			<-release // the owner's other call: held until the test lets it go
			return cmd.sendWith(context.Background())
		}
		if second.CompareAndSwap(true, false) {
			return answerAfter(ctx, slow, call) // a Redis slow to answer, within the cleanup timeout
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	for range 2 { // the second round as the first: the scripts are loaded (no NOSCRIPT resend)
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Lock(bg)) // two holds of the handle's owner
		if first.Load() {
			break
		}
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, m.Unlock(bg))
		first.Store(true)
	}
	firstDone := make(chan error, 1)
	go func() { firstDone <- m.Unlock(bg) }()
	redistest.WaitFor(t, 5*time.Second, "the first Unlock to send", func() bool { return !first.Load() })
	second.Store(true)
	start := time.Now()
	timer := time.AfterFunc(letGo, func() { close(release) })
	defer timer.Stop()
	err = m.Unlock(bg)
	took := time.Since(start)
	require.NoError(t, err, "the second Unlock, after %v (its turn came after about %v)", took, letGo)
	require.False(t, second.Load(), "the second Unlock's give-back went through the slow send")
	if err := await(t, firstDone, 10*time.Second, "the first Unlock"); !errors.Is(err, rlock.ErrUnknownOutcome) {
		require.NoError(t, err)
	}
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "both holds given back")
}

// The give-back of a grant whose caller had gone, learnt by the background's replays of an
// acquire whose reply was lost (resolveGone, then undo), has a whole cleanup timeout of its
// own. Before, it shared the one cleanup timeout of the replays before it: a replay that a
// slow Redis answered late left the give-back a few milliseconds, and a Redis that answered
// it in good time, but not in those, left it unknown: the hold was abandoned, held for nobody
// until its lease ended (the watchdog timeout: half a minute by default).
func TestMutex_lostAcquireReplyGivesBackItsLateGrantWithAWholeCleanupTimeout(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; bounds of hundreds of milliseconds
	b := realBackend(t)
	// The bounds leave a loaded machine (CI: -race, two cores) whole seconds: the replay's
	// answer does not depend on the time it has left (sent without the deadline, below), and
	// the give-back's slow answer comes 1.6 s inside its own cleanup timeout; with the
	// timeout it shared, at most left.
	const (
		cleanup = 2 * time.Second
		left    = 150 * time.Millisecond // what the slow replay leaves of its cleanup timeout
		slow    = 400 * time.Millisecond // the give-back takes this long to answer
	)
	var lose, replaySlow, releaseSlow atomic.Bool
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	gaveBack := make(chan error, 1)
	hc := &hookClient{Client: b.rueidis(t)}
	hc.set(func(hctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		switch {
		case cmd.script == "acquire" && lose.CompareAndSwap(true, false):
			// Applied, its reply lost as the caller leaves.
			if err := call().Error(); err != nil {
				t.Errorf("the first send: %v", err)
			}
			cancel()
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		case cmd.script == "acquire" && replaySlow.Load():
			// A Redis slow to answer the replay: it answers with little of the cleanup
			// timeout left.
			dl, ok := hctx.Deadline()
			if !ok {
				return call()
			}
			select {
			case <-time.After(time.Until(dl) - left):
			case <-hctx.Done():
				return rueidis.NewErrorResult(hctx.Err()) // a replay the caller's end cut short
			}
			replaySlow.Store(false)
			releaseSlow.Store(true)
			// Answered whatever is left of the deadline: sent under it (call), the replay
			// got no answer when a loaded machine took longer than left to send it and
			// read the reply, and the outcome stayed unknown, with nothing given back.
			return cmd.sendWith(context.Background())
		case cmd.script == "release" && releaseSlow.CompareAndSwap(true, false):
			// The give-back of the grant: Redis answers it within the cleanup timeout.
			res := answerAfter(hctx, slow, call)
			gaveBack <- res.Error()
			return res
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	name := redistest.Name(t)
	warm := c.Mutex(name) // the scripts are loaded: no NOSCRIPT resend goes through the hook
	require.NoError(t, warm.Lock(bg))
	require.NoError(t, warm.Unlock(bg))
	m := c.Mutex(name) // a handle with no uncontended grant lately: no fast grant
	lose.Store(true)
	replaySlow.Store(true)
	err = m.Lock(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, await(t, gaveBack, 10*time.Second, "the give-back of the late grant"),
		"the give-back, sent after the replay left %v of the cleanup timeout", left)
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "the grant given back")
}
