package rlock_test

// Review of RedLock (issue 12): each test pins one defect; it fails until the defect is fixed.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// scriptCalls is the number of scripts (EVAL/EVALSHA) the servers ran since their stats
// were reset.
func scriptCalls(t *testing.T, ss []*redistest.Server) int64 {
	var n int64
	for _, s := range ss {
		st := s.CommandStats(t)
		n += st["evalsha"] + st["eval"] + st["evalsha_ro"] + st["eval_ro"] + st["fcall"]
	}
	return n
}

// A Client of a minority of instances closed: Lock's doc says ErrClosed ends it only "on
// more than a minority of the instances"; a free lock is indeed taken on the other four, but a
// waiter fails at once with ErrClosed as soon as the lock is held: fresh() subscribes on every
// instance and gives up when one Watch fails, and checks isClosed on every instance after
// each pause.
func TestReviewRedLock_closedMinorityClientEndsWait(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	ss := redServers(t, 5)
	holder := redClients(t, addrsOf(ss))
	waiter := redClients(t, addrsOf(ss))
	name := redistest.Name(t)
	h := rlock.NewRedLock(name, holder)
	w := rlock.NewRedLock(name, waiter)
	require.NoError(t, waiter[0].Close()) // one instance of five: a minority

	// Free: the four others grant it.
	ok, err := w.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, w.Unlock(bg))

	// Held by another owner: a single attempt is refused cleanly...
	require.NoError(t, h.Lock(bg))
	ok, err = w.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok)

	// ...but a waiting caller must wait for the release, not fail with ErrClosed.
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	select {
	case err := <-got:
		t.Fatalf("Lock returned while the lock was held (one Client of five closed): %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, h.Unlock(bg))
	require.NoError(t, <-got)
	require.NoError(t, w.Unlock(bg))
}

// A waiter whose first round is refused registers on the release channels only afterwards,
// and never tries again when a release may have been published in between (the Mutex's
// waitLoop takes a Mark before its first attempt and tries again unless the waiter is Live
// since it). When the channels are still subscribed from an earlier wait (the subscription
// linger, on by default: a busy lock), a release that arrives between the refusal and the
// Watch wakes nobody, and the waiter sleeps to the end of the lease the refusal reported
// (here 30s) although the lock is free. The window is widened deterministically: the
// waiter's links are slowed (400ms a way) while its round is in flight, and made fast again
// as soon as every server has seen the refusal (the waiter mark, field w); the release is
// then published at once and reaches the waiter ~400ms before the refusals' replies do.
func TestReviewRedLock_releaseBetweenRefusalAndWatchLost(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 5)
	name := redistest.Name(t)
	holder := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(30*time.Second))
	var px []*faultproxy.Proxy
	var paddrs []string
	for _, s := range ss {
		p, err := faultproxy.New(s.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		px = append(px, p)
		paddrs = append(paddrs, p.Addr())
	}
	waiter := redClients(t, paddrs, rlock.WithWatchdogTimeout(30*time.Second),
		rlock.WithSubscriptionLinger(time.Minute))
	h := rlock.NewRedLock(name, holder)
	w := rlock.NewRedLock(name, waiter, rlock.WithInstanceTimeout(3*time.Second))

	// An earlier wait leaves the release channels subscribed (linger).
	require.NoError(t, h.Lock(bg))
	ok, err := w.TryLock(bg, 300*time.Millisecond, 0)
	require.NoError(t, err)
	require.False(t, ok)
	for _, c := range waiter {
		require.True(t, rlock.ChannelLive(c, c.Mutex(name)), "the channel lingers subscribed")
	}
	// A new tenure of the holder (no waiter mark yet).
	require.NoError(t, h.Unlock(bg))
	require.NoError(t, h.Lock(bg))

	for _, p := range px {
		p.SetLatency(400*time.Millisecond, 400*time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(bg, 25*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	// The waiter's round has been refused (and marked) on every server; its replies are
	// still ~400ms away.
	redistest.WaitFor(t, 10*time.Second, "the waiter's refusal on every server", func() bool {
		for _, s := range ss {
			msg := s.Do(t, "HEXISTS", redKey(name), "w")
			n, err := msg.AsInt64()
			if err != nil || n != 1 {
				return false
			}
		}
		return true
	})
	for _, p := range px {
		p.SetLatency(0, 0)
	}
	released := time.Now()
	require.NoError(t, h.Unlock(bg))
	select {
	case err := <-got:
		require.NoError(t, err)
		t.Logf("acquired %v after the release", time.Since(released))
		require.NoError(t, w.Unlock(bg))
	case <-time.After(8 * time.Second): // the replies take 400ms; the lost wake-up ~30s
		t.Errorf("the waiter still sleeps %v after the release (lost wake-up)", time.Since(released))
		cancel()
		<-got
	}
}

// A waiter on a lock held by another owner on a majority (four of five: one instance lost
// its copy, as after a restart without persistence) is granted the free instance in every
// round. fresh() treats any grant as a split between contenders and retries after a
// pause of at most 128ms, and the give-back of that grant publishes a release (the round
// marked it, waiting '2') that wakes the waiter itself: it polls ~10 times a second for as
// long as the holder holds, six scripts a round, instead of sleeping until a release or
// the holder's lease end.
func TestReviewRedLock_pollsWhileHeldOnMajority(t *testing.T) {
	t.Parallel()
	ss := redServers(t, 5)
	name := redistest.Name(t)
	holder := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(30*time.Second))
	waiter := redClients(t, addrsOf(ss), rlock.WithWatchdogTimeout(30*time.Second))
	h := rlock.NewRedLock(name, holder)
	w := rlock.NewRedLock(name, waiter)
	require.NoError(t, h.Lock(bg))
	settled(t, h) // Lock returns at a majority: no grant still on its way to ss[4]
	// One instance loses the holder's copy (restart without persistence): a minority.
	ss[4].Do(t, "DEL", redKey(name))
	require.NoError(t, h.Err(bg))
	for _, s := range ss {
		s.ResetStats(t)
	}
	ok, err := w.TryLock(bg, 3*time.Second, 0)
	require.NoError(t, err)
	require.False(t, ok)
	n := scriptCalls(t, ss)
	t.Logf("%d scripts in a 3s wait on a lock held on 4 of 5", n)
	// A first round (5), its re-try after subscribing (5), a give-back or two: a handful.
	require.LessOrEqual(t, n, int64(30), "the waiter polls the held lock")
	require.NoError(t, h.Unlock(bg))
}

// With a majority of the servers unresponsive (SIGSTOP), a single attempt on a context
// without a deadline fails, as it should, but its error wraps context.DeadlineExceeded: the
// per-instance timeouts are contexts derived from the caller's, and an instance's Mutex
// attempt returns its ctx's error. A caller cannot tell that error from its own deadline
// with errors.Is (the usual `if errors.Is(err, context.DeadlineExceeded) { give up }`), and
// an unreachable server is reported like a caller timeout instead of as an outcome the
// instance did not give (rlock.ErrUnknownOutcome / a transient error).
func TestReviewRedLock_instanceTimeoutLooksLikeCallerDeadline(t *testing.T) {
	ss := redServers(t, 5)
	cs := redClients(t, addrsOf(ss), rlock.WithCleanupTimeout(time.Second))
	name := redistest.Name(t)
	r := rlock.NewRedLock(name, cs, rlock.WithInstanceTimeout(50*time.Millisecond))
	for _, s := range ss[:3] {
		s.Pause(t)
	}
	ok, err := r.TryLock(bg, 0, 0) // bg: the caller has no deadline
	require.False(t, ok)
	require.Error(t, err)
	t.Log(err)
	require.False(t, errors.Is(err, context.DeadlineExceeded),
		"the caller's context has no deadline, yet the error says it ran out")
	for _, s := range ss[:3] {
		s.Resume(t)
	}
}
