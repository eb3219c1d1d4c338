// Command permits shows rlock.PermitSemaphore, a semaphore whose permits carry a lease: a
// process that takes a permit and dies without giving it back loses it when its lease ends,
// and a waiting process gets it then, with nobody calling Release; the dead process's late
// Release is refused with ErrNotHeld. A live permit's lease can be extended.
//
//	go run ./examples/permits
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const name = "examples:permits:gpu"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "permits:", err)
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
	a, b := procA.PermitSemaphore(name), procB.PermitSemaphore(name)
	if _, err := a.Delete(ctx); err != nil { // a clean start on a real server
		return err
	}
	if _, err := a.TrySetPermits(ctx, 1); err != nil {
		return err
	}
	fmt.Println("one permit")

	// 1. A takes the permit for 1s and dies without releasing it.
	const lease = time.Second
	fmt.Printf("\n== 1. A holder that dies: its permit comes back after its lease (%v)\n", lease)
	dead, err := a.Acquire(ctx, lease)
	if err != nil {
		return err
	}
	granted := time.Now()
	fmt.Printf("A: Acquire(lease %v) -> permit %s; then A crashes (it never calls Release)\n", lease, dead.ID)
	_ = procA.Close()

	fmt.Println("B: Acquire (blocks while A's lease runs)")
	mine, err := b.Acquire(ctx, 2*time.Second)
	if err != nil {
		return err
	}
	waited := time.Since(granted)
	fmt.Printf("B: got a permit %v after A's grant: A's lease ran out, nobody released it\n", waited.Round(10*time.Millisecond))
	if waited < lease-lease/10 {
		return fmt.Errorf("waiter B got the permit before A's lease ended")
	}

	// A's late release (by id, from any process) is refused: the permit may be B's by now.
	err = b.Release(ctx, dead.ID)
	fmt.Printf("late release of A's permit -> %v\n", err)
	fmt.Printf("   errors.Is(err, rlock.ErrNotHeld) = %v\n", errors.Is(err, rlock.ErrNotHeld))
	if !errors.Is(err, rlock.ErrNotHeld) {
		return fmt.Errorf("late release returned %v, want ErrNotHeld", err)
	}
	held, err := b.AcquiredPermits(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B: still holds its permit (acquired permits = %d)\n", held)
	if held != 1 {
		return fmt.Errorf("acquired permits = %d after the late release, want 1 (B's)", held)
	}

	// 2. A live permit's lease can be extended; an expired one cannot.
	fmt.Println("\n== 2. Extend")
	if err := b.Extend(ctx, mine.ID, time.Minute); err != nil {
		return err
	}
	ttl, err := b.TTL(ctx, mine.ID)
	if err != nil {
		return err
	}
	fmt.Printf("B: Extend(1m) -> lease left %v\n", ttl.Round(time.Second))
	err = b.Extend(ctx, dead.ID, time.Minute)
	fmt.Printf("Extend of A's expired permit -> ErrNotHeld: %v\n", errors.Is(err, rlock.ErrNotHeld))
	if !errors.Is(err, rlock.ErrNotHeld) {
		return fmt.Errorf("extend of an expired permit returned %v", err)
	}
	if err := b.Release(ctx, mine.ID); err != nil {
		return err
	}
	n, err := b.AvailablePermits(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B: Release -> available = %d\n", n)
	if n != 1 {
		return fmt.Errorf("available = %d after B's Release, want 1", n)
	}
	_, err = b.Delete(ctx)
	return err
}
