package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

func TestDo_runsUnderTheHoldAndUnlocks(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		m := c.Mutex(name)
		ran := false
		err := rlock.Do(bg, m, func(ctx context.Context) error {
			ran = true
			require.NoError(t, ctx.Err())
			require.NoError(t, m.Err(ctx))
			ok, err := c.Mutex(name).TryLock(bg, 0, 0) // another owner
			require.NoError(t, err)
			require.False(t, ok)
			return nil
		})
		require.NoError(t, err)
		require.True(t, ran)
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)

		// fn's error comes back as it is, and the lock is given back all the same.
		errWork := errors.New("work failed")
		err = rlock.Do(bg, m, func(context.Context) error { return errWork })
		require.ErrorIs(t, err, errWork)
		require.Equal(t, errWork.Error(), err.Error())
		locked, err = m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
	})
}

func TestDo_familyMembers(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		rw := c.RWMutex(redistest.Name(t) + "-rw")
		for _, l := range []rlock.Holder{
			c.Mutex(redistest.Name(t)), c.FairMutex(redistest.Name(t) + "-fair"),
			c.SpinMutex(redistest.Name(t) + "-spin"), rw, rw.RLocker(),
		} {
			err := rlock.Do(bg, l, func(ctx context.Context) error {
				require.NoError(t, ctx.Err())
				return nil
			})
			require.NoError(t, err, "%T", l)
		}
		locked, err := rw.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
		// The read side lets another reader in while fn runs; the write side does not.
		err = rlock.Do(bg, rw.RLocker(), func(ctx context.Context) error {
			ok, err := c.RWMutex(rw.Name()).TryRLock(bg, 0, 0)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = c.RWMutex(rw.Name()).TryLock(bg, 0, 0)
			require.NoError(t, err)
			require.False(t, ok)
			return nil
		})
		require.NoError(t, err)
	})
}

func TestDo_lossCancelsFnAndIsReported(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t, rlock.WithWatchdogTimeout(300*time.Millisecond))
		m := c.Mutex(redistest.Name(t))
		var cause error
		err := rlock.Do(bg, m, func(ctx context.Context) error {
			// Someone deletes the lock behind the holder's back.
			_, err := b.do(t, "DEL", m.Key())
			require.NoError(t, err)
			within(t, 2*time.Second, "loss notice", ctx.Done())
			cause = context.Cause(ctx)
			return nil // fn ignores the loss: Do reports it all the same
		})
		require.ErrorIs(t, cause, rlock.ErrLockLost)
		require.ErrorIs(t, err, rlock.ErrLockLost)
		require.NotErrorIs(t, err, rlock.ErrNotHeld, "Unlock's ErrNotHeld only repeats the loss")
		require.Contains(t, err.Error(), m.Name())
		// The hold was given back: the owner may lock again.
		require.ErrorIs(t, m.Err(bg), rlock.ErrNotHeld)
		require.NoError(t, rlock.Do(bg, m, func(context.Context) error { return nil }))
	})
}

func TestDo_panicUnlocksAndRepanics(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		func() {
			defer func() {
				require.Equal(t, "boom", recover())
			}()
			_ = rlock.Do(bg, m, func(context.Context) error { panic("boom") })
			t.Fatal("Do returned after a panic")
		}()
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
		require.ErrorIs(t, m.Err(bg), rlock.ErrNotHeld)
	})
}

func TestDo_cancelledCtxStillUnlocks(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		err := rlock.Do(ctx, m, func(hctx context.Context) error {
			cancel()
			<-hctx.Done()
			require.ErrorIs(t, context.Cause(hctx), context.Canceled)
			return hctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, rlock.ErrLockLost)
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
	})
}

func TestDo_lockErrorAsIsAndFnNotRun(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		fn := func(context.Context) error { t.Fatal("fn ran"); return nil }

		ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
		defer cancel()
		other := c.Mutex(m.Name())
		require.NoError(t, other.Lock(bg))
		err := rlock.Do(ctx, m, fn)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NoError(t, other.Unlock(bg))

		require.ErrorIs(t, rlock.Do(bg, nil, fn), rlock.ErrInvalid)
		require.ErrorIs(t, rlock.Do(bg, m, nil), rlock.ErrInvalid)
		ok, err := rlock.TryDo(bg, nil, 0, 0, fn)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.False(t, ok)
		require.ErrorIs(t, rlock.Do(bg, c.Mutex(""), fn), rlock.ErrInvalid)

		_ = c.Close()
		require.ErrorIs(t, rlock.Do(bg, m, fn), rlock.ErrClosed)
	})
}

func TestTryDo(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		m, other := c.Mutex(name), c.Mutex(name)
		require.NoError(t, other.Lock(bg))
		ok, err := rlock.TryDo(bg, m, 20*time.Millisecond, 0, func(context.Context) error {
			t.Fatal("fn ran while another held the lock")
			return nil
		})
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, other.Unlock(bg))

		ran := false
		ok, err = rlock.TryDo(bg, m, 0, 0, func(context.Context) error { ran = true; return nil })
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, ran)

		// A fixed lease that ends while fn runs: fn's context and the result tell it.
		ok, err = rlock.TryDo(bg, m, 0, 100*time.Millisecond, func(ctx context.Context) error {
			within(t, 2*time.Second, "the lease's end", ctx.Done())
			require.ErrorIs(t, context.Cause(ctx), rlock.ErrLeaseExpired)
			return nil
		})
		require.True(t, ok)
		require.ErrorIs(t, err, rlock.ErrLeaseExpired)
		require.NotContains(t, err.Error(), "unlock", "Unlock's ErrNotHeld only repeats the lease's end")
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked)
	})
}

// A Do nested in another's fn: the outer hold's loss cancels the inner fn too, but the inner
// Do does not take it for a loss of its own lock.
func TestDo_nestedReportsEachLossOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		// Renewed every 250ms (the outer loss is told as soon as with 300ms at the default
		// fraction), each renewal with about 640ms to be confirmed: the inner hold must last
		// on a loaded machine (300ms left under 100ms, and a missed renewal lost it).
		c := b.client(t, rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25))
		outer, inner := c.Mutex(redistest.Name(t)+"-outer"), c.Mutex(redistest.Name(t)+"-inner")
		var innerErr error
		err := rlock.Do(bg, outer, func(ctx context.Context) error {
			innerErr = rlock.Do(ctx, inner, func(ctx context.Context) error {
				_, err := b.do(t, "DEL", outer.Key())
				require.NoError(t, err)
				within(t, 2*time.Second, "the outer loss", ctx.Done())
				require.ErrorIs(t, context.Cause(ctx), rlock.ErrLockLost)
				return nil
			})
			return nil
		})
		require.NoError(t, innerErr, "the inner lock was not lost")
		require.ErrorIs(t, err, rlock.ErrLockLost)
		require.Contains(t, err.Error(), outer.Name())
		require.NotContains(t, err.Error(), inner.Name())
	})
}

// causeList is a cancel cause whose type cannot be compared.
type causeList []error

func (l causeList) Error() string   { return "causes" }
func (l causeList) Unwrap() []error { return l }

func TestDo_incomparableCauseDoesNotPanic(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		m := b.client(t).Mutex(redistest.Name(t))
		ctx, cancel := context.WithCancelCause(bg)
		defer cancel(nil)
		err := rlock.Do(ctx, m, func(hctx context.Context) error {
			cancel(causeList{rlock.ErrLockLost})
			<-hctx.Done()
			return nil
		})
		require.ErrorIs(t, err, rlock.ErrLockLost)
		locked, lerr := m.IsLocked(bg)
		require.NoError(t, lerr)
		require.False(t, locked)
	})
}
