package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/rlock"
)

// The examples run on an embedded miniredis. On a real server, make the rueidis client as
// usual (rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}}); miniredis needs
// client-side caching and cluster discovery turned off.

func ExampleMutex_Lock() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, AlwaysRESP2: true, ForceSingleClient: true})
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	client, err := rlock.New(rc) // one per process, shared
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	m := client.Mutex("report")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	// The fencing token rises with every grant of the lock: give it to the resource you
	// protect, and have it refuse lower tokens than one it has seen.
	token, _ := m.Token(ctx)
	fmt.Println("locked")
	// ... the work, passing token along ...
	if err := m.Unlock(ctx); err != nil {
		panic(err)
	}
	locked, _ := m.IsLocked(ctx)
	fmt.Println("still locked:", locked)

	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	next, _ := m.Token(ctx)
	fmt.Println("the next grant's token is higher:", next > token)
	_ = m.Unlock(ctx)
	// Output:
	// locked
	// still locked: false
	// the next grant's token is higher: true
}

func ExampleMutex_TryLock() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	holder, other := client.Mutex("job"), client.Mutex("job") // two handles: two owners
	if err := holder.Lock(ctx); err != nil {
		panic(err)
	}
	// Wait at most 50ms; lease 0: held in watchdog mode if granted.
	ok, err := other.TryLock(ctx, 50*time.Millisecond, 0)
	fmt.Println("while held:", ok, err)

	if err := holder.Unlock(ctx); err != nil {
		panic(err)
	}
	// Lease 10s: a fixed lease, never renewed; the lock frees by itself when it ends.
	ok, err = other.TryLock(ctx, 50*time.Millisecond, 10*time.Second)
	fmt.Println("once free:", ok, err)
	if ok {
		_ = other.Unlock(ctx)
	}
	// Output:
	// while held: false <nil>
	// once free: true <nil>
}

func ExampleWithOwner() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	// The request's context carries its owner (use client.WithNewOwner for a fresh one).
	// Handles made down the call chain re-enter under it instead of blocking each other.
	ctx := rlock.WithOwner(context.Background(), "request-42")
	outer, inner := client.Mutex("order:7"), client.Mutex("order:7")
	if err := outer.Lock(ctx); err != nil {
		panic(err)
	}
	if err := inner.Lock(ctx); err != nil { // re-enters
		panic(err)
	}
	n, _ := inner.HoldCount(ctx)
	fmt.Println("holds:", n)

	// A context without that owner is another owner.
	ok, _ := inner.TryLock(context.Background(), 0, 0)
	fmt.Println("another owner got it:", ok)

	_ = inner.Unlock(ctx)
	_ = outer.Unlock(ctx)
	locked, _ := outer.IsLocked(ctx)
	fmt.Println("locked after both unlocks:", locked)
	// Output:
	// holds: 2
	// another owner got it: false
	// locked after both unlocks: false
}

func ExampleMutex_HoldContext() {
	// A short lease, renewed every 200ms while held.
	client, done := exampleClient(rlock.WithWatchdogTimeout(300 * time.Millisecond))
	defer done()

	ctx := context.Background()
	m := client.Mutex("import")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	// Run the guarded work under hctx: it is cancelled as soon as the lock is lost.
	hctx, cancel := m.HoldContext(ctx)
	defer cancel()

	// Someone frees the lock behind the holder's back; the next renewal finds it gone.
	_, _ = client.Mutex("import").ForceUnlock(ctx)

	<-hctx.Done()
	fmt.Println("lost:", errors.Is(context.Cause(hctx), rlock.ErrLockLost))
	// The owner must still give back its hold before it may lock again.
	err := m.Unlock(ctx)
	fmt.Println("unlock: not held:", errors.Is(err, rlock.ErrNotHeld))
	// Output:
	// lost: true
	// unlock: not held: true
}

// exampleClient makes a Client on an embedded miniredis, as ExampleMutex_Lock does, and a
// func that closes everything.
func exampleClient(opts ...rlock.Option) (*rlock.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, AlwaysRESP2: true, ForceSingleClient: true})
	if err != nil {
		mr.Close()
		panic(err)
	}
	client, err := rlock.New(rc, opts...)
	if err != nil {
		rc.Close()
		mr.Close()
		panic(err)
	}
	return client, func() { _ = client.Close(); rc.Close(); mr.Close() }
}

// Dial makes the rueidis client itself, configured for locks, and closes it with the Client.
func ExampleDial() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	// On a real server: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}}.
	client, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		AlwaysRESP2: true, ForceSingleClient: true}) // (miniredis only)
	if err != nil {
		panic(err)
	}
	defer client.Close() // closes the rueidis client too

	ctx := context.Background()
	m := client.Mutex("report")
	if err := m.Lock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("locked")
	_ = m.Unlock(ctx)
	// Output:
	// locked
}

func ExampleMutex_LockLease() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	m := client.Mutex("report")
	// Block until held, then hold for 100ms, never renewed: the lock frees by itself then,
	// even if Unlock is never called.
	if err := m.LockLease(ctx, 100*time.Millisecond); err != nil {
		panic(err)
	}
	fmt.Println("locked")
	hctx, cancel := m.HoldContext(ctx)
	defer cancel()
	<-hctx.Done()
	fmt.Println("lease ran out:", errors.Is(context.Cause(hctx), rlock.ErrLeaseExpired))
	// Err says so too, until the owner locks again or unlocks; it is ErrNotHeld as well.
	err := m.Err(ctx)
	fmt.Println("Err:", errors.Is(err, rlock.ErrLeaseExpired), errors.Is(err, rlock.ErrNotHeld))
	fmt.Println("Unlock:", errors.Is(m.Unlock(ctx), rlock.ErrLeaseExpired))
	// Output:
	// locked
	// lease ran out: true
	// Err: true true
	// Unlock: true
}

// A handle that no Client made (a zero value, a nil pointer, or one from a nil Client) is
// no handle: its methods return ErrInvalid instead of panicking.
func ExampleMutex_invalid() {
	var zero rlock.Mutex
	var client *rlock.Client // never made with New or Dial
	ctx := context.Background()
	fmt.Println(errors.Is(zero.Lock(ctx), rlock.ErrInvalid))
	fmt.Println(errors.Is(client.Mutex("x").Lock(ctx), rlock.ErrInvalid))
	fmt.Println(client.Mutex("x").Lock(ctx))
	// Output:
	// true
	// true
	// rlock: invalid argument: nil Client: make one with New or Dial
}
