package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestExplore_WaitBound explores the wait bound and the return values of the waiting
// acquires of Mutex, SpinMutex, FairMutex and both sides of RWMutex (TryLock's godoc, Lock's and LockLease's with
// a ctx deadline, README guarantee 6), seeded and replayable. Six workers on three Clients
// (four on one, so that its releases hand the lock to its own parked waiters) run short
// calls, each on a handle of its own (a fresh owner): TryLock with a random wait (0 to
// 300ms) and a random fixed lease or watchdog mode, under no deadline or under a ctx
// deadline shorter than the wait, and Lock or LockLease under a ctx deadline; a call that
// gets the lock holds it a random while and gives it back. Every script goes through a hook
// that records when each acquire (and each release naming a successor: a hand-off) is sent
// and what came back, and injects reply delays (some longer than a short fixed lease: late
// grants, late hand-offs) and lost replies (the script applied, its reply lost).
//
// Checked from the outside, for every call:
//
//	bound      no acquire is sent for the call, nor a hand-off to it begun, after its start +
//	           wait (or its ctx's end, if earlier: its deadline, or when its Done closed if the
//	           runtime fired the deadline's timer later) + slack (less the stalls of this process
//	           meanwhile, of either scheduler slot: watchSlotStalls), but replays of a request
//	           sent before; wait 0 sends exactly one attempt
//	held       (true, nil): Redis counts the owner's hold right after (unless a fixed lease
//	           counted from the call's start is over by then)
//	refused    (false, nil): another owner may have held the lock in Redis at some moment
//	           of the call (from the first send to it that granted or whose outcome was
//	           unknown, to its give-back: Unlock's return, or the moment Redis had nothing
//	           left of it), or, for a FairMutex, a place in its queue (for a RWMutex, a
//	           writer's claim)
//	error      (false, err): err wraps ErrLeaseExpired, ErrUnknownOutcome, or (a call with a
//	           ctx deadline) the ctx's error
//	leftover   a call that returned false leaves nothing in Redis (the owner's field, a fair
//	           queue place, a writer's claim) after 2 cleanup timeouts + slack (+ the lease when a reply of its
//	           own was lost: a hold of unknown outcome expires with its lease)
//	ctx        a call with a ctx deadline returns within 100 ms of its ctx's end (its
//	           deadline, or its Done if later: wbCall.ended) (less the stalls of this process
//	           meanwhile); the worst is logged
//	return     a TryLock without deadline returns within wait + 2 cleanup timeouts + three of
//	           the longest injected delays + slack (a request in flight as wait ends is seen
//	           to its outcome; a hand-off, through two replays)
//
// Environment:
//
//	RELOCK_WAITBOUND_SEED=<n>     replay a run's choices (printed at the start; the
//	                              goroutines' interleaving is not replayed)
//	RELOCK_WAITBOUND_SECONDS=<s>  calls start while it lasts, per backend (default 5; 30
//	                              with RELOCK_FULL=1)
func TestExplore_WaitBound(t *testing.T) {
	t.Parallel() // its own Clients, names and servers' keys: it runs beside the others (go test ./... stays within 5 minutes)
	seed := seedOf(t, envWaitBoundSeed)
	budget := budgetOf(t, envWaitBoundSeconds, 5*time.Second, 30*time.Second)
	eachBackend(t, func(t *testing.T, b *backend) {
		x := newWBRun(t, b, seed, budget)
		x.run()
		x.check()
	})
}

const (
	envWaitBoundSeed    = "RELOCK_WAITBOUND_SEED"
	envWaitBoundSeconds = "RELOCK_WAITBOUND_SECONDS"
)

// The explorer's settings.
const (
	wbCleanup  = 500 * time.Millisecond // the Clients' cleanup timeout
	wbWatchdog = time.Second            // and watchdog timeout
	wbSlack    = 50 * time.Millisecond  // scheduling slack of the bound check
	wbMaxDelay = 600 * time.Millisecond // the longest injected reply delay
	wbTrial    = time.Second            // one lock name and kind for this long
)

// wbSend is a script send the hook saw for an owner: an acquire (req its request id, "+..."
// for a replay) or a release that names the owner as successor (handoff; req the
// successor's sequence number).
type wbSend struct {
	owner   string
	req     string
	handoff bool
	at      time.Time     // just before it was sent
	grant   int           // 1 granted (to the owner), 0 refused, -1 unknown (an error, or lost by the hook)
	lost    bool          // the hook lost its reply
	delay   time.Duration // the hook's delay of its reply
	noop    bool          // NOSCRIPT: nothing ran (the Client sends it again as EVAL)
}

// wbCall is one acquire call of a worker.
type wbCall struct {
	id       int
	worker   int
	kind     string // "Mutex", "SpinMutex", "FairMutex", "RWMutex"
	read     bool   // RWMutex: the read side (TryRLock, RLock, RLockLease)
	method   string // "TryLock", "Lock", "LockLease" (or their read side's)
	key      string // the lock's key
	owner    string
	field    string        // the owner's hold field in the lock's hash
	wait     time.Duration // TryLock's (-1: Lock, LockLease)
	lease    time.Duration // 0: watchdog mode
	start    time.Time
	deadline time.Time // the ctx's (zero: none)
	// ended is when the ctx's Done closed (zero: not by the call's end). The runtime fires a
	// deadline's timer from the heap of the scheduler slot it was set on: when the OS leaves
	// that slot's thread unscheduled while the other slot runs on, the ctx ends late, and the
	// library, which can see the end only then, sends and returns late with it, while the
	// stall watcher's ticker, on the other slot, sees no gap (helper waitbound24: a Done closed
	// 433-548 ms after its deadline beside a ticker whose worst gap was 23 ms). The ctx's end
	// is the later of the two.
	ended    atomic.Int64 // UnixNano
	end      time.Time
	ok       bool
	err      error
	heldAt   time.Time // (true, nil): when Redis was asked, and found the hold
	held     bool      // Redis counted the hold then
	unlocked time.Time // (true, nil): Unlock's return
	settled  time.Time // false: when Redis had nothing left of the owner (zero: never seen)
}

// bound is when attempts for c may no longer begin.
func (c *wbCall) bound() time.Time {
	b := time.Time{}
	if c.wait >= 0 {
		b = c.start.Add(c.wait)
	}
	if d := c.ctxEnd(); !d.IsZero() && (b.IsZero() || d.Before(b)) {
		b = d
	}
	return b
}

// ctxEnd is when c's ctx ended: its deadline, or when its Done closed if that came later
// (see ended); zero for a call without a deadline.
func (c *wbCall) ctxEnd() time.Time {
	if c.deadline.IsZero() {
		return time.Time{}
	}
	if n := c.ended.Load(); n != 0 {
		if at := time.Unix(0, n); at.After(c.deadline) {
			return at
		}
	}
	return c.deadline
}

type wbRun struct {
	t       *testing.T
	b       *backend
	seed    uint64
	budget  time.Duration
	admin   rueidis.Client
	clients []*rlock.Client
	hooks   []*hookClient

	fmu    sync.Mutex
	frands []*rand.Rand // per Client: the hook's draws
	scale  float64      // fault intensity of the current trial (guarded by fmu)

	mu    sync.Mutex
	sends map[string][]*wbSend // by owner
	calls []*wbCall

	pollers sync.WaitGroup
	stalls  func(start, end time.Time) time.Duration
}

func newWBRun(t *testing.T, b *backend, seed uint64, budget time.Duration) *wbRun {
	x := &wbRun{t: t, b: b, seed: seed, budget: budget, admin: b.rueidis(t), sends: map[string][]*wbSend{}, scale: 1}
	for i := range 3 {
		hc, c := hardSetup(t, b, rlock.WithCleanupTimeout(wbCleanup), rlock.WithWatchdogTimeout(wbWatchdog))
		x.hooks = append(x.hooks, hc)
		x.clients = append(x.clients, c)
		x.frands = append(x.frands, rand.New(rand.NewPCG(seed, uint64(100+i))))
		hc.set(x.hook(i))
	}
	return x
}

// fault is what the hook does to one reply.
type fault struct {
	delay time.Duration
	lose  bool
}

// draw picks the fault of a script call through Client i.
func (x *wbRun) draw(i int, script string, handoff bool) fault {
	x.fmu.Lock()
	defer x.fmu.Unlock()
	r, s := x.frands[i], x.scale
	var f fault
	switch {
	case handoff: // a release that passes the lock on: late hand-offs
		if r.Float64() < 0.35*s {
			f.delay = time.Duration(r.Int64N(int64(wbMaxDelay)))
		}
		f.lose = r.Float64() < 0.06*s
	case script == "acquire" || script == "fair_acquire" || script == "rw_acquire":
		switch p := r.Float64(); {
		case p < 0.04*s:
			f.delay = 150*time.Millisecond + time.Duration(r.Int64N(int64(wbMaxDelay-150*time.Millisecond)))
		case p < 0.2*s:
			f.delay = time.Duration(r.Int64N(int64(150 * time.Millisecond)))
		}
		f.lose = r.Float64() < 0.05*s
	case script == "release" || script == "fair_release" || script == "rw_release":
		if r.Float64() < 0.1*s {
			f.delay = time.Duration(r.Int64N(int64(100 * time.Millisecond)))
		}
		f.lose = r.Float64() < 0.03*s
	}
	return f
}

// hook records the acquires and hand-offs sent through Client i and injects its faults.
func (x *wbRun) hook(i int) scriptHook {
	return func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		var s *wbSend
		switch cmd.script {
		case "acquire", "fair_acquire", "rw_acquire":
			if n, err := strconv.Atoi(cmd.args[0]); err == nil && len(cmd.args) > n+3 {
				s = &wbSend{owner: cmd.args[n+2], req: cmd.args[n+3]}
			}
		case "release":
			// ARGV[5..7] after 3 keys: successor owner, lease, sequence number.
			if cmd.args[0] == "3" && len(cmd.args) > 10 && cmd.args[8] != "" {
				s = &wbSend{owner: cmd.args[8], req: cmd.args[10], handoff: true}
			}
		}
		f := x.draw(i, cmd.script, s != nil && s.handoff)
		if s != nil {
			s.at = time.Now()
			x.mu.Lock()
			x.sends[s.owner] = append(x.sends[s.owner], s)
			x.mu.Unlock()
		}
		res := call()
		if re, ok := rueidis.IsRedisErr(res.Error()); ok && re.IsNoScript() {
			if s != nil {
				x.mu.Lock()
				s.noop = true
				x.mu.Unlock()
			}
			return res
		}
		if s != nil {
			g := -1
			if vals, err := res.AsIntSlice(); err == nil {
				switch {
				case s.handoff && len(vals) == 2:
					g = 0
					if vals[1] > 0 {
						g = 1
					}
				case !s.handoff && len(vals) > 0:
					g = int(vals[0])
				}
			}
			x.mu.Lock()
			s.grant, s.lost, s.delay = g, f.lose, f.delay
			if f.lose {
				s.grant = -1
			}
			x.mu.Unlock()
		}
		if f.delay > 0 {
			time.Sleep(f.delay)
		}
		if f.lose {
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		}
		return res
	}
}

// run runs the workers for the budget, trial after trial (a lock name and kind each), then
// waits for the leftover pollers.
func (x *wbRun) run() {
	x.stalls = watchSlotStalls() // the calls' timers and goroutines run on either slot
	r := rand.New(rand.NewPCG(x.seed, 1))
	end := time.Now().Add(x.budget)
	for trial := 0; time.Now().Before(end); trial++ {
		kind := []string{"Mutex", "Mutex", "Mutex", "SpinMutex", "FairMutex", "RWMutex"}[r.IntN(6)]
		name := fmt.Sprintf("%s-%d-%s", redistest.Name(x.t), trial, kind)
		x.fmu.Lock()
		x.scale = []float64{0.5, 1, 2}[r.IntN(3)]
		x.fmu.Unlock()
		var wg sync.WaitGroup
		trialEnd := time.Now().Add(wbTrial)
		for w := range 6 {
			ci := 0
			if w >= 4 {
				ci = w - 3
			}
			wr := rand.New(rand.NewPCG(x.seed, uint64(1000*trial+10+w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(trialEnd) {
					x.one(wr, w, x.clients[ci], kind, name)
				}
			}()
		}
		wg.Wait()
	}
	x.pollers.Wait()
}

// wbOps are the acquire and release methods of one side of a fresh handle.
type wbOps struct {
	key, owner, field string // field: the owner's hold field in the lock's hash
	try               func(ctx context.Context, wait, lease time.Duration) (bool, error)
	lock              func(ctx context.Context) error
	lockLease         func(ctx context.Context, lease time.Duration) error
	unlock            func(ctx context.Context) error
}

// handle is a fresh handle of kind on name through c (the read side of a read-write lock
// when read).
func handle(c *rlock.Client, kind, name string, read bool) wbOps {
	if kind == "RWMutex" {
		rw := c.RWMutex(name)
		o := wbOps{key: rw.Key(), owner: rlock.ModelRWOwnerID(rw, bg)}
		if read {
			o.field, o.try, o.lock, o.lockLease, o.unlock = "r:"+o.owner, rw.TryRLock, rw.RLock, rw.RLockLease, rw.RUnlock
		} else {
			o.field, o.try, o.lock, o.lockLease, o.unlock = o.owner, rw.TryLock, rw.Lock, rw.LockLease, rw.Unlock
		}
		return o
	}
	var m *rlock.Mutex
	switch kind {
	case "SpinMutex":
		m = c.SpinMutex(name).Mutex
	case "FairMutex":
		m = c.FairMutex(name).Mutex
	default:
		m = c.Mutex(name)
	}
	owner := rlock.ModelOwnerID(m, bg)
	return wbOps{key: m.Key(), owner: owner, field: owner, try: m.TryLock, lock: m.Lock, lockLease: m.LockLease, unlock: m.Unlock}
}

// one runs one call of worker w, and its hold and give-back when it gets the lock.
func (x *wbRun) one(r *rand.Rand, w int, c *rlock.Client, kind, name string) {
	read := kind == "RWMutex" && r.IntN(2) == 0
	m := handle(c, kind, name, read)
	call := &wbCall{worker: w, kind: kind, read: read, key: m.key, owner: m.owner, field: m.field, wait: -1}
	if r.IntN(10) < 6 { // else watchdog mode
		call.lease = 20*time.Millisecond + time.Duration(r.Int64N(int64(380*time.Millisecond)))
	}
	ctx := bg
	var timeout time.Duration
	switch p := r.IntN(10); {
	case p < 6:
		call.method = "TryLock"
		if r.IntN(5) > 0 {
			call.wait = time.Millisecond + time.Duration(r.Int64N(int64(300*time.Millisecond)))
		} else {
			call.wait = 0
		}
	case p < 8:
		call.method = "TryLock"
		call.wait = 50*time.Millisecond + time.Duration(r.Int64N(int64(350*time.Millisecond)))
		timeout = 10*time.Millisecond + time.Duration(r.Int64N(int64(call.wait-10*time.Millisecond)))
	default:
		call.method = "Lock"
		if call.lease > 0 {
			call.method = "LockLease"
		}
		timeout = 20*time.Millisecond + time.Duration(r.Int64N(int64(280*time.Millisecond)))
	}
	hold := time.Duration(r.Int64N(int64(150 * time.Millisecond)))
	var cancel context.CancelFunc = func() {}
	call.start = time.Now()
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(bg, timeout)
		call.deadline, _ = ctx.Deadline()
		stop := context.AfterFunc(ctx, func() { call.ended.Store(time.Now().UnixNano()) })
		defer stop()
	}
	switch call.method {
	case "TryLock":
		call.ok, call.err = m.try(ctx, call.wait, call.lease)
	case "Lock":
		call.err = m.lock(ctx)
		call.ok = call.err == nil
	case "LockLease":
		call.err = m.lockLease(ctx, call.lease)
		call.ok = call.err == nil
	}
	call.end = time.Now()
	cancel()
	x.mu.Lock()
	call.id = len(x.calls)
	x.calls = append(x.calls, call)
	x.mu.Unlock()
	if call.ok && call.err == nil {
		n, err := x.admin.Do(bg, x.admin.B().Hget().Key(call.key).Field(call.field).Build()).AsInt64()
		call.heldAt, call.held = time.Now(), err == nil && n > 0
		time.Sleep(hold)
		_ = m.unlock(bg)
		call.unlocked = time.Now()
		return
	}
	x.pollers.Add(1)
	go func() {
		defer x.pollers.Done()
		x.poll(call)
	}()
}

// poll watches Redis until it has nothing left of call's owner (its field in the lock's
// hash, its place in a fair queue), for at most the leftover bound and a second.
func (x *wbRun) poll(call *wbCall) {
	giveUp := call.end.Add(2*wbCleanup + 2*wbMaxDelay + max(call.lease, wbWatchdog) + time.Second)
	for {
		cmds := rueidis.Commands{x.admin.B().Hexists().Key(call.key).Field(call.field).Build()}
		switch {
		case call.kind == "FairMutex":
			cmds = append(cmds, x.admin.B().Zscore().Key(call.key+":queue").Member(call.owner).Build())
		case call.kind == "RWMutex" && !call.read:
			cmds = append(cmds, x.admin.B().Zscore().Key(call.key+":writers").Member(call.owner).Build())
		}
		left := false
		for i, res := range x.admin.DoMulti(bg, cmds...) {
			if i == 0 {
				n, err := res.AsInt64()
				left = left || err != nil || n > 0 // an error: asked again
			} else {
				left = left || !rueidis.IsRedisNil(res.Error()) // a queue place (its score)
			}
		}
		if !left {
			call.settled = time.Now()
			return
		}
		if time.Now().After(giveUp) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check checks every call and fails the test with the violations.
func (x *wbRun) check() {
	t := x.t
	x.mu.Lock()
	defer x.mu.Unlock()
	var viol []string
	add := func(c *wbCall, what string, args ...any) {
		viol = append(viol, fmt.Sprintf("call %d %s: %s\n%s", c.id, what, fmt.Sprintf(args[0].(string), args[1:]...), x.describe(c)))
	}
	// Hold intervals: from the first send that granted the owner the lock or whose outcome
	// was unknown (a fair lock's: any, a queue place), to its give-back.
	type span struct {
		from, to time.Time
		owner    string
	}
	spans := map[string][]span{} // by key
	for _, c := range x.calls {
		var from time.Time
		for _, s := range x.sends[c.owner] {
			// A fair lock also refuses a free lock to a caller with waiters ahead: a refused
			// attempt may have queued its owner.
			// So does a read-write lock to a reader while a writer's claim is live.
			if !s.noop && (s.grant != 0 || c.kind == "FairMutex" || c.kind == "RWMutex") && (from.IsZero() || s.at.Before(from)) {
				from = s.at
			}
		}
		if from.IsZero() {
			continue
		}
		to := c.unlocked
		if !c.ok {
			to = c.settled
		}
		if to.IsZero() {
			to = time.Now()
		}
		spans[c.key] = append(spans[c.key], span{from, to, c.owner})
	}
	var worstBound, worstBoundNet, worstCtx, worstReturn, worstSettle time.Duration
	counts := map[string]int{}
	handoffs, lateGrants := 0, 0
	for _, c := range x.calls {
		bound := c.bound()
		// bound: attempts and hand-offs begin within the bound; replays of those only.
		firsts := map[string]time.Time{} // request or hand-off number -> first send
		nFirst := 0
		for _, s := range x.sends[c.owner] {
			if s.noop || strings.HasPrefix(s.req, "+") {
				continue
			}
			if at, ok := firsts[s.req]; !ok || s.at.Before(at) {
				if !ok && !s.handoff {
					nFirst++
				}
				firsts[s.req] = s.at
			}
			if s.handoff {
				handoffs++
			}
		}
		for req, at := range firsts {
			if d := at.Sub(bound); d > worstBound {
				worstBound = d
			}
			st := x.stalls(bound, at)
			worstBoundNet = max(worstBoundNet, at.Sub(bound)-st)
			if at.Sub(bound)-st > wbSlack {
				add(c, "bound", "request %s begun %v after the bound, the process stalled %v of it", req,
					at.Sub(bound).Round(time.Millisecond), st.Round(time.Millisecond))
			}
		}
		for _, s := range x.sends[c.owner] {
			if s.noop || !strings.HasPrefix(s.req, "+") {
				continue
			}
			if _, ok := firsts[strings.TrimPrefix(s.req, "+")]; !ok {
				add(c, "bound", "replay %s of a request never sent", s.req)
			}
		}
		if c.method == "TryLock" && c.wait == 0 && (nFirst > 1 || nFirst == 0 && c.err == nil) {
			add(c, "bound", "wait 0 sent %d attempts", nFirst)
		}
		// The call's outcome.
		switch {
		case c.ok && c.err != nil:
			add(c, "error", "true with an error")
		case c.ok:
			counts["held"]++
			if !c.held && (c.lease == 0 || c.heldAt.Before(c.start.Add(c.lease))) {
				add(c, "held", "(true, nil) but Redis had no hold of the owner %v after the start", c.heldAt.Sub(c.start).Round(time.Millisecond))
			}
		case c.err == nil:
			counts["refused"]++
			other := false
			for _, sp := range spans[c.key] {
				if sp.owner != c.owner && !sp.from.After(c.end) && !sp.to.Before(c.start) {
					other = true
					break
				}
			}
			if !other {
				add(c, "refused", "(false, nil) but no other owner may have held the lock during the call")
			}
		default:
			ctxErr := !c.deadline.IsZero() && (errors.Is(c.err, context.DeadlineExceeded) || errors.Is(c.err, context.Canceled))
			switch {
			case errors.Is(c.err, rlock.ErrLeaseExpired):
				counts["lease-expired"]++
				lateGrants++
			case errors.Is(c.err, rlock.ErrUnknownOutcome):
				counts["unknown"]++
			case ctxErr:
				counts["ctx"]++
			default:
				add(c, "error", "undocumented error %v", c.err)
			}
		}
		// leftover.
		if !c.ok {
			limit := 2*wbCleanup + 200*time.Millisecond
			for _, s := range x.sends[c.owner] {
				if s.lost {
					limit += max(c.lease, wbWatchdog) // a hold of unknown outcome expires with its lease
					break
				}
			}
			switch {
			case c.settled.IsZero():
				add(c, "leftover", "Redis still has the owner's hold or queue place")
			case c.settled.Sub(c.end) > limit:
				add(c, "leftover", "Redis had the owner's hold or place until %v after the return", c.settled.Sub(c.end).Round(time.Millisecond))
			}
			if !c.settled.IsZero() && c.settled.Sub(c.end) > worstSettle {
				worstSettle = c.settled.Sub(c.end)
			}
		}
		// ctx: within 100 ms of the ctx's end (its deadline, or its Done if later: ctxEnd).
		if d := c.ctxEnd(); !d.IsZero() && c.end.After(d) {
			late := c.end.Sub(d)
			worstCtx = max(worstCtx, late)
			if st := x.stalls(d, c.end); late-st > 100*time.Millisecond {
				add(c, "ctx", "returned %v after its ctx's end (its Done closed %v after its deadline), the process stalled %v of it",
					late.Round(time.Millisecond), d.Sub(c.deadline).Round(time.Millisecond), st.Round(time.Millisecond))
			}
		}
		// return: a TryLock without deadline.
		if c.method == "TryLock" && c.deadline.IsZero() {
			over := c.end.Sub(bound)
			worstReturn = max(worstReturn, over)
			if st := x.stalls(bound, c.end); over-st > 2*wbCleanup+3*wbMaxDelay+300*time.Millisecond {
				add(c, "return", "returned %v after its wait, the process stalled %v of it", over.Round(time.Millisecond), st.Round(time.Millisecond))
			}
		}
	}
	t.Logf("%d calls %v; %d hand-off sends; worst: attempt after bound %v (%v with the stalls meanwhile subtracted, the worst so), return after ctx end %v, TryLock return after wait %v, settle %v",
		len(x.calls), counts, handoffs, worstBound.Round(time.Millisecond), worstBoundNet.Round(time.Millisecond), worstCtx.Round(time.Millisecond),
		worstReturn.Round(time.Millisecond), worstSettle.Round(time.Millisecond))
	if len(viol) > 0 {
		sort.Strings(viol)
		for i, v := range viol {
			if i == 12 {
				t.Logf("... %d more", len(viol)-i)
				break
			}
			t.Log(v)
		}
		t.Errorf("%d violations (seed %d: %s=%d replays the run's choices)", len(viol), x.seed, envWaitBoundSeed, x.seed)
	}
}

// describe is c and its owner's sends, times from c's start.
func (x *wbRun) describe(c *wbCall) string {
	ms := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return at.Sub(c.start).Round(time.Millisecond).String()
	}
	var b strings.Builder
	side := ""
	if c.read {
		side = " (read)"
	}
	fmt.Fprintf(&b, "  %s.%s%s worker %d owner %s wait %v lease %v deadline %s -> (%v, %v) at %s; settled %s, unlocked %s\n",
		c.kind, c.method, side, c.worker, c.owner, c.wait, c.lease, ms(c.deadline), c.ok, c.err, ms(c.end), ms(c.settled), ms(c.unlocked))
	for _, s := range x.sends[c.owner] {
		what := "acquire"
		if s.handoff {
			what = "hand-off"
		}
		fmt.Fprintf(&b, "    %s %s sent at %s grant %d reply delayed %v lost %v noop %v\n", what, s.req, ms(s.at), s.grant, s.delay.Round(time.Millisecond), s.lost, s.noop)
	}
	return b.String()
}
