package rlock_test

import (
	"context"
	"errors"
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
	t.Parallel() // its own Clients and names: it runs beside the others
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
	// The cleanup timeout bounds the waiter's replays of the hand-off too, which must get
	// their answer: at 300 ms they ran out of it on a loaded machine ("the hand-off's replay
	// got no answer"; "passed on by a release whose outcome is unknown"), as the background's
	// give-back did in goneDuringHandoffReplay.
	const cleanup = 1500 * time.Millisecond
	name := redistest.Name(t)
	obs, replays := acquireReplays(name)
	ctx := waiterBase(ctxOwner)
	// The default watchdog timeout (30 s): a waiter that slept until the holder's lease ran
	// out would miss every bound below.
	s := parkWaiter(t, b, name, ctx, rlock.WithCleanupTimeout(cleanup), rlock.WithObserver(obs))
	hold, err := s.holder.Token(bg)
	require.NoError(t, err)

	// The release's first send is kept back (not sent) and no reply of it, nor of any of its
	// replays (not sent either), comes back. Between: the waiter's first replay runs, its
	// reply is lost, and the kept send is delivered then.
	kept := make(chan func(context.Context) rueidis.RedisResult, 1)
	late := make(chan rueidis.RedisResult, 1)
	var releases, acqReplays atomic.Int32
	s.hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
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
	require.ErrorIs(t, s.holder.Unlock(bg), rlock.ErrUnknownOutcome)
	if !between {
		select {
		case e := <-replays:
			require.NoError(t, e.Err, "the hand-off's replay got no answer")
		case <-time.After(5 * time.Second):
			t.Fatal("no Replay of the waiter's acquire: the hand-off was not resolved")
		}
		// Still the holder's: the replay was refused, and the waiter waits on.
		require.True(t, b.exists(t, s.holder.Key()))
		n, err := s.holder.HoldCount(bg)
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
	require.NoError(t, await(t, s.got, 5*time.Second, "the waiter's Lock after the late release freed the lock"))
	require.NoError(t, s.waiter.Err(ctx))
	n, err := s.waiter.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "Redis counts the waiter's one hold")
	tok, err := s.waiter.Token(ctx)
	require.NoError(t, err)
	require.Greater(t, tok, hold)
	n, err = s.holder.HoldCount(bg)
	require.NoError(t, err)
	require.Zero(t, n)
	require.ErrorIs(t, s.holder.Unlock(bg), rlock.ErrNotHeld)
	require.NoError(t, s.waiter.Unlock(ctx))
	require.False(t, b.exists(t, s.holder.Key()), "the waiter's Unlock frees the lock")
	require.ErrorIs(t, s.waiter.Unlock(ctx), rlock.ErrNotHeld)
}

// A context owner ([rlock.WithOwner]) shared by two Clients, or by two goroutines of one:
// the hand-off to the owner's waiter on Client 1 is applied but no reply of the release
// comes back, and before Client 1 replays the hand-off the owner takes another hold (a
// re-entry: the owner holds the lock in Redis) through Client 2 (other) or through another
// goroutine on Client 1 (same, which waits for the claim's h.op), and through Client 2 may give
// it back again (leave). The replay is answered from the state, with the owner's holds and
// Client 1's own count: Redis's count of the owner is the holds the callers were told they
// took, and their Unlocks, in either order, free the lock. A double count (the replay's grant
// recorded as the owner's two holds, or a re-entry counted twice) would leave the key held
// after the last Unlock, or an Unlock told ErrNotHeld.
func TestReview4_handoffReplayOfSharedContextOwnerCountsEachHoldOnce(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, mode := range []string{"other", "other-leave", "same"} {
			for _, firstOut := range []string{"waiter", "second"} {
				if mode == "other-leave" && firstOut == "second" {
					continue // the second hold is already given back
				}
				t.Run(mode+"/"+firstOut+"-unlocks-first", func(t *testing.T) {
					sharedOwnerHandoffReplay(t, b, mode, firstOut == "waiter")
				})
			}
		}
	})
}

func sharedOwnerHandoffReplay(t *testing.T, b *backend, mode string, waiterFirst bool) {
	const cleanup = 300 * time.Millisecond
	name := redistest.Name(t)
	obs, replays := acquireReplays(name)
	uctx := rlock.WithOwner(bg, "shared")
	s := parkWaiter(t, b, name, uctx, rlock.WithCleanupTimeout(cleanup), rlock.WithObserver(obs))
	second := b.client(t).Mutex(name) // Client 2
	if mode == "same" {
		second = s.c.Mutex(name)
	}

	// The release's first send is applied (the lock passes to the shared owner) and held in
	// the hook until the second hold is taken; then neither it nor a replay is answered.
	applied, goOn := make(chan struct{}), make(chan struct{})
	var releases atomic.Int32
	s.hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if !isHandoffRelease(cmd) {
			return call()
		}
		if releases.Add(1) == 1 {
			call()
			close(applied)
			<-goOn
		}
		return hardLost()
	})
	unlocked := make(chan error, 1)
	go func() { unlocked <- s.holder.Unlock(bg) }()
	within(t, 5*time.Second, "the hand-off to be applied", applied)
	n, err := second.HoldCount(uctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the hand-off is applied: the shared owner holds the lock in Redis")

	secondGot := make(chan error, 1)
	go func() {
		ok, err := second.TryLock(uctx, 0, 0)
		if err == nil && !ok {
			err = errors.New("the shared owner's second hold was refused")
		}
		secondGot <- err
	}()
	if mode != "same" {
		// Client 2 re-enters the shared owner's hold at once.
		require.NoError(t, await(t, secondGot, 5*time.Second, "the second hold through Client 2"))
		if mode == "other-leave" {
			require.NoError(t, second.Unlock(uctx))
		}
	}
	close(goOn)
	require.ErrorIs(t, await(t, unlocked, 10*time.Second, "the holder's Unlock"), rlock.ErrUnknownOutcome)
	require.NoError(t, await(t, s.got, 10*time.Second, "the waiter's Lock, the hand-off replayed"))
	if mode == "same" {
		// The second goroutine waited for the claim's h.op, then re-entered.
		require.NoError(t, await(t, secondGot, 10*time.Second, "the second hold on Client 1"))
	}
	select {
	case e := <-replays:
		require.NoError(t, e.Err, "the hand-off's replay got no answer")
	case <-time.After(3 * time.Second):
		t.Fatal("no Replay of the waiter's acquire")
	}

	want := 2
	if mode == "other-leave" {
		want = 1
	}
	n, err = s.waiter.HoldCount(uctx)
	require.NoError(t, err)
	require.Equal(t, want, n, "Redis counts the shared owner's holds the callers were told they took")
	require.NoError(t, s.waiter.Err(uctx))
	if want == 2 {
		require.NoError(t, second.Err(uctx))
		wt, err := s.waiter.Token(uctx)
		require.NoError(t, err)
		st, err := second.Token(uctx)
		require.NoError(t, err)
		require.Equal(t, wt, st, "one tenure: the second hold re-entered the handed-off one")
		first, last := s.waiter, second
		if !waiterFirst {
			first, last = second, s.waiter
		}
		require.NoError(t, first.Unlock(uctx))
		n, err = s.waiter.HoldCount(uctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "one hold given back of two")
		require.True(t, b.exists(t, s.holder.Key()))
		require.NoError(t, last.Unlock(uctx))
	} else {
		require.NoError(t, s.waiter.Unlock(uctx))
	}
	require.False(t, b.exists(t, s.holder.Key()), "the last Unlock frees the lock")
	n, err = s.waiter.HoldCount(uctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// The waiter's caller goes while the hand-off's replay is on its way (replayFor's gone path:
// the replaying goes on in the background, resolveGone): the call returns context.Canceled
// promptly; a hand-off that was applied is given back exactly once (one GiveBack, reason
// canceled, no error) and the lock is free; one that was not is resolved as refused (the
// successor's number spent), so that the release's first send, delivered late, frees the
// lock (kept) or the holder keeps it (lost, its release never arriving). Nothing of the
// waiter's owner is left in Redis, its Err ends as ErrNotHeld, and no goroutine outlives the
// test (goleak, TestMain).
func TestReview4_callerGoneDuringHandoffReplayLeavesNothing(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, release := range []string{"applied", "kept", "lost"} {
			for _, ctxOwner := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/ctxOwner=%v", release, ctxOwner), func(t *testing.T) {
					goneDuringHandoffReplay(t, b, release, ctxOwner)
				})
			}
		}
	})
}

func goneDuringHandoffReplay(t *testing.T, b *backend, release string, ctxOwner bool) {
	// The cleanup timeout bounds the background's give-back of the applied hand-off. At 500 ms
	// a give-back delayed by load could run out of it and leave the hold to its lease: a
	// -race run beside other tests failed redis/applied/ctxOwner=true with "Redis counts no
	// hold", and a give-back delayed 500 ms by the hook fails it so (its GiveBack's Err says
	// so now).
	const cleanup = 1500 * time.Millisecond
	name := redistest.Name(t)
	givebacks := make(chan rlock.GiveBackInfo, 16)
	obs, replays := acquireReplays(name)
	obs.GiveBack = func(e rlock.GiveBackInfo) {
		if e.Name == name {
			givebacks <- e
		}
	}
	wbase := waiterBase(ctxOwner)
	ctx, cancel := context.WithCancel(wbase)
	defer cancel()
	s := parkWaiter(t, b, name, ctx, rlock.WithCleanupTimeout(cleanup), rlock.WithObserver(obs))

	// The release's first send is applied, kept back (delivered at the end) or lost; no reply
	// of it or of its replays comes back. The waiter's first replay of the hand-off is held
	// until its caller has gone, then sent on and its reply lost: the background resolves it.
	kept := make(chan func(context.Context) rueidis.RedisResult, 1)
	replaying, gone := make(chan struct{}), make(chan struct{})
	var releases, acqReplays atomic.Int32
	s.hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		switch {
		case isHandoffRelease(cmd):
			if releases.Add(1) == 1 {
				switch release {
				case "applied":
					call()
				case "kept":
					kept <- cmd.sendWith
				}
			}
			return hardLost()
		case isAcquireReplay(cmd) && acqReplays.Add(1) == 1:
			close(replaying)
			<-gone
			cmd.sendWith(context.Background())
			return hardLost()
		}
		return call()
	})
	unlocked := make(chan error, 1)
	go func() { unlocked <- s.holder.Unlock(bg) }()
	within(t, 10*time.Second, "the waiter's replay of the hand-off", replaying)
	require.ErrorIs(t, await(t, unlocked, 5*time.Second, "the holder's Unlock"), rlock.ErrUnknownOutcome)
	cancel()
	start := time.Now()
	close(gone)
	require.ErrorIs(t, await(t, s.got, 2*time.Second, "the gone caller's Lock to return"), context.Canceled)
	require.Less(t, time.Since(start), time.Second, "the gone caller returns within its grace")

	// The background work resolves the hand-off: a Replay with an answer.
	deadline := time.After(10 * time.Second)
	for resolved := false; !resolved; {
		select {
		case e := <-replays:
			resolved = e.Err == nil
		case <-deadline:
			t.Fatal("no Replay of the waiter's acquire with an answer: the hand-off stayed unresolved")
		}
	}
	redistest.WaitFor(t, 3*time.Second, "the waiter's tenure, if any, to end", func() bool {
		return errors.Is(s.waiter.Err(wbase), rlock.ErrNotHeld)
	})
	// An applied hand-off is given back by the background after that Replay: its GiveBack
	// comes first, and says whether Redis took the hold back (else it stays to its lease).
	var gb []rlock.GiveBackInfo
	if release == "applied" {
		select {
		case e := <-givebacks:
			gb = append(gb, e)
			require.NoError(t, e.Err, "the applied hand-off's give-back")
		case <-time.After(10 * time.Second):
			t.Fatal("no GiveBack of the applied hand-off whose caller had gone")
		}
	}
	n, err := s.waiter.HoldCount(wbase)
	require.NoError(t, err)
	require.Zero(t, n, "Redis counts no hold of the gone caller's owner")
	switch release {
	case "applied":
		require.False(t, b.exists(t, s.holder.Key()), "the hand-off given back frees the lock")
	case "kept":
		res := (<-kept)(context.Background())
		vals, err := res.AsIntSlice()
		require.NoError(t, err)
		require.Equal(t, []int64{0, 0}, vals, "the late release frees the lock: the successor's number was spent")
		require.False(t, b.exists(t, s.holder.Key()), "the late release frees the lock")
	case "lost":
		n, err := s.holder.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the holder's hold stays, its release never arrived")
	}
	n, err = s.waiter.HoldCount(wbase)
	require.NoError(t, err)
	require.Zero(t, n)
	// One give-back for an applied hand-off, none otherwise.
	for done := false; !done; {
		select {
		case e := <-givebacks:
			gb = append(gb, e)
		case <-time.After(200 * time.Millisecond):
			done = true
		}
	}
	if release == "applied" {
		require.Len(t, gb, 1, "the applied hand-off is given back once: %+v", gb)
		require.Equal(t, rlock.GiveBackCanceled, gb[0].Reason)
		require.NoError(t, gb[0].Err)
	} else {
		require.Empty(t, gb, "nothing was granted, nothing is given back")
	}
}

// Only the plain Mutex hands off (its variant's handoff): a waiter of a FairMutex, an
// RWMutex's write side or a SpinMutex of the same Client never parks as a candidate, so no
// release names a successor and no acquire is ever replayed under a successor's number
// (handedOff is not reached). The plain Mutex is the control: its release names one.
func TestReview4_onlyThePlainMutexHandsOff(t *testing.T) {
	t.Parallel() // its own Clients and names: it runs beside the others
	type locker interface {
		Lock(context.Context) error
		Unlock(context.Context) error
	}
	b := realBackend(t)
	for _, kind := range []string{"mutex", "fair", "rw-write", "spin"} {
		t.Run(kind, func(t *testing.T) {
			hc, c := hardSetup(t, b)
			name := redistest.Name(t)
			mk := func() locker {
				switch kind {
				case "fair":
					return c.FairMutex(name)
				case "rw-write":
					return c.RWMutex(name)
				case "spin":
					return c.SpinMutex(name)
				}
				return c.Mutex(name)
			}
			var handoffs, replays atomic.Int32
			hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
				if isHandoffRelease(cmd) {
					handoffs.Add(1)
				}
				if isAcquireReplay(cmd) {
					replays.Add(1)
				}
				return call()
			})
			holder, waiter := mk(), mk()
			require.NoError(t, holder.Lock(bg))
			got := make(chan error, 1)
			go func() { got <- waiter.Lock(bg) }()
			if kind == "mutex" {
				redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, c.Mutex(name)) == 1 })
			} else {
				// Given time to park, were it to: it never does.
				time.Sleep(300 * time.Millisecond)
				require.Zero(t, rlock.ParkedCandidates(c, c.Mutex(name)))
				if s, ok := holder.(*rlock.SpinMutex); ok {
					require.Zero(t, rlock.ParkedCandidates(c, s.Mutex))
				}
			}
			require.NoError(t, holder.Unlock(bg))
			require.NoError(t, await(t, got, 10*time.Second, "the waiter's Lock"))
			require.NoError(t, waiter.Unlock(bg))
			require.Zero(t, replays.Load(), "no acquire replayed")
			if kind == "mutex" {
				require.EqualValues(t, 1, handoffs.Load(), "the control: the plain Mutex's release names its parked waiter")
			} else {
				require.Zero(t, handoffs.Load(), "no release names a successor")
			}
		})
	}
}
