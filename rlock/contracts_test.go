package rlock_test

import (
	"context"
	"time"

	"github.com/relock-go/relock/rlock"
)

// contractLock is what the reentrant lock kinds (Mutex, FairMutex, SpinMutex, the write side
// of an RWMutex and its read side, ReadLocker) share: the promises their godoc makes are walked
// across all of them by the TestContracts_* tests.
type contractLock interface {
	Lock(ctx context.Context) error
	LockLease(ctx context.Context, lease time.Duration) error
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	Done(ctx context.Context) <-chan struct{}
	Err(ctx context.Context) error
	HoldContext(ctx context.Context) (context.Context, context.CancelFunc)
}

// contractKind makes a handle of one kind on name, with how to force it free and count the
// caller's holds of that kind (as Redis sees them).
type contractKind struct {
	name  string
	make  func(c *rlock.Client, name string) contractLock
	force func(c *rlock.Client, name string) (bool, error)
	count func(l contractLock, ctx context.Context) (int, error)
}

var contractKinds = []contractKind{
	{
		name:  "Mutex",
		make:  func(c *rlock.Client, n string) contractLock { return c.Mutex(n) },
		force: func(c *rlock.Client, n string) (bool, error) { return c.Mutex(n).ForceUnlock(bg) },
		count: func(l contractLock, ctx context.Context) (int, error) { return l.(*rlock.Mutex).HoldCount(ctx) },
	},
	{
		name:  "FairMutex",
		make:  func(c *rlock.Client, n string) contractLock { return c.FairMutex(n) },
		force: func(c *rlock.Client, n string) (bool, error) { return c.FairMutex(n).ForceUnlock(bg) },
		count: func(l contractLock, ctx context.Context) (int, error) { return l.(*rlock.FairMutex).HoldCount(ctx) },
	},
	{
		name:  "SpinMutex",
		make:  func(c *rlock.Client, n string) contractLock { return c.SpinMutex(n) },
		force: func(c *rlock.Client, n string) (bool, error) { return c.SpinMutex(n).ForceUnlock(bg) },
		count: func(l contractLock, ctx context.Context) (int, error) { return l.(*rlock.SpinMutex).HoldCount(ctx) },
	},
	{
		name:  "RWMutex.write",
		make:  func(c *rlock.Client, n string) contractLock { return c.RWMutex(n) },
		force: func(c *rlock.Client, n string) (bool, error) { return c.RWMutex(n).ForceUnlock(bg) },
		count: func(l contractLock, ctx context.Context) (int, error) { return l.(*rlock.RWMutex).WriteHoldCount(ctx) },
	},
	{
		name:  "RWMutex.read",
		make:  func(c *rlock.Client, n string) contractLock { return c.RWMutex(n).RLocker() },
		force: func(c *rlock.Client, n string) (bool, error) { return c.RWMutex(n).ForceUnlock(bg) },
		count: func(l contractLock, ctx context.Context) (int, error) { return l.(*rlock.ReadLocker).HoldCount(ctx) },
	},
}
