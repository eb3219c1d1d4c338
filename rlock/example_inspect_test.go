package rlock_test

import (
	"context"
	"fmt"
	"slices"

	"github.com/relock-go/relock/rlock"
)

// Inspect reads what Redis knows of a name, whoever made it: here a lock this process
// holds twice, and a semaphore. List finds the names by SCAN.
func ExampleClient_Inspect() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()
	ctx := context.Background()

	m := client.Mutex("invoice:42")
	_ = m.Lock(ctx)
	_ = m.Lock(ctx) // re-entered
	defer m.Unlock(ctx)
	defer m.Unlock(ctx)
	pool := client.Semaphore("pool")
	_, _ = pool.TrySetPermits(ctx, 3)

	in, err := client.Inspect(ctx, "invoice:42")
	if err != nil {
		panic(err)
	}
	h := in.Holders[0]
	fmt.Println("kind:", in.Kind)
	fmt.Println("holds:", h.Holds)
	fmt.Println("held by this Client:", h.ClientID == client.ID())
	fmt.Println("within its lease:", h.TTL > 0 && h.TTL <= rlock.DefaultWatchdogTimeout)
	fmt.Println("fencing token:", in.Token > 0)

	in, _ = client.Inspect(ctx, "pool")
	fmt.Println(in.Kind+":", in.Count, "permits available")

	var names []string
	for name, err := range client.List(ctx, "*") {
		if err != nil {
			panic(err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	fmt.Println("names:", names)
	// Output:
	// kind: mutex
	// holds: 2
	// held by this Client: true
	// within its lease: true
	// fencing token: true
	// semaphore: 3 permits available
	// names: [invoice:42 pool]
}
