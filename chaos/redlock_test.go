package chaos

// The rows of this file run a RedLock (rlock.NewRedLock) over five independent
// redis-servers (no replication, no persistence) under a contended workload of goroutine
// contenders, each a RedLock handle over its own set of five Clients, checked as every other
// row is (the fenced resource, the holds, porcupine). A lock is also held throughout each
// fault, with a waiter of another set parked on it. The faults hit a minority of the
// servers: two killed (and restarted empty later), two SIGSTOPped for longer than the
// per-instance timeout and the lease, one restarted without persistence.
//
// The lock held throughout is granted by all 5 servers before the fault (holdOnAll), so
// that a fault on any 2 leaves it on a majority. It then lives on exactly a majority in the
// first two rows (3 of 5): it is lost if any one of the 3 misses a renewal, that is if a
// renewal is not confirmed within the third of the lease (about 320 ms) between its due
// time and the lease's end. A loaded machine can do that: a stall of this process or of one
// of the live servers that long (the rows measure both, stallMeter). Such a loss is no
// finding and fails nothing; a loss that no measured stall explains, or one of another
// cause (the lease found gone), fails the row (lostHeld).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/chaos/internal/worker"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
	"github.com/relock-go/relock/watchdog"
)

const (
	// redServers is the number of independent servers; a majority is 3.
	redServers = 5
	// redLease is the watchdog lease of every RedLock Client (renewed every 2/3 of it).
	redLease = time.Second
	// redInstTimeout is the RedLock's per-instance timeout of an acquire.
	redInstTimeout = 100 * time.Millisecond
	// redPause is how long the paused minority stays SIGSTOPped: longer than the
	// per-instance timeout and than the lease (their copies of every lock expire).
	redPause = 2500 * time.Millisecond
	// redWait is the contenders' TryLock wait: far longer than any fault.
	redWait = 30 * time.Second
)

func skipShortRed(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: five redis-servers under faults for a few seconds (run without -short)")
	}
}

// redRun is a RedLock run on five servers: the contended workload (3 sets of five Clients,
// 2 owners each, on 2 names), and a lock on a third name held by a fourth set throughout
// the fault with a waiter of a fifth set parked on it.
type redRun struct {
	*clusterRun
	ss      []*redistest.Server
	names   []string // the contended names
	held    string   // the name held throughout
	holder  *rlock.RedLock
	waiter  *redWaiter
	started time.Time
	// meter measures the stalls of this process and of the servers the fault spares, from
	// the hold of the lock held throughout until its Unlock.
	meter *stallMeter
	// ended is closed once the hold of the lock held throughout has ended (its Done),
	// endedAt set before.
	ended   chan struct{}
	endedAt time.Time
	// excused says why the lock held throughout was lost to a stall of the machine (see
	// lostHeld): nothing more is checked of it. Empty while it is held.
	excused string
}

// redWaiter is a RedLock waiter in TryLock.
type redWaiter struct {
	r    *rlock.RedLock
	done chan struct{}
	err  error
	at   time.Time
}

// startRedRun starts the run; live are the servers the row's fault spares, whose stalls
// (and this process's) may excuse a loss of the lock held throughout.
func startRedRun(t *testing.T, live ...int) *redRun {
	t.Helper()
	ss := redistest.StartN(t, redServers)
	rr := &redRun{clusterRun: newClusterRun(t), ss: ss, started: time.Now()}
	ns := names(t, 3)
	rr.names, rr.held = ns[:2], ns[2]
	set := func(extra ...func(i int) rlock.Option) []*rlock.Client {
		cs := make([]*rlock.Client, len(ss))
		for i, s := range ss {
			opts := []rlock.Option{rlock.WithWatchdogTimeout(redLease), rlock.WithCleanupTimeout(5 * time.Second)}
			for _, f := range extra {
				opts = append(opts, f(i))
			}
			cs[i] = relock(t, s, s.Addr(), opts...)
		}
		return cs
	}
	// Every Client first: the contenders stop (a cleanup registered by the first workers
	// call) before any Client is closed. The 4th set's Clients (the holder's) tell the
	// renewals Redis confirmed: they renew nothing but the lock held throughout.
	renewed := newRenewTally(len(ss))
	var sets [][]*rlock.Client
	for i := 0; i < 5; i++ {
		if i == 3 {
			sets = append(sets, set(renewed.option))
			continue
		}
		sets = append(sets, set())
	}
	opts := []rlock.RedLockOption{rlock.WithInstanceTimeout(redInstTimeout)}
	cfg := worker.Config{Names: rr.names, Wait: redWait, Work: 2 * time.Millisecond, Kind: "red", RedOptions: opts}
	for i, cs := range sets[:3] {
		cfg := cfg
		cfg.RedClients = cs
		rr.workers(cs[0], fmt.Sprint("red", i, "-"), 2, cfg)
	}
	rr.holder = rlock.NewRedLock(rr.held, sets[3], opts...)
	rr.holdOnAll(renewed)
	var watched []*redistest.Server
	for _, i := range live {
		watched = append(watched, ss[i])
	}
	rr.meter = startStallMeter(t, watched)
	rr.ended = make(chan struct{})
	ended := rr.holder.Done(bg)
	go func() {
		<-ended // the Unlock in finish, a loss, or the Clients' Close at the test's end
		rr.endedAt = time.Now()
		close(rr.ended)
	}()
	w := &redWaiter{r: rlock.NewRedLock(rr.held, sets[4], opts...), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ok, err := w.r.TryLock(bg, 90*time.Second, 0)
		w.at = time.Now()
		if err == nil && !ok {
			err = errors.New("wait ran out")
		}
		w.err = err
	}()
	rr.waiter = w
	// Parked: refused by a majority, each of which marked the lock for its release to publish.
	key := sets[0][0].Mutex(rr.held).Key()
	redistest.WaitFor(t, 20*time.Second, "the waiter on "+rr.held+" to be refused and mark the lock", func() bool {
		n := 0
		for _, s := range ss {
			msg := s.Do(t, "HEXISTS", key, "w")
			if v, err := msg.AsInt64(); err == nil && v == 1 {
				n++
			}
		}
		return n >= 3
	})
	rr.grants("the workload to run", 5, rr.names...)
	return rr
}

// holdOnAll takes the lock held throughout on all the instances, as the rows suppose: a hold
// granted by 3 or 4 of them survives the loss of fewer than the fault's 2, and the fault
// may hit those that hold it. An instance whose grant comes after the per-instance timeout
// (fresh Clients and servers under -race, the workload starting beside them: 100-200 ms) is
// not part of the hold and is given back: the holder then holds 3 or 4, and the lock was
// lost when the fault took 2 of them, leaving 2 (TestRedLock_killMinority at the check 2
// leases after the kill, TestRedLock_pauseMinority at the end of the pause, once the paused
// instances' leases ran out: 2 of 10 runs of the two rows on a quiet machine). Every
// instance of the hold renews it: the hold is on all once each of the holder's Clients told
// a confirmed renewal (renewTally); one that told none within the lease after the grant is
// not in the hold, and the lock is taken again.
func (rr *redRun) holdOnAll(renewed *renewTally) {
	t := rr.t
	t.Helper()
	const tries = 5
	for try := 1; ; try++ {
		since := time.Now()
		if ok, err := rr.holder.TryLock(bg, 10*time.Second, 0); !ok || err != nil {
			t.Fatalf("TryLock %s: %v %v", rr.held, ok, err)
		}
		all := renewed.arm(since)
		select {
		case <-all:
			return
		case <-time.After(redLease + redLease/2): // every instance of the hold renews within its lease
		}
		n := renewed.count()
		if try == tries {
			t.Fatalf("the lock held throughout was held on %d of the %d instances after each of %d tries (a grant later than the per-instance timeout is given back)", n, len(rr.ss), tries)
		}
		t.Logf("the lock held throughout is held on %d of the %d instances (a grant came after the per-instance timeout and was given back): taken again", n, len(rr.ss))
		if err := rr.holder.Unlock(bg); err != nil {
			t.Fatalf("Unlock %s to take it again: %v", rr.held, err)
		}
	}
}

// renewTally records which of a set's Clients told a renewal round that Redis confirmed
// (RenewalRound without failures), begun after the time it was armed with.
type renewTally struct {
	mu    sync.Mutex
	since time.Time
	ok    []bool
	all   chan struct{} // closed once every Client told one
}

func newRenewTally(n int) *renewTally {
	return &renewTally{ok: make([]bool, n), all: make(chan struct{})}
}

// option is the Option of Client i of the set: an Observer that tells its renewal rounds.
func (r *renewTally) option(i int) rlock.Option {
	return rlock.WithObserver(&rlock.Observer{RenewalRound: func(e rlock.RenewalRoundInfo) {
		if e.Leases == 0 || e.Failures > 0 {
			return
		}
		begun := time.Now().Add(-e.Took)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.ok[i] || begun.Before(r.since) {
			return
		}
		r.ok[i] = true
		if !slices.Contains(r.ok, false) {
			close(r.all)
		}
	}})
}

// arm forgets the rounds told so far and returns a channel closed once every Client told a
// confirmed round begun after since.
func (r *renewTally) arm(since time.Time) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.since = since
	clear(r.ok)
	r.all = make(chan struct{})
	return r.all
}

// count is how many Clients told a confirmed round since the last arm.
func (r *renewTally) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ok := range r.ok {
		if ok {
			n++
		}
	}
	return n
}

// stillHeld fails t if the held lock was lost (unless to a stall of the machine: lostHeld)
// or the waiter got it.
func (rr *redRun) stillHeld(when string) {
	t := rr.t
	t.Helper()
	if rr.excused != "" {
		return // lost to a stall: nothing more to check of it
	}
	if err := rr.holder.Err(bg); err != nil {
		rr.lostHeld(when, err)
		return
	}
	if ttl, err := rr.holder.TTL(bg); err != nil || ttl <= 0 {
		t.Fatalf("%s: the lock held throughout has TTL %v, %v", when, ttl, err)
	}
	select {
	case <-rr.waiter.done:
		t.Fatalf("%s: the waiter on the held lock returned while it was held: %v", when, rr.waiter.err)
	default:
	}
}

// lostHeld judges the loss of the lock held throughout, seen when with err: it fails t unless
// its cause is a lease that ran out unconfirmed (a renewal that came too late, not one that
// found the lease gone) and this process or a live server stalled for at least a third of
// the last renewal window before the loss (the third of the lease between a renewal's
// last chance to go out on time and the loss; a stall that delays the renewal past the lease
// covers most of it). Then the loss is the machine's, recorded in rr.excused.
func (rr *redRun) lostHeld(when string, err error) {
	t := rr.t
	t.Helper()
	select {
	case <-rr.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the lock held throughout was lost (%v) and its Done not closed 10s later", when, err)
	}
	if !errors.Is(err, rlock.ErrLockLost) || !errors.Is(err, watchdog.ErrExpired) {
		t.Fatalf("%s: the lock held throughout was lost: %v", when, err)
	}
	window := redLease / 3
	stalled, longest := rr.meter.cover(rr.endedAt.Add(-window), rr.endedAt)
	if stalled < window/3 {
		t.Fatalf("%s: the lock held throughout was lost: %v; this process and the %d live servers stalled only %v (longest %v) in the %v before the loss: not the machine's load",
			when, err, rr.meter.servers, stalled.Round(time.Millisecond), longest.Round(time.Millisecond), window.Round(time.Millisecond))
	}
	rr.excused = fmt.Sprintf("lost %v after the hold began, this process or a live server stalled %v (longest %v) of the %v before",
		rr.endedAt.Sub(rr.started).Round(time.Millisecond), stalled.Round(time.Millisecond), longest.Round(time.Millisecond), window.Round(time.Millisecond))
	t.Logf("%s: the lock held throughout was %s: a loaded machine, not a finding (%v)", when, rr.excused, err)
}

// stallMeter records, from its start until stop, the stalls of this process (a goroutine
// that a 5 ms ticker wakes runs more than stallGap late) and of the servers it watches (a
// PING sent every 20 ms that takes more than stallGap): what a loaded machine does to the
// renewals of a lock.
type stallMeter struct {
	servers int
	mu      sync.Mutex
	spans   [][2]time.Time
	stopCh  chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

const stallGap = 20 * time.Millisecond

func startStallMeter(t *testing.T, watch []*redistest.Server) *stallMeter {
	t.Helper()
	m := &stallMeter{servers: len(watch), stopCh: make(chan struct{})}
	var cs []rueidis.Client
	for _, s := range watch {
		cs = append(cs, s.Client(t)) // closed at cleanup, after stop (registered below)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-m.stopCh:
				return
			case <-tk.C:
			}
			// The clock on waking, not the tick's time: a goroutine that a timer wakes late
			// is what delays a renewal.
			now := time.Now()
			if now.Sub(last) > stallGap {
				m.add(last, now)
			}
			last = now
		}
	}()
	for _, c := range cs {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			tk := time.NewTicker(20 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-m.stopCh:
					return
				case <-tk.C:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(bg, time.Second)
				_ = c.Do(ctx, c.B().Ping().Build()).Error()
				cancel()
				if end := time.Now(); end.Sub(start) > stallGap {
					m.add(start, end)
				}
			}
		}()
	}
	t.Cleanup(m.stop)
	return m
}

func (m *stallMeter) add(a, b time.Time) {
	m.mu.Lock()
	m.spans = append(m.spans, [2]time.Time{a, b})
	m.mu.Unlock()
}

func (m *stallMeter) stop() {
	m.once.Do(func() { close(m.stopCh) })
	m.wg.Wait()
}

// cover is how much of [a, b] the stalls recorded so far cover (their union), and the
// longest of them that overlaps it.
func (m *stallMeter) cover(a, b time.Time) (covered, longest time.Duration) {
	m.mu.Lock()
	spans := slices.Clone(m.spans)
	m.mu.Unlock()
	slices.SortFunc(spans, func(x, y [2]time.Time) int { return x[0].Compare(y[0]) })
	var at time.Time // the end of the union so far, within [a, b]
	for _, sp := range spans {
		if !sp[1].After(a) || !sp[0].Before(b) {
			continue
		}
		longest = max(longest, sp[1].Sub(sp[0]))
		from, to := maxTime(sp[0], a, at), minTime(sp[1], b)
		if to.After(from) {
			covered += to.Sub(from)
			at = to
		}
	}
	return covered, longest
}

func maxTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// holders counts the running servers that have the lock key of name.
func (rr *redRun) holders(name string) int {
	n := 0
	for _, s := range rr.ss {
		if !s.Running() {
			continue
		}
		msg := s.Do(rr.t, "EXISTS", redKeyOf(name))
		if v, err := msg.AsInt64(); err == nil && v == 1 {
			n++
		}
	}
	return n
}

// redKeyOf is the key of name's lock on each instance (the Clients' default prefix).
func redKeyOf(name string) string { return "{relock:" + name + "}" }

// redCheck is what finish found beyond the checker's report.
type redCheck struct {
	rep    report
	ops    []worker.Op
	wake   time.Duration // the waiter's wake-up after the release of the lock held throughout
	below  int           // holds the fault took below a majority: Unlock said ErrNotHeld
	across int           // untold overlaps of a hold from before the fault with one after it
	// excused: the lock held throughout was lost to a stall of the machine (redRun.excused)
	excused string
}

// finish hands the held lock to the waiter, stops the workload and checks the run against
// the fault, which hit the servers between from and to (worker.Mono):
//   - the fenced resource must see no violation (no overlap, tokens rise, counter exact);
//   - the history must be linearizable against the lock model with expiry (a hold that a
//     fault takes below a majority is lost, as a lease that ran out);
//   - no two holds may overlap with neither holder told, except one that began before the
//     fault's end with one that began after its start: that is the documented RedLock
//     assumption (a server restarted without its data before a lease has passed), counted
//     in across and shown as a limitation;
//   - no error reaches a caller; an Unlock may say ErrNotHeld only for a hold that the fault
//     took below a majority (given back by fewer than 3), whose hold spanned the fault;
//   - in the end no key is left on any server (late grants given back).
func (rr *redRun) finish(from, to int64) redCheck {
	t := rr.t
	t.Helper()
	if rr.excused == "" {
		if err := rr.holder.Err(bg); err != nil {
			rr.lostHeld("at the end", err) // lost since the last stillHeld
		}
	}
	rr.meter.stop()
	if err := rr.holder.Unlock(bg); err != nil && (rr.excused == "" || !errors.Is(err, rlock.ErrNotHeld)) {
		t.Fatalf("Unlock of the lock held throughout: %v", err)
	}
	released := time.Now()
	select {
	case <-rr.waiter.done:
	case <-time.After(wakeBound):
		t.Fatalf("the waiter on %s was not woken %v after the release", rr.held, wakeBound)
	}
	if rr.waiter.err != nil {
		t.Fatalf("the waiter on %s: %v", rr.held, rr.waiter.err)
	}
	out := redCheck{wake: max(rr.waiter.at.Sub(released), 0), excused: rr.excused}
	if err := rr.waiter.r.Unlock(bg); err != nil {
		t.Fatalf("the waiter's Unlock of %s: %v", rr.held, err)
	}
	rr.end()
	ops, lost := rr.rec.snapshot()
	out.ops = ops
	rep := check(rr.res, ops, lost)
	out.rep = rep
	t.Logf("checker: %s", rep)
	if rep.Overlaps+rep.TokensBack+rep.CounterOff > 0 {
		t.Errorf("the fenced resource saw a violation: %s", rep)
	}
	if rep.HoldOverlaps > 0 {
		out.across = untoldOverlaps(t, ops, lost, "fault", func(_ string, a, b *span) bool {
			return a.start < to && b.start > from
		})
	}
	out.rep.Linear = checkLinear(t, true, ops, func(m *porcupine.Model, info porcupine.LinearizationInfo) string {
		return rr.dump(m, info, ops, lost)
	})
	if noop, unknown, s := errorsIn(ops); noop+unknown > 0 {
		t.Errorf("%d errors and %d unknown outcomes reached the callers: %v", noop, unknown, s)
	}
	acquired := map[string]int64{}
	for _, o := range ops {
		k := secKey(o.Owner, o.Token)
		switch {
		case o.Kind == "acquire" && o.Out == worker.OutOK:
			acquired[k] = o.Return
		case o.Kind == "release" && o.Out == worker.OutNotHeld:
			if strings.Contains(o.Err, "given back by") && acquired[k] < to && o.Return > from {
				out.below++
				continue
			}
			t.Errorf("an Unlock said ErrNotHeld for a hold the fault did not take below a majority: %+v", o)
		}
	}
	// Late grants are given back in the background: every key goes.
	all := append(append([]string{}, rr.names...), rr.held)
	redistest.WaitFor(t, 10*time.Second, "no lock key left on any server", func() bool {
		for _, n := range all {
			if rr.holders(n) > 0 {
				return false
			}
		}
		return true
	})
	return out
}

// grantsIn counts the grants of the history whose acquire returned within [from, to].
func grantsIn(ops []worker.Op, from, to int64) int {
	n := 0
	for _, o := range ops {
		if o.Kind == "acquire" && o.Out == worker.OutOK && o.Return >= from && o.Return <= to {
			n++
		}
	}
	return n
}

// outcome is the measured outcome common to the RedLock rows; it marks the row a
// documented limitation when holds overlapped across the fault.
func (c redCheck) outcome(t *testing.T, head string) {
	acq, rel := stalls(c.ops)
	held := fmt.Sprintf("the lock held throughout kept, its waiter woken %v after the release", roundMS(c.wake))
	if c.excused != "" {
		held = "the lock held throughout " + c.excused + " (a loaded machine: not checked this run), its waiter got it after"
	}
	setOutcome(t, head+fmt.Sprintf("; workload: %d holds (%d stale writes refused), %d taken below a majority by the fault (grants on 3 or 4 servers, the victims among them: Unlock said ErrNotHeld), %d loss notices, 0 errors; longest acquire %v, longest Unlock %v; %s; no key left on the 5 servers; %d violations, %s (lock model with expiry)",
		c.rep.Acquired, c.rep.Rejected, c.below, c.rep.Lost, acq.Round(time.Millisecond), rel.Round(time.Millisecond), held, c.rep.violations()-c.across, c.rep.Linear))
	if c.excused != "" {
		setRow(t, func(r *row) { r.status = "pass (the held lock: lost to a stall, not checked)" })
	}
	if c.across > 0 {
		setRow(t, func(r *row) {
			r.status = "limitation (documented)"
			r.outcome += fmt.Sprintf("; %d hold(s) from before the fault overlapped one granted after it, neither holder told yet: a server came back without the lock before a lease had passed (the RedLock assumption: stay down a max lease after a crash, or appendfsync always; see the README's RedLock section)", c.across)
		})
	}
}

const redSetup = "RedLock over 5 independent redis-servers (no persistence): 3 sets of 5 Clients x 2 owners (watchdog, lease 1s, per-instance timeout 100ms) contend on 2 names; a 4th set holds a 3rd name throughout (granted by all 5 before the fault), a 5th set's waiter parked on it."

// redExpected is what every RedLock row expects beyond its own fault.
const redExpected = "; 0 violations with the fenced resource, no two holds at once with neither told, linearizable (lock model with expiry); no error reaches a caller; a workload hold whose grants the fault takes below a majority (granted by exactly 3 or 4 servers, the victims among them) is lost, its Unlock says ErrNotHeld; no key left in the end"

func TestRedLock_killMinority(t *testing.T) {
	skipShortRed(t)
	result(t, row{order: "redlock 1", fault: redSetup + " 2 of the 5 servers killed (SIGKILL) mid-run; 2 leases later restarted empty",
		expected: "the workload goes on over the 3 (a majority); the held lock kept, renewed on the 3; after the 2 come back empty nobody else gets it" + redExpected})
	rr := startRedRun(t, 2, 3, 4)
	killed := worker.Mono()
	killedAt := time.Now()
	for _, s := range rr.ss[:2] {
		s.Kill(t)
	}
	rr.grants("the workload to go on over 3 of 5", 20, rr.names...)
	if d := 2*redLease - time.Since(killedAt); d > 0 {
		time.Sleep(d) // the fault's length: the held lock must outlive two leases on the 3
	}
	rr.stillHeld("2 leases after the kill")
	on3 := rr.holders(rr.held)
	down := worker.Mono()
	for _, s := range rr.ss[:2] {
		s.Restart(t) // empty
	}
	up := worker.Mono()
	rr.grants("the workload to go on after the restart", 10, rr.names...)
	rr.stillHeld("after the 2 came back empty")
	c := rr.finish(killed, up)
	held := fmt.Sprintf("; the held lock on %d of the 3 live servers through 2 leases, still refused to the waiter after the 2 came back empty", on3)
	if c.excused != "" {
		held = ""
	}
	c.outcome(t, fmt.Sprintf("%d grants while 2 were down (%v)%s",
		grantsIn(c.ops, killed, down), time.Duration(down-killed).Round(100*time.Millisecond), held))
}

func TestRedLock_pauseMinority(t *testing.T) {
	skipShortRed(t)
	result(t, row{order: "redlock 2", fault: redSetup + fmt.Sprintf(" 2 of the 5 servers paused (SIGSTOP) %v mid-run: longer than the per-instance timeout and than the lease", redPause),
		expected: "the workload goes on over the 3; the held lock kept; on SIGCONT the late grants are undone" + redExpected})
	rr := startRedRun(t, 0, 1, 2)
	paused := worker.Mono()
	for _, s := range rr.ss[3:] {
		s.Pause(t)
	}
	time.Sleep(redPause) // the fault's length, not a wait for an event
	rr.stillHeld("at the end of the pause")
	resumed := worker.Mono()
	for _, s := range rr.ss[3:] {
		s.Resume(t)
	}
	rr.grants("the workload to go on after the resume", 20, rr.names...)
	rr.stillHeld("after the resume")
	c := rr.finish(paused, resumed)
	during := grantsIn(c.ops, paused, resumed)
	if during == 0 {
		t.Errorf("no grant while 2 of 5 were paused: the majority should serve")
	}
	c.outcome(t, fmt.Sprintf("%d grants during the pause; late grants undone", during))
}

func TestRedLock_restartOne(t *testing.T) {
	skipShortRed(t)
	result(t, row{order: "redlock 3", fault: redSetup + " 1 of the 5 servers killed and restarted at once without persistence (its locks gone)",
		expected: "the held lock kept on the other 4, the waiter still refused; the workload goes on" + redExpected})
	rr := startRedRun(t, 0, 1, 3, 4)
	s := rr.ss[2]
	from := worker.Mono()
	s.Kill(t)
	s.Restart(t)
	restarted := worker.Mono()
	rr.grants("the workload to go on after the restart", 20, rr.names...)
	if d := redLease - time.Duration(worker.Mono()-restarted); d > 0 {
		time.Sleep(d) // a lease after the restart: renewals met the empty instance
	}
	rr.stillHeld("a lease after the restart")
	on := rr.holders(rr.held)
	c := rr.finish(from, restarted)
	held := fmt.Sprintf("; the held lock on %d of 5 a lease later, the waiter still refused", on)
	if c.excused != "" {
		held = ""
	}
	c.outcome(t, fmt.Sprintf("restarted in %v%s; %d grants after the restart",
		time.Duration(restarted-from).Round(10*time.Millisecond), held, grantsIn(c.ops, restarted, 1<<62)))
}
