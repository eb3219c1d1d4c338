package bench

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

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
			srv.ResetStats(b)
			var next sync.Mutex
			left := b.N
			waits := make([][]time.Duration, contenders)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < contenders; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					lock, unlock := handle(g)
					for {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						t0 := time.Now()
						if err := lock(); err != nil {
							b.Error(err)
							return
						}
						waits[g] = append(waits[g], time.Since(t0))
						if err := unlock(); err != nil {
							b.Error(err)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var all []time.Duration
			var sum, sumSq float64
			for _, w := range waits {
				all = append(all, w...)
				sum += float64(len(w))
				sumSq += float64(len(w)) * float64(len(w))
			}
			if len(all) == 0 {
				return
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			p50, p99, maxW := all[len(all)/2], all[len(all)*99/100], all[len(all)-1]
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
			b.ReportMetric(float64(p50.Microseconds()), "p50-wait-us")
			b.ReportMetric(float64(p99.Microseconds()), "p99-wait-us")
			b.ReportMetric(float64(maxW.Microseconds()), "max-wait-us")
			b.ReportMetric(float64(maxW)/float64(max(p50, time.Microsecond)), "max/p50")
			b.ReportMetric(sum*sum/(contenders*sumSq), "jain")
			b.ReportMetric(float64(scripts(b, srv))/float64(b.N), "cmds/op")
		})
	}
}
