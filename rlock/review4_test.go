package rlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Review 4: the hand-off of unknown outcome resolved for a caller that still waits (ed7de42:
// handedOff and replayFor replay the hand-off as an acquire under the successor's number).
// These tests check, against Redis, what a user of the lock relies on when a release that
// passes the lock to a parked waiter of the same Client gets no answer: the waiter ends up
// holding the lock once, or waiting on without stalling, or told ErrUnknownOutcome; Redis's
// count of the waiter's owner matches what the callers were told; nothing is left held.

// isHandoffRelease reports whether cmd is a release that names a successor (three keys: the
// lock, the forced record or the lock again, the fence).
func isHandoffRelease(cmd hookCall) bool {
	return cmd.script == "release" && len(cmd.args) > 0 && cmd.args[0] == "3"
}

// isAcquireReplay reports whether cmd is an acquire sent as a replay (its request id marked
// '+'): for the waiter of these tests, the hand-off's replay under the successor's number.
func isAcquireReplay(cmd hookCall) bool {
	return cmd.script == "acquire" && len(cmd.args) > 5 && strings.HasPrefix(cmd.args[5], "+")
}

// A release that passes the lock on whose first send reaches Redis only after the waiter's
// replay of the hand-off (rueidis spreads commands over connections: nothing orders the two)
// frees the lock instead, since the replay's refusal spent the successor's number, and the
// waiter, whose wait went on, takes the lock at once: woken by the release's publish or by
// its own next attempt, not by the fallback timer (the holder's lease, 30 s here, which nobody
// renews once its Unlock was told ErrUnknownOutcome). The late send is delivered either after
// the replay was answered (after) or while the first replay's reply is lost, so that the
// waiter's next replay meets the freed lock (between: refused again, the number being spent).
func TestReview4_lateHandoffReleaseAfterRefusedReplayFreesAndWakes(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, when := range []string{"after", "between"} {
			for _, ctxOwner := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/ctxOwner=%v", when, ctxOwner), func(t *testing.T) {
					lateHandoffRelease(t, b, when == "between", ctxOwner)
				})
			}
		}
	})
}

func lateHandoffRelease(t *testing.T, b *backend, between, ctxOwner bool) {
	const cleanup = 300 * time.Millisecond
	name := redistest.Name(t)
	replays := make(chan rlock.ReplayInfo, 16)
	obs := &rlock.Observer{Replay: func(e rlock.ReplayInfo) {
		if e.Name == name && e.Op == "acquire" {
			replays <- e
		}
	}}
	// The default watchdog timeout (30 s): a waiter that slept until the holder's lease ran
	// out would miss every bound below.
	hc, c := hardSetup(t, b, rlock.WithCleanupTimeout(cleanup), rlock.WithObserver(obs))
	holder, waiter := c.Mutex(name), c.Mutex(name)
	ctx := bg
	if ctxOwner {
		ctx = rlock.WithOwner(bg, "waiter")
	}
	require.NoError(t, holder.Lock(bg))
	hold, err := holder.Token(bg)
	require.NoError(t, err)
	hardSubscribe(t, c, name)
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })

	// The release's first send is kept back (not sent) and no reply of it, nor of any of its
	// replays (not sent either), comes back. Between: the waiter's first replay runs, its
	// reply is lost, and the kept send is delivered then.
	kept := make(chan func(context.Context) rueidis.RedisResult, 1)
	late := make(chan rueidis.RedisResult, 1)
	var releases, acqReplays atomic.Int32
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		switch {
		case isHandoffRelease(cmd):
			if releases.Add(1) == 1 {
				kept <- cmd.sendWith
			}
			return hardLost()
		case isAcquireReplay(cmd) && between && acqReplays.Add(1) == 1:
			res := call()
			v, err := res.AsIntSlice()
			if err != nil || len(v) != 2 || v[0] != 0 {
				// Recorded for the test: the replay must be refused (the lock is the holder's).
				late <- rueidis.NewErrorResult(fmt.Errorf("the waiter's first replay: %v %v", v, err))
				return hardLost()
			}
			late <- (<-kept)(context.Background())
			return hardLost()
		}
		return call()
	})
	require.ErrorIs(t, holder.Unlock(bg), rlock.ErrUnknownOutcome)
	if !between {
		select {
		case e := <-replays:
			require.NoError(t, e.Err, "the hand-off's replay got no answer")
		case <-time.After(5 * time.Second):
			t.Fatal("no Replay of the waiter's acquire: the hand-off was not resolved")
		}
		// Still the holder's: the replay was refused, and the waiter waits on.
		require.True(t, b.exists(t, holder.Key()))
		n, err := holder.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the holder's hold, its release not yet arrived")
		late <- (<-kept)(context.Background())
	}
	var res rueidis.RedisResult
	select {
	case res = <-late:
	case <-time.After(5 * time.Second):
		t.Fatal("the kept release was not delivered")
	}
	vals, err := res.AsIntSlice()
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0}, vals, "the late release frees the lock (the successor's number is spent), not passes it on")

	// The waiter takes the lock well within the holder's lease (30 s).
	require.NoError(t, await(t, got, 5*time.Second, "the waiter's Lock after the late release freed the lock"))
	require.NoError(t, waiter.Err(ctx))
	n, err := waiter.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "Redis counts the waiter's one hold")
	tok, err := waiter.Token(ctx)
	require.NoError(t, err)
	require.Greater(t, tok, hold)
	n, err = holder.HoldCount(bg)
	require.NoError(t, err)
	require.Zero(t, n)
	require.ErrorIs(t, holder.Unlock(bg), rlock.ErrNotHeld)
	require.NoError(t, waiter.Unlock(ctx))
	require.False(t, b.exists(t, holder.Key()), "the waiter's Unlock frees the lock")
	require.ErrorIs(t, waiter.Unlock(ctx), rlock.ErrNotHeld)
}
