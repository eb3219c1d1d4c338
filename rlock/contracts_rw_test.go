package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// RWMutex: the two sides' leases are their own ("Every hold kind of every owner carries its
// own lease"). The owner's read holds, taken under the write hold with a fixed lease, run
// their course while the write hold (watchdog) lives: the read side reports ErrLeaseExpired
// (ReadLocker.Err, RUnlock), the write side is untouched (Err nil, still write-locked, other
// owners still kept out), and the write hold's Unlock then frees the lock.
func TestContracts_rwReadLeaseEndsUnderWriteHold(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, ctxOwner := range []bool{false, true} {
		t.Run(map[bool]string{false: "own", true: "ctx"}[ctxOwner], func(t *testing.T) {
			t.Parallel()
			name := redistest.Name(t)
			c := b.client(t, rlock.WithWatchdogTimeout(600*time.Millisecond))
			rw := c.RWMutex(name)
			ctx := bg
			if ctxOwner {
				ctx = rlock.WithOwner(bg, "o-"+name)
			}
			require.NoError(t, rw.Lock(ctx))
			// The write hold's renewal has a third of its 600 ms lease to land (200 ms).
			hw := watchHold(t, rw.Done(ctx), 200*time.Millisecond)
			require.NoError(t, rw.RLockLease(ctx, 200*time.Millisecond))
			within(t, 5*time.Second, "the read lease's end", rw.RLocker().Done(ctx))
			require.ErrorIs(t, rw.RLocker().Err(ctx), rlock.ErrLeaseExpired)
			hw.noLoss(t, rw.Err(ctx), "the write hold lives on")
			// Redis's end comes later than the Client's conservative one (the drift allowance).
			redistest.WaitFor(t, time.Second, "Redis to count no read hold", func() bool {
				n, err := rw.ReadHoldCount(ctx)
				return err == nil && n == 0
			})
			rwState(t, rw, true, false)
			time.Sleep(700 * time.Millisecond) // past one watchdog timeout: renewed
			hw.noLoss(t, rw.Err(ctx))
			ok, err := b.client(t).RWMutex(name).TryRLock(bg, 0, 0)
			if ok && err == nil {
				// flake29 r1, beside a loaded machine: Err nil, then another reader got in.
				hw.noLossSeen(t, func() error { return rw.Err(ctx) }, "another reader while written")
			}
			rwTry(t, false, ok, err, "another reader while written")
			require.ErrorIs(t, rw.RUnlock(ctx), rlock.ErrLeaseExpired)
			hw.noLoss(t, rw.Unlock(ctx))
			rwState(t, rw, false, false)
			require.False(t, b.exists(t, rw.Key()))
		})
	}
}

// RWMutex "Writers first": "A writer that gives up (ctx, wait bound, error) withdraws its
// claim before returning, and wakes the readers it held back." Here by its wait bound: once
// TryLock returns (false, nil), no claim is left and another owner's single read attempt
// succeeds at once. And "A single attempt (TryLock with wait 0) never claims."
func TestContracts_rwWriterWaitBoundWithdrawsClaim(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	name := redistest.Name(t)
	reader := b.client(t).RWMutex(name)
	require.NoError(t, reader.RLock(bg))
	w := b.client(t).RWMutex(name)
	ok, err := w.TryLock(bg, 300*time.Millisecond, 0)
	rwTry(t, false, ok, err, "the writer, kept out by a reader")
	msg, err := b.do(t, "ZCARD", w.Key()+":writers")
	require.NoError(t, err)
	n, _ := msg.AsInt64()
	require.Zero(t, n, "the claim is withdrawn before TryLock returns")
	other := b.client(t).RWMutex(name)
	ok, err = other.TryRLock(bg, 0, 0)
	rwTry(t, true, ok, err, "a new reader once the writer gave up")
	require.NoError(t, other.RUnlock(bg))
	require.NoError(t, reader.RUnlock(bg))
}

// RWMutex.Lock: ErrUpgrade "at once when the owner holds read holds and not the write hold",
// which "changes nothing", for a context owner whose read hold was taken through another
// Client (Redis counts it: the refusal is Redis's): the read hold stays, the other Client's
// read side is untouched, and no writer's claim holds other readers back.
func TestContracts_rwUpgradeOfContextOwnerAcrossClients(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	name := redistest.Name(t)
	ctx := rlock.WithOwner(bg, "o-"+name)
	a, bb := b.client(t).RWMutex(name), b.client(t).RWMutex(name)
	require.NoError(t, a.RLock(ctx))
	start := time.Now()
	require.ErrorIs(t, bb.Lock(ctx), rlock.ErrUpgrade)
	ok, err := bb.TryLock(ctx, 5*time.Second, 0)
	require.ErrorIs(t, err, rlock.ErrUpgrade)
	require.False(t, ok)
	require.Less(t, time.Since(start), 2*time.Second, "an upgrade fails at once")
	n, err := a.ReadHoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, a.RLocker().Err(ctx))
	require.ErrorIs(t, bb.Err(ctx), rlock.ErrNotHeld)
	ok, err = b.client(t).RWMutex(name).TryRLock(bg, 0, 0)
	rwTry(t, true, ok, err, "another reader: no claim was left")
	require.NoError(t, a.RUnlock(ctx))
}
