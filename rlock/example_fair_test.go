package rlock_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/rlock"
)

func ExampleFairMutex() {
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
	client, err := rlock.New(rc)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	ctx := context.Background()
	holder := client.FairMutex("printer")
	if err := holder.Lock(ctx); err != nil {
		panic(err)
	}
	served := make(chan string)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, name := range []string{"ann", "bob", "cid"} {
		m := client.FairMutex("printer") // in real life: other processes
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Lock(ctx); err != nil {
				panic(err)
			}
			served <- name
			_ = m.Unlock(ctx)
		}()
		// For the example only: wait until this waiter has its place in the queue before
		// the next one arrives.
		for {
			n, _ := rc.Do(ctx, rc.B().Zcard().Key(holder.Key()+":queue").Build()).AsInt64()
			if n == int64(i+1) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A single attempt does not jump the queue, even once the lock is free.
	_ = holder.Unlock(ctx)
	ok, _ := client.FairMutex("printer").TryLock(ctx, 0, 0)
	fmt.Println("newcomer's TryLock(0):", ok)
	for range 3 {
		fmt.Println("served:", <-served)
	}
	// Output:
	// newcomer's TryLock(0): false
	// served: ann
	// served: bob
	// served: cid
}
