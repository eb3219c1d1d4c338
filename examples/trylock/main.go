// Command trylock shows Mutex.TryLock: a bounded wait that gives up with (false, nil) while
// another client holds the lock, and a fixed lease that ends by itself, never renewed,
// letting a waiting Lock in without anyone calling Unlock. Two relock Clients stand for two
// processes.
//
//	go run ./examples/trylock
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

const lockName = "examples:trylock:nightly-report"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trylock:", err)
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

	// Two Clients, as two processes would have.
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
	a, b := procA.Mutex(lockName), procB.Mutex(lockName)

	// 1. A bounded wait that runs out.
	fmt.Println("== 1. TryLock with a wait, while another client holds the lock")
	if err := a.Lock(ctx); err != nil {
		return err
	}
	fmt.Println("A: Lock -> held (watchdog mode)")
	start := time.Now()
	ok, err := b.TryLock(ctx, 500*time.Millisecond, 0)
	fmt.Printf("B: TryLock(wait 500ms) -> ok=%v err=%v after %v\n", ok, err, since(start))
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}
	ok, err = b.TryLock(ctx, 0, 0)
	fmt.Printf("B: TryLock(wait 0), a single attempt -> ok=%v err=%v\n", ok, err)
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}
	if err := a.Unlock(ctx); err != nil {
		return err
	}
	fmt.Println("A: Unlock")

	// 2. A fixed lease that runs out by itself.
	const lease = 1 * time.Second
	fmt.Printf("\n== 2. TryLock with a fixed lease of %v: it ends by itself\n", lease)
	ok, err = a.TryLock(ctx, 0, lease)
	if err != nil || !ok {
		return fmt.Errorf("holder A: TryLock with a lease: (%v, %v)", ok, err)
	}
	granted := time.Now()
	ttl, err := a.TTL(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("A: TryLock(wait 0, lease %v) -> ok=%v; TTL in Redis %v; A never calls Unlock in time\n",
		lease, ok, ttl.Round(10*time.Millisecond))

	fmt.Println("B: Lock (blocks while A's lease runs)")
	if err := b.Lock(ctx); err != nil {
		return err
	}
	waited := time.Since(granted)
	fmt.Printf("B: Lock returned %v after A's grant: A's lease ran out, nobody unlocked\n", waited.Round(10*time.Millisecond))
	if waited < lease-lease/10 {
		return fmt.Errorf("waiter B got the lock %v after A's grant, before A's %v lease ended", waited, lease)
	}
	tokA, tokB := "-", "-"
	if t, err := b.Token(ctx); err == nil {
		tokB = fmt.Sprint(t)
	}

	// A learns that its hold ended; it must not go on as if it held the lock.
	select {
	case <-a.Done(ctx):
	case <-time.After(time.Second):
		return fmt.Errorf("holder A: Done did not close")
	}
	fmt.Printf("A: Done closed; Err = %v\n", a.Err(ctx))
	if _, err := a.Token(ctx); err != nil {
		tokA = "none (" + err.Error() + ")"
	}
	fmt.Printf("fencing tokens: B holds %s; A has %s\n", tokB, tokA)

	// A's late Unlock does not touch B's lock.
	err = a.Unlock(ctx)
	fmt.Printf("A: late Unlock -> %v\n", err)
	fmt.Printf("   errors.Is(err, rlock.ErrNotHeld) = %v\n", errors.Is(err, rlock.ErrNotHeld))
	if !errors.Is(err, rlock.ErrNotHeld) {
		return fmt.Errorf("holder A: late Unlock returned %v, want ErrNotHeld", err)
	}
	n, err := b.HoldCount(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("B: still holds the lock, HoldCount=%d\n", n)
	if n != 1 {
		return fmt.Errorf("holder B lost its lock to A's late Unlock")
	}
	if err := b.Unlock(ctx); err != nil {
		return err
	}
	fmt.Println("B: Unlock")
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
