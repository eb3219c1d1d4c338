package rlock_test

import (
	"context"
	"fmt"
	"sync"
)

func ExampleCountDownLatch() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	latch := client.CountDownLatch("batch:7")
	// Set the count before anyone awaits: a latch that does not exist is open.
	if ok, err := latch.TrySetCount(ctx, 3); err != nil || !ok {
		panic(fmt.Sprint(ok, err))
	}

	var wg sync.WaitGroup
	for part := 0; part < 3; part++ {
		wg.Add(1)
		go func() { // workers, possibly in other processes, with handles of their own
			defer wg.Done()
			// ... this worker's part ...
			if err := client.CountDownLatch("batch:7").CountDown(ctx); err != nil {
				panic(err)
			}
		}()
	}
	// Blocks until the third CountDown; woken through pub/sub.
	if err := latch.Await(ctx); err != nil {
		panic(err)
	}
	n, _ := latch.Count(ctx)
	fmt.Println("every part done, count:", n)
	wg.Wait()
	// Output:
	// every part done, count: 0
}
