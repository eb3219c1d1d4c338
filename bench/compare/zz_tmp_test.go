package main

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/rlock"
)

func BenchmarkZZRedCycle(b *testing.B) {
	ctx := context.Background()
	var addrs []string
	for range 3 {
		s, err := startServer(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.stop)
		p, _ := faultproxy.New(s.addr)
		b.Cleanup(func() { p.Close() })
		p.SetLatency(time.Millisecond/2, time.Millisecond/2)
		addrs = append(addrs, p.Addr())
	}
	var lcs []*rlock.Client
	var pools []redis.Pool
	for _, a := range addrs {
		lc, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{a}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lc.Close() })
		lcs = append(lcs, lc)
		gc := goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { gc.Close() })
		pools = append(pools, redsyncgoredis.NewPool(gc))
	}
	rs := redsync.New(pools...)
	for _, gap := range []time.Duration{0, 10 * time.Millisecond} {
		for _, lib := range []string{"relock", "redsync", "mutex3", "rueidis3"} {
			b.Run(lib+"/gap"+gap.String(), func(b *testing.B) {
				var lock, unlock func() error
				if lib == "relock" {
					r := rlock.NewRedLock("{z}r", lcs)
					lock = func() error { return r.Lock(ctx) }
					unlock = func() error { return r.Unlock(ctx) }
				} else if lib == "mutex3" {
					ms := []*rlock.Mutex{lcs[0].Mutex("{z}m"), lcs[1].Mutex("{z}m"), lcs[2].Mutex("{z}m")}
					lock = func() error { return par(func(i int) error { return ms[i].Lock(ctx) }) }
					unlock = func() error { return par(func(i int) error { return ms[i].Unlock(ctx) }) }
				} else if lib == "rueidis3" {
					var rcs []rueidis.Client
					for _, a := range addrs {
						rc, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
						defer rc.Close()
						rcs = append(rcs, rc)
					}
					lock = func() error { return par(func(i int) error { return rcs[i].Do(ctx, rcs[i].B().Set().Key("{z}q").Value("o").Nx().Px(30000).Build()).Error() }) }
					unlock = func() error { return par(func(i int) error { return rcs[i].Do(ctx, rcs[i].B().Del().Key("{z}q").Build()).Error() }) }
				} else {
					m := rs.NewMutex("{z}s")
					lock = func() error { return m.LockContext(ctx) }
					unlock = func() error { _, err := m.UnlockContext(ctx); return err }
				}
				var lt, ut []time.Duration
				for range b.N {
					if gap > 0 {
						b.StopTimer()
						time.Sleep(gap)
						b.StartTimer()
					}
					s := time.Now()
					if err := lock(); err != nil {
						b.Fatal(err)
					}
					m := time.Now()
					if err := unlock(); err != nil {
						b.Fatal(err)
					}
					lt = append(lt, m.Sub(s))
					ut = append(ut, time.Since(m))
				}
				b.ReportMetric(medianUs(lt), "lock_us")
				b.ReportMetric(medianUs(ut), "unlock_us")
			})
		}
	}
}

func par(f func(i int) error) error {
	errs := make(chan error, 3)
	for i := range 3 {
		go func() { errs <- f(i) }()
	}
	var err error
	for range 3 {
		if e := <-errs; e != nil {
			err = e
		}
	}
	return err
}
