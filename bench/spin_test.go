package bench

import (
	"sort"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkSpinMutex_HotKey is BenchmarkMutex_HotKey's contest (16 goroutines, each its own
// owner, on 4 Clients, taking one lock in turn) for the SpinMutex beside the Mutex. It
// reports acquisitions per second, client-sent scripts per acquisition (the release
// included) and the spread of waits.
func BenchmarkSpinMutex_HotKey(b *testing.B) {
	for _, kind := range []string{"mutex", "spin"} {
		b.Run("kind="+kind, func(b *testing.B) {
			srv := redistest.Start(b)
			cs := make([]*rlock.Client, 4)
			for i := range cs {
				cs[i] = newClient(b, srv)
			}
			newLocker := func(c *rlock.Client) locker {
				if kind == "spin" {
					return c.SpinMutex("hot")
				}
				return c.Mutex("hot")
			}
			hotKeyContest(b, srv, 16, func(g int) locker { return newLocker(cs[g%len(cs)]) })
		})
	}
}

// hotKeyContest runs b.N acquisitions shared among contenders goroutines, each with its
// own locker (see contest).
func hotKeyContest(b *testing.B, srv *redistest.Server, contenders int, newLocker func(g int) locker) {
	contest(b, srv, contenders, lockers(newLocker, contenders), nil)
}

// BenchmarkSpinMutex_Handoff is the time from a holder's Unlock until a waiter of another
// Client, spinning for a while already, holds the lock: the cost of polling (up to one
// pause of at most 128ms) against the Mutex's pub/sub wake-up.
func BenchmarkSpinMutex_Handoff(b *testing.B) {
	for _, kind := range []string{"mutex", "spin"} {
		b.Run("kind="+kind, func(b *testing.B) {
			srv := redistest.Start(b)
			hc, wc := newClient(b, srv), newClient(b, srv)
			var holder, waiter locker = hc.Mutex("handoff"), wc.Mutex("handoff")
			if kind == "spin" {
				holder, waiter = hc.SpinMutex("handoff"), wc.SpinMutex("handoff")
			}
			var all []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := holder.Lock(bg); err != nil {
					b.Fatal(err)
				}
				got := make(chan time.Time, 1)
				go func() {
					if err := waiter.Lock(bg); err != nil {
						b.Error(err)
					}
					got <- time.Now()
				}()
				time.Sleep(50 * time.Millisecond) // the waiter parks, or backs off a few times
				b.StartTimer()
				start := time.Now()
				if err := holder.Unlock(bg); err != nil {
					b.Fatal(err)
				}
				all = append(all, (<-got).Sub(start))
				b.StopTimer()
				if err := waiter.Unlock(bg); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-handoff-us")
			b.ReportMetric(float64(all[len(all)-1].Microseconds()), "max-handoff-us")
		})
	}
}
