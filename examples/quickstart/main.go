// Command quickstart shows the basics of relock: take a lock, read its fencing token, give
// it back; wait for a lock with a bound; and keep a shared counter exact across goroutines.
//
//	go run ./examples/quickstart                            # on an embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart  # on a real Redis
//	REDIS_URL=redis://user:pass@host:6379/0 go run ./examples/quickstart
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

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()

	// One relock Client per process, shared by everything. Against your own Redis:
	//
	//	client, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	//
	// Here connect.Options gives the option for $REDIS_URL or $REDIS_ADDR, or starts an
	// embedded miniredis and gives its option.
	opt, stop, err := connect.Options()
	if err != nil {
		return err
	}
	defer stop() // runs last: after client.Close
	fmt.Println("using", connect.Describe())

	client, err := rlock.Dial(opt) // makes the rueidis client; client.Close closes it
	if err != nil {
		return err
	}
	defer client.Close() // stops relock's goroutines and closes the rueidis client

	// 1. Lock, do the work, Unlock.
	fmt.Println("\n== 1. Lock / Unlock")
	m := client.Mutex("examples:quickstart:report")
	if err := m.Lock(ctx); err != nil {
		return err
	}
	token, err := m.Token(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("locked %q (Redis key %s), fencing token %d\n", m.Name(), m.Key(), token)
	fmt.Println("  the token is for the resource you protect: send it with every write; the resource keeps")
	fmt.Println("  the highest token it has seen and refuses lower ones, so a holder that lost the lock is turned away")
	time.Sleep(100 * time.Millisecond) // the "work"
	if err := m.Unlock(ctx); err != nil {
		return err
	}
	locked, err := m.IsLocked(ctx)
	if err != nil {
		return err
	}
	fmt.Println("unlocked; IsLocked =", locked)

	// 2. TryLock with a wait: another handle is another owner, and is refused while the
	// first holds the lock.
	fmt.Println("\n== 2. TryLock with a wait")
	holder := client.Mutex("examples:quickstart:job")
	other := client.Mutex("examples:quickstart:job")
	if err := holder.Lock(ctx); err != nil {
		return err
	}
	fmt.Println("holder: locked")
	start := time.Now()
	ok, err := other.TryLock(ctx, 300*time.Millisecond, 0)
	if err != nil {
		return err
	}
	fmt.Printf("other:  TryLock(wait 300ms) = %v after %v (held by holder)\n",
		ok, time.Since(start).Round(10*time.Millisecond))
	if ok {
		return fmt.Errorf("TryLock succeeded while another owner held the lock")
	}
	if err := holder.Unlock(ctx); err != nil {
		return err
	}
	fmt.Println("holder: unlocked")
	if ok, err = other.TryLock(ctx, 300*time.Millisecond, 0); err != nil {
		return err
	}
	fmt.Printf("other:  TryLock(wait 300ms) = %v\n", ok)
	if !ok {
		return fmt.Errorf("TryLock failed on a free lock")
	}
	if err := other.Unlock(ctx); err != nil {
		return err
	}

	// 3. A read-modify-write of a shared counter from 4 goroutines. The load and the store
	// are apart, so updates get lost unless the lock keeps them one at a time.
	fmt.Println("\n== 3. A shared counter, 4 goroutines x 25 increments")
	const workers, rounds = 4, 25
	increment := func(c *atomic.Int64) {
		v := c.Load()
		time.Sleep(200 * time.Microsecond) // widen the window for a lost update
		c.Store(v + 1)
	}

	var unguarded atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				increment(&unguarded)
			}
		})
	}
	wg.Wait()
	fmt.Printf("without the lock: counter = %d (want %d)\n", unguarded.Load(), workers*rounds)

	var guarded, inside, maxInside atomic.Int64
	errs := make(chan error, workers)
	start = time.Now()
	for range workers {
		wg.Go(func() {
			mu := client.Mutex("examples:quickstart:counter") // each goroutine its own handle
			for range rounds {
				if err := mu.Lock(ctx); err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := maxInside.Load(); n > m && !maxInside.CompareAndSwap(m, n); m = maxInside.Load() {
				}
				increment(&guarded)
				inside.Add(-1)
				if err := mu.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("with the lock:    counter = %d (want %d), at most %d goroutine inside, %v\n",
		guarded.Load(), workers*rounds, maxInside.Load(), time.Since(start).Round(time.Millisecond))
	if guarded.Load() != workers*rounds || maxInside.Load() != 1 {
		return fmt.Errorf("counter is %d, want %d; %d goroutines were inside at once, want 1",
			guarded.Load(), workers*rounds, maxInside.Load())
	}

	fmt.Println("\ndone")
	return nil
}
