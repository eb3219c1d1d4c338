package rlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/rlock"
)

func ExampleRWMutex() {
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
	// Two readers (in real life: other processes) read the config at once.
	r1, r2 := client.RWMutex("config"), client.RWMutex("config")
	_ = r1.RLock(ctx)
	_ = r2.RLock(ctx)
	readers, _ := r1.IsReadLocked(ctx)
	fmt.Println("read by two:", readers)

	// A writer has to wait for both.
	w := client.RWMutex("config")
	ok, _ := w.TryLock(ctx, 0, 0)
	fmt.Println("writer in while read:", ok)
	_ = r1.RUnlock(ctx)
	_ = r2.RUnlock(ctx)
	ok, _ = w.TryLock(ctx, 0, 0)
	fmt.Println("writer in once the readers left:", ok)

	// The writer may read too, and keep reading after it stops writing (a downgrade)...
	_ = w.RLock(ctx)
	_ = w.Unlock(ctx)
	written, _ := w.IsWriteLocked(ctx)
	fmt.Println("still written after the downgrade:", written)
	// ...but a reader cannot become a writer: it must stop reading first.
	err = w.Lock(ctx)
	fmt.Println("upgrade refused:", errors.Is(err, rlock.ErrUpgrade))
	_ = w.RUnlock(ctx)
	// Output:
	// read by two: true
	// writer in while read: false
	// writer in once the readers left: true
	// still written after the downgrade: false
	// upgrade refused: true
}
