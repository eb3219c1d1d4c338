// Command latch shows CountDownLatch: a coordinator sets a count of three, three workers
// (each on its own relock Client, as separate processes would be) count it down when their
// part is done, and two waiters blocked in Await are released together by the last
// count-down, woken through pub/sub. Await on a latch that does not exist returns at once.
//
//	go run ./examples/latch
package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const latchName = "examples:latch:nightly-import"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "latch:", err)
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

	coordinator, err := rlock.Dial(opt)
	if err != nil {
		return err
	}
	defer coordinator.Close()
	latch := coordinator.CountDownLatch(latchName)
	// A leftover from an earlier run on a real server goes first.
	if _, err := latch.Delete(ctx); err != nil {
		return err
	}

	// 1. A latch that does not exist is open.
	start := time.Now()
	if err := latch.Await(ctx); err != nil {
		return err
	}
	fmt.Printf("== 1. Await before the count is set returns at once (%v): set it first\n", since(start))

	// 2. Set the count, once.
	const parts = 3
	ok, err := latch.TrySetCount(ctx, parts)
	if err != nil {
		return err
	}
	again, err := latch.TrySetCount(ctx, 10)
	if err != nil {
		return err
	}
	n, err := latch.Count(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("\n== 2. TrySetCount(%d) -> %v; a second TrySetCount(10) -> %v; Count = %d\n", parts, ok, again, n)
	if !ok || again || n != parts {
		return fmt.Errorf("unexpected set results")
	}

	// 3. Two waiters block until the count reaches zero.
	fmt.Println("\n== 3. Two waiters Await; three workers count down")
	start = time.Now()
	type release struct {
		who string
		at  time.Time
		err error
	}
	var wg sync.WaitGroup
	released := make(chan release, 2)
	for _, who := range []string{"waiter-1", "waiter-2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := latch.Await(ctx)
			released <- release{who, time.Now(), err}
		}()
	}
	var last time.Time
	for i := 1; i <= parts; i++ {
		worker, err := rlock.Dial(opt) // a worker process of its own
		if err != nil {
			return err
		}
		time.Sleep(150 * time.Millisecond) // the worker's part of the job
		last = time.Now()
		if err := worker.CountDownLatch(latchName).CountDown(ctx); err != nil {
			worker.Close()
			return err
		}
		left, _ := latch.Count(ctx)
		fmt.Printf("worker-%d: CountDown at %v -> count %d\n", i, since(start), left)
		worker.Close()
	}
	wg.Wait()
	close(released)
	for r := range released {
		if r.err != nil {
			return fmt.Errorf("%s: %w", r.who, r.err)
		}
		if r.at.Before(last) {
			return fmt.Errorf("%s was released before the last count-down", r.who)
		}
		fmt.Printf("%s: Await returned at %v, %v after the last count-down\n",
			r.who, r.at.Sub(start).Round(10*time.Millisecond), r.at.Sub(last).Round(time.Millisecond))
	}

	// 4. At zero the latch is gone; counting down further changes nothing.
	if err := latch.CountDown(ctx); err != nil {
		return err
	}
	n, err = latch.Count(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("\n== 4. One more CountDown on the opened latch -> Count = %d\n", n)
	if n != 0 {
		return fmt.Errorf("count went below zero")
	}
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
