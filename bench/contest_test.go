package bench

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
)

// locker is what the contention benchmarks take in turn.
type locker interface {
	Lock(ctx context.Context) error
	Unlock(ctx context.Context) error
}

// contest runs b.N cycles shared among contenders goroutines and reports them. Goroutine g
// makes a cycle with take(g): it blocks until it holds what it takes (its wait is recorded)
// and returns the release to run next. sent returns the client-sent scripts since the start
// (reset by contest on srv; nil: srv's only). It reports ops/s, scripts per op (the release
// included), the p50, p99 and longest wait, their spread (max/p50) and Jain's index of the
// cycles per goroutine.
func contest(b *testing.B, srv *redistest.Server, contenders int, take func(g int) (release func() error, err error), sent func() int64) {
	b.Helper()
	srv.ResetStats(b)
	var next sync.Mutex
	left := b.N
	waits := make([][]time.Duration, contenders)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < contenders; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				next.Lock()
				if left == 0 {
					next.Unlock()
					return
				}
				left--
				next.Unlock()
				t0 := time.Now()
				release, err := take(g)
				if err != nil {
					b.Error(err)
					return
				}
				waits[g] = append(waits[g], time.Since(t0))
				if err := release(); err != nil {
					b.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	n := scripts(b, srv)
	if sent != nil {
		n += sent()
	}
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
	b.ReportMetric(float64(n)/float64(b.N), "cmds/op")
	b.ReportMetric(float64(p50.Microseconds()), "p50-wait-us")
	b.ReportMetric(float64(p99.Microseconds()), "p99-wait-us")
	b.ReportMetric(float64(maxW.Microseconds()), "max-wait-us")
	b.ReportMetric(float64(maxW)/float64(max(p50, time.Microsecond)), "max/p50")
	b.ReportMetric(sum*sum/(float64(contenders)*sumSq), "jain")
}

// lockers adapts a locker per goroutine to contest's take.
func lockers(newLocker func(g int) locker, contenders int) func(g int) (func() error, error) {
	ls := make([]locker, contenders)
	for g := range ls {
		ls[g] = newLocker(g)
	}
	return func(g int) (func() error, error) {
		if err := ls[g].Lock(bg); err != nil {
			return nil, err
		}
		return func() error { return ls[g].Unlock(bg) }, nil
	}
}
