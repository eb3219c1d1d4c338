// Command semaphore shows rlock.Semaphore, a counting semaphore shared by processes: workers
// on two Clients (two processes) share two permits and never run more than two at once; an
// Acquire of two permits waits until both are free, holding none meanwhile; a bounded
// TryAcquire gives up; DrainPermits takes what is left.
//
//	go run ./examples/semaphore
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const name = "examples:semaphore:exporters"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "semaphore:", err)
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
	a, b := procA.Semaphore(name), procB.Semaphore(name)
	if _, err := a.Delete(ctx); err != nil { // a clean start on a real server
		return err
	}

	// 1. Two permits, six workers: at most two run at once.
	fmt.Println("== 1. six workers on two processes share two permits")
	ok, err := a.TrySetPermits(ctx, 2)
	if err != nil {
		return err
	}
	fmt.Printf("A: TrySetPermits(2) -> %v\n", ok)
	if !ok {
		return fmt.Errorf("TrySetPermits on a new semaphore did not set it")
	}
	ok, err = b.TrySetPermits(ctx, 5)
	if err != nil {
		return err
	}
	fmt.Printf("B: TrySetPermits(5) -> %v (already set: only the first call sets)\n", ok)
	if ok {
		return fmt.Errorf("a second TrySetPermits set the count again")
	}
	var running, most atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for w := 0; w < 6; w++ {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func(w int, s *rlock.Semaphore) {
			defer wg.Done()
			if err := s.Acquire(ctx, 1); err != nil {
				errs <- err
				return
			}
			now := running.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			time.Sleep(100 * time.Millisecond) // the export
			running.Add(-1)
			if err := s.Release(ctx, 1); err != nil {
				errs <- err
			}
		}(w, s)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	fmt.Printf("all six done; at most %d ran at once\n", most.Load())
	if most.Load() > 2 {
		return fmt.Errorf("more than two workers ran at once")
	}

	// 2. Acquire(2) takes both permits at once, or waits holding none.
	fmt.Println("\n== 2. Acquire(2) waits until two permits are free")
	if err := a.Acquire(ctx, 2); err != nil {
		return err
	}
	fmt.Println("A: Acquire(2) -> both permits")
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 2) }()
	time.Sleep(100 * time.Millisecond)
	if err := a.Release(ctx, 1); err != nil {
		return err
	}
	fmt.Println("A: Release(1)")
	time.Sleep(100 * time.Millisecond)
	n, err := a.AvailablePermits(ctx)
	if err != nil {
		return err
	}
	select {
	case err := <-got:
		return fmt.Errorf("waiter B: Acquire(2) returned (%v) with one permit free", err)
	default:
	}
	fmt.Printf("B: still waiting; available = %d (B holds no partial count)\n", n)
	if n != 1 {
		return fmt.Errorf("available = %d while B waits for two, want 1", n)
	}
	start := time.Now()
	if err := a.Release(ctx, 1); err != nil {
		return err
	}
	fmt.Println("A: Release(1)")
	if err := <-got; err != nil {
		return err
	}
	fmt.Printf("B: Acquire(2) returned %v after that release, woken by it (pub/sub)\n", time.Since(start).Round(100*time.Microsecond))

	// 3. A bounded wait gives up with (false, nil).
	fmt.Println("\n== 3. TryAcquire with a wait bound")
	start = time.Now()
	ok, err = a.TryAcquire(ctx, 1, 300*time.Millisecond)
	fmt.Printf("A: TryAcquire(1, wait 300ms) -> ok=%v err=%v after %v\n", ok, err, since(start))
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}
	if err := b.Release(ctx, 2); err != nil {
		return err
	}
	fmt.Println("B: Release(2)")

	// 4. Release may add beyond the first count; DrainPermits takes what is there.
	fmt.Println("\n== 4. permits are a count, not holds")
	if err := a.Release(ctx, 3); err != nil {
		return err
	}
	if n, err = a.AvailablePermits(ctx); err != nil {
		return err
	}
	fmt.Printf("A: Release(3) without acquiring -> available = %d\n", n)
	drained, err := b.DrainPermits(ctx)
	if err != nil {
		return err
	}
	if n, err = a.AvailablePermits(ctx); err != nil {
		return err
	}
	fmt.Printf("B: DrainPermits -> took %d, available = %d\n", drained, n)
	if drained != 5 || n != 0 {
		return fmt.Errorf("drained %d, left %d: want 5 and 0", drained, n)
	}
	_, err = a.Delete(ctx)
	return err
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
