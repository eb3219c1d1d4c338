package rlock

import (
	"context"
	"time"
)

// The kinds of lock that embed *Mutex ([FairMutex], [SpinMutex]) define its methods again,
// each calling the Mutex's, so that a nil handle (or a zero one, whose *Mutex is nil) returns
// an error wrapping [ErrInvalid] like a Mutex's, rather than panicking on the way to the
// embedded *Mutex.

// mutex is the embedded *Mutex, nil for a nil handle.
func (f *FairMutex) mutex() *Mutex {
	if f == nil {
		return nil
	}
	return f.Mutex
}

// Name is [Mutex.Name].
func (f *FairMutex) Name() string { return f.mutex().Name() }

// Key is [Mutex.Key].
func (f *FairMutex) Key() string { return f.mutex().Key() }

// Lock is [Mutex.Lock].
func (f *FairMutex) Lock(ctx context.Context) error { return f.mutex().Lock(ctx) }

// LockLease is [Mutex.LockLease].
func (f *FairMutex) LockLease(ctx context.Context, lease time.Duration) error {
	return f.mutex().LockLease(ctx, lease)
}

// TryLock is [Mutex.TryLock].
func (f *FairMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return f.mutex().TryLock(ctx, wait, lease)
}

// Unlock is [Mutex.Unlock].
func (f *FairMutex) Unlock(ctx context.Context) error { return f.mutex().Unlock(ctx) }

// ForceUnlock is [Mutex.ForceUnlock].
func (f *FairMutex) ForceUnlock(ctx context.Context) (bool, error) { return f.mutex().ForceUnlock(ctx) }

// IsLocked is [Mutex.IsLocked].
func (f *FairMutex) IsLocked(ctx context.Context) (bool, error) { return f.mutex().IsLocked(ctx) }

// HoldCount is [Mutex.HoldCount].
func (f *FairMutex) HoldCount(ctx context.Context) (int, error) { return f.mutex().HoldCount(ctx) }

// TTL is [Mutex.TTL].
func (f *FairMutex) TTL(ctx context.Context) (time.Duration, error) { return f.mutex().TTL(ctx) }

// Done is [Mutex.Done].
func (f *FairMutex) Done(ctx context.Context) <-chan struct{} { return f.mutex().Done(ctx) }

// Err is [Mutex.Err].
func (f *FairMutex) Err(ctx context.Context) error { return f.mutex().Err(ctx) }

// Token is [Mutex.Token].
func (f *FairMutex) Token(ctx context.Context) (int64, error) { return f.mutex().Token(ctx) }

// HoldContext is [Mutex.HoldContext].
func (f *FairMutex) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return f.mutex().HoldContext(ctx)
}

// mutex is the embedded *Mutex, nil for a nil handle.
func (s *SpinMutex) mutex() *Mutex {
	if s == nil {
		return nil
	}
	return s.Mutex
}

// Name is [Mutex.Name].
func (s *SpinMutex) Name() string { return s.mutex().Name() }

// Key is [Mutex.Key].
func (s *SpinMutex) Key() string { return s.mutex().Key() }

// Lock is [Mutex.Lock].
func (s *SpinMutex) Lock(ctx context.Context) error { return s.mutex().Lock(ctx) }

// LockLease is [Mutex.LockLease].
func (s *SpinMutex) LockLease(ctx context.Context, lease time.Duration) error {
	return s.mutex().LockLease(ctx, lease)
}

// TryLock is [Mutex.TryLock].
func (s *SpinMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return s.mutex().TryLock(ctx, wait, lease)
}

// Unlock is [Mutex.Unlock].
func (s *SpinMutex) Unlock(ctx context.Context) error { return s.mutex().Unlock(ctx) }

// ForceUnlock is [Mutex.ForceUnlock].
func (s *SpinMutex) ForceUnlock(ctx context.Context) (bool, error) { return s.mutex().ForceUnlock(ctx) }

// IsLocked is [Mutex.IsLocked].
func (s *SpinMutex) IsLocked(ctx context.Context) (bool, error) { return s.mutex().IsLocked(ctx) }

// HoldCount is [Mutex.HoldCount].
func (s *SpinMutex) HoldCount(ctx context.Context) (int, error) { return s.mutex().HoldCount(ctx) }

// TTL is [Mutex.TTL].
func (s *SpinMutex) TTL(ctx context.Context) (time.Duration, error) { return s.mutex().TTL(ctx) }

// Done is [Mutex.Done].
func (s *SpinMutex) Done(ctx context.Context) <-chan struct{} { return s.mutex().Done(ctx) }

// Err is [Mutex.Err].
func (s *SpinMutex) Err(ctx context.Context) error { return s.mutex().Err(ctx) }

// Token is [Mutex.Token].
func (s *SpinMutex) Token(ctx context.Context) (int64, error) { return s.mutex().Token(ctx) }

// HoldContext is [Mutex.HoldContext].
func (s *SpinMutex) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.mutex().HoldContext(ctx)
}
