package rlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// sharedOwnerPair returns a Client whose acquire and release scripts go through hc's hook,
// and a plain Client on the same server: two Clients (two processes) that a context owner
// (WithOwner) shares.
func sharedOwnerPair(t *testing.T) (hc *hookClient, c0, c1 *rlock.Client) {
	t.Helper()
	b := realBackend(t)
	hc, c0 = hardSetup(t, b, rlock.WithWatchdogTimeout(3*time.Second), rlock.WithCleanupTimeout(400*time.Millisecond))
	c1 = b.client(t, rlock.WithWatchdogTimeout(3*time.Second), rlock.WithCleanupTimeout(400*time.Millisecond))
	hardWarm(t, c1)
	return hc, c0, c1
}

// TestSharedOwner_replayedAcquireAfterOtherClientAppliesTwice: a context owner used through
// two Clients (README guarantee 8 names the case: "which handles of other Clients may
// share"). Client 0's acquire is applied, its reply lost; before Client 0 replays it,
// Client 1's acquire for the same owner is applied. The replay then finds the owner's last
// applied sequence number to be Client 1's (q:<owner>), which lib_seq's superseded did not
// compare across Clients, and re-entered a second time (before the owner's field kept one
// number per Client): Redis counts 3 holds for the 2 the
// owner took (README guarantee 5, "never applied twice"; HoldCount's godoc), and once the
// owner has given back both, the lock stays held by nobody for a whole lease (a ghost).
// Found by TestDriftHunt_sharedOwnerAcrossClients.
func TestSharedOwner_replayedAcquireAfterOtherClientAppliesTwice(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	var armed atomic.Bool
	armed.Store(true)
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" || !armed.CompareAndSwap(true, false) {
			return call()
		}
		_ = call() // applied: the owner's first hold
		require.NoError(t, m1.Lock(ctx), "the other Client's Lock for the same owner")
		return hardLost() // the reply is lost: Client 0 replays
	})
	require.NoError(t, m0.Lock(ctx))
	n, err := m0.HoldCount(ctx)
	require.NoError(t, err)
	if n != 2 {
		t.Errorf("the owner took 2 holds (one Lock through each Client); Redis counts %d", n)
	}

	require.NoError(t, m0.Unlock(ctx))
	require.NoError(t, m1.Unlock(ctx))
	locked, err := m0.IsLocked(bg)
	require.NoError(t, err)
	require.False(t, locked, "every hold was given back, but the lock is held by nobody (a ghost) for its lease")
}

// TestSharedOwner_replayedReleaseAfterOtherClientAppliesTwice: as above, for a release.
// The owner holds one hold through each Client. Client 0's Unlock is applied, its reply
// lost; Client 1 re-enters for the same owner before Client 0 replays; the replay gives back
// a second hold, one that Client 1 counts. Client 1's next Unlock then frees the lock (Redis
// answers 0) although the owner took 2 holds through Client 1 and gave back 1: its last hold
// ends with no loss notice (Err says ErrNotHeld, not ErrLockLost; README guarantee 3), and
// another owner takes the lock while the owner believes it holds it.
func TestSharedOwner_replayedReleaseAfterOtherClientAppliesTwice(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	require.NoError(t, m0.Lock(ctx))
	require.NoError(t, m1.Lock(ctx))
	var armed atomic.Bool
	armed.Store(true)
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "release" || !armed.CompareAndSwap(true, false) {
			return call()
		}
		_ = call()                       // applied: the owner's count goes from 2 to 1
		ok, err := m1.TryLock(ctx, 0, 0) // a re-entry through Client 1: 2 again
		require.NoError(t, err)
		require.True(t, ok)
		return hardLost()
	})
	require.NoError(t, m0.Unlock(ctx))
	n, err := m1.HoldCount(ctx)
	require.NoError(t, err)
	if n != 2 {
		t.Errorf("the owner holds 2 holds (both through Client 1); Redis counts %d", n)
	}

	require.NoError(t, m1.Unlock(ctx))
	if err := m1.Err(ctx); err != nil {
		t.Errorf("the owner took 2 holds through Client 1 and gave back 1, but Client 1 says %q: its hold ended with no loss notice", err)
	}
	other := c1.Mutex(name) // another owner: this handle's own
	ok, err := other.TryLock(bg, 0, 0)
	require.NoError(t, err)
	if ok {
		t.Errorf("another owner took the lock while the owner still holds one hold through Client 1")
		require.NoError(t, other.Unlock(bg))
	}
	_ = m1.Unlock(ctx)
}

// sharedOwnerCounts checks that Redis counts want holds of owner ctx on m's lock, and that
// after each Client has given back its own (gives: the Mutex of each Client, one Unlock per
// hold it took) the lock is free: no hold of one Client was taken by another's give-back,
// and none is left over.
func sharedOwnerCounts(t *testing.T, ctx context.Context, want int, gives ...*rlock.Mutex) {
	t.Helper()
	n, err := gives[0].HoldCount(ctx)
	require.NoError(t, err)
	if n != want {
		t.Errorf("the owner took %d holds and has given back none; Redis counts %d", want, n)
	}
	for i, m := range gives {
		if err := m.Unlock(ctx); err != nil {
			t.Errorf("give-back %d of the owner's own holds: %v", i, err)
		}
	}
	locked, err := gives[0].IsLocked(bg)
	require.NoError(t, err)
	if locked {
		t.Errorf("every hold was given back, yet the lock is held")
	}
}

// TestSharedOwner_unknownAcquireNeverAppliedTakesNoOtherHold: a context owner used through two
// Clients. Client 0's TryLock is never applied, but its sends all go unanswered: it ends with
// ErrUnknownOutcome, and Client 0 can only suppose that Redis may have granted it. Client 1
// then takes a hold of the owner, and Client 0 another (a re-entry in Redis). Redis counts 2
// holds, one beyond Client 0's own: Client 1's. Client 0 took that one for its own unknown
// grant (a stale record) and gave it back blindly (before: Redis counted 1 of the 2 holds the
// owner took, and Client 1's Unlock freed the lock under Client 0's hold: the drift hunt's
// shared owner, seed 1796321909366661268 trial 29). Redis now counts each Client's holds of
// a context owner apart, and a give-back of holds a Client let go of is conditional on them.
func TestSharedOwner_unknownAcquireNeverAppliedTakesNoOtherHold(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	disarm := unanswered(hc, "acquire", false) // never sent: nothing applied, and no answer
	_, err := m0.TryLock(ctx, 0, 0)
	require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
	disarm()
	require.NoError(t, m1.Lock(ctx))
	require.NoError(t, m0.Lock(ctx))
	sharedOwnerCounts(t, ctx, 2, m1, m0)
}

// TestSharedOwner_unknownAcquireAppliedIsGivenBack: as above, but Client 0's TryLock was
// applied (its replies lost): Redis counts a hold of the owner that no call took. Client 0's
// next grant finds it among its own holds in Redis and gives it back, and no give-back takes
// Client 1's hold; once both Clients have given back their own, the lock is free.
func TestSharedOwner_unknownAcquireAppliedIsGivenBack(t *testing.T) {
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	disarm := unanswered(hc, "acquire", true)
	_, err := m0.TryLock(ctx, 0, 0)
	require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
	disarm()
	require.NoError(t, m1.Lock(ctx))
	require.NoError(t, m0.Lock(ctx))
	require.Eventually(t, func() bool {
		n, err := m0.HoldCount(ctx)
		return err == nil && n == 2
	}, 5*time.Second, 10*time.Millisecond, "the unknown grant is given back, and nothing else")
	sharedOwnerCounts(t, ctx, 2, m1, m0)
}

// TestSharedOwner_unknownUnlockAppliedTakesNoOtherHold: Client 0 holds 2 holds of the owner,
// Client 1 one. Client 0's Unlock is applied but no answer comes (ErrUnknownOutcome): Client
// 0 counts it given back, and keeps it as an orphan in case Redis did not apply it. The
// orphan's give-back must take nothing (Redis applied the Unlock): not Client 1's hold.
func TestSharedOwner_unknownUnlockAppliedTakesNoOtherHold(t *testing.T) {
	t.Parallel()
	hc, c0, c1 := sharedOwnerPair(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "shared-"+name)
	m0, m1 := c0.Mutex(name), c1.Mutex(name)
	require.NoError(t, m0.Lock(ctx))
	require.NoError(t, m0.Lock(ctx))
	require.NoError(t, m1.Lock(ctx))
	disarm := unanswered(hc, "release", true)
	require.ErrorIs(t, m0.Unlock(ctx), rlock.ErrUnknownOutcome)
	disarm()
	// Two renewal periods (the watchdog timeout is 3 s): an orphan's give-back starts at the
	// first renewal Redis confirms.
	time.Sleep(2500 * time.Millisecond)
	sharedOwnerCounts(t, ctx, 2, m1, m0)
}

// unanswered makes every send of script through hc go unanswered until disarm is called:
// none reaches Redis, or, with applyFirst, the first does (Redis applies it) and its reply is
// lost. Other scripts go straight on.
func unanswered(hc *hookClient, script string, applyFirst bool) (disarm func()) {
	var armed, first atomic.Bool
	armed.Store(true)
	first.Store(applyFirst)
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script == script && armed.Load() {
			if first.CompareAndSwap(true, false) {
				_ = call() // applied
			}
			return hardLost()
		}
		return call()
	})
	return func() { armed.Store(false) }
}

// TestSharedOwner_reentryIntoAnotherClientsTenureIsALoss: a context owner's tenure lost in
// Redis (here its key deleted) and taken afresh by another Client for the same owner is still
// a loss for the Client that held it. Its next re-entry, which Redis grants into the other
// Client's tenure (the owner's count 2, a token not its own), is refused with ErrLockLost and
// given back, and the other Client's hold is untouched. Before, the loss was detected from the
// owner's total count alone (a fresh grant, count 1): the re-entry joined the other Client's
// tenure unnoticed, and the Client went on as if its own tenure still held (guarantee 3).
func TestSharedOwner_reentryIntoAnotherClientsTenureIsALoss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ca, cb := b.client(t), b.client(t)
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		ma, mb := ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, ma.Lock(ctx))
		tokA, err := ma.Token(ctx)
		require.NoError(t, err)
		_, err = b.do(t, "DEL", ma.Key()) // lost, before A's watchdog renews (30 s)
		require.NoError(t, err)
		require.NoError(t, mb.Lock(ctx)) // afresh: B's tenure
		tokB, err := mb.Token(ctx)
		require.NoError(t, err)
		require.NotEqual(t, tokA, tokB)

		require.ErrorIs(t, ma.Lock(ctx), rlock.ErrLockLost, "A re-entered B's tenure as if it were its own")
		require.ErrorIs(t, ma.Err(ctx), rlock.ErrLockLost)
		redistest.WaitFor(t, 5*time.Second, "A's refused re-entry to be given back", func() bool {
			n, err := mb.HoldCount(ctx)
			require.NoError(t, err)
			return n == 1
		})
		require.NoError(t, mb.Err(ctx), "B's hold is untouched")
		require.NoError(t, mb.Unlock(ctx))
		require.False(t, b.exists(t, mb.Key()), "B's Unlock frees the lock")
		require.ErrorIs(t, ma.Unlock(ctx), rlock.ErrNotHeld)
	})
}

// The same lost tenure, found by the renewals: the first Client's watchdog, renewing its
// tenure, finds the other Client's in its place and ends its hold as lost. Before, renew.lua
// checked only the owner's field, which the other Client's tenure has too, and renewed it:
// the first Client's HoldContext stayed live over a tenure that was not its own until its
// next re-entry or Unlock.
func TestSharedOwner_renewalOfTenureTakenByAnotherClientIsALoss(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca, cb := b.client(t, rlock.WithWatchdogTimeout(time.Second)), b.client(t)
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		ma, mb := ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, ma.Lock(ctx))
		done := ma.Done(ctx)
		_, err := b.do(t, "DEL", ma.Key()) // lost, before A's first renewal (at 2/3 of 1 s)
		require.NoError(t, err)
		require.NoError(t, mb.Lock(ctx)) // afresh: B's tenure
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("A's renewals kept B's tenure as A's own: no loss told in 10 s")
		}
		require.ErrorIs(t, ma.Err(ctx), rlock.ErrLockLost)
		n, err := mb.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "B's hold is untouched")
		require.NoError(t, mb.Err(ctx))
		require.ErrorIs(t, ma.Unlock(ctx), rlock.ErrNotHeld)
		n, err = mb.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "A's Unlock took B's hold")
		require.NoError(t, mb.Unlock(ctx))
		require.False(t, b.exists(t, mb.Key()), "B's Unlock frees the lock")
	})
}

// The same lost tenure, found by the Unlock instead of a re-entry: it gives back nothing of
// the other Client's tenure and says the hold is not held; with a waiter of another owner
// parked on the first Client, it does not pass the other Client's lock to it either. Before,
// the Unlock (a context owner's give-back, not conditional on the Client's count) took the
// other Client's hold and returned nil, and the last one freed the lock or handed it to the
// waiter while that Client still held it (an exclusion violation).
func TestSharedOwner_unlockOfTenureTakenByAnotherClientTakesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, waiter := range []bool{false, true} {
			t.Run(fmt.Sprintf("waiter=%v", waiter), func(t *testing.T) {
				ca, cb := b.client(t), b.client(t)
				name := redistest.Name(t)
				ctx := rlock.WithOwner(bg, "shared-"+name)
				ma, mb, w := ca.Mutex(name), cb.Mutex(name), ca.Mutex(name)
				require.NoError(t, ma.Lock(ctx))
				got := make(chan error, 1)
				if waiter {
					hardSubscribe(t, ca, name)
					go func() { got <- w.Lock(bg) }()
					redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(ca, w) == 1 })
				}
				_, err := b.do(t, "DEL", ma.Key())
				require.NoError(t, err)
				require.NoError(t, mb.Lock(ctx))
				err = ma.Unlock(ctx)
				t.Logf("A's Unlock: %v", err)
				require.ErrorIs(t, err, rlock.ErrNotHeld)
				n, err := mb.HoldCount(ctx)
				require.NoError(t, err)
				require.Equal(t, 1, n, "A's Unlock took B's hold")
				require.NoError(t, mb.Err(ctx))
				if waiter {
					select {
					case err := <-got:
						t.Fatalf("the waiter got the lock B holds: %v", err)
					case <-time.After(100 * time.Millisecond):
					}
				}
				require.NoError(t, mb.Unlock(ctx))
				if waiter {
					require.NoError(t, await(t, got, 10*time.Second, "the waiter's Lock once B unlocked"))
					require.NoError(t, w.Unlock(bg))
				}
				require.False(t, b.exists(t, mb.Key()))
			})
		}
	})
}

// A context owner's holds of every kind that renews through renew.lua (Mutex, SpinMutex,
// FairMutex, a hand-off to a waiter of the same Client, MultiLock's locks, RedLock's
// instances) and a re-entry that turns a fixed lease into the watchdog's keep being renewed
// across several rounds: the tenure's token that a context owner's renewal names is the one
// Redis has, so no renewal reports a false loss.
func TestSharedOwner_renewalsOfEveryKindKeepTheHold(t *testing.T) {
	t.Parallel()
	// Renewed every 1.33 s: a 1-s lease (renewed every 667 ms) ran out for real once on
	// miniredis, on a machine running a CI proof beside a helper's explorers ("spin: a renewal
	// reported a live hold lost").
	const wd = 2 * time.Second
	rounds := func() { time.Sleep(3 * wd) } // four rounds
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t, rlock.WithWatchdogTimeout(wd))
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "owner-"+name)
		type held struct {
			what   string
			err    func() error
			unlock func() error
		}
		var hs []held
		m := c.Mutex(name + "-m")
		require.NoError(t, m.Lock(ctx))
		hs = append(hs, held{"mutex", func() error { return m.Err(ctx) }, func() error { return m.Unlock(ctx) }})
		s := c.SpinMutex(name + "-s")
		require.NoError(t, s.Lock(ctx))
		hs = append(hs, held{"spin", func() error { return s.Err(ctx) }, func() error { return s.Unlock(ctx) }})
		f := c.FairMutex(name + "-f")
		require.NoError(t, f.Lock(ctx))
		hs = append(hs, held{"fair", func() error { return f.Err(ctx) }, func() error { return f.Unlock(ctx) }})
		r := c.Mutex(name + "-r") // a fixed lease, then a re-entry that turns the watchdog on
		require.NoError(t, r.LockLease(ctx, time.Minute))
		require.NoError(t, r.Lock(ctx))
		hs = append(hs, held{"re-entered", func() error { return r.Err(ctx) }, func() error {
			if err := r.Unlock(ctx); err != nil {
				return err
			}
			return r.Unlock(ctx)
		}})
		ml := c.MultiLock(name+"-a", name+"-b")
		require.NoError(t, ml.Lock(ctx))
		hs = append(hs, held{"multilock", func() error { return c.Mutex(name + "-a").Err(ctx) }, func() error { return ml.Unlock(ctx) }})

		// A hand-off to a waiter of the same Client whose owner is a context owner.
		hctx := rlock.WithOwner(bg, "handed-"+name)
		holder, waiter := c.Mutex(name+"-h"), c.Mutex(name+"-h")
		require.NoError(t, holder.Lock(bg))
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(hctx) }()
		redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
		require.NoError(t, holder.Unlock(bg))
		require.NoError(t, await(t, got, 5*time.Second, "the hand-off"))
		hs = append(hs, held{"handed off", func() error { return waiter.Err(hctx) }, func() error { return waiter.Unlock(hctx) }})

		rounds()
		for _, h := range hs {
			require.NoError(t, h.err(), "%s: a renewal reported a live hold lost", h.what)
		}
		for _, h := range hs {
			require.NoError(t, h.unlock(), h.what)
		}
	})
}

// The same for RedLock's instances, held by a context owner.
func TestSharedOwner_redLockRenewalsKeepTheHold(t *testing.T) {
	t.Parallel()
	// A 3-s lease renewed every second (renew fraction 1/3: 2 s for a renewal to land), and a
	// wait for renewals rather than a sleep: a 1-s lease (renewed every 667 ms) ran out for
	// real on a machine at a load of 13-18 on 2 cores ("a renewal reported a live RedLock hold
	// lost"), as it had for TestSharedOwner_renewalsOfEveryKindKeepTheHold.
	const wd = 3 * time.Second
	var renewed [3]atomic.Int64 // leases each instance's Client renewed
	var cs []*rlock.Client
	for i, a := range addrsOf(redServers(t, 3)) {
		obs := &rlock.Observer{RenewalRound: func(e rlock.RenewalRoundInfo) { renewed[i].Add(int64(e.Leases - e.Failures)) }}
		cs = append(cs, redClients(t, []string{a}, rlock.WithWatchdogTimeout(wd), rlock.WithRenewFraction(1.0/3), rlock.WithObserver(obs))...)
	}
	r := rlock.NewRedLock(redistest.Name(t), cs)
	ctx := rlock.WithOwner(bg, "red-"+redistest.Name(t))
	require.NoError(t, r.Lock(ctx))
	redistest.WaitFor(t, 10*wd, "three renewals on each instance", func() bool {
		for i := range renewed {
			if renewed[i].Load() < 3 {
				return false
			}
		}
		return true
	})
	require.NoError(t, r.Err(ctx), "a renewal reported a live RedLock hold lost")
	require.NoError(t, r.Unlock(ctx))
}

// A re-entry whose grant comes back after the tenure it re-entered ran to the end of its
// fixed lease is refused (ErrLeaseExpired) and given back: the caller counts the ended
// tenure's hold, and the Client, had it started a new tenure with the grant, would count
// one hold fewer than the caller's Unlocks. For a context owner the extra Unlock, through a
// Client that counts none, gave back another Client's hold: here Client A's, and the lock
// was free while A held it. Before, B's Lock returned nil, and its caller's second Unlock
// left Redis counting none of the owner's holds (review5's explorer, seed
// 1796361340442485057 trial 0).
func TestSharedOwner_reentryRacingItsFixedLeaseEndIsRefused(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ca := b.client(t)
		d := delayReplies(b.rueidis(t), 500*time.Millisecond)
		cb, err := rlock.New(d)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cb.Close() })
		hardWarm(t, cb)
		name := redistest.Name(t)
		ctx := rlock.WithOwner(bg, "shared-"+name)
		ma, mb := ca.Mutex(name), cb.Mutex(name)
		require.NoError(t, ma.Lock(ctx))                            // A's tenure, renewed by A
		require.NoError(t, mb.LockLease(ctx, 300*time.Millisecond)) // B re-enters it for 300 ms
		close(d.on)                                                 // B's next replies come 500 ms late: after its fixed lease's end
		err = mb.Lock(ctx)
		t.Logf("B's re-entry: %v", err)
		require.ErrorIs(t, err, rlock.ErrLeaseExpired, "B's re-entry joined a tenure of its own after the one it re-entered had ended")
		// The caller unlocks the hold it took (LockLease): its lease ran its course.
		// (One Unlock: the refused Lock took nothing. A second Unlock through B, which counts
		// no hold, would give back a hold of the owner's wherever it was taken, as an owner
		// id is a capability: Mutex.Unlock.)
		require.ErrorIs(t, mb.Unlock(ctx), rlock.ErrLeaseExpired)
		require.NoError(t, ma.Err(ctx), "A's hold is untouched")
		redistest.WaitFor(t, 5*time.Second, "Redis to count A's hold alone", func() bool {
			n, err := ma.HoldCount(ctx)
			require.NoError(t, err)
			return n == 1
		})
		require.NoError(t, ma.Unlock(ctx))
		require.False(t, b.exists(t, ma.Key()), "A's Unlock frees the lock")
	})
}
