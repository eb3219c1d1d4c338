package bench

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var bg = context.Background()

func newClient(b *testing.B, srv *redistest.Server, opts ...rlock.Option) *rlock.Client {
	b.Helper()
	c, err := rlock.New(srv.Client(b), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// scripts is the number of scripts clients sent since the last reset.
func scripts(b *testing.B, srv *redistest.Server) int64 {
	s := srv.CommandStats(b)
	return s["evalsha"] + s["eval"]
}

// pingRTT is the median round trip of a PING on a fresh connection.
func pingRTT(b *testing.B, srv *redistest.Server) time.Duration {
	c := srv.Client(b)
	var rtts []time.Duration
	for i := 0; i < 200; i++ {
		start := time.Now()
		if err := c.Do(bg, c.B().Ping().Build()).Error(); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts[len(rtts)/2]
}

// BenchmarkMutex_Uncontended is one goroutine's Lock+Unlock cycle on a free lock, with a
// cancellable context as a request handler would pass.
func BenchmarkMutex_Uncontended(b *testing.B) {
	srv := redistest.Start(b)
	m := newClient(b, srv).Mutex("uncontended")
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	bg := ctx
	if err := m.Lock(bg); err != nil { // load the scripts
		b.Fatal(err)
	}
	_ = m.Unlock(bg)
	srv.ResetStats(b)
	b.ReportAllocs()
	b.ResetTimer()
	lockCycles(b, m, bg)
	b.StopTimer()
	b.ReportMetric(float64(scripts(b, srv))/float64(b.N), "cmds/op")
}

// lockCycles runs b.N Lock+Unlock cycles of m with ctx.
func lockCycles(b *testing.B, m *rlock.Mutex, ctx context.Context) {
	for i := 0; i < b.N; i++ {
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMutex_UncontendedBackground is BenchmarkMutex_Uncontended with a context that
// cannot end (context.Background()): Lock then sends its acquire on the caller's goroutine,
// where a cancellable context has it sent from a goroutine of its own (rlock/inflight.go,
// README guarantee 6). The difference between the two is what that bound costs a cycle.
func BenchmarkMutex_UncontendedBackground(b *testing.B) {
	srv := redistest.Start(b)
	m := newClient(b, srv).Mutex("uncontended")
	if err := m.Lock(bg); err != nil { // load the scripts
		b.Fatal(err)
	}
	_ = m.Unlock(bg)
	b.ReportAllocs()
	b.ResetTimer()
	lockCycles(b, m, bg)
}

// BenchmarkMutex_Parallel is Lock+Unlock cycles from GOMAXPROCS*p goroutines on distinct
// locks of one Client (rueidis pipelines them on shared connections).
func BenchmarkMutex_Parallel(b *testing.B) {
	for _, p := range []int{8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", p), func(b *testing.B) {
			srv := redistest.Start(b)
			c := newClient(b, srv)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			bg := ctx
			var id sync.Mutex
			n := 0
			b.SetParallelism(p)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id.Lock()
				m := c.Mutex(fmt.Sprintf("parallel-%d", n))
				n++
				id.Unlock()
				for pb.Next() {
					if err := m.Lock(bg); err != nil {
						b.Error(err)
						return
					}
					if err := m.Unlock(bg); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkMutex_HotKey is 16 goroutines, each with its own handle (its own owner), taking
// one lock in turn. It reports client-sent scripts per acquisition (the release included),
// and the spread of waits.
func BenchmarkMutex_HotKey(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			srv := redistest.Start(b)
			cs := make([]*rlock.Client, clients)
			for i := range cs {
				cs[i] = newClient(b, srv)
			}
			const contenders = 16
			contest(b, srv, contenders, lockers(func(g int) locker { return cs[g%clients].Mutex("hot") }, contenders), nil)
		})
	}
}

// BenchmarkMutex_Handoff is the time from a holder's Unlock call until a parked waiter of
// another Client holds the lock, in ns/op and in PING round trips.
func BenchmarkMutex_Handoff(b *testing.B) {
	srv := redistest.Start(b)
	holder := newClient(b, srv).Mutex("handoff")
	waiter := newClient(b, srv).Mutex("handoff")
	rtt := pingRTT(b, srv)
	var total time.Duration
	var all []time.Duration
	b.ReportAllocs()
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
		time.Sleep(2 * time.Millisecond) // let the waiter park
		b.StartTimer()
		start := time.Now()
		if err := holder.Unlock(bg); err != nil {
			b.Fatal(err)
		}
		d := (<-got).Sub(start)
		total += d
		all = append(all, d)
		b.StopTimer()
		if err := waiter.Unlock(bg); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(total)/float64(b.N)/float64(rtt), "rtts/handoff")
	b.ReportMetric(float64(all[len(all)/2])/float64(rtt), "p50-rtts/handoff")
	b.ReportMetric(float64(rtt.Microseconds()), "ping-rtt-us")
}

// BenchmarkWatchdog_HeldLocks holds 10,000 locks in watchdog mode across two renewal periods
// and reports goroutines per held lock and renewal scripts per lock per period.
func BenchmarkWatchdog_HeldLocks(b *testing.B) {
	const n = 10000
	const timeout = time.Second
	srv := redistest.Start(b)
	c := newClient(b, srv, rlock.WithWatchdogTimeout(timeout))
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		locks := make([]*rlock.Mutex, n)
		for j := range locks {
			locks[j] = c.Mutex(fmt.Sprintf("held-%d-%d", i, j))
		}
		before := runtime.NumGoroutine()
		b.StartTimer()
		for _, m := range locks {
			if err := m.Lock(bg); err != nil {
				b.Fatal(err)
			}
		}
		srv.ResetStats(b)
		time.Sleep(2 * timeout) // two renewal periods of 2/3 s: three rounds
		renewals := scripts(b, srv)
		held := runtime.NumGoroutine() - before
		for _, m := range locks {
			if err := m.Err(bg); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(bg); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(held)/n, "goroutines/lock")
		b.ReportMetric(float64(renewals), "renew-scripts")
	}
}

// BenchmarkRueidis_HandoffFloor is the floor under BenchmarkMutex_Handoff: plain rueidis,
// no lock logic: one client runs a script that only PUBLISHes, a subscriber's hook wakes a
// goroutine, which runs a script that only reads a key. Its round trips are what any
// pub/sub-woken lock on rueidis pays on this machine; the difference to the Mutex's is
// relock's own cost (scripts that do more, and bookkeeping).
func BenchmarkRueidis_HandoffFloor(b *testing.B) {
	srv := redistest.Start(b)
	pubc, acqc, subc := srv.Client(b), srv.Client(b), srv.Client(b)
	pub := rueidis.NewLuaScript("redis.call('publish', KEYS[1], '0') return 0")
	acq := rueidis.NewLuaScript("return redis.call('exists', KEYS[1])")
	wake := make(chan struct{}, 1)
	dc, release := subc.Dedicate()
	defer release()
	dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: func(rueidis.PubSubMessage) {
		select {
		case wake <- struct{}{}:
		default:
		}
	}})
	if err := dc.Do(bg, dc.B().Subscribe().Channel("{floor}:released").Build()).Error(); err != nil {
		b.Fatal(err)
	}
	pub.Exec(bg, pubc, []string{"{floor}:released"}, nil) // load both scripts
	acq.Exec(bg, acqc, []string{"{floor}"}, nil)
	<-wake
	rtt := pingRTT(b, srv)
	var all []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		done := make(chan time.Time, 1)
		go func() {
			<-wake
			acq.Exec(bg, acqc, []string{"{floor}"}, nil)
			done <- time.Now()
		}()
		time.Sleep(time.Millisecond)
		b.StartTimer()
		start := time.Now()
		pub.Exec(bg, pubc, []string{"{floor}:released"}, nil)
		all = append(all, (<-done).Sub(start))
	}
	b.StopTimer()
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(all[len(all)/2])/float64(rtt), "p50-rtts/handoff")
	b.ReportMetric(float64(rtt.Microseconds()), "ping-rtt-us")
}
