// Command watchdog shows relock's watchdog. A lock taken with Lock has a short lease in
// Redis (here 1s, WithWatchdogTimeout) that the Client's watchdog renews while the lock is
// held, so a crashed process's lock frees within a second while a live one keeps it for
// as long as its work takes. And when the lock is lost anyway (here: its key deleted
// behind the holder's back), the holder learns it at the next renewal: the context from
// HoldContext is cancelled with cause rlock.ErrLockLost.
//
//	go run ./examples/watchdog
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const watchdogTimeout = 1 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "watchdog:", err)
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

	client, err := rlock.Dial(opt, rlock.WithWatchdogTimeout(watchdogTimeout))
	if err != nil {
		return err
	}
	defer client.Close()

	renewEvery := time.Duration(rlock.DefaultRenewFraction * float64(watchdogTimeout.Nanoseconds()))
	fmt.Printf("watchdog timeout (lease) %v, renewed every ~%v\n", watchdogTimeout, renewEvery.Round(time.Millisecond))

	m := client.Mutex("examples:watchdog:import")

	// 1. Work three times longer than the lease: the watchdog keeps the lock.
	fmt.Println("\n== 1. 3s of work under a 1s lease")
	if err := m.Lock(ctx); err != nil {
		return err
	}
	if err := longWork(ctx, m, 3*time.Second); err != nil {
		return err
	}
	if err := m.Unlock(ctx); err != nil {
		return err
	}
	fmt.Println("unlocked after 3s: the lock was never lost")

	// 2. The lock is lost: its key is deleted behind the holder's back.
	fmt.Println("\n== 2. Losing the lock")
	if err := m.Lock(ctx); err != nil {
		return err
	}
	hctx, cancel := m.HoldContext(ctx)
	defer cancel()

	time.Sleep(100 * time.Millisecond)
	// A plain rueidis client deletes the key, as an operator's redis-cli DEL would.
	rcOpt := opt
	rcOpt.DisableCache = true // it only sends plain commands
	rc, err := rueidis.NewClient(rcOpt)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := rc.Do(ctx, rc.B().Del().Key(m.Key()).Build()).Error(); err != nil {
		return err
	}
	deleted := time.Now()
	fmt.Printf("DEL %s sent behind the holder's back\n", m.Key())

	select {
	case <-hctx.Done():
	case <-time.After(3 * watchdogTimeout):
		return fmt.Errorf("the holder was not told of the loss")
	}
	cause := context.Cause(hctx)
	fmt.Printf("HoldContext cancelled %v after the DEL (at the next renewal)\n", time.Since(deleted).Round(time.Millisecond))
	fmt.Printf("  context.Cause: %v\n", cause)
	fmt.Printf("  errors.Is(cause, rlock.ErrLockLost) = %v\n", errors.Is(cause, rlock.ErrLockLost))
	if !errors.Is(cause, rlock.ErrLockLost) {
		return fmt.Errorf("cause %v is not ErrLockLost", cause)
	}
	select {
	case <-m.Done(ctx):
		fmt.Println("  m.Done(ctx) is closed too; m.Err(ctx):", m.Err(ctx))
	default:
		return fmt.Errorf("the Done channel is not closed after a loss")
	}

	// A lost lock is never silently taken again: the owner must first Unlock every hold.
	err = m.Lock(ctx)
	fmt.Printf("Lock by the same owner before unlocking: %v (ErrLockLost: %v)\n", err, errors.Is(err, rlock.ErrLockLost))
	if !errors.Is(err, rlock.ErrLockLost) {
		return fmt.Errorf("a Lock after a loss returned %v", err)
	}
	err = m.Unlock(ctx)
	fmt.Printf("Unlock of the lost hold: %v (ErrNotHeld: %v)\n", err, errors.Is(err, rlock.ErrNotHeld))
	if !errors.Is(err, rlock.ErrNotHeld) {
		return fmt.Errorf("an Unlock after a loss returned %v", err)
	}
	if err := m.Lock(ctx); err != nil {
		return err
	}
	fmt.Println("after that Unlock, Lock works again")
	return m.Unlock(ctx)
}

// longWork stands for work that takes d, run under the hold's context so that it would
// stop at once if the lock were lost. It prints the lock's TTL in Redis every 500ms.
func longWork(ctx context.Context, m *rlock.Mutex, d time.Duration) error {
	hctx, cancel := m.HoldContext(ctx)
	defer cancel()
	start := time.Now()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	done := time.After(d)
	last := time.Duration(0)
	for {
		select {
		case <-hctx.Done():
			return fmt.Errorf("work stopped: %w", context.Cause(hctx))
		case <-done:
			return nil
		case <-tick.C:
			ttl, err := m.TTL(hctx)
			if err != nil {
				return err
			}
			note := ""
			if ttl > last && last != 0 {
				note = "  <- renewed"
			}
			last = ttl
			fmt.Printf("  t=%4dms  TTL %4dms%s\n", time.Since(start).Round(100*time.Millisecond).Milliseconds(), ttl.Milliseconds(), note)
		}
	}
}
