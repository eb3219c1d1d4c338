package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkRedLock_Uncontended is one goroutine's Lock+Unlock cycle of a RedLock on a free
// lock over 3 and 5 redis-servers, with a cancellable context as a request handler would
// pass. It reports the scripts sent per cycle (all servers) and allocations; compare its
// ns/op with BenchmarkMutex_Uncontended's (one server): the instances are asked in
// parallel, so the cycle should cost about one Mutex cycle.
func BenchmarkRedLock_Uncontended(b *testing.B) {
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			srvs := redBenchServers(b, n)
			cs := make([]*rlock.Client, n)
			for i, s := range srvs {
				cs[i] = newClient(b, s)
			}
			r := rlock.NewRedLock("red-uncontended", cs)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			if err := r.Lock(ctx); err != nil { // load the scripts, learn the servers
				b.Fatal(err)
			}
			if err := r.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			for _, s := range srvs {
				s.ResetStats(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := r.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := r.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			var calls int64
			for _, s := range srvs {
				calls += scripts(b, s)
			}
			b.ReportMetric(float64(calls)/float64(b.N), "cmds/op")
		})
	}
}

// BenchmarkRedLock_ParallelMutexes is the floor of BenchmarkRedLock_Uncontended: one
// goroutine's cycle of N plain Mutexes, one per server, each Lock and each Unlock of the N
// made at once from a goroutine per server (what N parallel attempts cost without the
// quorum's bookkeeping).
func BenchmarkRedLock_ParallelMutexes(b *testing.B) {
	for _, n := range []int{3, 5} {
		b.Run(fmt.Sprintf("servers=%d", n), func(b *testing.B) {
			srvs := redBenchServers(b, n)
			ms := make([]*rlock.Mutex, n)
			for i, s := range srvs {
				ms[i] = newClient(b, s).Mutex("red-floor")
			}
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			all := func(f func(m *rlock.Mutex) error) {
				var wg sync.WaitGroup
				for _, m := range ms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := f(m); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			lock := func(m *rlock.Mutex) error { return m.Lock(ctx) }
			unlock := func(m *rlock.Mutex) error { return m.Unlock(ctx) }
			all(lock)
			all(unlock)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				all(lock)
				all(unlock)
			}
		})
	}
}

// BenchmarkRedLock_Parallel is Lock+Unlock cycles of RedLocks over 3 servers from
// GOMAXPROCS*16 goroutines, each its own lock name (one set of Clients).
func BenchmarkRedLock_Parallel(b *testing.B) {
	srvs := redBenchServers(b, 3)
	cs := make([]*rlock.Client, len(srvs))
	for i, s := range srvs {
		cs[i] = newClient(b, s)
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	var mu sync.Mutex
	n := 0
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		r := rlock.NewRedLock(fmt.Sprintf("red-parallel-%d", n), cs)
		n++
		mu.Unlock()
		for pb.Next() {
			if err := r.Lock(ctx); err != nil {
				b.Error(err)
				return
			}
			if err := r.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// redBenchServers starts n independent redis-servers at once.
func redBenchServers(b *testing.B, n int) []*redistest.Server { return redistest.StartN(b, n) }
