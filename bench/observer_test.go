package bench

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// noopObserver has every hook set, each doing nothing: the cost of the dispatch and of the
// events themselves, without any work of an Observer's own.
func noopObserver() *rlock.Observer {
	return &rlock.Observer{
		AcquireStart: func(ctx context.Context, _ rlock.AcquireStartInfo) context.Context { return ctx },
		AcquireDone:  func(context.Context, rlock.AcquireDoneInfo) {},
		ReleaseStart: func(ctx context.Context, _ rlock.ReleaseStartInfo) context.Context { return ctx },
		ReleaseDone:  func(context.Context, rlock.ReleaseDoneInfo) {},
		HoldEnd:      func(rlock.HoldEndInfo) {},
		RenewalRound: func(rlock.RenewalRoundInfo) {},
		Replay:       func(rlock.ReplayInfo) {},
		Subscription: func(rlock.SubscriptionInfo) {},
		GiveBack:     func(rlock.GiveBackInfo) {},
	}
}

type observerCase struct {
	name string
	opts []rlock.Option
}

// observerCases are the two Clients the observer benchmarks compare: without an Observer
// and with a no-op one.
func observerCases() []observerCase {
	return []observerCase{
		{"observer=none", nil},
		{"observer=noop", []rlock.Option{rlock.WithObserver(noopObserver())}},
	}
}

// BenchmarkMutex_UncontendedObserver is BenchmarkMutex_Uncontended without an Observer
// (observer=none: the path every Client without one takes) and with a no-op Observer
// (observer=noop), side by side: what the hooks cost an uncontended Lock+Unlock.
func BenchmarkMutex_UncontendedObserver(b *testing.B) {
	for _, bc := range observerCases() {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			m := newClient(b, srv, bc.opts...).Mutex("uncontended")
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			if err := m.Lock(ctx); err != nil { // load the scripts
				b.Fatal(err)
			}
			_ = m.Unlock(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cannedClient answers each script (by SHA1) with the reply Redis gave its first run: a
// lock that is granted fresh and freed on every cycle, without a round trip. It isolates
// the client's own work, which the round trip otherwise drowns in noise.
type cannedClient struct {
	rueidis.Client
	mu     sync.Mutex
	canned map[string]rueidis.RedisResult
}

func (c *cannedClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	args := cmd.Commands()
	if len(args) < 2 || args[0] != "EVALSHA" {
		return c.Client.Do(ctx, cmd)
	}
	sha := args[1] // read before Do: rueidis recycles the command's memory
	c.mu.Lock()
	res, ok := c.canned[sha]
	c.mu.Unlock()
	if ok {
		return res
	}
	res = c.Client.Do(ctx, cmd)
	if res.Error() == nil { // not NOSCRIPT: the script's own reply
		c.mu.Lock()
		c.canned[sha] = res
		c.mu.Unlock()
	}
	return res
}

// BenchmarkMutex_UncontendedObserverCPU is BenchmarkMutex_UncontendedObserver with every
// script answered from memory (cannedClient): the client-side cost of a cycle, without an
// Observer and with a no-op one.
func BenchmarkMutex_UncontendedObserverCPU(b *testing.B) {
	for _, bc := range observerCases() {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			cc := &cannedClient{Client: srv.Client(b), canned: map[string]rueidis.RedisResult{}}
			c, err := rlock.New(cc, bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close() })
			m := c.Mutex("uncontended")
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			for range 3 { // the first cycles go to Redis (EVAL after NOSCRIPT, then EVALSHA) and fill the canned replies
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
