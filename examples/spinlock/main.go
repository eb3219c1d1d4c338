// Command spinlock shows SpinMutex: the same reentrant lock as Mutex, whose waiters poll with
// jittered exponential backoff (2ms doubling to 128ms) instead of listening on Redis pub/sub,
// for deployments where pub/sub is costly (a large Redis Cluster broadcasts every PUBLISH)
// or unavailable (some proxies). Two relock Clients stand for two processes.
//
//	go run ./examples/spinlock
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const lockName = "examples:spinlock:cache-rebuild"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "spinlock:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	// Against your own Redis, a process makes its relock Client with one line:
	//
	//	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	//
	// Here connect.Options gives the option for $REDIS_URL or $REDIS_ADDR, or starts an
	// embedded miniredis and gives its option.
	opt, stop, err := connect.Options()
	if err != nil {
		return err
	}
	defer stop() // runs last: after every Client's Close
	fmt.Println("using", connect.Describe())

	procA, err := rlock.Dial(opt)
	if err != nil {
		return err
	}
	defer procA.Close()
	procB, err := rlock.Dial(opt)
	if err != nil {
		return err
	}
	defer procB.Close()
	a, b := procA.SpinMutex(lockName), procB.SpinMutex(lockName)

	fmt.Println("== 1. A holds the spin lock; B's bounded wait runs out")
	if err := a.Lock(ctx); err != nil {
		return err
	}
	if err := a.Lock(ctx); err != nil { // reentrant, as a Mutex
		return err
	}
	holds, err := a.HoldCount(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("A: Lock, Lock -> held, HoldCount=%d\n", holds)
	if holds != 2 {
		return fmt.Errorf("HoldCount after two Locks is %d, want 2", holds)
	}
	start := time.Now()
	ok, err := b.TryLock(ctx, 300*time.Millisecond, 0)
	fmt.Printf("B: TryLock(wait 300ms) -> ok=%v err=%v after %v\n", ok, err, since(start))
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}

	fmt.Println("\n== 2. B spins in Lock; A's last Unlock lets it in at its next attempt")
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx) }()
	time.Sleep(200 * time.Millisecond)    // A's work; B polls meanwhile, backing off
	if err := a.Unlock(ctx); err != nil { // A's first hold of two: the lock stays A's
		return err
	}
	time.Sleep(200 * time.Millisecond) // B polls on
	select {
	case err := <-got:
		return fmt.Errorf("waiter B: Lock returned (%v) while A still held the lock once", err)
	default:
	}
	released := time.Now()
	if err := a.Unlock(ctx); err != nil {
		return err
	}
	if err := <-got; err != nil {
		return err
	}
	fmt.Printf("A: Unlock (B still spins: A holds it once more), Unlock; B: Lock returned %v after the release (at most one pause of <=128ms)\n", since(released))
	token, err := b.Token(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B: holds it, fencing token %d\n", token)

	fmt.Println("\n== 3. A SpinMutex and a Mutex of one name are one lock")
	ok, err = procA.Mutex(lockName).TryLock(ctx, 0, 0)
	fmt.Printf("A: Mutex(%q).TryLock -> ok=%v err=%v\n", lockName, ok, err)
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}
	if err := b.Unlock(ctx); err != nil {
		return err
	}
	locked, err := b.IsLocked(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B: Unlock -> locked=%v\n", locked)
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
