package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relock-go/relock/rlock"
)

func ExampleDo() {
	// A short lease, renewed every 200ms while held.
	client, done := exampleClient(rlock.WithWatchdogTimeout(300 * time.Millisecond)) // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	m := client.Mutex("invoice:42")
	err := rlock.Do(ctx, m, func(ctx context.Context) error {
		// The work, under ctx: it is cancelled at once if the lock is lost.
		fmt.Println("locked:", m.Err(ctx) == nil)
		return nil
	})
	fmt.Println("done:", err)
	locked, _ := m.IsLocked(ctx)
	fmt.Println("still locked:", locked)

	// A loss while the work runs is reported even when the work does not look.
	err = rlock.Do(ctx, m, func(ctx context.Context) error {
		_, _ = client.Mutex("invoice:42").ForceUnlock(ctx) // someone frees it behind our back
		<-ctx.Done()
		fmt.Println("work cancelled, lock lost:", errors.Is(context.Cause(ctx), rlock.ErrLockLost))
		return nil
	})
	fmt.Println("Do reports the loss:", errors.Is(err, rlock.ErrLockLost))
	// Output:
	// locked: true
	// done: <nil>
	// still locked: false
	// work cancelled, lock lost: true
	// Do reports the loss: true
}

func ExampleTryDo() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	holder := client.Mutex("nightly-job")
	if err := holder.Lock(ctx); err != nil {
		panic(err)
	}
	job := func(ctx context.Context) error { fmt.Println("job ran"); return nil }

	// Another owner: wait at most 20ms, then skip the job.
	ran, err := rlock.TryDo(ctx, client.Mutex("nightly-job"), 20*time.Millisecond, 0, job)
	fmt.Println("while held:", ran, err)

	_ = holder.Unlock(ctx)
	// A fixed lease of 10s: the job's context ends with it if the job runs longer.
	ran, err = rlock.TryDo(ctx, client.Mutex("nightly-job"), 0, 10*time.Second, job)
	fmt.Println("once free:", ran, err)
	// Output:
	// while held: false <nil>
	// job ran
	// once free: true <nil>
}
