package bench

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"runtime/trace"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkCycleProfile is BenchmarkMutex_Uncontended(Background) at exactly 1 and 8
// goroutines (BenchmarkMutex_Parallel's goroutines=8 is 8*GOMAXPROCS), each on a lock of its
// own, Lock and Unlock with the same ctx: a cancellable one or context.Background(). It is
// for profiling the client's side of a cycle (-cpuprofile, -memprofile, -trace): it reports
// goroutines created per cycle, and marks the timed loop in an execution trace (trace.Log
// "cycles" start/end) so that a trace's events can be counted within it.
func BenchmarkCycleProfile(b *testing.B) {
	for _, g := range []int{1, 8} {
		for _, cancellable := range []bool{true, false} {
			name := fmt.Sprintf("g=%d/ctx=background", g)
			if cancellable {
				name = fmt.Sprintf("g=%d/ctx=cancel", g)
			}
			b.Run(name, func(b *testing.B) {
				srv := redistest.Start(b)
				var c *rlock.Client
				if os.Getenv("PROFILE_NO_AUTOPIPELINING") != "" {
					// rueidis without auto-pipelining: each request on a pooled connection of its own
					c, _ = rlock.New(srv.Client(b, func(o *rueidis.ClientOption) { o.DisableAutoPipelining = true }))
					b.Cleanup(func() { _ = c.Close() })
				} else {
					c = newClient(b, srv)
				}
				ctx := bg
				if cancellable {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(bg)
					defer cancel()
				}
				ms := make([]*rlock.Mutex, g)
				for i := range ms {
					ms[i] = c.Mutex(fmt.Sprintf("profile-%d", i))
					if err := ms[i].Lock(ctx); err != nil { // load the scripts
						b.Fatal(err)
					}
					_ = ms[i].Unlock(ctx)
				}
				sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
				metrics.Read(sample)
				created := sample[0].Value.Uint64()
				b.ReportAllocs()
				report := cpuMeter(b, srv)
				b.ResetTimer()
				trace.Log(bg, "cycles", "start")
				var wg sync.WaitGroup
				for i := range g {
					n := b.N / g
					if i < b.N%g {
						n++
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range n {
							if err := ms[i].Lock(ctx); err != nil {
								b.Error(err)
								return
							}
							if err := ms[i].Unlock(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				trace.Log(bg, "cycles", "end")
				b.StopTimer()
				report()
				metrics.Read(sample)
				b.ReportMetric(float64(sample[0].Value.Uint64()-created-uint64(g))/float64(b.N), "goroutines/op")
			})
		}
	}
}

// BenchmarkCycleFloor is BenchmarkCycleProfile's floor: plain rueidis, two scripts that do
// nothing per cycle (EVALSHA, as relock's two), from 1 and 8 goroutines, with
// context.Background(). The client CPU per cycle above it is relock's own.
func BenchmarkCycleFloor(b *testing.B) {
	for _, g := range []int{1, 8} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			srv := redistest.Start(b)
			rc := srv.Client(b)
			s := rueidis.NewLuaScript("return 1")
			if err := s.Exec(bg, rc, []string{"{floor}"}, nil).Error(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			report := cpuMeter(b, srv)
			b.ResetTimer()
			trace.Log(bg, "cycles", "start")
			var wg sync.WaitGroup
			for i := range g {
				n := b.N / g
				if i < b.N%g {
					n++
				}
				keys := []string{fmt.Sprintf("{floor-%d}", i)}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range n {
						for range 2 {
							if err := s.Exec(bg, rc, keys, nil).Error(); err != nil {
								b.Error(err)
								return
							}
						}
					}
				}()
			}
			wg.Wait()
			trace.Log(bg, "cycles", "end")
			b.StopTimer()
			report()
		})
	}
}

// serverCPU is the redis-server's CPU time so far (INFO cpu: used_cpu_user + used_cpu_sys).
func serverCPU(b *testing.B, srv *redistest.Server) time.Duration {
	m := srv.Do(b, "INFO", "cpu")
	info, _ := m.ToString()
	var d time.Duration
	for _, l := range strings.Split(info, "\n") {
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				d += time.Duration(f * float64(time.Second))
			}
		}
	}
	return d
}

// cpuMeter reports the client's (this process) and the server's CPU per cycle.
func cpuMeter(b *testing.B, srv *redistest.Server) func() {
	c0, s0 := processCPU(), serverCPU(b, srv)
	return func() {
		c1, s1 := processCPU(), serverCPU(b, srv)
		b.ReportMetric(float64((c1-c0).Microseconds())/float64(b.N), "client-cpu-us/op")
		b.ReportMetric(float64((s1-s0).Microseconds())/float64(b.N), "server-cpu-us/op")
	}
}

// BenchmarkFirstSendPaths weighs the ways a lone request can be sent so that its caller may
// leave at a cancel (README guarantee 6), two PINGs per op on one goroutine: on the caller's
// goroutine with context.Background() (sync-bg: rueidis's synchronous path, which heeds no
// cancel), from a goroutine of its own with a deadline while the caller waits for it or the
// cancel (goroutine-deadline: what inflight.go does), through rueidis's own cancel path, a
// context with a Done channel and no deadline (queue-cancel: rueidis moves the connection to
// its pipelining mode for good and heeds the cancel, dropping the reply), and
// context.Background() on a connection rueidis has moved so (sync-bg-after-queue).
func BenchmarkFirstSendPaths(b *testing.B) {
	for _, mode := range []string{"sync-bg", "goroutine-deadline", "queue-cancel", "sync-bg-after-queue"} {
		b.Run(mode, func(b *testing.B) {
			srv := redistest.Start(b)
			rc := srv.Client(b)
			cmd := func() error { return rc.Do(bg, rc.B().Ping().Build()).Error() }
			cctx, cancel := context.WithCancel(bg)
			defer cancel()
			if mode == "sync-bg-after-queue" {
				_ = rc.Do(cctx, rc.B().Ping().Build()).Error()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				switch mode {
				case "sync-bg", "sync-bg-after-queue":
					_ = cmd()
					_ = cmd()
				case "goroutine-deadline":
					for range 2 {
						done := make(chan error, 1)
						go func() {
							dctx, c := context.WithDeadline(bg, time.Now().Add(5*time.Second))
							done <- rc.Do(dctx, rc.B().Ping().Build()).Error()
							c()
						}()
						select {
						case <-done:
						case <-cctx.Done():
						}
					}
				case "queue-cancel":
					_ = rc.Do(cctx, rc.B().Ping().Build()).Error()
					_ = rc.Do(cctx, rc.B().Ping().Build()).Error()
				}
			}
		})
	}
}
