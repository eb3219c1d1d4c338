package rlock

import (
	"context"
	"errors"
	"time"
)

// Holder is a lock that [Do] and [TryDo] can run a function under: a [Locker] that also
// blocks until held (Lock) and tells of the loss of the caller's hold (HoldContext, as
// [Mutex.HoldContext] does: a copy of ctx cancelled when the owner's current hold ends, with
// the reason as its cause). [Mutex], [FairMutex], [SpinMutex], the write side of an
// [RWMutex] and its read side ([RWMutex.RLocker]) satisfy it. A [MultiLock] does not: it has
// no single hold to watch (loss is per member).
type Holder interface {
	Locker
	Lock(ctx context.Context) error
	HoldContext(ctx context.Context) (context.Context, context.CancelFunc)
}

var (
	_ Holder = (*Mutex)(nil)
	_ Holder = (*FairMutex)(nil)
	_ Holder = (*SpinMutex)(nil)
	_ Holder = (*RWMutex)(nil)
	_ Holder = (*ReadLocker)(nil)
)

// Do runs fn while the caller's owner holds l, and always gives the hold back after.
//
// Do takes the lock with l.Lock(ctx) (blocking; the watchdog keeps it held). If that fails,
// Do returns Lock's error as it is and fn does not run. Otherwise fn runs with the hold's
// context (l.HoldContext(ctx)): it is cancelled when ctx ends, and when the hold is lost, then
// with a cause wrapping [ErrLockLost] ([context.Cause]), so that fn can stop its work at once.
// When fn returns, Do gives the hold back with l.Unlock, on ctx's values even when ctx has
// ended. It does so too when fn panics (or calls [runtime.Goexit]): the panic then goes on,
// unrecovered, once the hold is given back, and Unlock's error is dropped.
//
// Do returns nil when fn returned nil, the hold lasted until fn returned, and Unlock
// succeeded. Otherwise it returns, joined ([errors.Join]):
//  1. fn's error, as it is;
//  2. an error wrapping [ErrLockLost] when the hold was lost while fn ran, whether or not fn
//     noticed, even when fn returned nil: the work may have overlapped another holder's;
//  3. Unlock's error, except an [ErrNotHeld] that only repeats that loss.
//
// A nil l or fn is an error wrapping [ErrInvalid]; fn does not run. Do is reentrant as far
// as l is: under an owner that already holds l, it adds a hold and gives that one back.
func Do(ctx context.Context, l Holder, fn func(ctx context.Context) error) error {
	if err := checkDo(ctx, l, fn); err != nil {
		return err
	}
	if err := l.Lock(ctx); err != nil {
		return err
	}
	return runHeld(ctx, l, fn)
}

// TryDo is [Do] with l.TryLock(ctx, wait, lease) in place of l.Lock: wait bounds the wait for
// the lock (0 makes one attempt), and lease > 0 holds it for that fixed lease, never renewed
// (lease <= 0: watchdog mode, like Do).
//
// TryDo returns (false, nil) when wait ran out with the lock held by another: fn did not
// run. It returns (false, err) with TryLock's error when that failed: fn did not run either.
// Otherwise fn ran, and TryDo returns true and Do's error. With a fixed lease, the end of
// the lease while fn runs counts as a loss: fn's context is cancelled with a cause wrapping
// [ErrLeaseExpired], and so is the error returned (the work outlived the lease).
func TryDo(ctx context.Context, l Holder, wait, lease time.Duration, fn func(ctx context.Context) error) (bool, error) {
	if err := checkDo(ctx, l, fn); err != nil {
		return false, err
	}
	ok, err := l.TryLock(ctx, wait, lease)
	if !ok || err != nil {
		return false, err
	}
	return true, runHeld(ctx, l, fn)
}

// checkDo validates the arguments of Do and TryDo.
func checkDo(ctx context.Context, l Holder, fn func(context.Context) error) error {
	switch {
	case ctxError(ctx) != nil:
		return ctxError(ctx)
	case l == nil:
		return invalid("nil lock")
	case fn == nil:
		return invalid("nil function")
	}
	return nil
}

// runHeld runs fn under the hold l was just given, then gives it back (see Do).
func runHeld(ctx context.Context, l Holder, fn func(context.Context) error) (err error) {
	hctx, cancel := l.HoldContext(ctx)
	defer cancel()
	returned := false
	defer func() {
		if !returned {
			// fn panicked or called runtime.Goexit: give the hold back and let it go on.
			_ = l.Unlock(ctx)
		}
	}()
	ferr := fn(hctx)
	returned = true

	// The hold's end while fn ran (read before Unlock ends it on purpose). A cause that
	// hctx inherited from ctx is ctx's, not this hold's.
	var loss error
	if cause := context.Cause(hctx); cause != nil && (errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrLeaseExpired)) &&
		!(ctx.Err() != nil && identical(context.Cause(ctx), cause)) {
		loss = cause
		if name, ok := holderName(l); ok {
			loss = errorf("lock %q: %w", name, cause)
		}
	}
	uerr := l.Unlock(ctx)
	if loss != nil && errors.Is(uerr, ErrNotHeld) {
		uerr = nil // the loss, told again
	}
	return errors.Join(ferr, loss, uerr)
}

// holderName is the name of l's lock, when it tells it (every lock of this package does).
func holderName(l Holder) (string, bool) {
	if n, ok := l.(interface{ Name() string }); ok {
		return n.Name(), true
	}
	return "", false
}

// identical reports whether a and b are the same error value (false where their type cannot
// be compared, rather than a panic).
func identical(a, b error) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
