package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkMajorityFloor splits a RedLock acquire over 3 servers into what it is made of, to
// show where its time goes (issue 12's one-goroutine row with -rtt 2ms): each sub-benchmark
// sends one request to each of 3 redis-servers at once, from a goroutine per server, and
// reports the median time until the second reply (a majority: what relock's RedLock waits
// for) as majority_us and until the third (what redsync waits for) as all_us. The requests:
//
//	get             a GET (rueidis): the round trip itself
//	setnx           SET NX PX (go-redis): redsync's acquire
//	lua-setnx       the same SET NX PX inside a Lua script (rueidis EVALSHA)
//	acquire-script  relock's acquire.lua (rueidis EVALSHA, no relock code on the client)
//	mutex           relock's Mutex.Lock on each server (Unlock untimed)
//	redlock         RedLock.Lock over the 3 (majority_us = all_us: Lock returns once)
//
// each direct and through proxies adding 2 ms per round trip (internal/faultproxy, as -rtt
// 2ms). Every iteration's keys are deleted (or unlocked) before the next, untimed. Run from
// bench/compare:
//
//	go test -run XXX -bench MajorityFloor -benchtime 300x -count 3 .
func BenchmarkMajorityFloor(b *testing.B) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("no redis-server on PATH")
	}
	ctx := context.Background()
	var direct []string
	for range 3 {
		s, err := startServer(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.stop)
		direct = append(direct, s.addr)
	}
	for _, rtt := range []time.Duration{0, 2 * time.Millisecond} {
		addrs := direct
		name := "direct"
		if rtt > 0 {
			name = "rtt" + rtt.String()
			addrs = nil
			for _, a := range direct {
				p, err := faultproxy.New(a)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { p.Close() })
				p.SetLatency(rtt/2, rtt/2)
				addrs = append(addrs, p.Addr())
			}
		}
		b.Run(name, func(b *testing.B) { floorAt(b, addrs) })
	}
}

// floorAt runs the sub-benchmarks of BenchmarkMajorityFloor over the servers at addrs.
func floorAt(b *testing.B, addrs []string) {
	ctx := context.Background()
	var rcs []rueidis.Client
	var gcs []*goredis.Client
	var lcs []*rlock.Client
	for _, a := range addrs {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(rc.Close)
		rcs = append(rcs, rc)
		gc := goredis.NewClient(&goredis.Options{Addr: a})
		b.Cleanup(func() { gc.Close() })
		gcs = append(gcs, gc)
		lc, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{a}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lc.Close() })
		lcs = append(lcs, lc)
	}
	load := func(src string) string {
		var sha string
		for _, rc := range rcs {
			var err error
			if sha, err = rc.Do(ctx, rc.B().ScriptLoad().Script(src).Build()).ToString(); err != nil {
				b.Fatal(err)
			}
		}
		return sha
	}
	luaSetNX := load("return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])")
	acquire := load(lua.Acquire.PlainSource())
	del := func(i int) { rcs[i].Do(ctx, rcs[i].B().Del().Key("{f}").Build()) }
	// each runs one request per server at once; undo, untimed, clears what it left.
	type req struct {
		name string
		each func(i, n int) error
		undo func(i int)
	}
	ms := make([]*rlock.Mutex, len(lcs))
	for i, c := range lcs {
		ms[i] = c.Mutex("{f}m")
	}
	reqs := []req{
		{"get", func(i, _ int) error { return rcs[i].Do(ctx, rcs[i].B().Get().Key("{f}").Build()).NonRedisError() }, nil},
		{"setnx", func(i, _ int) error { return gcs[i].SetNX(ctx, "{f}", "owner", 30*time.Second).Err() }, del},
		{"lua-setnx", func(i, _ int) error {
			return rcs[i].Do(ctx, rcs[i].B().Evalsha().Sha1(luaSetNX).Numkeys(1).Key("{f}").Arg("owner", "30000").Build()).Error()
		}, del},
		{"acquire-script", func(i, n int) error {
			return rcs[i].Do(ctx, rcs[i].B().Evalsha().Sha1(acquire).Numkeys(2).Key("{f}", "{f}:fence").
				Arg("30000", "u:owner", fmt.Sprint("r", n), "1").Build()).Error()
		}, del},
		{"mutex", func(i, _ int) error { return ms[i].Lock(ctx) }, func(i int) { _ = ms[i].Unlock(ctx) }},
	}
	for _, r := range reqs {
		b.Run(r.name, func(b *testing.B) {
			var second, third []time.Duration
			for n := range b.N {
				start := time.Now()
				done := make(chan time.Duration, len(addrs))
				errs := make(chan error, len(addrs))
				var wg sync.WaitGroup
				for i := range addrs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := r.each(i, n); err != nil {
							errs <- err
						}
						done <- time.Since(start)
					}()
				}
				<-done
				second = append(second, <-done)
				third = append(third, <-done)
				wg.Wait()
				select {
				case err := <-errs:
					b.Fatal(err)
				default:
				}
				if r.undo != nil {
					b.StopTimer()
					for i := range addrs {
						r.undo(i)
					}
					b.StartTimer()
				}
			}
			b.ReportMetric(medianUs(second), "majority_us")
			b.ReportMetric(medianUs(third), "all_us")
		})
	}
	b.Run("redlock", func(b *testing.B) {
		r := rlock.NewRedLock("{f}r", lcs)
		var took []time.Duration
		for range b.N {
			start := time.Now()
			if err := r.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
			b.StopTimer()
			if err := r.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(medianUs(took), "majority_us")
		b.ReportMetric(medianUs(took), "all_us")
	})
}

// medianUs is the median of ds in microseconds.
func medianUs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Microsecond)
}
