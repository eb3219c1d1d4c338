package rlock_test

import (
	"context"
	"fmt"

	"github.com/relock-go/relock/rlock"
)

func ExampleNewMultiLock() {
	client, done := exampleClient() // as in the Mutex.Lock example
	defer done()

	ctx := context.Background()
	// Members may come from different Clients (different Redis servers); here, one.
	from, to := client.Mutex("account:17"), client.Mutex("account:42")
	transfer := rlock.NewMultiLock(from, to)
	if err := transfer.Lock(ctx); err != nil { // both, or (on error) neither
		panic(err)
	}
	// Another owner cannot take either account, nor both.
	ok, _ := client.Mutex("account:42").TryLock(ctx, 0, 0)
	fmt.Println("another owner got account 42:", ok)
	ok, _ = client.MultiLock("account:42", "account:17").TryLock(ctx, 0, 0)
	fmt.Println("another multi-lock got both:", ok)
	// ... move the money ...
	if err := transfer.Unlock(ctx); err != nil { // gives back every member
		panic(err)
	}
	locked, _ := from.IsLocked(ctx)
	fmt.Println("account 17 locked after Unlock:", locked)
	// Output:
	// another owner got account 42: false
	// another multi-lock got both: false
	// account 17 locked after Unlock: false
}
