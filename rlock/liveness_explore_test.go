package rlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestExplore_Liveness explores the waits of Mutex and FairMutex for a liveness defect: a
// waiter that sleeps while the lock it waits for is free (DESIGN 7: a release that frees a
// marked lock publishes; an expiry publishes nothing, and a waiter also wakes at the
// holder's reported lease end; a wake-up consumed and not used is passed on). Seeded and
// replayable (the choices, not the goroutines' interleaving), on a real redis-server.
//
// Every trial takes a fresh Mutex name and a fresh FairMutex name, shared by two or three
// Clients (so the fair lock's channel shares each Client's subscriber with the plain
// one's), each with one to four workers on the plain lock (several owners of one Client:
// local FIFO, direct hand-offs, streaks) and up to two on the fair one. A worker runs calls
// on fresh handles (fresh owners): Lock and LockLease under a ctx cancelled at a random
// moment (often mid-wait), TryLock with short waits (some with ctx cancelled first); a call
// that gets the lock holds it a random while (sometimes past its fixed lease: an expiry)
// and gives it back. A hook loses the replies of some releases (hand-offs included) and
// acquires after Redis applied them, and delays a few by up to 20 ms.
//
// A raw client reads each lock's key and its fence counter every 2 ms in one script
// (EXISTS, GET). The fence changes at every grant (a fresh grant's INCR or a hand-off's, a
// fast grant's, a fair grant's clock token), so between two reads that find the key absent
// and the fence unchanged, the lock was free the whole time. Checked:
//
//	free     no call waited (started, not returned, its ctx live, within its wait bound)
//	         the whole of a stretch longer than livenessBound (less this process's stalls
//	         and the raw reads' own latency beyond 20 ms) in which its lock was free
//	return   every call returns by its ctx's end (or wait bound) + 2 s
//
// Environment:
//
//	RELOCK_LIVENESS_SEED=<n>     replay a run's choices (printed at the start)
//	RELOCK_LIVENESS_SECONDS=<s>  trials start while it lasts (default 5; 30 with RELOCK_FULL=1)
func TestExplore_Liveness(t *testing.T) {
	t.Parallel() // its own server, Clients and names
	seed := seedOf(t, envLivenessSeed)
	budget := budgetOf(t, envLivenessSeconds, 5*time.Second, 30*time.Second)
	x := newLVRun(t, realBackend(t), seed)
	x.run(budget)
	x.check()
}

const (
	envLivenessSeed    = "RELOCK_LIVENESS_SEED"
	envLivenessSeconds = "RELOCK_LIVENESS_SECONDS"
)

const (
	livenessBound    = 300 * time.Millisecond // the longest a waiter may sleep on a free lock
	lvTrial          = 1500 * time.Millisecond
	lvPoll           = 2 * time.Millisecond
	lvCleanup        = 500 * time.Millisecond
	lvWatchdog       = time.Second
	lvWaiterTimeout  = 3 * time.Second
	lvReturnSlack    = 2 * time.Second
	lvRedisLagAllow  = 20 * time.Millisecond
	lvMaxHookDelay   = 20 * time.Millisecond
	lvDescribeWindow = 150 * time.Millisecond
)

// lvSample is one read of a lock's key and fence.
type lvSample struct {
	sent, recv time.Time
	exists     bool
	fence      string
	err        bool
}

// lvCall is one acquire call.
type lvCall struct {
	id            int
	trial, worker int
	client        int
	kind, method  string
	key, owner    string
	wait, lease   time.Duration // wait -1: Lock/LockLease; lease 0: watchdog
	start, end    time.Time
	ctxEnd        time.Time // when its ctx ended (cancel or deadline); zero: never
	ok            bool
	err           error
	unlockAt      time.Time
	unlockErr     error
	returned      bool
	cancelAfter   time.Duration
	holdFor       time.Duration
	waitingEnd    time.Time // computed: the end of its waiting
}

// lvEvent is one script call seen by a hook.
type lvEvent struct {
	client     int
	script     string
	owner      string
	successor  string
	sent, recv time.Time
	reply      string
	lost       bool
	delay      time.Duration
}

type lvRun struct {
	t       *testing.T
	b       *backend
	seed    uint64
	admin   rueidis.Client
	clients []*rlock.Client

	fmu    sync.Mutex
	frands []*rand.Rand
	lose   float64 // the current trial's fault rate (guarded by fmu)

	mu      sync.Mutex
	calls   []*lvCall
	events  []*lvEvent
	samples map[string][]lvSample // by key
	stalls  func(start, end time.Time) time.Duration
}

func newLVRun(t *testing.T, b *backend, seed uint64) *lvRun {
	x := &lvRun{t: t, b: b, seed: seed, admin: b.rueidis(t), samples: map[string][]lvSample{}}
	for i := range 3 {
		hc, c := hardSetup(t, b, rlock.WithCleanupTimeout(lvCleanup), rlock.WithWatchdogTimeout(lvWatchdog),
			rlock.WithWaiterTimeout(lvWaiterTimeout))
		x.clients = append(x.clients, c)
		x.frands = append(x.frands, rand.New(rand.NewPCG(seed, uint64(100+i))))
		hc.set(x.hook(i))
	}
	return x
}

// hook records relock's script calls through Client i, and loses or delays some replies
// (after Redis applied the script).
func (x *lvRun) hook(i int) scriptHook {
	return func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		ev := &lvEvent{client: i, script: cmd.script}
		if cmd.fast {
			ev.script = "fast-acquire"
		}
		n := 0
		if len(cmd.args) > 0 {
			fmt.Sscan(cmd.args[0], &n)
		}
		argv := func(j int) string { // ARGV[j], 1-based
			if k := n + j; k < len(cmd.args) {
				return cmd.args[k]
			}
			return ""
		}
		switch cmd.script {
		case "acquire", "fair_acquire", "release", "fair_release", "fast_release", "fair_leave":
			ev.owner = argv(1)
			if strings.HasSuffix(cmd.script, "acquire") {
				ev.owner = argv(2)
			}
		}
		if cmd.script == "release" {
			ev.successor = argv(5)
		}
		x.fmu.Lock()
		r, rate := x.frands[i], x.lose
		switch cmd.script {
		case "release", "fair_release", "fast_release":
			ev.lost = r.Float64() < 2*rate
		case "acquire", "fair_acquire":
			ev.lost = r.Float64() < rate/2
		}
		if r.Float64() < 0.1 {
			ev.delay = time.Duration(r.Int64N(int64(lvMaxHookDelay)))
		}
		x.fmu.Unlock()
		ev.sent = time.Now()
		res := call()
		ev.recv = time.Now()
		if v, err := res.ToMessage(); err == nil {
			ev.reply = fmt.Sprint(lvMsg(v))
		} else {
			ev.reply = "err: " + err.Error()
		}
		x.mu.Lock()
		x.events = append(x.events, ev)
		x.mu.Unlock()
		if ev.delay > 0 {
			time.Sleep(ev.delay)
		}
		if ev.lost && res.Error() == nil {
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		}
		return res
	}
}

// lvMsg renders a reply briefly.
func lvMsg(m rueidis.RedisMessage) any {
	if vs, err := m.ToArray(); err == nil {
		out := make([]any, len(vs))
		for i, v := range vs {
			out[i] = lvMsg(v)
		}
		return out
	}
	if n, err := m.AsInt64(); err == nil {
		return n
	}
	if s, err := m.ToString(); err == nil {
		return s
	}
	return m.Error()
}

// poll reads key and fence every lvPoll until stop is closed.
func (x *lvRun) poll(key, fence string, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	const script = "local f = redis.call('get', KEYS[2]) if not f then f = '' end return {redis.call('exists', KEYS[1]), f}"
	tk := time.NewTicker(lvPoll)
	defer tk.Stop()
	var out []lvSample
	defer func() {
		x.mu.Lock()
		x.samples[key] = append(x.samples[key], out...)
		x.mu.Unlock()
	}()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
		}
		s := lvSample{sent: time.Now()}
		vals, err := x.admin.Do(bg, x.admin.B().Eval().Script(script).Numkeys(2).Key(key, fence).Build()).ToArray()
		s.recv = time.Now()
		if err != nil || len(vals) != 2 {
			s.err = true
		} else {
			n, _ := vals[0].AsInt64()
			s.exists = n == 1
			s.fence, _ = vals[1].ToString()
		}
		out = append(out, s)
	}
}

// run runs trials for budget.
func (x *lvRun) run(budget time.Duration) {
	x.stalls = watchStalls(nil)
	r := rand.New(rand.NewPCG(x.seed, 1))
	end := time.Now().Add(budget)
	for trial := 0; time.Now().Before(end); trial++ {
		x.trial(trial, r)
	}
}

// trial runs one trial: fresh names, a random set of workers, for lvTrial.
func (x *lvRun) trial(trial int, r *rand.Rand) {
	base := fmt.Sprintf("%s-%d", redistest.Name(x.t), trial)
	plain, fair := base+"-plain", base+"-fair"
	nClients := 2 + r.IntN(2)
	x.fmu.Lock()
	x.lose = []float64{0, 0.05, 0.15}[r.IntN(3)]
	x.fmu.Unlock()
	type wspec struct {
		client int
		kind   string
	}
	var specs []wspec
	for ci := range nClients {
		for range 1 + r.IntN(4) {
			specs = append(specs, wspec{ci, "Mutex"})
		}
		for range r.IntN(3) {
			specs = append(specs, wspec{ci, "FairMutex"})
		}
	}
	// Mixes of this trial: how often calls are cancelled mid-wait, held past their lease.
	mix := lvMix{
		cancel:  []float64{0.2, 0.5, 0.8}[r.IntN(3)],
		tryLock: []float64{0.2, 0.5, 0.8}[r.IntN(3)],
		overrun: []float64{0, 0.1, 0.3}[r.IntN(3)],
		maxHold: []time.Duration{5 * time.Millisecond, 40 * time.Millisecond, 120 * time.Millisecond}[r.IntN(3)],
	}
	stop := make(chan struct{})
	var pollers sync.WaitGroup
	for _, name := range []string{plain, fair} {
		m := x.clients[0].Mutex(name)
		pollers.Add(1)
		go x.poll(m.Key(), m.Key()+":fence", stop, &pollers)
	}
	trialEnd := time.Now().Add(lvTrial)
	var wg sync.WaitGroup
	for w, sp := range specs {
		wr := rand.New(rand.NewPCG(x.seed, uint64(1000*trial+10+w)))
		name := plain
		if sp.kind == "FairMutex" {
			name = fair
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(trialEnd) {
				x.one(wr, trial, w, sp.client, sp.kind, name, mix)
			}
		}()
	}
	wg.Wait()
	time.Sleep(50 * time.Millisecond)
	close(stop)
	pollers.Wait()
}

type lvMix struct {
	cancel, tryLock, overrun float64
	maxHold                  time.Duration
}

// one runs one call of worker w through Client ci on a fresh handle.
func (x *lvRun) one(r *rand.Rand, trial, w, ci int, kind, name string, mix lvMix) {
	var m *rlock.Mutex
	if kind == "FairMutex" {
		m = x.clients[ci].FairMutex(name).Mutex
	} else {
		m = x.clients[ci].Mutex(name)
	}
	c := &lvCall{trial: trial, worker: w, client: ci, kind: kind, key: m.Key(), owner: rlock.ModelOwnerID(m, bg), wait: -1}
	if r.IntN(2) == 0 {
		c.lease = 30*time.Millisecond + time.Duration(r.Int64N(int64(370*time.Millisecond)))
	}
	if r.Float64() < mix.tryLock {
		c.method = "TryLock"
		if r.IntN(8) == 0 {
			c.wait = 0
		} else {
			c.wait = time.Millisecond + time.Duration(r.Int64N(int64(250*time.Millisecond)))
		}
	} else {
		c.method = "Lock"
		if c.lease > 0 {
			c.method = "LockLease"
		}
	}
	if r.Float64() < mix.cancel {
		c.cancelAfter = time.Duration(r.Int64N(int64(600 * time.Millisecond)))
	} else if c.method != "TryLock" {
		c.cancelAfter = 3 * time.Second // a bound, so that a stuck call ends the run
	}
	c.holdFor = time.Duration(r.Int64N(int64(mix.maxHold) + 1))
	if c.lease > 0 && r.Float64() < mix.overrun {
		c.holdFor = c.lease + time.Duration(r.Int64N(int64(100*time.Millisecond)))
	}
	ctx, cancel := context.WithCancel(bg)
	var cmu sync.Mutex
	var timer *time.Timer
	c.start = time.Now()
	if c.cancelAfter > 0 {
		timer = time.AfterFunc(c.cancelAfter, func() {
			cmu.Lock()
			if !c.returned {
				c.ctxEnd = time.Now()
			}
			cmu.Unlock()
			cancel()
		})
	}
	switch c.method {
	case "TryLock":
		c.ok, c.err = m.TryLock(ctx, c.wait, c.lease)
	case "Lock":
		c.err = m.Lock(ctx)
		c.ok = c.err == nil
	case "LockLease":
		c.err = m.LockLease(ctx, c.lease)
		c.ok = c.err == nil
	}
	end := time.Now()
	if timer != nil {
		timer.Stop()
	}
	cmu.Lock()
	c.end, c.returned = end, true
	cmu.Unlock()
	cancel()
	x.mu.Lock()
	c.id = len(x.calls)
	x.calls = append(x.calls, c)
	x.mu.Unlock()
	if c.ok {
		time.Sleep(c.holdFor)
		c.unlockErr = m.Unlock(bg)
		c.unlockAt = time.Now()
	}
}

// check finds the stretches in which a lock was free while a call waited throughout.
func (x *lvRun) check() {
	t := x.t
	x.mu.Lock()
	defer x.mu.Unlock()
	byKey := map[string][]*lvCall{}
	counts := map[string]int{}
	var viol []string
	for _, c := range x.calls {
		we := c.end
		if !c.ctxEnd.IsZero() && c.ctxEnd.Before(we) {
			we = c.ctxEnd
		}
		if c.wait > 0 && c.start.Add(c.wait).Before(we) {
			we = c.start.Add(c.wait)
		}
		c.waitingEnd = we
		if c.wait != 0 {
			byKey[c.key] = append(byKey[c.key], c)
		}
		switch {
		case c.ok:
			counts["held"]++
		case c.err == nil:
			counts["refused"]++
		default:
			counts["error"]++
		}
		bound := c.ctxEnd
		if c.wait >= 0 && (bound.IsZero() || c.start.Add(c.wait).Before(bound)) {
			bound = c.start.Add(c.wait)
		}
		if !bound.IsZero() && c.end.Sub(bound)-x.stalls(bound, c.end) > lvReturnSlack {
			viol = append(viol, fmt.Sprintf("return: call %d returned %v after its bound\n%s", c.id, c.end.Sub(bound).Round(time.Millisecond), x.describe(c, c.start, c.end)))
		}
	}
	worst := time.Duration(0)
	stretches := 0
	for key, ss := range x.samples {
		sort.Slice(ss, func(i, j int) bool { return ss[i].sent.Before(ss[j].sent) })
		// Stretches: runs of reads finding the key absent with one fence value.
		for i := 0; i < len(ss); {
			if ss[i].err || ss[i].exists {
				i++
				continue
			}
			j := i
			for j+1 < len(ss) && !ss[j+1].err && !ss[j+1].exists && ss[j+1].fence == ss[i].fence {
				j++
			}
			from, to := ss[i].recv, ss[j].sent // free throughout
			if to.Sub(from) > livenessBound/2 {
				stretches++
			}
			var lag time.Duration // the raw reads' own latency beyond lvRedisLagAllow
			for k := i; k <= j; k++ {
				if d := ss[k].recv.Sub(ss[k].sent); d > lvRedisLagAllow {
					lag += d
				}
			}
			for _, c := range byKey[key] {
				lo, hi := from, to
				if c.start.After(lo) {
					lo = c.start
				}
				if c.waitingEnd.Before(hi) {
					hi = c.waitingEnd
				}
				d := hi.Sub(lo)
				if d <= 0 {
					continue
				}
				net := d - x.stalls(lo, hi) - lag
				worst = max(worst, net)
				if net > livenessBound {
					viol = append(viol, fmt.Sprintf("free: %s call %d waited %v (%v net of stalls and read lag) while %s was free (fence %s)\n%s",
						c.kind, c.id, d.Round(time.Millisecond), net.Round(time.Millisecond), key, ss[i].fence, x.describe(c, lo, hi)))
				}
			}
			i = j + 1
		}
	}
	t.Logf("%d calls %v; %d free stretches over %v; worst wait on a free lock %v", len(x.calls), counts, stretches, livenessBound/2, worst.Round(time.Millisecond))
	if len(viol) > 0 {
		for i, v := range viol {
			if i == 6 {
				t.Logf("... %d more", len(viol)-i)
				break
			}
			t.Log(v)
		}
		t.Errorf("%d violations (seed %d: %s=%d replays the run's choices)", len(viol), x.seed, envLivenessSeed, x.seed)
	}
}

// describe is c, the other calls on its key around [lo, hi], and the script events of the
// window, times from lo.
func (x *lvRun) describe(c *lvCall, lo, hi time.Time) string {
	ms := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return at.Sub(lo).Round(time.Millisecond).String()
	}
	var b strings.Builder
	line := func(o *lvCall) {
		fmt.Fprintf(&b, "  call %d trial %d %s.%s client %d worker %d owner %s wait %v lease %v start %s ctxEnd %s end %s -> (%v, %v) unlock %s %v\n",
			o.id, o.trial, o.kind, o.method, o.client, o.worker, o.owner, o.wait, o.lease, ms(o.start), ms(o.ctxEnd), ms(o.end), o.ok, o.err, ms(o.unlockAt), o.unlockErr)
	}
	line(c)
	fmt.Fprintf(&b, "  window %s .. %s; other calls on the key:\n", ms(lo), ms(hi))
	wlo, whi := lo.Add(-lvDescribeWindow), hi.Add(lvDescribeWindow)
	if c.start.Before(wlo) {
		wlo = c.start
	}
	for _, o := range x.calls {
		if o != c && o.key == c.key && !o.start.After(whi) && (o.unlockAt.IsZero() && !o.end.Before(wlo) || !o.unlockAt.Before(wlo)) {
			line(o)
		}
	}
	fmt.Fprintf(&b, "  scripts:\n")
	owners := map[string]bool{}
	for _, o := range x.calls {
		if o.key == c.key {
			owners[o.owner] = true
		}
	}
	for _, e := range x.events {
		if (owners[e.owner] || owners[e.successor]) && !e.sent.Before(wlo) && !e.sent.After(whi) {
			fmt.Fprintf(&b, "    %s client %d %s owner %s succ %s recv %s -> %s lost %v delay %v\n",
				ms(e.sent), e.client, e.script, e.owner, e.successor, ms(e.recv), e.reply, e.lost, e.delay.Round(time.Millisecond))
		}
	}
	return b.String()
}
