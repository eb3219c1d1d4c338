// Command multilock shows MultiLock: several locks held as one, all or none, here one lock on
// each of three Redis servers (three embedded miniredis; with $REDIS_URL or $REDIS_ADDR set,
// all three are that one server, which works the same). Two processes (two sets of relock
// Clients) contend: while B holds one member, A's TryLock fails and leaves nothing held on
// the other servers; A's Lock then waits for it and takes all three.
//
//	go run ./examples/multilock
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const lockName = "examples:multilock:transfer"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "multilock:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	fmt.Println("using, three times:", connect.Describe())

	// Against your own servers, a process makes one relock Client per server:
	//
	//	c0, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"redis-0:6379"}})
	//	c1, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"redis-1:6379"}})
	//	...
	//
	// Here connect.Options gives the option for $REDIS_URL or $REDIS_ADDR, or starts an
	// embedded miniredis (a new one per call) and gives its option.
	// procA[i] and procB[i] are the Clients of processes A and B on server i.
	var procA, procB []*rlock.Client
	for i := 0; i < 3; i++ {
		opt, stop, err := connect.Options()
		if err != nil {
			return err
		}
		defer stop() // runs after the Clients' Close (deferred later, run earlier)
		for _, proc := range []*[]*rlock.Client{&procA, &procB} {
			c, err := rlock.Dial(opt)
			if err != nil {
				return err
			}
			defer c.Close()
			*proc = append(*proc, c)
		}
	}
	// The lock on server i is named lockName+":i", so that one server serves as three too.
	member := func(c []*rlock.Client, i int) *rlock.Mutex { return c[i].Mutex(fmt.Sprintf("%s:%d", lockName, i)) }
	// Members belong to different Clients: a MultiLock is made by rlock.NewMultiLock, not by a Client.
	a := rlock.NewMultiLock(member(procA, 0), member(procA, 1), member(procA, 2))

	fmt.Println("== 1. A takes all three; B cannot take one of them")
	if err := a.Lock(ctx); err != nil {
		return err
	}
	fmt.Println("A: Lock -> holds the locks on servers 0, 1 and 2")
	ok, err := member(procB, 1).TryLock(ctx, 0, 0)
	fmt.Printf("B: TryLock on server 1's member -> ok=%v err=%v\n", ok, err)
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}
	if err := a.Unlock(ctx); err != nil {
		return err
	}
	fmt.Println("A: Unlock -> every member given back")

	fmt.Println("\n== 2. B holds server 1's member: A's TryLock fails and takes nothing")
	held := member(procB, 1)
	if err := held.Lock(ctx); err != nil {
		return err
	}
	start := time.Now()
	ok, err = a.TryLock(ctx, 300*time.Millisecond, 0)
	fmt.Printf("A: TryLock(wait 300ms) -> ok=%v err=%v after %v\n", ok, err, since(start))
	if ok || err != nil {
		return fmt.Errorf("want (false, nil), got (%v, %v)", ok, err)
	}
	for _, i := range []int{0, 2} {
		locked, err := member(procB, i).IsLocked(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("   server %d's member locked: %v\n", i, locked)
		if locked {
			return errors.New("a failed TryLock left a member held")
		}
	}

	fmt.Println("\n== 3. A's Lock waits for B's member, then takes all three")
	got := make(chan error, 1)
	go func() { got <- a.Lock(ctx) }()
	time.Sleep(200 * time.Millisecond)
	select {
	case err := <-got:
		return fmt.Errorf("process A: Lock returned (%v) while B held a member", err)
	default:
	}
	released := time.Now()
	if err := held.Unlock(ctx); err != nil {
		return err
	}
	if err := <-got; err != nil {
		return err
	}
	fmt.Printf("B: Unlock; A: Lock returned %v later, holding all three\n", time.Since(released).Round(100*time.Microsecond))
	for i := range 3 {
		if locked, err := member(procB, i).IsLocked(ctx); err != nil || !locked {
			return fmt.Errorf("server %d's member not locked after A's Lock: (%v, %v)", i, locked, err)
		}
	}
	if err := a.Unlock(ctx); err != nil {
		return err
	}
	fmt.Println("A: Unlock")
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }
