package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The semaphore hunt (TestSemHunt): a seeded randomized explorer of the plain Semaphore,
// which the model test (model_test.go) does not cover, checking Redis's count of available
// permits against what the callers were told, from the exported API only.
//
// Three Clients, each on a driftFaults hookClient (drift_hunt_test.go: the op's plan in its
// ctx faults its script calls: a reply lost, a send refused or lost, a reply delayed, a send
// kept back and delivered late, the ctx cancelled just before or after a script, and now
// and then a storm of lost replies or refused sends longer than the cleanup timeout), two
// actors (sibling goroutines) on each. A trial is a few rounds; in a round every actor runs
// 1-4 operations concurrently with the others: Acquire(1-2) with a ctx that times out or is
// cancelled at a random point, TryAcquire(1-2) with wait 0 or a short wait (its ctx with or
// without a deadline), Release of permits it was granted (its ctx live or ended), and now
// and then DrainPermits. In some trials a Client is closed during a round (its actors' later
// calls fail with ErrClosed; what they hold is given back through another Client at the
// end: permits are not owned).
//
// The count is kept from the API's returns: a grant takes its permits, a Release that
// returned nil gives them back; any other return of an acquire leaves nothing taken once the
// background work is done (the godoc of Acquire and of Replays at Semaphore); an
// ErrUnknownOutcome, a Release that failed after it may have been sent, or a GiveBack event
// with an error, is a documented window: the count may lack those permits, and the check
// accepts it and takes Redis's count as the new base.
//
// Checks: at each quiescent point (every actor done, every kept-back send delivered), Redis's
// count equals the initial count less the permits held by the returns, within the settle
// bound (the background's give-backs); a TryAcquire never returns (false, nil) while the
// permits were sure to be available throughout its call (a lower bound of the count from
// the returns, with every acquire in flight or left to the background counted as taking its
// permits); TryAcquire returns within its wait plus two cleanup timeouts and a reply's delay,
// and every call within 100 ms (plus slack and this process's stalls) of its ctx's deadline
// (README guarantee 6); Close returns within the cleanup timeout plus slack.
//
// RELOCK_SEMHUNT_SEED replays a run's plan (goroutine timing is not replayed),
// RELOCK_SEMHUNT_TRIAL=<n> runs trial n alone, RELOCK_SEMHUNT_LOG=1 prints passing trials'
// histories, RELOCK_SEMHUNT_BUDGET sets the run time (1 s, a trial or two of 2-4 s: go test ./...
// stays within its 5 minutes; 30 s under RELOCK_FULL).

const semHuntCleanup = 400 * time.Millisecond

// semHuntSettle bounds a quiescent check's wait for the background's give-backs.
const semHuntSettle = 2*semHuntCleanup + 1500*time.Millisecond

func TestSemHunt(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	// Beside the other parallel tests, as the drift hunt whose faults it uses: its server,
	// Clients and names are its own, and its time bounds allow for this process's stalls.
	t.Parallel()
	const env = "RELOCK_SEMHUNT"
	seed := seedOf(t, env+"_SEED")
	budget := budgetOf(t, env+"_BUDGET", time.Second, 30*time.Second)
	only := trialOf(t, env+"_TRIAL")
	srv := redistest.Start(t)
	admin := srv.Client(t)
	var dcs []*driftFaults
	for i := range 3 {
		dc := newDriftFaults(srv.Client(t), rand.New(rand.NewPCG(seed, uint64(100+i))))
		t.Cleanup(dc.late.Wait)
		dcs = append(dcs, dc)
	}
	stalls := watchStalls(nil)
	defer stalls(time.Now(), time.Now())
	begin := time.Now()
	trials := 0
	for i := range trialIndices(begin, only, budget) {
		tr := &semTrial{t: t, idx: i, dcs: dcs, admin: admin, stalls: stalls, trialLog: trialLog{start: time.Now()}}
		tr.run(rand.New(rand.NewPCG(seed, uint64(i))))
		trials++
		reportTrial(t, "semaphore hunt", env, seed, i, &tr.trialLog)
	}
	t.Logf("%d trials in %v; faults applied: %s", trials, time.Since(begin).Round(time.Millisecond), faultsApplied(dcs))
}

type semActor struct {
	id   string
	ci   int
	rng  *rand.Rand
	held int // permits granted by the returns, not given back (guarded by semTrial.mu)
}

// semTry is a TryAcquire in flight: the lowest the count's lower bound fell to during it.
type semTry struct {
	n     int
	minLB int
}

type semTrial struct {
	t       *testing.T
	idx     int
	dcs     []*driftFaults
	admin   rueidis.Client
	clients []*rlock.Client
	name    string
	key     string
	stalls  func(start, end time.Time) time.Duration

	trialLog        // start; the history and findings, and the fields below, under mu
	closed   []bool // Client i was closed
	total    int    // the count with nothing held
	actors   []*semActor
	// The count's lower bound from the returns: total - held - taking - bg - ambig, or none
	// while a drain is in flight.
	taking int // permits of acquires in flight
	bg     int // permits of acquires that returned without a grant this round (the background may hold them until it gives them back)
	ambig  int // permits the count may lack: unknown outcomes, failed give-backs, Releases that failed after a send
	drains int // drains in flight
	// drainUnknown: a drain's outcome is unknown, or its give-back failed (how many: unknown).
	drainUnknown bool
	tries        map[*semTry]bool
}

func (tr *semTrial) heldLocked() int {
	n := 0
	for _, a := range tr.actors {
		n += a.held
	}
	return n
}

// lbLocked is the count's lower bound now (a very low number while a drain is in flight or
// its outcome unknown).
func (tr *semTrial) lbLocked() int {
	if tr.drains > 0 || tr.drainUnknown {
		return -1 << 30
	}
	return tr.total - tr.heldLocked() - tr.taking - tr.bg - tr.ambig
}

// lowered records the lower bound now in every TryAcquire in flight.
func (tr *semTrial) loweredLocked() {
	lb := tr.lbLocked()
	for st := range tr.tries {
		st.minLB = min(st.minLB, lb)
	}
}

func (tr *semTrial) count() (int, error) {
	v, err := tr.admin.Do(context.Background(), tr.admin.B().Get().Key(tr.key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}

func (tr *semTrial) run(rng *rand.Rand) {
	t := tr.t
	tr.name = fmt.Sprintf("%s-%d", redistest.Name(t), tr.idx)
	tr.tries = map[*semTry]bool{}
	obs := &rlock.Observer{GiveBack: func(e rlock.GiveBackInfo) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.noteLocked(fmt.Sprintf("  observer: give-back (%s) of %d permit(s): err %v", e.Reason, e.Holds, e.Err))
		if e.Err != nil {
			if e.Holds == 0 {
				tr.drainUnknown = true
			}
			tr.ambig += e.Holds
			tr.windows = append(tr.windows, fmt.Sprintf("a give-back of %d permit(s) failed: %v", e.Holds, e.Err))
			tr.loweredLocked()
		}
	}}
	for _, dc := range tr.dcs {
		c, err := rlock.New(dc, rlock.WithCleanupTimeout(semHuntCleanup), rlock.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		tr.clients = append(tr.clients, c)
	}
	tr.closed = make([]bool, len(tr.clients))
	defer func() {
		for _, c := range tr.clients {
			_ = c.Close()
		}
	}()
	s0 := tr.clients[0].Semaphore(tr.name)
	tr.key = s0.Key()
	tr.total = 2 + rng.IntN(4)
	if ok, err := s0.TrySetPermits(context.Background(), tr.total); !ok || err != nil {
		t.Fatalf("TrySetPermits(%d): %v %v", tr.total, ok, err)
	}
	tr.note(fmt.Sprintf("semaphore %s: %d permits", tr.name, tr.total))
	for ci := range tr.clients {
		for range 2 {
			tr.actors = append(tr.actors, &semActor{id: fmt.Sprintf("a%d", len(tr.actors)+1), ci: ci,
				rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))})
		}
	}
	closeRound, closeCI := -1, 0
	rounds := 2 + rng.IntN(3)
	if rng.Float64() < 0.3 {
		closeRound, closeCI = rng.IntN(rounds), rng.IntN(len(tr.clients))
	}
	for r := range rounds {
		tr.note(fmt.Sprintf("round %d", r))
		var wg sync.WaitGroup
		for _, a := range tr.actors {
			nops := 1 + rng.IntN(4)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range nops {
					tr.op(a)
				}
			}()
		}
		if r == closeRound {
			d := time.Duration(rng.IntN(200)) * time.Millisecond
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(d)
				tr.mu.Lock()
				tr.closed[closeCI] = true
				tr.mu.Unlock()
				tr.note(fmt.Sprintf("Close Client %d", closeCI))
				began := time.Now()
				_ = tr.clients[closeCI].Close()
				took := time.Since(began)
				tr.note(fmt.Sprintf("Close Client %d returned after %v", closeCI, took.Round(time.Millisecond)))
				if bound := semHuntCleanup + 500*time.Millisecond + tr.stalls(began, time.Now()); took > bound {
					tr.violation("Close took %v (bound %v)", took, bound)
				}
			}()
		}
		wg.Wait()
		for _, dc := range tr.dcs {
			dc.late.Wait()
		}
		tr.quiescent(fmt.Sprintf("after round %d", r))
		if len(tr.fail) > 0 {
			return
		}
	}
	// Give back every permit held, through a Client still open (permits are not owned).
	open := -1
	for ci := range tr.clients {
		if !tr.closed[ci] {
			open = ci
			break
		}
	}
	s := tr.clients[open].Semaphore(tr.name)
	for _, a := range tr.actors {
		if a.held > 0 {
			if err := s.Release(context.Background(), a.held); err != nil {
				tr.violation("final Release(%d) of %s: %v", a.held, a.id, err)
				return
			}
			tr.note(fmt.Sprintf("final Release(%d) of %s", a.held, a.id))
			tr.mu.Lock()
			a.held = 0
			tr.mu.Unlock()
		}
	}
	for _, c := range tr.clients {
		_ = c.Close()
	}
	tr.quiescent("at the end (Clients closed)")
}

// quiescent checks Redis's count against the returns, waiting for the background within
// semHuntSettle; a documented window (ambig, drainUnknown: read at every look, since the
// Observer tells of a failed give-back only when the background gives up) is accepted once
// the settle bound has passed, and the count taken as the base.
func (tr *semTrial) quiescent(when string) {
	end := time.Now().Add(semHuntSettle)
	for {
		got, err := tr.count()
		if err != nil {
			tr.violation("%s: reading the count: %v", when, err)
			return
		}
		tr.mu.Lock()
		exp := tr.total - tr.heldLocked()
		ambig, dunk := tr.ambig, tr.drainUnknown
		if ambig == 0 && !dunk && got == exp {
			tr.bg = 0
			tr.noteLocked(fmt.Sprintf("quiescent %s: Redis counts %d as expected", when, got))
			tr.mu.Unlock()
			return
		}
		if time.Now().After(end) {
			defer tr.mu.Unlock()
			if got > exp || (!dunk && got < exp-ambig) {
				tr.violationLocked("%s: Redis counts %d permits, want %d (held by the returns: %d; less at most %d of documented windows, a drain's unknown %v) after %v",
					when, got, exp, tr.total-exp, ambig, dunk, semHuntSettle)
				return
			}
			tr.noteLocked(fmt.Sprintf("quiescent %s: Redis counts %d, want %d less at most %d (windows): new base", when, got, exp, ambig))
			if got != exp {
				tr.windows = append(tr.windows, fmt.Sprintf("%s: %d permit(s) lost to documented windows", when, exp-got))
			}
			tr.total -= exp - got
			tr.ambig, tr.drainUnknown, tr.bg = 0, false, 0
			return
		}
		tr.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
}

// plan draws the faults of one op.
func (tr *semTrial) plan(a *semActor) *driftPlan {
	p := &driftPlan{at: map[int32]driftFault{}, delay: time.Duration(10+a.rng.IntN(390)) * time.Millisecond,
		note: func(s string) { tr.note(a.id + s) }}
	if a.rng.Float64() < 0.6 {
		for range 1 + a.rng.IntN(2) {
			p.at[int32(1+a.rng.IntN(3))] = driftFault(1 + a.rng.IntN(int(dfaultCount)-1))
		}
	}
	if a.rng.Float64() < 0.015 {
		p.storm = semHuntCleanup + time.Duration(100+a.rng.IntN(400))*time.Millisecond
		p.stormAt = int32(1 + a.rng.IntN(2))
		p.outage = a.rng.Float64() < 0.5
	}
	return p
}

// opCtx makes an op's ctx: kind 0 a longer timeout (0.3-0.8 s), 1 a short timeout, 2 cancelled at a random
// point; with the plan in it. dl is its deadline when short.
func (tr *semTrial) opCtx(a *semActor, p *driftPlan, kind int) (ctx context.Context, cancel context.CancelFunc, dl time.Time, desc string) {
	base := context.WithValue(context.Background(), driftPlanKey{}, p)
	switch kind {
	case 1:
		d := time.Duration(20+a.rng.IntN(180)) * time.Millisecond
		ctx, cancel = context.WithTimeout(base, d)
		dl, _ = ctx.Deadline()
		desc = fmt.Sprintf("timeout(%v)", d)
	case 2:
		d := time.Duration(a.rng.IntN(150)) * time.Millisecond
		ctx, cancel = context.WithCancel(base)
		time.AfterFunc(d, cancel)
		desc = fmt.Sprintf("cancel(%v)", d)
	default:
		d := time.Duration(300+a.rng.IntN(500)) * time.Millisecond
		ctx, cancel = context.WithTimeout(base, d)
		desc = fmt.Sprintf("timeout(%v)", d)
	}
	p.cancel = cancel
	return ctx, cancel, dl, desc
}

func (tr *semTrial) op(a *semActor) {
	r := a.rng.Float64()
	tr.mu.Lock()
	held := a.held
	closed := tr.closed[a.ci]
	tr.mu.Unlock()
	s := tr.clients[a.ci].Semaphore(tr.name)
	p := tr.plan(a)
	switch {
	case held > 0 && r < 0.5:
		k := 1 + a.rng.IntN(held)
		tr.release(a, s, p, k)
	case r < 0.6:
		tr.acquire(a, s, p, 1+a.rng.IntN(2), -1, closed)
	case r < 0.95:
		wait := time.Duration(0)
		if a.rng.Float64() < 0.6 {
			wait = time.Duration(1+a.rng.IntN(150)) * time.Millisecond
		}
		tr.acquire(a, s, p, 1+a.rng.IntN(2), wait, closed)
	default:
		tr.drain(a, s, p)
	}
	time.Sleep(time.Duration(a.rng.IntN(30)) * time.Millisecond)
}

func (tr *semTrial) acquire(a *semActor, s *rlock.Semaphore, p *driftPlan, n int, wait time.Duration, wasClosed bool) {
	kind := a.rng.IntN(3)
	if wait >= 0 && a.rng.Float64() < 0.5 {
		kind = 0
	}
	ctx, cancel, dl, desc := tr.opCtx(a, p, kind)
	defer cancel()
	var st *semTry
	tr.mu.Lock()
	tr.taking += n
	tr.loweredLocked()
	if wait >= 0 {
		st = &semTry{n: n, minLB: tr.total - tr.heldLocked() - (tr.taking - n) - tr.bg - tr.ambig}
		if tr.drains > 0 || tr.drainUnknown {
			st.minLB = -1 << 30
		}
		tr.tries[st] = true
	}
	what := fmt.Sprintf("%s Acquire(%d) ctx=%s", a.id, n, desc)
	if wait >= 0 {
		what = fmt.Sprintf("%s TryAcquire(%d, wait %v) ctx=%s", a.id, n, wait, desc)
	}
	tr.noteLocked(what + " ...")
	tr.mu.Unlock()
	began := time.Now()
	var ok bool
	var err error
	if wait >= 0 {
		ok, err = s.TryAcquire(ctx, n, wait)
	} else {
		err = s.Acquire(ctx, n)
		ok = err == nil
	}
	ended := time.Now()
	took := ended.Sub(began)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.taking -= n
	if st != nil {
		delete(tr.tries, st)
	}
	tr.noteLocked(fmt.Sprintf("%s -> %v %v (%v)", what, ok, err, took.Round(time.Millisecond)))
	switch {
	case ok && err == nil:
		a.held += n
	case errors.Is(err, rlock.ErrUnknownOutcome):
		tr.ambig += n
		tr.windows = append(tr.windows, fmt.Sprintf("%s: unknown outcome", what))
	case err != nil:
		tr.bg += n // its background work may hold them until it gives them back
	}
	tr.loweredLocked()
	closed := tr.closed[a.ci]
	if !ok && err == nil && wait >= 0 {
		// (false, nil): contention, honest only if the permits were not sure to be there.
		if !closed && st.minLB >= n {
			tr.violationLocked("%s returned (false, nil) although at least %d permits were available throughout", what, st.minLB)
		}
	}
	stall := tr.stalls(began, ended)
	if !dl.IsZero() && !closed && !wasClosed {
		if late := ended.Sub(dl); late > 100*time.Millisecond+200*time.Millisecond+stall && ctx.Err() != nil {
			tr.violationLocked("%s returned %v after its ctx's deadline (stalls %v)", what, late, stall)
		}
	}
	if wait >= 0 && p.storm == 0 && !closed {
		if bound := wait + 2*semHuntCleanup + p.delay + 300*time.Millisecond + stall; took > bound {
			tr.violationLocked("%s took %v (bound %v)", what, took, bound)
		}
	}
}

func (tr *semTrial) release(a *semActor, s *rlock.Semaphore, p *driftPlan, k int) {
	kind := 0
	if a.rng.Float64() < 0.3 {
		kind = 2
	}
	ctx, cancel, _, desc := tr.opCtx(a, p, kind)
	defer cancel()
	what := fmt.Sprintf("%s Release(%d) ctx=%s", a.id, k, desc)
	tr.note(what + " ...")
	began := time.Now()
	err := s.Release(ctx, k)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.noteLocked(fmt.Sprintf("%s -> %v (%v)", what, err, time.Since(began).Round(time.Millisecond)))
	switch {
	case err == nil:
		a.held -= k
	case errors.Is(err, rlock.ErrUnknownOutcome):
		a.held -= k
		tr.ambig += k
		tr.windows = append(tr.windows, fmt.Sprintf("%s: unknown outcome", what))
	case errors.Is(err, rlock.ErrClosed):
		// Nothing sent: still held, given back at the end through another Client.
	default:
		// A failure after a send may or may not have applied: count it given back, and the
		// count may lack it.
		a.held -= k
		tr.ambig += k
		tr.windows = append(tr.windows, fmt.Sprintf("%s: failed: %v", what, err))
	}
	tr.loweredLocked()
}

func (tr *semTrial) drain(a *semActor, s *rlock.Semaphore, p *driftPlan) {
	ctx, cancel, _, desc := tr.opCtx(a, p, a.rng.IntN(3))
	defer cancel()
	what := fmt.Sprintf("%s DrainPermits ctx=%s", a.id, desc)
	tr.mu.Lock()
	tr.drains++
	tr.loweredLocked()
	tr.noteLocked(what + " ...")
	tr.mu.Unlock()
	began := time.Now()
	got, err := s.DrainPermits(ctx)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.drains--
	tr.noteLocked(fmt.Sprintf("%s -> %d %v (%v)", what, got, err, time.Since(began).Round(time.Millisecond)))
	switch {
	case err == nil:
		a.held += got
	case errors.Is(err, rlock.ErrUnknownOutcome):
		tr.drainUnknown = true
		tr.windows = append(tr.windows, fmt.Sprintf("%s: unknown outcome", what))
	default:
		// Given back by the background: no lower bound until the quiescent point.
		tr.bg += 1 << 20
	}
	tr.loweredLocked()
}
