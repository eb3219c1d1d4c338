package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestSpinMultiHunt_leases is the MultiLock hunt's complement (TestSpinMultiHunt_multiLock
// holds every fixed lease 20 s and has only Mutex and SpinMutex members): no faults, but
// short fixed leases (30-250 ms) that end during a trial, members of every kind (Mutex,
// SpinMutex, FairMutex, an RWMutex's write side, its ReadLocker) on two Redis servers, and
// nested MultiLocks. Each actor is one goroutine with its own handles (a handle owner per
// member), contending with the others on three names per server (two of the Mutex family,
// one read-write lock).
//
// The expected count of each leaf (a member that is no MultiLock) is booked from the
// MultiLock's returns: (true, nil) +1 on every leaf, any other return none (MultiLock's
// godoc: nothing taken is left held), an Unlock -1. A leaf's tenure holds fixed leases only,
// or also a watchdog grant (then it never ends here). A fixed-lease tenure surely lasts until
// its earliest possible conservative end, max over its grants of (call start + lease - 1% -
// 2 ms), less slack; it has surely ended after its latest possible end, max over grants of
// (return + lease), plus slack. Between, it may have ended. So: an Unlock that returns while
// every leaf surely lasts must return nil; otherwise nil or an error wrapping ErrNotHeld
// (ErrLeaseExpired) is accepted, and a leaf that may have ended is settled (the actor sleeps
// past its latest end: count 0). An acquire that re-enters a leaf that may have ended is
// settled the same way (a fresh tenure or a re-entry), or, when it turned the watchdog on, by
// HoldCount, which must be 1 or one more than before. An acquire that fails wraps
// ErrLeaseExpired only when a leaf may have ended. When no leaf is uncertain, HoldCount (Err,
// for a count of 0) must equal the booked count, within a short settle for background
// give-backs. A grant while another actor's conflicting hold surely lasts (not being given
// back) is an exclusion violation.
//
// RELOCK_MULTI_LEASE_SEED, _TRIAL, _BUDGET (default spinHuntBudget; RELOCK_FULL spinHuntFull), _LOG as
// RELOCK_MULTI_HUNT_*. Skipped under -short.
func TestSpinMultiHunt_leases(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("short")
	}
	const env = "RELOCK_MULTI_LEASE"
	seed := seedOf(t, env+"_SEED")
	budget := budgetOf(t, env+"_BUDGET", spinHuntBudget, spinHuntFull)
	only := trialOf(t, env+"_TRIAL")
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t)}
	var clients []*rlock.Client
	for _, s := range srvs {
		c, err := rlock.New(s.Client(t), rlock.WithWatchdogTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	begin := time.Now()
	trials := 0
	for i := range trialIndices(begin, only, budget) {
		tr := &mlTrial{t: t, idx: i, clients: clients, start: time.Now()}
		tr.run(rand.New(rand.NewPCG(seed, uint64(i))))
		trials++
		if os.Getenv(env+"_LOG") == "1" {
			t.Logf("trial %d history:\n%s", i, strings.Join(tr.hist, "\n"))
		}
		if len(tr.fail) > 0 {
			hist := tr.hist
			if len(hist) > 300 {
				hist = append([]string{fmt.Sprintf("(%d earlier lines left out)", len(hist)-300)}, hist[len(hist)-300:]...)
			}
			t.Fatalf("multi-lock lease hunt: seed %d trial %d (%s_SEED=%d %s_TRIAL=%d replays its plan):\n%s\nhistory:\n%s",
				seed, i, env, seed, env, i, strings.Join(tr.fail, "\n"), strings.Join(hist, "\n"))
		}
	}
	t.Logf("%d trials in %v", trials, time.Since(begin).Round(time.Millisecond))
}

const (
	mlSlack = 15 * time.Millisecond // scheduling slack either side of a lease's end (2 cores, -race)
)

// mlLeaf is one member that is no MultiLock, of one actor.
type mlLeaf struct {
	desc  string
	srv   int
	name  string // lock name (per server)
	kind  string // mutex, spin, fair, write, read
	lk    rlock.Locker
	count func(context.Context) (int, error)
	errf  func(context.Context) error

	// booked by the actor; read by others under tr.mu
	held      int
	watch     bool      // a watchdog grant in the tenure: it does not end here
	minEnd    time.Time // earliest possible conservative end of the tenure (fixed leases)
	maxEnd    time.Time // latest possible end
	since     time.Time // the tenure's first grant's return
	releasing bool
}

// surely reports whether the leaf's tenure surely lasts at t.
func (l *mlLeaf) surely(t time.Time) bool {
	return l.held > 0 && (l.watch || t.Before(l.minEnd.Add(-mlSlack)))
}

// ended reports whether the leaf's tenure surely ended by t (a fixed-lease tenure).
func (l *mlLeaf) ended(t time.Time) bool {
	return !l.watch && t.After(l.maxEnd.Add(mlSlack))
}

type mlActor struct {
	id     string
	leaves []*mlLeaf
	ml     *rlock.MultiLock
	desc   string
	rng    *rand.Rand
}

type mlTrial struct {
	t       *testing.T
	idx     int
	clients []*rlock.Client
	start   time.Time
	actors  []*mlActor

	mu   sync.Mutex
	hist []string
	fail []string
}

func (tr *mlTrial) note(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.hist = append(tr.hist, fmt.Sprintf("%7.1fms %s", float64(time.Since(tr.start).Microseconds())/1000, fmt.Sprintf(format, args...)))
}

func (tr *mlTrial) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	tr.note("VIOLATION %s", s)
	tr.mu.Lock()
	tr.fail = append(tr.fail, s)
	tr.mu.Unlock()
}

func (tr *mlTrial) failed() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.fail) > 0
}

// leaf makes a member of kind on lock name of server s.
func (tr *mlTrial) leaf(s int, name, kind string) *mlLeaf {
	c := tr.clients[s]
	l := &mlLeaf{srv: s, name: name, kind: kind, desc: fmt.Sprintf("%s:%s@%d", kind, name[strings.LastIndex(name, "-")+1:], s)}
	switch kind {
	case "mutex":
		m := c.Mutex(name)
		l.lk, l.count, l.errf = m, m.HoldCount, m.Err
	case "spin":
		m := c.SpinMutex(name)
		l.lk, l.count, l.errf = m, m.HoldCount, m.Err
	case "fair":
		m := c.FairMutex(name)
		l.lk, l.count, l.errf = m, m.HoldCount, m.Err
	case "write":
		m := c.RWMutex(name)
		l.lk, l.count, l.errf = m, m.WriteHoldCount, m.Err
	case "read":
		m := c.RWMutex(name).RLocker()
		l.lk, l.count, l.errf = m, m.HoldCount, m.Err
	}
	return l
}

func (tr *mlTrial) run(rng *rand.Rand) {
	base := fmt.Sprintf("%s-%d", redistest.Name(tr.t), tr.idx)
	// names: m0, m1 (Mutex family), rw (read-write)
	type slot struct {
		srv  int
		name string
		rw   bool
	}
	var slots []slot
	for s := range 2 {
		slots = append(slots, slot{s, base + "-m0", false}, slot{s, base + "-m1", false}, slot{s, base + "-rw", true})
	}
	nActors := 3 + rng.IntN(2)
	for a := range nActors {
		perm := rng.Perm(len(slots))
		n := 2 + rng.IntN(3)
		act := &mlActor{id: fmt.Sprintf("a%d", a+1), rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}
		for _, k := range perm[:n] {
			sl := slots[k]
			var kind string
			if sl.rw {
				kind = []string{"write", "read", "read"}[rng.IntN(3)]
			} else {
				kind = []string{"mutex", "spin", "fair"}[rng.IntN(3)]
			}
			act.leaves = append(act.leaves, tr.leaf(sl.srv, sl.name, kind))
		}
		// Members: leaves, or a nested MultiLock of some of them.
		var lks []rlock.Locker
		var desc []string
		i := 0
		for i < len(act.leaves) {
			if len(act.leaves)-i >= 2 && rng.IntN(3) == 0 {
				k := 2 + rng.IntN(len(act.leaves)-i-1)
				var inner []rlock.Locker
				var id []string
				for _, l := range act.leaves[i : i+k] {
					inner = append(inner, l.lk)
					id = append(id, l.desc)
				}
				lks = append(lks, rlock.NewMultiLock(inner...))
				desc = append(desc, "ML("+strings.Join(id, " ")+")")
				i += k
				continue
			}
			lks = append(lks, act.leaves[i].lk)
			desc = append(desc, act.leaves[i].desc)
			i++
		}
		act.ml = rlock.NewMultiLock(lks...)
		act.desc = strings.Join(desc, " ")
		tr.actors = append(tr.actors, act)
		tr.note("%s: ML(%s)", act.id, act.desc)
	}
	length := time.Duration(400+rng.IntN(600)) * time.Millisecond
	var wg sync.WaitGroup
	for _, a := range tr.actors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(tr.start) < length && !tr.failed() {
				tr.step(a)
			}
		}()
	}
	wg.Wait()
	if tr.failed() {
		return
	}
	tr.note("--- end: every actor unlocks what it holds")
	for _, a := range tr.actors {
		for !tr.failed() && tr.maxHeld(a) > 0 {
			tr.unlock(a)
		}
	}
	// No key left once every hold ended.
	time.Sleep(50 * time.Millisecond)
	for s := range tr.clients {
		for _, n := range []string{base + "-m0", base + "-m1", base + "-rw"} {
			key := tr.clients[s].Mutex(n).Key()
			if locked, err := keyLocked(tr, s, key); locked || err != nil {
				tr.violation("at the end, %s on server %d: locked %v, %v", key, s, locked, err)
			}
		}
	}
}

// keyLocked reports whether the lock of key on server s is held by anyone (a fresh handle's
// IsLocked).
func keyLocked(tr *mlTrial, s int, key string) (bool, error) {
	name := key
	for _, a := range tr.actors {
		for _, l := range a.leaves {
			if l.srv == s && tr.clients[s].Mutex(l.name).Key() == key {
				name = l.name
			}
		}
	}
	if strings.HasSuffix(name, "-rw") {
		return tr.clients[s].RWMutex(name).IsLocked(bg)
	}
	return tr.clients[s].Mutex(name).IsLocked(bg)
}

func (tr *mlTrial) maxHeld(a *mlActor) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, l := range a.leaves {
		n = max(n, l.held)
	}
	return n
}

func (tr *mlTrial) step(a *mlActor) {
	rng := a.rng
	held := tr.maxHeld(a) > 0
	switch op := rng.IntN(10); {
	case held && op < 5 || op == 9:
		tr.unlock(a)
	case op < 7:
		tr.acquire(a)
	default:
		d := time.Duration(rng.IntN(250)) * time.Millisecond
		time.Sleep(d)
	}
	tr.check(a)
}

// settle sleeps until every uncertain leaf of a's (a fixed-lease tenure that may have ended)
// surely ended, and books it 0.
func (tr *mlTrial) settle(a *mlActor, why string) {
	tr.mu.Lock()
	var until time.Time
	var which []string
	now := time.Now()
	for _, l := range a.leaves {
		if l.held > 0 && !l.surely(now) && !l.watch {
			if l.maxEnd.After(until) {
				until = l.maxEnd
			}
			which = append(which, l.desc)
		}
	}
	tr.mu.Unlock()
	if len(which) == 0 {
		return
	}
	time.Sleep(time.Until(until.Add(2 * mlSlack)))
	tr.mu.Lock()
	for _, l := range a.leaves {
		if l.held > 0 && !l.watch && l.ended(time.Now()) {
			l.held = 0
		}
	}
	tr.mu.Unlock()
	tr.note("%s: settled %v (%s): their fixed leases surely ended", a.id, which, why)
}

// settleConverted settles leaves that a failed watchdog-mode acquire may have turned to
// watchdog mode (ls: held with fixed leases only before it): once their fixed leases surely
// ended, each is either gone (HoldCount 0: not converted) or still held as booked (converted,
// renewed until its last Unlock).
func (tr *mlTrial) settleConverted(a *mlActor, ls []*mlLeaf) {
	tr.mu.Lock()
	var until time.Time
	for _, l := range ls {
		if l.maxEnd.After(until) {
			until = l.maxEnd
		}
	}
	tr.mu.Unlock()
	time.Sleep(time.Until(until.Add(2 * mlSlack)))
	var conv, gone []string
	for _, l := range ls {
		hc, err := l.count(bg)
		tr.mu.Lock()
		switch {
		case err != nil:
			tr.fail = append(tr.fail, fmt.Sprintf("%s: HoldCount of %s: %v", a.id, l.desc, err))
		case hc == 0:
			l.held = 0
			gone = append(gone, l.desc)
		case hc == l.held:
			l.watch = true
			conv = append(conv, l.desc)
		default:
			tr.fail = append(tr.fail, fmt.Sprintf("%s: %s, held %d times with fixed leases that ended, after a failed watchdog acquire: HoldCount %d, want 0 or %d", a.id, l.desc, l.held, hc, l.held))
		}
		tr.mu.Unlock()
	}
	tr.note("%s: settled after a failed watchdog acquire: turned to watchdog mode %v, ended %v", a.id, conv, gone)
}

func (tr *mlTrial) unlock(a *mlActor) {
	rng := a.rng
	ctx := bg
	how := "live"
	if rng.IntN(4) == 0 {
		c, cancel := context.WithCancel(bg)
		cancel()
		ctx, how = c, "cancelled"
	}
	tr.mu.Lock()
	before := make([]int, len(a.leaves))
	for i, l := range a.leaves {
		before[i] = l.held
		l.releasing = true
	}
	tr.mu.Unlock()
	call := time.Now()
	err := a.ml.Unlock(ctx)
	ret := time.Now()
	tr.mu.Lock()
	var sure, unsure, none, gone []string
	for i, l := range a.leaves {
		l.releasing = false
		switch {
		case before[i] == 0:
			none = append(none, l.desc)
		case l.ended(call):
			gone = append(gone, l.desc)
			unsure = append(unsure, l.desc)
			l.held = 0
		case l.watch || ret.Before(l.minEnd.Add(-mlSlack)):
			sure = append(sure, l.desc)
			l.held--
		default:
			unsure = append(unsure, l.desc)
			l.held-- // settled below if it may have ended
		}
	}
	tr.mu.Unlock()
	tr.note("%s Unlock(%s ctx) holds %v, took %v -> %v (sure %v, maybe ended %v, ended %v, none %v)", a.id, how, before, ret.Sub(call).Round(time.Microsecond), err, sure, unsure, gone, none)
	switch {
	case len(gone) == len(a.leaves) && !errors.Is(err, rlock.ErrNotHeld):
		tr.violation("%s: Unlock of holds whose fixed leases surely ended (%v) returned %v", a.id, gone, err)
	case len(unsure) == 0 && len(none) == 0 && err != nil:
		tr.violation("%s: Unlock of holds that surely lasted (%v) returned %v", a.id, sure, err)
	case len(none) > 0 && !errors.Is(err, rlock.ErrNotHeld):
		tr.violation("%s: Unlock with no hold on %v returned %v, want ErrNotHeld", a.id, none, err)
	case err != nil && !errors.Is(err, rlock.ErrNotHeld):
		tr.violation("%s: Unlock returned %v: not ErrNotHeld", a.id, err)
	case err != nil && len(unsure) == 0 && len(none) == 0:
		tr.violation("%s: Unlock returned %v with every hold surely lasting", a.id, err)
	}
	if len(none) > 0 {
		tr.mu.Lock()
		for i, l := range a.leaves {
			if before[i] == 0 {
				l.held = 0
			}
		}
		tr.mu.Unlock()
	}
	if len(unsure) > 0 {
		tr.settle(a, "an Unlock near a lease's end")
	}
}

func (tr *mlTrial) acquire(a *mlActor) {
	rng := a.rng
	wait := time.Duration(0)
	if rng.IntN(2) == 0 {
		wait = time.Duration(5+rng.IntN(80)) * time.Millisecond
	}
	lease := time.Duration(0)
	if rng.IntN(6) != 0 {
		lease = time.Duration(30+rng.IntN(220)) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(bg, time.Duration(20+rng.IntN(200))*time.Millisecond)
	defer cancel()
	lockCall := rng.IntN(8) == 0
	tr.mu.Lock()
	before := make([]int, len(a.leaves))
	call := time.Now()
	var unsure []string
	for i, l := range a.leaves {
		before[i] = l.held
		if l.held > 0 && !l.surely(call) {
			unsure = append(unsure, l.desc)
		}
	}
	tr.mu.Unlock()
	var ok bool
	var err error
	what := fmt.Sprintf("TryLock(wait %v, lease %v)", wait, lease)
	if lockCall {
		what, lease = "Lock", 0
		err = a.ml.Lock(ctx)
		ok = err == nil
	} else {
		ok, err = a.ml.TryLock(ctx, wait, lease)
	}
	ret := time.Now()
	tr.note("%s %s holds %v (maybe ended %v) took %v -> %v, %v", a.id, what, before, unsure, ret.Sub(call).Round(time.Microsecond), ok, err)
	if ok != (err == nil) && ok {
		tr.violation("%s: acquire returned true with %v", a.id, err)
	}
	if !ok {
		// Nothing taken is left held.
		var exp []string
		tr.mu.Lock()
		for _, l := range a.leaves {
			if l.held > 0 && !l.surely(ret) {
				exp = append(exp, l.desc)
			}
		}
		tr.mu.Unlock()
		switch {
		case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		case errors.Is(err, rlock.ErrLeaseExpired) && len(exp)+len(unsure) > 0:
		case errors.Is(err, rlock.ErrLeaseExpired) && lease > 0 && ret.Sub(call) > lease-(lease/100+2*time.Millisecond):
			// A grant that came back after its own fixed lease ran out on the Client's
			// conservative clock (lease - 1% - 2 ms after its send) is given back, and a wait
			// that ends that way returns ErrLeaseExpired (TryLock's godoc): possible only in a
			// call that lasted that long. Seed 1796464068677464101 trial 46 (a run at 02f0cb7):
			// the trial's first TryLocks took 158 ms and 161 ms for leases of 122 ms and 162 ms
			// (a stalled machine), and their read side's grant came back too late.
		default:
			tr.violation("%s: acquire failed with %v (leaves that may have ended: %v)", a.id, err, exp)
		}
		// The round may have re-entered the leaves a holds before it failed and gave them back
		// (Mutex: a re-entry never shortens the lease in force; one with a longer fixed lease
		// extends it, one in watchdog mode turns the watchdog on for the rest of the tenure,
		// whether or not the caller got the hold: seed 1796457983141400584 trial 11, CI at
		// f221ff7, where the hunt booked as ended two read sides that a failed Lock had turned
		// to watchdog mode).
		var conv []*mlLeaf
		tr.mu.Lock()
		for _, l := range a.leaves {
			switch {
			case l.held == 0 || l.watch || l.ended(call):
			case lease > 0:
				if e := ret.Add(lease); e.After(l.maxEnd) {
					l.maxEnd = e
				}
			default:
				conv = append(conv, l)
			}
		}
		tr.mu.Unlock()
		if len(conv) > 0 {
			tr.settleConverted(a, conv) // first: settle would book them ended
		}
		if len(exp) > 0 {
			tr.settle(a, "a failed acquire near a lease's end")
		}
		return
	}
	tr.mu.Lock()
	drift := lease/100 + 2*time.Millisecond
	var reent []*mlLeaf
	for _, l := range a.leaves {
		if l.held > 0 && !l.surely(ret) {
			reent = append(reent, l)
		}
		// exclusion: another actor's conflicting hold that surely lasted through this grant
		for _, b := range tr.actors {
			if b == a {
				continue
			}
			for _, m := range b.leaves {
				if m.srv != l.srv || m.name != l.name || m.held == 0 || m.releasing || !m.since.Before(call) || !m.surely(ret) {
					continue
				}
				if l.kind == "read" && m.kind == "read" {
					continue
				}
				tr.hist = append(tr.hist, "VIOLATION exclusion")
				tr.fail = append(tr.fail, fmt.Sprintf("exclusion: %s granted %s while %s holds %s %d time(s) (since %v, surely until after %v)",
					a.id, l.desc, b.id, m.desc, m.held, m.since.Sub(tr.start), ret.Sub(tr.start)))
			}
		}
	}
	for _, l := range a.leaves {
		if l.held == 0 || l.ended(call) {
			l.held, l.watch, l.since = 0, false, ret
			l.minEnd, l.maxEnd = time.Time{}, time.Time{}
		}
		l.held++
		if lease <= 0 {
			l.watch = true
		} else {
			if e := call.Add(lease - drift); e.After(l.minEnd) {
				l.minEnd = e
			}
			if e := ret.Add(lease); e.After(l.maxEnd) {
				l.maxEnd = e
			}
		}
	}
	tr.mu.Unlock()
	if len(reent) == 0 {
		return
	}
	// A grant on a tenure that may have ended: a re-entry, or a fresh tenure.
	for _, l := range reent {
		if !l.watch {
			tr.mu.Lock()
			l.minEnd = time.Time{} // a fresh tenure of 1 or a re-entry: uncertain until it surely ended
			tr.mu.Unlock()
			continue
		}
		hc, err := l.count(bg)
		tr.mu.Lock()
		switch {
		case err != nil:
			tr.fail = append(tr.fail, fmt.Sprintf("%s: HoldCount of %s: %v", a.id, l.desc, err))
		case hc == 1 || hc == l.held:
			l.held = hc
		default:
			tr.fail = append(tr.fail, fmt.Sprintf("%s: watchdog grant on %s whose tenure (%d holds) may have ended: HoldCount %d, want 1 or %d", a.id, l.desc, l.held-1, hc, l.held))
		}
		tr.mu.Unlock()
	}
	tr.settle(a, "a grant on a tenure that may have ended")
}

// check compares each leaf whose count is certain with HoldCount (and Err), polling a while
// for background give-backs.
func (tr *mlTrial) check(a *mlActor) {
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		var bad []string
		for _, l := range a.leaves {
			t0 := time.Now()
			tr.mu.Lock()
			if l.held > 0 && l.ended(t0) {
				l.held = 0 // its fixed lease surely ended: HoldCount 0, Err ErrNotHeld
			}
			exp, sure := l.held, l.held == 0 || l.surely(t0)
			tr.mu.Unlock()
			if !sure {
				continue
			}
			hc, err := l.count(bg)
			e := l.errf(bg)
			tr.mu.Lock()
			still := l.held == exp && (l.held == 0 || l.surely(time.Now()))
			tr.mu.Unlock()
			if !still {
				continue
			}
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s HoldCount: %v", l.desc, err))
			case hc != exp:
				bad = append(bad, fmt.Sprintf("%s HoldCount %d, booked %d", l.desc, hc, exp))
			case exp > 0 && e != nil:
				bad = append(bad, fmt.Sprintf("%s holds %d, Err %v", l.desc, exp, e))
			case exp == 0 && !errors.Is(e, rlock.ErrNotHeld):
				bad = append(bad, fmt.Sprintf("%s holds none, Err %v", l.desc, e))
			}
		}
		if len(bad) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tr.violation("%s: %v", a.id, bad)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
