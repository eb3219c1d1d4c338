// Command reentrant shows relock's reentrancy across a call chain. A request goes
// handler -> service -> repository; each layer makes its own handle on the same lock name
// and locks it with the request's context. The context carries an owner id (from
// Client.WithNewOwner), so the nested Locks re-enter instead of deadlocking, while another
// request, another owner, is kept out until the outermost layer unlocks.
//
//	go run ./examples/reentrant
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/relock-go/relock/examples/internal/connect"
	"github.com/relock-go/relock/rlock"
)

const lockName = "examples:reentrant:order-42"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "reentrant:", err)
		os.Exit(1)
	}
}

func run() error {
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

	client, err := rlock.Dial(opt)
	if err != nil {
		return err
	}
	defer client.Close()

	app := &app{client: client, other: make(chan string, 1)}

	// Request A: one owner for the whole call chain.
	reqA := client.WithNewOwner(context.Background())
	owner, _ := rlock.OwnerFrom(reqA)
	fmt.Printf("request A: owner %s\n", owner)

	// Request B, another owner, will try the same lock while A is inside the repository.
	app.reqB = client.WithNewOwner(context.Background())

	if err := app.handler(reqA); err != nil {
		return err
	}

	// B's Lock was waiting; it gets the lock only now that A has given back every hold.
	select {
	case msg := <-app.other:
		fmt.Println(msg)
	case <-time.After(5 * time.Second):
		return fmt.Errorf("request B never got the lock")
	}
	return nil
}

type app struct {
	client *rlock.Client
	reqB   context.Context
	other  chan string // request B's report
}

// guarded locks lockName with ctx through a handle of its own, reports the hold count, runs
// next and unlocks.
func (a *app) guarded(ctx context.Context, depth int, layer string, next func(context.Context) error) error {
	indent := strings.Repeat("  ", depth)
	m := a.client.Mutex(lockName) // every layer its own handle
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("%s: %w", layer, err)
	}
	n, err := m.HoldCount(ctx)
	if err != nil {
		return err
	}
	token, err := m.Token(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%s%s: locked, HoldCount=%d, token=%d\n", indent, layer, n, token)

	if err := next(ctx); err != nil {
		// Give this layer's hold back too; report both failures if that fails as well.
		if uerr := m.Unlock(ctx); uerr != nil {
			return errors.Join(err, fmt.Errorf("%s: %w", layer, uerr))
		}
		return err
	}

	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("%s: %w", layer, err)
	}
	n, err = m.HoldCount(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("%s%s: unlocked, HoldCount=%d\n", indent, layer, n)
	return nil
}

func (a *app) handler(ctx context.Context) error {
	return a.guarded(ctx, 1, "handler", a.service)
}

func (a *app) service(ctx context.Context) error {
	return a.guarded(ctx, 2, "service", a.repository)
}

func (a *app) repository(ctx context.Context) error {
	return a.guarded(ctx, 3, "repository", func(ctx context.Context) error {
		indent := strings.Repeat("  ", 4)
		// Another owner is refused while A holds the lock, however deep.
		m := a.client.Mutex(lockName)
		ok, err := m.TryLock(a.reqB, 200*time.Millisecond, 0)
		if err != nil {
			return err
		}
		fmt.Printf("%srequest B: TryLock(wait 200ms) = %v (A holds it 3 times)\n", indent, ok)
		if ok {
			return fmt.Errorf("request B got the lock while A held it")
		}
		// So is a plain handle: with no owner in its context it is an owner of its own.
		ok, err = m.TryLock(context.Background(), 0, 0)
		if err != nil {
			return err
		}
		fmt.Printf("%sa handle with no owner in ctx: TryLock = %v\n", indent, ok)
		if ok {
			return fmt.Errorf("a foreign handle got the lock while A held it")
		}

		// B now blocks in Lock; it must get in only after A's outermost Unlock.
		reqA := ctx
		go func() {
			if err := m.Lock(a.reqB); err != nil {
				a.other <- "request B: Lock failed: " + err.Error()
				return
			}
			nB, _ := m.HoldCount(a.reqB)
			nA, _ := m.HoldCount(reqA)
			err := m.Unlock(a.reqB)
			a.other <- fmt.Sprintf("request B: Lock returned with HoldCount=%d, A's HoldCount=%d; Unlock: %v", nB, nA, err)
		}()
		fmt.Printf("%srequest B: now waiting in Lock\n", indent)
		time.Sleep(100 * time.Millisecond) // the repository's work
		return nil
	})
}
