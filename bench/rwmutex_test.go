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

// BenchmarkRWMutex_Contended is 16 goroutines on two Clients, each with its own handle (its
// own owner), taking one read-write lock over and over: a read hold (RLock+RUnlock) or the
// write hold (Lock+Unlock), each held for about 100µs of work. reads=90% is a read-heavy
// load, reads=50% a write-heavy one, reads=0% is the write side alone (a plain exclusive
// lock's hand-offs). It reports operations per second, client-sent scripts per operation,
// and the p50/p99/max waits of each kind.
func BenchmarkRWMutex_Contended(b *testing.B) {
	for _, readPct := range []int{90, 50, 0} {
		b.Run(fmt.Sprintf("reads=%d%%", readPct), func(b *testing.B) {
			srv := redistest.Start(b)
			cs := []*rlock.Client{newClient(b, srv), newClient(b, srv)}
			const contenders = 16
			// Warm up: load the scripts.
			warm := cs[0].RWMutex("rw-hot")
			if err := warm.RLock(bg); err != nil {
				b.Fatal(err)
			}
			_ = warm.RUnlock(bg)
			if err := warm.Lock(bg); err != nil {
				b.Fatal(err)
			}
			_ = warm.Unlock(bg)
			srv.ResetStats(b)

			var next sync.Mutex
			left := b.N
			rwaits := make([][]time.Duration, contenders)
			wwaits := make([][]time.Duration, contenders)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < contenders; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					rw := cs[g%2].RWMutex("rw-hot")
					for i := 0; ; i++ {
						next.Lock()
						if left == 0 {
							next.Unlock()
							return
						}
						left--
						next.Unlock()
						read := (g*7+i)%100 < readPct
						t0 := time.Now()
						var err error
						if read {
							err = rw.RLock(bg)
						} else {
							err = rw.Lock(bg)
						}
						if err != nil {
							b.Error(err)
							return
						}
						w := time.Since(t0)
						rwWork()
						if read {
							rwaits[g] = append(rwaits[g], w)
							err = rw.RUnlock(bg)
						} else {
							wwaits[g] = append(wwaits[g], w)
							err = rw.Unlock(bg)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
			b.ReportMetric(float64(scripts(b, srv))/float64(b.N), "cmds/op")
			rwReportWaits(b, "read", rwaits)
			rwReportWaits(b, "write", wwaits)
		})
	}
}

// rwWork stands for ~100µs of work done under the lock.
func rwWork() {
	end := time.Now().Add(100 * time.Microsecond)
	for time.Now().Before(end) {
	}
}

// rwReportWaits reports the p50, p99 and max of the waits of one kind.
func rwReportWaits(b *testing.B, kind string, waits [][]time.Duration) {
	var all []time.Duration
	for _, w := range waits {
		all = append(all, w...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), kind+"-p50-us")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), kind+"-p99-us")
	b.ReportMetric(float64(all[len(all)-1].Microseconds()), kind+"-max-us")
}
