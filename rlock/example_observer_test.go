package rlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/relock-go/relock/rlock"
)

// An Observer is a struct of optional hooks: set those you need. They run on the goroutine
// that does the work, so an Observer that feeds metrics only counts and returns.
func ExampleWithObserver() {
	obs := &rlock.Observer{
		AcquireDone: func(_ context.Context, e rlock.AcquireDoneInfo) {
			fmt.Printf("%s %q: %s (attempts %d, re-entered %v)\n", e.Kind, e.Name, e.Outcome, e.Attempts, e.Reentered)
		},
		HoldEnd: func(e rlock.HoldEndInfo) {
			fmt.Printf("%s %q: tenure ended by %s\n", e.Kind, e.Name, e.Cause)
		},
		ReleaseDone: func(_ context.Context, e rlock.ReleaseDoneInfo) {
			fmt.Printf("%s %q: released (freed %v)\n", e.Kind, e.Name, e.Freed)
		},
	}
	client, done := exampleClient(rlock.WithObserver(obs)) // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	m := client.Mutex("report")
	_ = m.Lock(ctx)
	_ = m.Lock(ctx) // a re-entry: the same tenure
	ok, _ := client.Mutex("report").TryLock(ctx, 0, 0)
	fmt.Println("another owner got it:", ok)
	_ = m.Unlock(ctx)
	_ = m.Unlock(ctx)
	// Output:
	// mutex "report": acquired (attempts 1, re-entered false)
	// mutex "report": acquired (attempts 1, re-entered true)
	// mutex "report": busy (attempts 1, re-entered false)
	// another owner got it: false
	// mutex "report": released (freed false)
	// mutex "report": tenure ended by unlock
	// mutex "report": released (freed true)
}

// WithLogger logs what goes wrong and what the Client does on its own; a Lock and an Unlock
// log nothing. Here a fixed lease runs out before Unlock.
func ExampleWithLogger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug, // a lease that runs out is logged at Debug
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "token", "held": // they change from run to run
				return slog.Attr{}
			}
			return a
		},
	}))
	client, done := exampleClient(rlock.WithLogger(logger))

	// Logged as owner=#9c3d44d9: 32-bit FNV-1a of "u:job-7", never the id itself.
	ctx := rlock.WithOwner(context.Background(), "job-7")
	m := client.Mutex("nightly-report")
	_ = m.Lock(ctx)
	_ = m.Unlock(ctx) // nothing logged

	// A lease long enough that no late grant is given back (and logged) on a loaded machine.
	_ = m.LockLease(ctx, 500*time.Millisecond)
	<-m.Done(ctx) // the lease ran out
	err := m.Unlock(ctx)
	// The end is logged by the watchdog's goroutine just after Done closes; Close waits for it.
	done()
	fmt.Println("unlock:", err)
	// Output:
	// level=DEBUG msg="relock: lease expired" kind=mutex name=nightly-report owner=#9c3d44d9 cause=lease_expired error="rlock: not held: its fixed lease ran out"
	// unlock: rlock: unlock "nightly-report": not held: its fixed lease ran out
}
