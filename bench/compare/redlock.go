package main

// The RedLock comparison (issue 12, -redlock): relock's RedLock (rlock.NewRedLock) over 3 and
// 5 independent redis-servers against go-redsync/redsync's multi-pool mutex over the same
// servers, with relock's single-server Mutex on the first server as the reference of the
// cycle's latency. Scenarios: the uncontended cycle at 1 and 16 goroutines, the hot key at
// 16.

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/rlock"
)

// redServersMax is the number of servers the RedLock comparison starts.
const redServersMax = 5

// redLib is one library in one configuration over several servers.
type redLib struct {
	name   string
	config string
	multi  bool // more than one server: the INFO commandstats figures (one server's) are left out
	open   func(addrs []string) (instance, error)
}

func redLibs() []redLib {
	out := []redLib{{
		name:   "relock",
		config: "relock's Mutex on the first server alone (rlock.Dial, defaults): the reference of the cycle's latency",
		open:   func(addrs []string) (instance, error) { return openRelockDial(addrs[0], openOpts{}) },
	}}
	for _, n := range []int{3, 5} {
		out = append(out,
			redLib{
				name:   fmt.Sprintf("relock-redlock-%d", n),
				config: fmt.Sprintf("rlock.NewRedLock over %d Clients (one rlock.Dial per server), every option at its default (watchdog, per-instance timeout a tenth of the lease)", n),
				multi:  true,
				open:   openRelockRed(n),
			},
			redLib{
				name:   fmt.Sprintf("redsync-default-%d", n),
				config: fmt.Sprintf("redsync.New with %d go-redis pools (one per server), default options: 32 tries, 50-250 ms random retry delay, 8 s expiry", n),
				multi:  true,
				open:   openRedsyncMulti(n, false),
			},
			redLib{
				name:   fmt.Sprintf("redsync-tuned-%d", n),
				config: fmt.Sprintf("redsync.New with %d go-redis pools (PoolSize 128): WithRetryDelay(1ms), unlimited tries", n),
				multi:  true,
				open:   openRedsyncMulti(n, true),
			})
	}
	return out
}

// relockRedInst is one rlock.Client per server.
type relockRedInst struct{ cs []*rlock.Client }

func openRelockRed(n int) func([]string) (instance, error) {
	return func(addrs []string) (instance, error) {
		i := &relockRedInst{}
		for _, a := range addrs[:n] {
			c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{a}, DialCtxFn: rueidisDial})
			if err != nil {
				i.close()
				return nil, err
			}
			i.cs = append(i.cs, c)
		}
		return i, nil
	}
}

func (i *relockRedInst) handle(key string) handle {
	return relockRedHandle{rlock.NewRedLock(key, i.cs)}
}
func (i *relockRedInst) renewPeriod(lease time.Duration) time.Duration {
	return time.Duration(float64(lease) * rlock.DefaultRenewFraction)
}
func (i *relockRedInst) close() {
	for _, c := range i.cs {
		_ = c.Close()
	}
}

type relockRedHandle struct{ r *rlock.RedLock }

func (h relockRedHandle) lock(ctx context.Context) error   { return h.r.Lock(ctx) }
func (h relockRedHandle) unlock(ctx context.Context) error { return h.r.Unlock(ctx) }
func (h relockRedHandle) held() bool                       { return h.r.Err(context.Background()) == nil }

// openRedsyncMulti is redsync over n pools, one go-redis client per server.
func openRedsyncMulti(n int, tuned bool) func([]string) (instance, error) {
	return func(addrs []string) (instance, error) {
		var opts []redsync.Option
		if tuned {
			opts = append(opts, redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32))
		}
		i := &redsyncMultiInst{opts: opts}
		var pools []redis.Pool
		for _, a := range addrs[:n] {
			ro := &goredis.Options{Addr: a, Dialer: goredisDial}
			if tuned {
				ro.PoolSize = 128
			}
			rdb := goredis.NewClient(ro)
			i.rdbs = append(i.rdbs, rdb)
			pools = append(pools, redsyncgoredis.NewPool(rdb))
		}
		i.rs = redsync.New(pools...)
		return i, nil
	}
}

type redsyncMultiInst struct {
	rdbs []*goredis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (i *redsyncMultiInst) handle(key string) handle {
	return &redsyncHandle{i: &redsyncInst{}, m: i.rs.NewMutex(key, i.opts...)}
}
func (i *redsyncMultiInst) renewPeriod(lease time.Duration) time.Duration { return lease / 2 }
func (i *redsyncMultiInst) close() {
	for _, r := range i.rdbs {
		_ = r.Close()
	}
}

// redScenarios are the comparison's scenarios: name, goroutines, key of each goroutine.
var redScenarios = []struct {
	name string
	g    int
}{{"uncontended", 1}, {"uncontended", 16}, {"hotkey", 16}}

// runRedLockCompare starts redServersMax servers and runs the RedLock comparison. With rtt > 0
// every library reaches every server through a proxy that delays each direction by at least
// rtt/2 (internal/faultproxy; its timers serve a delay below about 1 ms as about 1.1 ms here),
// as servers on other hosts would; resets and INFO go direct, the two PINGs through the proxy.
func runRedLockCompare(ctx context.Context, out io.Writer, sel []redLib, s settings, csvPath string, rtt time.Duration) error {
	srvs := make([]*server, redServersMax)
	errs := make([]error, redServersMax)
	var wg sync.WaitGroup
	for i := range srvs {
		wg.Add(1)
		go func() { defer wg.Done(); srvs[i], errs[i] = startServer(ctx) }()
	}
	wg.Wait()
	defer func() {
		for _, s := range srvs {
			if s != nil {
				s.stop()
			}
		}
	}()
	var addrs []string
	for i, s := range srvs {
		if errs[i] != nil {
			return errs[i]
		}
		addrs = append(addrs, s.addr)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(addrs)))) < redServersMax {
		return fmt.Errorf("the RedLock comparison needs %d distinct servers (REDIS_ADDR names one): %v", redServersMax, addrs)
	}
	fmt.Fprintf(os.Stderr, "redis servers at %v\n", addrs)
	if rtt > 0 {
		for i, a := range addrs {
			p, err := faultproxy.New(a)
			if err != nil {
				return fmt.Errorf("proxy to %s: %w", a, err)
			}
			defer p.Close()
			p.SetLatency(rtt/2, rtt/2)
			addrs[i] = p.Addr()
		}
		fmt.Fprintf(os.Stderr, "reached through proxies adding at least %v per round trip, at %v\n", rtt, addrs)
	}
	begin := time.Now()
	var results []*result
	for _, sc := range redScenarios {
		keyOf := func(i int) string { return fmt.Sprintf("u%d-%d", sc.g, i) }
		if sc.name == "hotkey" {
			keyOf = func(int) string { return "hot" }
		}
		byLib := map[string]*result{}
		for round := range s.rounds {
			for _, l := range sel {
				for _, srv := range srvs {
					if err := srv.reset(ctx); err != nil {
						return err
					}
				}
				ping := sc.name == "uncontended" && sc.g == 1 && s.pingPairs > 0
				var before []time.Duration
				if ping {
					var err error
					if before, err = twoPings(ctx, addrs[0], s.pingPairs/2, 50); err != nil {
						return fmt.Errorf("two PINGs: %w", err)
					}
				}
				inst, err := l.open(addrs)
				if err != nil {
					return fmt.Errorf("%s: %w", l.name, err)
				}
				r := runCycles(ctx, srvs[0], inst, l.name, sc.name, sc.g, keyOf, s)
				inst.close()
				if l.multi {
					r.statCalls = nil // one server's INFO: not this library's figures
				}
				if rtt > 0 {
					r.hasAllocs = false // faultproxy, in this process, allocates per chunk
				}
				if ping {
					after, err := twoPings(ctx, addrs[0], s.pingPairs-s.pingPairs/2, 50)
					if err != nil {
						return fmt.Errorf("two PINGs: %w", err)
					}
					r.pingPairs = append(before, after...)
					slices.Sort(r.pingPairs)
				}
				fmt.Fprintf(os.Stderr, "%-20s %-12s g=%-3d round %d: %10.0f ops/s p50=%v max=%v jain=%.3f cmds/op=%.2f viol=%d err=%d cycle p50=%v\n",
					r.lib, r.scenario, r.goroutines, round+1, r.opsPerSec(), r.pct(0.5), r.max(), r.jain(), r.cmdsPerOp(), r.violations, r.errors, quantile(r.cycles, 0.5))
				if prev := byLib[l.name]; prev != nil {
					prev.merge(r)
				} else {
					byLib[l.name] = r
				}
			}
		}
		for _, l := range sel {
			results = append(results, byLib[l.name])
		}
	}
	writeRedMarkdown(out, results, sel, time.Since(begin), rtt)
	if csvPath != "" {
		return writeRedCSV(csvPath, results)
	}
	return nil
}

// redCSVHeader is the main CSV's header with the cycle's p50 and p99 added.
var redCSVHeader = append(slices.Clone(csvHeader), "cycle_p50_us", "cycle_p99_us")

func redRow(r *result) []string {
	return append(row(r), us(quantile(r.cycles, 0.5)), us(quantile(r.cycles, 0.99)))
}

func writeRedCSV(path string, results []*result) error {
	return writeRows(path, redCSVHeader, results, redRow)
}

func writeRedMarkdown(out io.Writer, results []*result, sel []redLib, took time.Duration, rtt time.Duration) {
	via := ""
	if rtt > 0 {
		via = fmt.Sprintf(", each reached through a proxy adding at least %v per round trip (the two-PING line below is through it)", rtt)
	}
	fmt.Fprintf(out, "RedLock comparison: %d redis-servers on 127.0.0.1%s, %d configurations, run took %v.\n\n", redServersMax, via, len(sel), took.Round(time.Second))
	fmt.Fprintln(out, "| lib | configuration |")
	fmt.Fprintln(out, "|---|---|")
	for _, l := range sel {
		fmt.Fprintf(out, "| %s | %s |\n", l.name, l.config)
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| "+strings.Join(redCSVHeader, " | ")+" |")
	fmt.Fprintln(out, "|"+strings.Repeat("---|", len(redCSVHeader)))
	for _, r := range results {
		fmt.Fprintln(out, "| "+strings.Join(redRow(r), " | ")+" |")
	}
	if p := twoPingP50(results, "uncontended"); p > 0 {
		fmt.Fprintf(out, "\nTwo back-to-back PINGs (first server), median of the run: %s us.\n", us(p))
	}
	ref := find(results, "relock", "uncontended", 1)
	for _, n := range []int{3, 5} {
		mine := fmt.Sprintf("relock-redlock-%d", n)
		if find(results, mine, "uncontended", 1) == nil {
			continue
		}
		fmt.Fprintf(out, "\nTargets (%s against relock's single-server cycle and the better redsync over the same %d servers):\n\n", mine, n)
		fmt.Fprintln(out, "| target | relock RedLock | other | ratio | verdict |")
		fmt.Fprintln(out, "|---|---|---|---|---|")
		verdict := func(ok bool) string {
			if ok {
				return "met"
			}
			return "MISSED"
		}
		me1 := find(results, mine, "uncontended", 1)
		if ref != nil {
			a, b := quantile(me1.cycles, 0.5), quantile(ref.cycles, 0.5)
			fmt.Fprintf(out, "| uncontended cycle p50, 1 goroutine: <= 1.2x relock's single-server cycle | %s us | relock %s us | %.2fx | %s |\n",
				us(a), us(b), float64(a)/float64(b), verdict(float64(a) <= 1.2*float64(b)))
		}
		best := func(scenario string, g int, better func(a, b float64) bool, f func(*result) float64) (float64, string) {
			var v float64
			var who string
			for _, r := range results {
				if !strings.HasPrefix(r.lib, "redsync-") || !strings.HasSuffix(r.lib, fmt.Sprintf("-%d", n)) || r.scenario != scenario || r.goroutines != g {
					continue
				}
				if x := f(r); who == "" || better(x, v) {
					v, who = x, r.lib
				}
			}
			return v, who
		}
		higher := func(a, b float64) bool { return a > b }
		lower := func(a, b float64) bool { return a < b }
		cyc := func(r *result) float64 { return float64(quantile(r.cycles, 0.5)) }
		ops := func(r *result) float64 { return r.opsPerSec() }
		maxw := func(r *result) float64 { return float64(r.max()) }
		jain := func(r *result) float64 { return r.jain() }
		type tgt struct {
			what     string
			scenario string
			g        int
			better   func(a, b float64) bool
			f        func(*result) float64
			show     func(float64) string
		}
		usf := func(v float64) string { return us(time.Duration(v)) + " us" }
		opsf := func(v float64) string { return fmt.Sprintf("%.0f/s", v) }
		jf := func(v float64) string { return fmt.Sprintf("%.3f", v) }
		for _, t := range []tgt{
			{"uncontended cycle p50, 1 goroutine: below redsync's", "uncontended", 1, lower, cyc, usf},
			{"uncontended throughput, 1 goroutine: above redsync's", "uncontended", 1, higher, ops, opsf},
			{"uncontended cycle p50, 16 goroutines: below redsync's", "uncontended", 16, lower, cyc, usf},
			{"uncontended throughput, 16 goroutines: above redsync's", "uncontended", 16, higher, ops, opsf},
			{"hot key, 16 goroutines, max wait: below redsync's", "hotkey", 16, lower, maxw, usf},
			{"hot key, 16 goroutines, Jain: at least redsync's", "hotkey", 16, func(a, b float64) bool { return a >= b }, jain, jf},
			{"hot key, 16 goroutines, throughput (for reference)", "hotkey", 16, higher, ops, opsf},
		} {
			me := find(results, mine, t.scenario, t.g)
			v, who := best(t.scenario, t.g, t.better, t.f)
			if me == nil || who == "" {
				continue
			}
			x := t.f(me)
			ratio := ""
			if v != 0 {
				ratio = fmt.Sprintf("%.2fx", x/v)
			}
			fmt.Fprintf(out, "| %s | %s | %s %s | %s | %s |\n", t.what, t.show(x), who, t.show(v), ratio, verdict(t.better(x, v) || x == v))
		}
	}
}
