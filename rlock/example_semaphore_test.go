package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relock-go/relock/rlock"
)

func ExampleSemaphore() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	conns := client.Semaphore("db:connections")
	// The first process to get here sets the count; the others find it set.
	if _, err := conns.TrySetPermits(ctx, 3); err != nil {
		panic(err)
	}

	// A batch job takes two connections at once: all or nothing, never one while it
	// waits for the other.
	if err := conns.Acquire(ctx, 2); err != nil {
		panic(err)
	}
	n, _ := conns.AvailablePermits(ctx)
	fmt.Println("available while the batch runs:", n)
	ok, _ := conns.TryAcquire(ctx, 2, 0) // a second batch does not fit
	fmt.Println("second batch got in:", ok)

	// Permits are not owned: give them back in every case, or they are gone for good.
	if err := conns.Release(ctx, 2); err != nil {
		panic(err)
	}
	n, _ = conns.AvailablePermits(ctx)
	fmt.Println("available after release:", n)
	// Output:
	// available while the batch runs: 1
	// second batch got in: false
	// available after release: 3
}

func ExamplePermitSemaphore() {
	client, done := exampleClient()
	defer done()

	ctx := context.Background()
	exports := client.PermitSemaphore("exports")
	if _, err := exports.TrySetPermits(ctx, 1); err != nil {
		panic(err)
	}

	// A worker takes the only permit for 100ms, then dies without releasing it.
	dead, err := exports.Acquire(ctx, 100*time.Millisecond)
	if err != nil {
		panic(err)
	}

	// Another worker waits: the permit comes back when the lease ends, no message needed.
	permit, ok, err := exports.TryAcquire(ctx, 5*time.Second, time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("got the expired permit:", ok)

	// The dead worker's late release is refused: the permit is someone else's now.
	err = exports.Release(ctx, dead.ID)
	fmt.Println("late release refused:", errors.Is(err, rlock.ErrNotHeld))

	// A live permit can be extended, then released.
	if err := exports.Extend(ctx, permit.ID, 2*time.Minute); err != nil {
		panic(err)
	}
	if err := exports.Release(ctx, permit.ID); err != nil {
		panic(err)
	}
	n, _ := exports.AvailablePermits(ctx)
	fmt.Println("available:", n)
	// Output:
	// got the expired permit: true
	// late release refused: true
	// available: 1
}
