// Command fairlock shows FairMutex: waiters from several processes are served in the order
// they arrived; a single attempt (TryLock with wait 0) never jumps the queue; a waiter that
// gives up leaves the queue at once; and a release wakes only the waiter at the head. Three
// relock Clients stand for three processes.
//
//	go run ./examples/fairlock
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const lockName = "examples:fairlock:printer"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fairlock:", err)
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

	procs := make([]*rlock.Client, 3) // three processes, each dialling its own Client
	for i := range procs {
		if procs[i], err = rlock.Dial(opt); err != nil {
			return err
		}
		defer procs[i].Close()
	}
	// A plain rueidis client, to look into Redis as redis-cli would.
	rcOpt := opt
	rcOpt.DisableCache = true // it only sends plain commands
	rc, err := rueidis.NewClient(rcOpt)
	if err != nil {
		return err
	}
	defer rc.Close()

	holder := procs[0].FairMutex(lockName)
	queueKey := holder.Key() + ":queue"

	// queueLen is the number of places in the queue (the sorted set Key()+":queue").
	queueLen := func() int64 {
		n, _ := rc.Do(ctx, rc.B().Zcard().Key(queueKey).Build()).AsInt64()
		return n
	}
	// awaitQueue waits until the queue has n places (for the demo's timing only).
	awaitQueue := func(n int64) error {
		for end := time.Now().Add(5 * time.Second); queueLen() != n; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(end) {
				return fmt.Errorf("the queue never reached %d places", n)
			}
		}
		return nil
	}

	// 1. Waiters on different processes are served in arrival order.
	fmt.Println("== 1. Five waiters on three processes, arriving one after the other")
	if err := holder.Lock(ctx); err != nil {
		return err
	}
	fmt.Println("holder: Lock -> held")
	names := []string{"ann", "bob", "cid", "dee", "eve"}
	served := make(chan string, len(names))
	errs := make(chan error, len(names))
	var inside atomic.Int32 // waiters holding the lock at once: never more than one
	var overlap atomic.Bool
	for i, name := range names {
		m := procs[i%len(procs)].FairMutex(lockName)
		wctx := rlock.WithOwner(ctx, name) // an owner id we can read in the queue
		go func() {
			if err := m.Lock(wctx); err != nil {
				errs <- err
				return
			}
			if inside.Add(1) > 1 {
				overlap.Store(true)
			}
			served <- name
			time.Sleep(20 * time.Millisecond) // the work
			inside.Add(-1)
			errs <- m.Unlock(wctx)
		}()
		if err := awaitQueue(int64(i + 1)); err != nil {
			return err
		}
		fmt.Printf("%s (process %d): Lock -> waits at place %d\n", name, i%len(procs), i+1)
	}
	members, err := rc.Do(ctx, rc.B().Zrange().Key(queueKey).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		return err
	}
	fmt.Printf("queue in Redis (%s): %s\n", queueKey, strings.Join(members, " "))

	// 2. A single attempt never queues.
	fmt.Println("\n== 2. TryLock with wait 0 while others wait")
	late := procs[1].FairMutex(lockName)
	ok, err := late.TryLock(ctx, 0, 0)
	if err != nil {
		return err
	}
	fmt.Printf("late: TryLock(wait 0) -> %v; places in the queue still %d\n", ok, queueLen())
	if ok {
		return fmt.Errorf("a single attempt took a held lock")
	}

	// 3. A waiter that gives up leaves the queue at once.
	fmt.Println("\n== 3. A waiter that gives up")
	quitter := procs[2].FairMutex(lockName)
	start := time.Now()
	ok, err = quitter.TryLock(rlock.WithOwner(ctx, "quitter"), 200*time.Millisecond, 0)
	if err != nil {
		return err
	}
	fmt.Printf("quitter: TryLock(wait 200ms) -> %v after %v; places in the queue: %d (its own is gone)\n",
		ok, time.Since(start).Round(10*time.Millisecond), queueLen())
	if ok || queueLen() != int64(len(names)) {
		return fmt.Errorf("the quitter's place was not removed")
	}

	// 4. The holder lets go: each release wakes only the head, so the waiters follow in order.
	fmt.Println("\n== 4. The holder unlocks")
	if err := holder.Unlock(ctx); err != nil {
		return err
	}
	// The lock is now free or already taken by the head: either way a newcomer's single
	// attempt does not get it before the waiters.
	ok, err = late.TryLock(ctx, 0, 0)
	if err != nil {
		return err
	}
	fmt.Printf("late: TryLock(wait 0) right after the release -> %v (the waiters go first)\n", ok)
	if ok {
		return fmt.Errorf("a single attempt passed the waiters")
	}
	var order []string
	for range names {
		select {
		case name := <-served:
			order = append(order, name)
			fmt.Printf("served: %s\n", name)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("a waiter was never served")
		}
	}
	for range names {
		if err := <-errs; err != nil {
			return err
		}
	}
	if strings.Join(order, " ") != strings.Join(names, " ") {
		return fmt.Errorf("served out of order: %v", order)
	}
	if overlap.Load() {
		return fmt.Errorf("two waiters held the lock at once")
	}
	fmt.Println("served in arrival order, one at a time:", strings.Join(order, " "))
	n, err := rc.Do(ctx, rc.B().Exists().Key(queueKey).Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	fmt.Println("queue key left in Redis:", n == 1)
	return nil
}
