package rlock_test

import (
	"context"
	"fmt"

	"github.com/relock-go/relock/rlock"
)

func ExampleNewRedLock() {
	// One Client per independent Redis master (here, five embedded miniredis servers; in
	// production, five standalone masters on separate hosts, without replication between
	// them).
	var clients []*rlock.Client
	for range 5 {
		c, done := exampleClient() // as in the Mutex.Lock example
		defer done()
		clients = append(clients, c)
	}
	ctx := context.Background()

	lock := rlock.NewRedLock("invoice:42", clients)
	if err := lock.Lock(ctx); err != nil { // held on a majority (3 of 5); renewed there
		panic(err)
	}
	hctx, cancel := lock.HoldContext(ctx) // cancelled (cause ErrLockLost) if the majority is lost
	defer cancel()
	token, _ := lock.Token(ctx) // hand it to the resource: it refuses lower tokens
	fmt.Println("token > 0:", token > 0)

	// Another owner (another handle) cannot take it.
	ok, _ := rlock.NewRedLock("invoice:42", clients).TryLock(ctx, 0, 0)
	fmt.Println("another owner got it:", ok)

	_ = hctx                                 // ... work under hctx ...
	if err := lock.Unlock(ctx); err != nil { // released on every instance
		panic(err)
	}
	locked, _ := lock.IsLocked(ctx)
	fmt.Println("locked after Unlock:", locked)
	// Output:
	// token > 0: true
	// another owner got it: false
	// locked after Unlock: false
}
