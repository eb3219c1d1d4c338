package chaos

// The rows of this file run a RedLock (rlock.NewRedLock) over five independent
// redis-servers (no replication, no persistence) under a contended workload of goroutine
// contenders, each a RedLock handle over its own set of five Clients, checked as every other
// row is (the fenced resource, the holds, porcupine). A lock is also held throughout each
// fault, with a waiter of another set parked on it. The faults hit a minority of the
// servers: two killed (and restarted empty later), two SIGSTOPped for longer than the
// per-instance timeout and the lease, one restarted without persistence.

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/relock-go/relock/chaos/internal/worker"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
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
}

// redWaiter is a RedLock waiter in TryLock.
type redWaiter struct {
	r    *rlock.RedLock
	done chan struct{}
	err  error
	at   time.Time
}

func startRedRun(t *testing.T) *redRun {
	t.Helper()
	ss := redistest.StartN(t, redServers)
	rr := &redRun{clusterRun: newClusterRun(t), ss: ss, started: time.Now()}
	ns := names(t, 3)
	rr.names, rr.held = ns[:2], ns[2]
	set := func() []*rlock.Client {
		cs := make([]*rlock.Client, len(ss))
		for i, s := range ss {
			cs[i] = relock(t, s, s.Addr(), rlock.WithWatchdogTimeout(redLease), rlock.WithCleanupTimeout(5*time.Second))
		}
		return cs
	}
	// Every Client first: the contenders stop (a cleanup registered by the first workers
	// call) before any Client is closed.
	var sets [][]*rlock.Client
	for i := 0; i < 5; i++ {
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
	if ok, err := rr.holder.TryLock(bg, 10*time.Second, 0); !ok || err != nil {
		t.Fatalf("TryLock %s: %v %v", rr.held, ok, err)
	}
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

// stillHeld fails t if the held lock was lost or the waiter got it.
func (rr *redRun) stillHeld(when string) {
	t := rr.t
	t.Helper()
	if err := rr.holder.Err(bg); err != nil {
		t.Fatalf("%s: the lock held throughout was lost: %v", when, err)
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
	if err := rr.holder.Unlock(bg); err != nil {
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
	out := redCheck{wake: max(rr.waiter.at.Sub(released), 0)}
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
	setOutcome(t, head+fmt.Sprintf("; workload: %d holds (%d stale writes refused), %d taken below a majority by the fault (grants on 3 or 4 servers, the victims among them: Unlock said ErrNotHeld), %d loss notices, 0 errors; longest acquire %v, longest Unlock %v; the lock held throughout kept, its waiter woken %v after the release; no key left on the 5 servers; %d violations, %s (lock model with expiry)",
		c.rep.Acquired, c.rep.Rejected, c.below, c.rep.Lost, acq.Round(time.Millisecond), rel.Round(time.Millisecond), roundMS(c.wake), c.rep.violations()-c.across, c.rep.Linear))
	if c.across > 0 {
		setRow(t, func(r *row) {
			r.status = "limitation (documented)"
			r.outcome += fmt.Sprintf("; %d hold(s) from before the fault overlapped one granted after it, neither holder told yet: a server came back without the lock before a lease had passed (the RedLock assumption: stay down a max lease after a crash, or appendfsync always; see the README's RedLock section)", c.across)
		})
	}
}

const redSetup = "RedLock over 5 independent redis-servers (no persistence): 3 sets of 5 Clients x 2 owners (watchdog, lease 1s, per-instance timeout 100ms) contend on 2 names; a 4th set holds a 3rd name throughout, a 5th set's waiter parked on it."

// redExpected is what every RedLock row expects beyond its own fault.
const redExpected = "; 0 violations with the fenced resource, no two holds at once with neither told, linearizable (lock model with expiry); no error reaches a caller; a workload hold whose grants the fault takes below a majority (granted by exactly 3 or 4 servers, the victims among them) is lost, its Unlock says ErrNotHeld; no key left in the end"

func TestRedLock_killMinority(t *testing.T) {
	skipShortRed(t)
	result(t, row{order: "redlock 1", fault: redSetup + " 2 of the 5 servers killed (SIGKILL) mid-run; 2 leases later restarted empty",
		expected: "the workload goes on over the 3 (a majority); the held lock kept, renewed on the 3; after the 2 come back empty nobody else gets it" + redExpected})
	rr := startRedRun(t)
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
	c.outcome(t, fmt.Sprintf("%d grants while 2 were down (%v); the held lock on %d of the 3 live servers through 2 leases, still refused to the waiter after the 2 came back empty",
		grantsIn(c.ops, killed, down), time.Duration(down-killed).Round(100*time.Millisecond), on3))
}

func TestRedLock_pauseMinority(t *testing.T) {
	skipShortRed(t)
	result(t, row{order: "redlock 2", fault: redSetup + fmt.Sprintf(" 2 of the 5 servers paused (SIGSTOP) %v mid-run: longer than the per-instance timeout and than the lease", redPause),
		expected: "the workload goes on over the 3; the held lock kept; on SIGCONT the late grants are undone" + redExpected})
	rr := startRedRun(t)
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
	c.outcome(t, fmt.Sprintf("%d grants during the pause; the held lock kept; late grants undone", during))
}

func TestRedLock_restartOne(t *testing.T) {
	skipShortRed(t)
	result(t, row{order: "redlock 3", fault: redSetup + " 1 of the 5 servers killed and restarted at once without persistence (its locks gone)",
		expected: "the held lock kept on the other 4, the waiter still refused; the workload goes on" + redExpected})
	rr := startRedRun(t)
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
	c.outcome(t, fmt.Sprintf("restarted in %v; the held lock on %d of 5 a lease later, the waiter still refused; %d grants after the restart",
		time.Duration(restarted-from).Round(10*time.Millisecond), on, grantsIn(c.ops, restarted, 1<<62)))
}
