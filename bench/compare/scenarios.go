package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// settings bound each scenario in time.
type settings struct {
	warm       time.Duration // load before the measured window
	window     time.Duration // measured window of the cycle and hot-key scenarios
	handoffDur time.Duration // time budget of the hand-off scenario
	handoffMax int           // most hand-offs measured
	heldLocks  int           // locks of the held scenario
	heldLease  time.Duration // their lease (renewed while held)
	rounds     int           // turns of every library at each scenario but the held one
	pingPairs  int           // two-PING samples taken around each uncontended 1-goroutine round
	// rtt is the round trip the uncontended-rtt scenario adds between the clients and Redis
	// (delayProxy); 0 leaves the scenario out.
	rtt time.Duration
	// rttPingPairs are the two-PING samples taken, through the same proxy, around each
	// uncontended-rtt round (fewer: each takes two round trips of rtt).
	rttPingPairs int
}

// defaultRTT is the uncontended-rtt scenario's round trip unless -rtt says otherwise: what
// a service in a data centre sees between it and Redis.
const defaultRTT = time.Millisecond

var (
	fullRun  = settings{warm: 200 * time.Millisecond, window: time.Second, handoffDur: 1500 * time.Millisecond, handoffMax: 100, heldLocks: 10000, heldLease: 3 * time.Second, rounds: 3, pingPairs: 500, rtt: defaultRTT, rttPingPairs: 100}
	quickRun = settings{warm: 100 * time.Millisecond, window: 500 * time.Millisecond, handoffDur: 800 * time.Millisecond, handoffMax: 40, heldLocks: 1000, heldLease: time.Second, rounds: 1, pingPairs: 500, rtt: defaultRTT, rttPingPairs: 100}
)

// result is one library's figures in one scenario.
type result struct {
	lib, scenario string
	goroutines    int
	ops           int64           // acquisitions measured
	elapsed       time.Duration   // measured window
	waits         []time.Duration // sorted; includes censored
	censored      []time.Duration // waits still in progress at the end of the window
	counts        []int64         // acquisitions per goroutine
	cmds          int64           // client-sent commands in the window
	byName        map[string]int64
	statScripts   int64 // EVAL+EVALSHA in INFO commandstats over the window (cross-check)
	sentScripts   int64 // EVAL+EVALSHA counted on the clients' sockets over the window
	violations    int64
	errors        int64
	rtt           time.Duration   // PING round trip (hand-off): median of rtts
	rtts          []time.Duration // the PING round trip of each round
	held          *heldStats
	handoffSum    time.Duration   // hand-off: total of the hand-off times
	serverCPU     time.Duration   // redis-server CPU time spent in the window
	coldRTTs      []time.Duration // hand-off: PING round trips after the same idle park as a hand-off

	// cycles are the completed Lock+Unlock cycles of the window (cycle scenarios), sorted:
	// from the Lock call to the Unlock call's return, the empty critical section included.
	cycles []time.Duration
	// pingPairs are samples of two back-to-back PINGs on a fresh connection, half taken
	// right before and half right after each round (uncontended, 1 goroutine), sorted.
	pingPairs []time.Duration
	// From INFO commandstats over the window (nil for the held scenario's figures):
	statCalls   map[string]int64 // server calls by command, harness commands left out
	serverCalls int64            // their sum: every command Redis ran, scripts' inner ones included
	redisUsec   int64            // server time of the commands the client sent (top level)
	// allocs are the heap allocations of the whole process over the window (runtime.MemStats
	// Mallocs): the library's, as the harness allocates nothing per cycle; only the cycle
	// scenarios measure them (hasAllocs).
	allocs    int64
	hasAllocs bool
	// addedRTT is the round trip the delay proxy added between the client and Redis
	// (uncontended-rtt), 0 when direct.
	addedRTT time.Duration
}

type heldStats struct {
	locks      int
	lease      time.Duration
	period     time.Duration
	window     time.Duration
	renewCmds  int64
	goroutines int   // added by the library while the locks are held
	heap       int64 // bytes added while the locks are held
	lost       int
}

// merge adds another round of the same library and scenario.
func (r *result) merge(o *result) {
	r.ops += o.ops
	r.elapsed += o.elapsed
	r.waits = append(r.waits, o.waits...)
	slices.Sort(r.waits)
	r.censored = append(r.censored, o.censored...)
	for i := range r.counts {
		r.counts[i] += o.counts[i]
	}
	r.cmds += o.cmds
	for k, v := range o.byName {
		r.byName[k] += v
	}
	r.statScripts += o.statScripts
	r.sentScripts += o.sentScripts
	r.violations += o.violations
	r.errors += o.errors
	r.rtts = append(r.rtts, o.rtts...)
	slices.Sort(r.rtts)
	if len(r.rtts) > 0 {
		r.rtt = r.rtts[len(r.rtts)/2]
	}
	r.handoffSum += o.handoffSum
	r.serverCPU += o.serverCPU
	r.coldRTTs = append(r.coldRTTs, o.coldRTTs...)
	slices.Sort(r.coldRTTs)
	r.cycles = append(r.cycles, o.cycles...)
	slices.Sort(r.cycles)
	r.pingPairs = append(r.pingPairs, o.pingPairs...)
	slices.Sort(r.pingPairs)
	if o.statCalls != nil {
		if r.statCalls == nil {
			r.statCalls = map[string]int64{}
		}
		for k, v := range o.statCalls {
			r.statCalls[k] += v
		}
	}
	r.serverCalls += o.serverCalls
	r.redisUsec += o.redisUsec
	r.allocs += o.allocs
	r.hasAllocs = r.hasAllocs && o.hasAllocs
}

// quantile is the q-quantile of sorted durations, 0 when there are none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

func (r *result) opsPerSec() float64 {
	if r.handoffSum > 0 {
		return float64(len(r.waits)) / r.handoffSum.Seconds() // hand-offs per second of hand-off time
	}
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

func (r *result) pct(q float64) time.Duration { return quantile(r.waits, q) }

// hasServerStats reports whether the server figures per operation apply: INFO
// commandstats was read over the window the operations were counted in (not so for the
// held scenario, whose cmds_per_op is about the hold, not the acquisitions).
func (r *result) hasServerStats() bool { return r.statCalls != nil && r.held == nil && r.ops > 0 }

// serverCallsPerOp is every command Redis ran per operation (scripts' inner ones included).
func (r *result) serverCallsPerOp() float64 { return float64(r.serverCalls) / float64(max(r.ops, 1)) }

// redisUsecPerOp is Redis's time in the client-sent commands per operation.
func (r *result) redisUsecPerOp() float64 { return float64(r.redisUsec) / float64(max(r.ops, 1)) }

// redisCPUPerOp is the redis-server process's CPU time (INFO cpu: user + sys) per
// operation, in microseconds: the commands' time plus reading, parsing and answering them
// (and the server's own timer, hz 10, while the window lasts).
func (r *result) redisCPUPerOp() float64 {
	return float64(r.serverCPU) / 1e3 / float64(max(r.ops, 1))
}

// allocsPerOp is the process's heap allocations per operation over the window.
func (r *result) allocsPerOp() float64 { return float64(r.allocs) / float64(max(r.ops, 1)) }

func (r *result) max() time.Duration {
	if len(r.waits) == 0 {
		return 0
	}
	return r.waits[len(r.waits)-1]
}

// jain is Jain's fairness index of the acquisitions per goroutine: 1 when all got the same.
func (r *result) jain() float64 {
	var sum, sq float64
	for _, c := range r.counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(r.counts)) * sq)
}

func (r *result) cmdsPerOp() float64 {
	if r.held != nil {
		return float64(r.held.renewCmds) / float64(r.held.locks)
	}
	if r.ops == 0 {
		return 0
	}
	return float64(r.cmds) / float64(r.ops)
}

// window snapshots the client-sent and server-counted commands.
type window struct {
	total  int64
	byName map[string]int64
	stats  map[string]cmdStat
	cpu    float64 // redis-server CPU seconds (user + sys)
}

func snap(ctx context.Context, srv *server) window {
	t, b := sent.snapshot()
	s, _ := srv.commandStats(ctx)
	return window{total: t, byName: b, stats: s, cpu: srv.cpu(ctx)}
}

func (r *result) fill(a, b window) {
	r.cmds = b.total - a.total
	r.byName = map[string]int64{}
	for k, v := range b.byName {
		if d := v - a.byName[k]; d != 0 {
			r.byName[k] = d
		}
	}
	r.sentScripts = r.byName["evalsha"] + r.byName["eval"]
	r.statScripts = b.stats["evalsha"].calls + b.stats["eval"].calls - a.stats["evalsha"].calls - a.stats["eval"].calls
	r.serverCPU = time.Duration((b.cpu - a.cpu) * 1e9)

	// Server calls: every command Redis ran in the window, but the harness's own.
	if a.stats == nil || b.stats == nil {
		return // INFO failed: no server figures
	}
	r.statCalls = map[string]int64{}
	type top struct{ calls, usec int64 }
	tops := map[string]top{} // by the name the client sends ("client" for "client|setinfo")
	for name, st := range b.stats {
		d := cmdStat{st.calls - a.stats[name].calls, st.usec - a.stats[name].usec}
		if d.calls <= 0 {
			continue
		}
		if !harnessCommand(name) {
			r.statCalls[name] = d.calls
			r.serverCalls += d.calls
		}
		t, _, _ := strings.Cut(name, "|")
		tt := tops[t]
		tt.calls += d.calls
		tt.usec += d.usec
		tops[t] = tt
	}
	// Redis time: the usec of the commands the client sent. A script's usec already
	// includes the commands it ran, so those are not added again. When the client sends a
	// command that its scripts also run (say SET), commandstats has one line for both:
	// the client's share of it is taken, sent / calls of the usec (the calls costing alike).
	for t, n := range r.byName {
		tt := tops[t]
		if tt.calls <= 0 {
			continue
		}
		r.redisUsec += int64(float64(tt.usec) * min(1, float64(n)/float64(tt.calls)))
	}
}

// runCycles runs Lock+Unlock cycles from g goroutines, each with its own handle on
// keyOf(i), for the warm-up and the measured window.
func runCycles(ctx context.Context, srv *server, inst instance, lib, scenario string, g int, keyOf func(int) string, s settings) *result {
	r := &result{lib: lib, scenario: scenario, goroutines: g, counts: make([]int64, g)}
	handles := make([]handle, g)
	inCS := map[string]*atomic.Int32{}
	for i := range handles {
		handles[i] = inst.handle(keyOf(i))
		if inCS[keyOf(i)] == nil {
			inCS[keyOf(i)] = new(atomic.Int32)
		}
	}
	waits := make([][]time.Duration, g)
	cycles := make([][]time.Duration, g)
	pending := make([]atomic.Int64, g) // start (UnixNano) of a Lock call in progress, 0 when none
	var measuring atomic.Bool
	var violations, errs atomic.Int64
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, cs := handles[i], inCS[keyOf(i)]
			for runCtx.Err() == nil {
				start := time.Now()
				pending[i].Store(start.UnixNano())
				err := h.lock(runCtx)
				pending[i].Store(0)
				if err != nil {
					if runCtx.Err() == nil {
						if measuring.Load() {
							errs.Add(1)
						}
						time.Sleep(time.Millisecond)
					}
					continue
				}
				w := time.Since(start)
				if cs.Add(1) != 1 {
					violations.Add(1)
				}
				runtime.Gosched() // widen the critical section a little
				cs.Add(-1)
				err = h.unlock(context.Background())
				c := time.Since(start)
				if err != nil && runCtx.Err() == nil && measuring.Load() {
					errs.Add(1)
				}
				if measuring.Load() {
					waits[i] = append(waits[i], w)
					cycles[i] = append(cycles[i], c)
					r.counts[i]++
				}
			}
		}()
	}
	time.Sleep(s.warm)
	a := snap(ctx, srv)
	m0 := mallocs()
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(s.window)
	measuring.Store(false)
	end := time.Now()
	r.allocs, r.hasAllocs = int64(mallocs()-m0), true
	r.elapsed = end.Sub(t0)
	// A Lock still waiting at the end of the window counts with the time it has waited so
	// far: a starved waiter must show in the maximum, not vanish from the figures.
	for i := range pending {
		if st := pending[i].Load(); st != 0 {
			r.censored = append(r.censored, end.Sub(time.Unix(0, st)))
		}
	}
	b := snap(ctx, srv)
	cancel()
	wg.Wait()
	r.fill(a, b)
	for i := range waits {
		r.waits = append(r.waits, waits[i]...)
		r.cycles = append(r.cycles, cycles[i]...)
		r.ops += r.counts[i]
	}
	r.waits = append(r.waits, r.censored...)
	slices.Sort(r.waits)
	slices.Sort(r.cycles)
	r.violations, r.errors = violations.Load(), errs.Load()
	return r
}

// pingRTT is the median PING round trip on the harness's connection.
func pingRTT(ctx context.Context, srv *server) time.Duration {
	var rtts []time.Duration
	for range 300 {
		start := time.Now()
		if err := srv.admin.Do(ctx, srv.admin.B().Ping().Build()).Error(); err != nil {
			return 0
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

// twoPings times n pairs of back-to-back PINGs (one pair, one sample) on a fresh rueidis
// client made as rlock.Dial makes relock's (DisableCache: a lone request is written and
// read on the caller's goroutine), dialled through the same counting wrapper as the
// libraries (so the same write path; it runs outside every measured window, so its PINGs
// are in no figure), with context.Background(). The bar of the issue: a lock cycle is two
// round trips, so the floor is two PINGs. The first warm pairs are not kept (the
// connection's warm-up). The samples come back sorted.
func twoPings(ctx context.Context, addr string, n, warm int) ([]time.Duration, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: rueidisDial, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out := make([]time.Duration, 0, n)
	for i := range n + warm {
		start := time.Now()
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			return nil, err
		}
		if d := time.Since(start); i >= warm {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out, nil
}

// coldPingRTTs are PING round trips each taken after an idle park like the hand-off's: on
// a virtual machine an idle CPU takes long to wake, and a hand-off pays that too.
func coldPingRTTs(ctx context.Context, srv *server, n int) []time.Duration {
	var rtts []time.Duration
	for range n {
		time.Sleep(park())
		start := time.Now()
		if err := srv.admin.Do(ctx, srv.admin.B().Ping().Build()).Error(); err != nil {
			break
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts
}

// park is how long a hand-off's waiter is left parked: long enough for its first attempt to
// fail and for it to settle into its way of waiting; jittered so that polling waiters are
// caught at every phase of their retry period.
func park() time.Duration { return 3*time.Millisecond + rand.N(10*time.Millisecond) }

// runHandoff measures, with two instances (two processes in real life), the time from the
// holder's unlock call until a waiter that was parked on the lock holds it.
func runHandoff(ctx context.Context, srv *server, holderInst, waiterInst instance, lib string, s settings) *result {
	r := &result{lib: lib, scenario: "handoff", goroutines: 2, counts: make([]int64, 2)}
	key := "handoff"
	holder, waiter := holderInst.handle(key), waiterInst.handle(key)
	// Warm up: both sides lock once (connections, scripts, subscriptions).
	for _, h := range []handle{holder, waiter} {
		if h.lock(ctx) == nil {
			_ = h.unlock(ctx)
		}
	}
	r.rtt = pingRTT(ctx, srv)
	r.rtts = []time.Duration{r.rtt}
	r.coldRTTs = coldPingRTTs(ctx, srv, 25)
	a := snap(ctx, srv)
	start := time.Now()
	var sum time.Duration
	for len(r.waits) < s.handoffMax && time.Since(start) < s.handoffDur {
		if err := holder.lock(ctx); err != nil {
			r.errors++
			continue
		}
		type got struct {
			t   time.Time
			err error
		}
		ch := make(chan got, 1)
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		go func() {
			err := waiter.lock(wctx)
			ch <- got{time.Now(), err}
		}()
		time.Sleep(park())
		select {
		case <-ch:
			r.violations++ // the waiter got it while the holder held it
		default:
		}
		t0 := time.Now()
		if err := holder.unlock(ctx); err != nil {
			r.errors++
		}
		g := <-ch
		if g.err != nil {
			wcancel()
			r.errors++
			continue
		}
		d := g.t.Sub(t0)
		sum += d
		r.waits = append(r.waits, d)
		r.counts[0]++
		r.counts[1]++
		if err := waiter.unlock(ctx); err != nil {
			r.errors++
		}
		wcancel()
	}
	r.elapsed = time.Since(start)
	b := snap(ctx, srv)
	r.fill(a, b)
	r.ops = r.counts[0] + r.counts[1]
	slices.Sort(r.waits)
	r.handoffSum = sum
	return r
}

// mallocs is the number of heap allocations of the process so far.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// runHeld acquires s.heldLocks locks with a renewed lease of s.heldLease from 64
// goroutines, holds them for two and a half renewal periods (two renewal rounds of every
// lock fall inside), and counts what holding costs.
func runHeld(ctx context.Context, srv *server, l lib, s settings) (*result, error) {
	const acquirers = 64
	n := s.heldLocks
	r := &result{lib: l.name, scenario: fmt.Sprintf("held-%d", n), goroutines: acquirers, counts: make([]int64, acquirers)}
	g0, h0 := runtime.NumGoroutine(), heapNow()
	inst, err := l.open(srv.addr, openOpts{lease: s.heldLease})
	if err != nil {
		return nil, err
	}
	defer inst.close()
	handles := make([]handle, n)
	for i := range handles {
		handles[i] = inst.handle(fmt.Sprintf("held-%d", i))
	}
	a := snap(ctx, srv)
	waits := make([][]time.Duration, acquirers)
	var next atomic.Int64
	var errs atomic.Int64
	acquired := make([]bool, n)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range acquirers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				t := time.Now()
				if err := handles[i].lock(ctx); err != nil {
					errs.Add(1)
					continue
				}
				waits[w] = append(waits[w], time.Since(t))
				r.counts[w]++
				acquired[i] = true
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	b := snap(ctx, srv)
	r.fill(a, b)
	for w := range waits {
		r.waits = append(r.waits, waits[w]...)
		r.ops += r.counts[w]
	}
	slices.Sort(r.waits)

	period := inst.renewPeriod(s.heldLease)
	hs := &heldStats{locks: n, lease: s.heldLease, period: period, window: period * 5 / 2}
	c0 := sent.total.Load()
	time.Sleep(hs.window)
	hs.renewCmds = sent.total.Load() - c0
	hs.goroutines = runtime.NumGoroutine() - g0
	hs.heap = heapNow() - h0
	for i, h := range handles {
		if acquired[i] && !h.held() {
			hs.lost++
		}
	}
	r.held = hs
	// Release, in parallel.
	next.Store(0)
	for range acquirers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if acquired[i] {
					if err := handles[i].unlock(ctx); err != nil {
						errs.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	r.errors = errs.Load() // a lost lock fails its unlock, so it is counted here too
	return r, nil
}
