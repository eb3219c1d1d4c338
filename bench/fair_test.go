package bench

import (
	"fmt"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkFairMutex_HotKey is 16 goroutines over 4 Clients, each with its own handle,
// taking one lock in turn: the FairMutex against the plain Mutex. Each acquisition's wait
// (from the Lock call to the grant) is recorded. It reports acquisitions per second, the
// median and longest wait, their ratio (spread: fairness shows as a small one, since no
// waiter is passed over again and again), Jain's index of the acquisitions per goroutine,
// and client-sent scripts per acquisition (its release included).
func BenchmarkFairMutex_HotKey(b *testing.B) {
	for _, kind := range []string{"mutex", "fair"} {
		b.Run("kind="+kind, func(b *testing.B) {
			srv := redistest.Start(b)
			const clients, contenders = 4, 16
			cs := make([]*rlock.Client, clients)
			for i := range cs {
				cs[i] = newClient(b, srv)
			}
			name := fmt.Sprintf("hot-%s-%d", kind, b.N)
			handle := func(g int) (lock, unlock func() error) {
				c := cs[g%clients]
				if kind == "fair" {
					m := c.FairMutex(name)
					return func() error { return m.Lock(bg) }, func() error { return m.Unlock(bg) }
				}
				m := c.Mutex(name)
				return func() error { return m.Lock(bg) }, func() error { return m.Unlock(bg) }
			}
			// Load the scripts.
			lock, unlock := handle(0)
			if err := lock(); err != nil {
				b.Fatal(err)
			}
			_ = unlock()
			locks, unlocks := make([]func() error, contenders), make([]func() error, contenders)
			for g := range locks {
				locks[g], unlocks[g] = handle(g)
			}
			contest(b, srv, contenders, func(g int) (func() error, error) {
				lock, unlock := locks[g], unlocks[g]
				if err := lock(); err != nil {
					return nil, err
				}
				return unlock, nil
			}, nil)
		})
	}
}
