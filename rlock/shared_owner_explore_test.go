package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestExplore_SharedOwnerLosses explores a context owner (WithOwner) shared by two or three
// Clients, each on its own connection to one redis-server, while its holds are lost
// (review5). A trial picks 2-3 Clients, 1-2 lock names, the shared owner (one actor, a
// goroutine, per Client and lock) and, most of the time, a second owner on one Client that
// contends for the same locks. In each of 3-6 rounds every actor runs 1-4 operations one after
// another, beside the others: Lock, TryLock (wait 0 or short; watchdog or a short fixed
// lease), LockLease (a short fixed lease), a re-entry (any of them while it holds), Unlock,
// each with a ctx that may time out, and acquire and release replies delayed now and then
// (soFaults); meanwhile a chaos goroutine loses holds: DEL of a lock key, or PEXPIRE 1 ms.
// An actor unlocks by the holds it booked, without asking Err first: as a caller whose work
// overran its fixed lease does.
// The watchdog renews every 150ms (a 300ms lease), so a Client learns of a loss at its next
// renewal round; a fixed lease is never renewed, and a Client learns of its loss when it
// ends (at most soFixedMax).
//
// An actor books its holds from the API's returns and the handle's Err: +1 for a grant, -1
// for an Unlock that returned nil or an error wrapping ErrNotHeld while the loss still counts
// holds (Err says ErrLockLost), 0 once Err says plain ErrNotHeld or ErrLeaseExpired (the
// Client counts none: the loss's holds given back, or a fixed lease's end). After each round
// (every actor paused, no loss in flight) and at the end it checks, against Redis itself:
//
//	(a) exclusion: the hash never has two owners' fields; and a grant to one owner while an
//	    actor of another still holds by its returns and its Err is nil (one of the two holds
//	    is not in Redis: the grant may also have been applied before a loss and returned
//	    after it) is allowed only when a loss was injected on that lock since the earlier of
//	    the two tenures began (or the other's hold had a fixed lease), and one of the two is
//	    told (Err not nil, or an Unlock's ErrNotHeld) within soTell;
//	(b) a Client whose handle reports held (Err nil) holds in Redis's tenure (the owner's
//	    field present, its Token the hash's token), or is told of the loss within soTell
//	    (one renewal period, the longest fixed lease, and a second of slack);
//	(c) the count Redis keeps for each Client of the shared owner (lib_seq.lua's entries of
//	    the q: field) equals the holds that Client's live actor booked, within soSettle (the
//	    background give-back of a grant whose caller had gone): so no Unlock, give-back or
//	    renewal of one Client took a hold another took; and a Client that counts none has
//	    none counted in Redis;
//	(d) at the end, once every actor has given back what it holds, no key of the trial is
//	    left but the fences (DESIGN section 3), within one lease.
//
// A hold that a Client counts none of after a fixed-lease tenure of its own, and that Redis
// still counts for it in a tenure renewed by another Client of the owner (a fixed lease
// re-entered into that tenure, or a fixed tenure that a renewed re-entry joined:
// TestSharedOwner_fixedLeaseReentryEndsInRedisToo and ...TenureJoinedByARenewedReentry...)
// was a known defect, logged as a window (20 s runs showed it in about one trial in five,
// and in 10 s with the fix of the first story alone); since the give-back at every context
// owner's fixed-lease end (hold.giveBackExpired) it is a violation once the trial settles.
//
// RELOCK_SHARED_SEED replays a run's plan (goroutine timing is not replayed),
// RELOCK_SHARED_TRIAL=<n> runs its trial n alone, RELOCK_SHARED_LOG=1 prints every trial's
// history. The run lasts 6 s (RELOCK_FULL: 30 s; RELOCK_SHARED_BUDGET, a duration or seconds,
// overrides both).
func TestExplore_SharedOwnerLosses(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	t.Parallel() // its own Clients and names: it runs beside the others (go test ./... stays within 5 minutes)
	seed := seedOf(t, "RELOCK_SHARED_SEED")
	budget := budgetOf(t, "RELOCK_SHARED_BUDGET", 6*time.Second, 30*time.Second)
	only := trialOf(t, "RELOCK_SHARED_TRIAL")
	srv := redistest.Start(t)
	admin := srv.Client(t)
	var clients []*rlock.Client
	for i := range 3 {
		f := &soFaults{hookClient: &hookClient{Client: srv.Client(t)}, rng: rand.New(rand.NewPCG(seed, uint64(200+i)))}
		f.set(f.hook)
		c, err := rlock.New(f, rlock.WithWatchdogTimeout(soWatchdog), rlock.WithRenewFraction(0.5),
			rlock.WithCleanupTimeout(soCleanup))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	begin := time.Now()
	trials, losses, overlaps := 0, 0, 0
	for i := range trialIndices(begin, only, budget) {
		tr := &soTrial{t: t, idx: i, admin: admin, clients: clients, start: time.Now()}
		tr.run(rand.New(rand.NewPCG(seed, uint64(i))))
		trials++
		losses += tr.losses
		overlaps += tr.overlaps
		if os.Getenv("RELOCK_SHARED_LOG") == "1" {
			t.Logf("trial %d history:\n%s", i, strings.Join(tr.hist, "\n"))
		}
		if len(tr.fail) > 0 {
			hist := tr.hist
			if len(hist) > 400 {
				hist = append([]string{fmt.Sprintf("(%d earlier lines left out)", len(hist)-400)}, hist[len(hist)-400:]...)
			}
			t.Fatalf("shared-owner explore: seed %d trial %d (RELOCK_SHARED_SEED=%d RELOCK_SHARED_TRIAL=%d replays its plan):\n%s\nhistory:\n%s",
				seed, i, seed, i, strings.Join(tr.fail, "\n"), strings.Join(hist, "\n"))
		}
	}
	t.Logf("%d trials in %v: %d losses injected, %d grants to another owner over a hold not yet told lost", trials,
		time.Since(begin).Round(time.Millisecond), losses, overlaps)
}

const (
	soWatchdog = 300 * time.Millisecond
	soRenew    = soWatchdog / 2 // WithRenewFraction(0.5)
	soCleanup  = 400 * time.Millisecond
	soFixedMin = 150 * time.Millisecond
	soFixedMax = 400 * time.Millisecond
	// soTell bounds how long a Client whose hold is gone from Redis may go on reporting it
	// held: its next renewal round (a renewal period, and the round's answer), or the end of
	// a fixed lease, and a second of slack for a loaded machine.
	soTell = soRenew + soFixedMax + time.Second
	// soSettle bounds how long the counts may take to agree at a quiescent point: the
	// background give-back of a grant whose caller had gone (within the cleanup timeout), a
	// renewal period, and slack.
	soSettle = soCleanup + soRenew + time.Second
)

// soFaults delays the replies of acquire and release scripts now and then (10-60ms; the ctx
// of the call may end first), so that grants reach callers who have gone.
type soFaults struct {
	*hookClient
	mu  sync.Mutex
	rng *rand.Rand
}

func (f *soFaults) hook(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
	if cmd.script != "acquire" && cmd.script != "release" {
		return call()
	}
	f.mu.Lock()
	r, d := f.rng.Float64(), time.Duration(10+f.rng.IntN(50))*time.Millisecond
	f.mu.Unlock()
	if r >= 0.15 {
		return call()
	}
	res := call()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return res
	case <-ctx.Done():
		return rueidis.NewErrorResult(ctx.Err())
	}
}

// soActor is one goroutine acting for one owner on one lock through one Client.
type soActor struct {
	id     string
	ci     int
	owner  string // the context owner's id
	shared bool   // the shared owner's (else the contender's)
	lock   int
	m      *rlock.Mutex
	rng    *rand.Rand
	// guarded by soTrial.mu
	held   int       // holds taken through its Client and not given back, as booked
	unlock int       // Unlocks in flight (each may give back one of held)
	since  time.Time // when its tenure began (held went from 0 to 1)
	fixed  bool      // the tenure's grants all had fixed leases
	stale  bool      // its last fixed-lease tenure ended locally: Redis may still count it
	told   time.Time // when it last learnt its holds were gone (Err, or an Unlock's ErrNotHeld)
	lastOK time.Time // last grant
}

func (a *soActor) ctx(parent context.Context) context.Context {
	return rlock.WithOwner(parent, a.owner)
}

// soPending is a grant to one owner (to actor g, returned at) while an actor b of another
// held by its returns with Err nil: one of the two holds is not in Redis (the grant may have
// been applied before a loss and returned after it, or b's hold may be the lost one), and its
// actor must be told within soTell.
type soPending struct {
	g, b     *soActor
	at       time.Time
	explains bool // a loss was injected on the lock since the earlier tenure began, or b's lease was fixed
	what     string
}

type soTrial struct {
	t       *testing.T
	idx     int
	admin   rueidis.Client
	clients []*rlock.Client
	start   time.Time
	names   []string
	keys    []string
	base    string
	actors  []*soActor

	mu       sync.Mutex
	lossAt   map[int][]time.Time // lock -> when losses were injected
	pending  []soPending
	hist     []string
	fail     []string
	losses   int
	overlaps int
}

func (tr *soTrial) note(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.noteLocked(format, args...)
}

func (tr *soTrial) noteLocked(format string, args ...any) {
	tr.hist = append(tr.hist, fmt.Sprintf("%8.1fms %s", float64(time.Since(tr.start).Microseconds())/1000, fmt.Sprintf(format, args...)))
}

func (tr *soTrial) violation(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	s := fmt.Sprintf(format, args...)
	tr.noteLocked("VIOLATION %s", s)
	tr.fail = append(tr.fail, s)
}

func (tr *soTrial) run(rng *rand.Rand) {
	tr.lossAt = map[int][]time.Time{}
	nLocks, nClients := 1+rng.IntN(2), 2+rng.IntN(2)
	tr.base = fmt.Sprintf("%s-%d", redistest.Name(tr.t), tr.idx)
	for l := range nLocks {
		n := fmt.Sprintf("%s-%d", tr.base, l)
		tr.names = append(tr.names, n)
		tr.keys = append(tr.keys, tr.clients[0].Mutex(n).Key())
	}
	add := func(owner string, shared bool, ci, l int) {
		a := &soActor{id: fmt.Sprintf("a%d", len(tr.actors)+1), ci: ci, owner: owner, shared: shared, lock: l,
			m: tr.clients[ci].Mutex(tr.names[l]), rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}
		tr.actors = append(tr.actors, a)
		tr.note("%s: owner %s on lock %d through Client %d", a.id, owner, l, ci)
	}
	shared := fmt.Sprintf("shared-%s", tr.base)
	for l := range nLocks {
		for ci := range nClients {
			add(shared, true, ci, l)
		}
	}
	if rng.IntN(10) < 6 {
		ci := rng.IntN(nClients)
		for l := range nLocks {
			add("other-"+tr.base, false, ci, l)
		}
	}
	rounds := 3 + rng.IntN(4)
	for r := range rounds {
		tr.note("--- round %d", r)
		var wg sync.WaitGroup
		for _, a := range tr.actors {
			n := 1 + a.rng.IntN(4)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n {
					tr.step(a)
				}
			}()
		}
		chaos := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr.chaos(chaos)
		}()
		wg.Wait()
		tr.quiescent(fmt.Sprintf("after round %d", r))
		if len(tr.fail) > 0 {
			return
		}
	}
	tr.end()
}

// chaos injects 0-2 losses at random points of a round.
func (tr *soTrial) chaos(rng *rand.Rand) {
	for range rng.IntN(3) {
		time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond)
		l := rng.IntN(len(tr.keys))
		cmd := tr.admin.B().Del().Key(tr.keys[l]).Build()
		what := "DEL"
		if rng.IntN(2) == 0 {
			cmd, what = tr.admin.B().Pexpire().Key(tr.keys[l]).Milliseconds(1).Build(), "PEXPIRE 1"
		}
		tr.mu.Lock()
		tr.lossAt[l] = append(tr.lossAt[l], time.Now())
		tr.mu.Unlock()
		n, err := tr.admin.Do(context.Background(), cmd).AsInt64()
		tr.note("chaos: %s lock %d -> %d, %v", what, l, n, err)
		if n == 1 {
			tr.mu.Lock()
			tr.losses++
			tr.mu.Unlock()
		}
	}
}

// refresh books what a's Err tells: no holds once the Client counts none (plain ErrNotHeld
// or ErrLeaseExpired). It returns Err.
func (tr *soTrial) refresh(a *soActor) error {
	err := a.m.Err(a.ctx(bg))
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if a.held > 0 && err != nil {
		a.told = time.Now()
	}
	if a.held > 0 && err != nil && !errors.Is(err, rlock.ErrLockLost) {
		tr.noteLocked("%s: Err says %v: %d hold(s) booked, none held", a.id, err, a.held)
		a.stale = a.stale || a.fixed || errors.Is(err, rlock.ErrLeaseExpired)
		a.held = 0
	}
	return err
}

// step runs one random operation of a.
func (tr *soTrial) step(a *soActor) {
	rng := a.rng
	err := a.m.Err(a.ctx(bg))
	tr.mu.Lock()
	held := a.held
	tr.mu.Unlock()
	if errors.Is(err, rlock.ErrLockLost) || held > 0 && rng.IntN(10) < 4 {
		// Unlock: one hold of a live tenure, or, told of a loss, one of the lost ones; or a
		// hold whose fixed lease may have run its course meanwhile, as a caller's Unlock
		// after its work overran the lease (the booking is not refreshed first).
		tr.mu.Lock()
		a.unlock++
		tr.mu.Unlock()
		uerr := a.m.Unlock(a.ctx(bg))
		after := a.m.Err(a.ctx(bg))
		tr.mu.Lock()
		defer tr.mu.Unlock()
		a.unlock--
		tr.noteLocked("%s Unlock with %d booked -> %v (Err now %v)", a.id, a.held, uerr, after)
		if uerr != nil && a.held > 0 {
			a.told = time.Now()
		}
		switch {
		case uerr == nil && a.held == 0:
			tr.violation0("%s: Unlock returned nil with no hold booked through its Client", a.id)
		case uerr == nil:
			a.held--
		case errors.Is(uerr, rlock.ErrNotHeld) && errors.Is(after, rlock.ErrLockLost):
			a.held = max(0, a.held-1) // counting the lost holds down
		case errors.Is(uerr, rlock.ErrNotHeld):
			a.stale = a.stale || a.fixed || errors.Is(uerr, rlock.ErrLeaseExpired)
			a.held = 0
		default:
			tr.violation0("%s: Unlock: %v", a.id, uerr)
		}
		return
	}
	// An acquire: a re-entry while it holds.
	tr.refresh(a) // a fixed lease's end: its holds are over
	ctx, cancel := context.WithTimeout(a.ctx(bg), time.Duration(30+rng.IntN(220))*time.Millisecond)
	defer cancel()
	fixed := time.Duration(0)
	var ok bool
	var what string
	sent := time.Now()
	switch rng.IntN(4) {
	case 0, 1:
		what = "Lock"
		err = a.m.Lock(ctx)
		ok = err == nil
	case 2:
		wait := time.Duration(0)
		if rng.IntN(2) == 0 {
			wait = time.Duration(10+rng.IntN(70)) * time.Millisecond
		}
		if rng.IntN(2) == 0 {
			fixed = soFixedMin + time.Duration(rng.Int64N(int64(soFixedMax-soFixedMin)))
		}
		what = fmt.Sprintf("TryLock(wait %v, lease %v)", wait, fixed)
		ok, err = a.m.TryLock(ctx, wait, fixed)
	default:
		fixed = soFixedMin + time.Duration(rng.Int64N(int64(soFixedMax-soFixedMin)))
		what = fmt.Sprintf("LockLease(%v)", fixed)
		err = a.m.LockLease(ctx, fixed)
		ok = err == nil
	}
	if !ok {
		tr.mu.Lock()
		tr.noteLocked("%s %s -> %v, %v (%d booked)", a.id, what, ok, err, a.held)
		if errors.Is(err, rlock.ErrLockLost) && a.held == 0 {
			tr.violation0("%s: %s says lost with no hold booked: %v", a.id, what, err)
		}
		tr.mu.Unlock()
		return
	}
	tok, terr := a.m.Token(a.ctx(bg))
	tr.mu.Lock()
	tr.noteLocked("%s %s -> granted, token %d %v (%d booked before)", a.id, what, tok, terr, a.held)
	if a.held == 0 {
		a.since, a.fixed = sent, true
	}
	a.held++
	a.fixed = a.fixed && fixed > 0
	a.lastOK = time.Now()
	var others []*soActor
	for _, b := range tr.actors {
		if b.owner != a.owner && b.lock == a.lock && b.held-b.unlock > 0 {
			others = append(others, b)
		}
	}
	tr.mu.Unlock()
	// (a) Exclusion: another owner's actor that holds by its returns must have lost its hold.
	for _, b := range others {
		if b.m.Err(b.ctx(bg)) != nil {
			continue
		}
		tr.mu.Lock()
		explains := b.fixed
		first := b.since
		if a.since.Before(first) {
			first = a.since
		}
		for _, at := range tr.lossAt[a.lock] {
			explains = explains || !at.Before(first.Add(-5*time.Millisecond))
		}
		tr.overlaps++
		tr.pending = append(tr.pending, soPending{g: a, b: b, at: time.Now(), explains: explains,
			what: fmt.Sprintf("%s (%s) granted lock %d while %s (%s) holds %d by its returns with Err nil", a.id, a.owner, a.lock, b.id, b.owner, b.held)})
		tr.noteLocked("overlap: %s granted while %s holds %d, Err nil (a loss explains it: %v)", a.id, b.id, b.held, explains)
		tr.mu.Unlock()
	}
}

// violation0 is violation with tr.mu held.
func (tr *soTrial) violation0(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	tr.noteLocked("VIOLATION %s", s)
	tr.fail = append(tr.fail, s)
}

// soLock is one lock's hash as Redis has it.
type soLock struct {
	owners map[string]int // owner fields
	token  string
	counts map[string]map[string]int // owner -> client id -> its count (lib_seq.lua)
	raw    map[string]string
}

func (tr *soTrial) read(l int) (soLock, error) {
	m, err := tr.admin.Do(context.Background(), tr.admin.B().Hgetall().Key(tr.keys[l]).Build()).AsStrMap()
	s := soLock{owners: map[string]int{}, counts: map[string]map[string]int{}, raw: m}
	if err != nil {
		return s, err
	}
	for f, v := range m {
		switch {
		case f == "token":
			s.token = v
		case strings.HasPrefix(f, "q:u:"):
			cs := map[string]int{}
			for _, e := range strings.Fields(v) {
				k := 0
				if i := strings.LastIndexByte(e, '/'); i >= 0 {
					k, _ = strconv.Atoi(e[i+1:])
					e = e[:i]
				}
				if i := strings.LastIndexByte(e, '.'); i >= 0 {
					cs[e[:i]] = k
				}
			}
			s.counts[strings.TrimPrefix(f, "q:")] = cs
		case strings.HasPrefix(f, "u:") || strings.HasPrefix(f, "h:"):
			n, _ := strconv.Atoi(v)
			s.owners[f] = n
		}
	}
	return s, nil
}

// quiescent checks (a)-(c) with every actor paused.
func (tr *soTrial) quiescent(when string) {
	tr.note("check %s", when)
	// (a) the overlaps seen at grants: each actor told within soTell, and a loss explains it.
	tr.mu.Lock()
	pend := tr.pending
	tr.pending = nil
	tr.mu.Unlock()
	for _, p := range pend {
		deadline := p.at.Add(soTell)
		told := func(a *soActor) bool {
			tr.refresh(a)
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return !a.told.Before(p.at)
		}
		for !told(p.g) && !told(p.b) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		switch {
		case !told(p.g) && !told(p.b):
			tr.violation("exclusion: %s, and neither was told of a loss within %v", p.what, soTell)
		case !p.explains:
			tr.violation("exclusion: %s, with no loss injected on the lock since the earlier tenure began", p.what)
		}
	}
	deadline := time.Now().Add(soSettle)
	for {
		ms, windows := tr.mismatches()
		// The give-back at a fixed lease's end runs in the background: a window may close
		// within the settling time too.
		if len(ms) == 0 && len(windows) == 0 || time.Now().After(deadline) {
			for _, m := range ms {
				tr.violation("%s: %s", when, m)
			}
			for _, w := range windows {
				tr.violation("%s: %s", when, w)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// toldBy waits until a's Err is not nil, or deadline; it returns Err (nil: never told).
func (tr *soTrial) toldBy(a *soActor, deadline time.Time) error {
	for {
		err := tr.refresh(a)
		if err != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mismatches returns what (a)-(c) find wrong now, and apart the holds of an ended fixed lease
// that Redis still counts in a tenure another Client renews (once a known defect: see the test's
// comment).
func (tr *soTrial) mismatches() (out, windows []string) {
	for l := range tr.keys {
		s, err := tr.read(l)
		if err != nil && !rueidis.IsRedisNil(err) {
			out = append(out, fmt.Sprintf("lock %d: HGETALL: %v", l, err))
			continue
		}
		if len(s.owners) > 1 {
			out = append(out, fmt.Sprintf("lock %d: exclusion: %d owners in Redis: %v", l, len(s.owners), s.raw))
		}
		for _, a := range tr.actors {
			if a.lock != l {
				continue
			}
			err := tr.refresh(a)
			tr.mu.Lock()
			held, stale := a.held, a.stale
			tr.mu.Unlock()
			field := "u:" + a.owner
			mine := s.counts[field][tr.clients[a.ci].ID()]
			if held > 0 && err == nil {
				// (b) a live hold is in Redis's tenure, or its Client is told within soTell
				// (a loss injected at the end of the round is told at the next renewal).
				tok, terr := a.m.Token(a.ctx(bg))
				if terr != nil || s.owners[field] == 0 || strconv.FormatInt(tok, 10) != s.token {
					if e := tr.toldBy(a, time.Now().Add(soTell)); e == nil {
						out = append(out, fmt.Sprintf("lock %d: %s holds %d by its returns and Err nil, token %d (%v), but Redis's tenure is %q with %s = %d, and no loss was told in %v",
							l, a.id, held, tok, terr, s.token, field, s.owners[field], soTell))
					}
					continue
				}
				// (c) Redis's count for this Client is the holds it booked.
				if mine != held {
					out = append(out, fmt.Sprintf("lock %d: %s (Client %d) booked %d, Redis counts %d for its Client (hash %v)", l, a.id, a.ci, held, mine, s.raw))
				}
			} else if held == 0 && mine == 0 {
				tr.mu.Lock()
				a.stale = false // nothing of its Client's left in Redis
				tr.mu.Unlock()
			} else if held == 0 && mine > 0 {
				if stale && s.owners[field] > 0 {
					windows = append(windows, fmt.Sprintf("lock %d: %s (Client %d) counts no hold after its fixed lease ended, Redis counts %d for it in a tenure still renewed (hash %v)", l, a.id, a.ci, mine, s.raw))
				} else {
					out = append(out, fmt.Sprintf("lock %d: %s (Client %d) counts no hold (Err %v), Redis counts %d for it (hash %v)", l, a.id, a.ci, err, mine, s.raw))
				}
			}
			if n, err := a.m.HoldCount(a.ctx(bg)); err != nil || n != s.owners[field] {
				if s2, _ := tr.read(l); s2.owners[field] == n {
					continue // changed in between (a lease ran out)
				}
				out = append(out, fmt.Sprintf("lock %d: %s HoldCount %d (%v), the hash %d", l, a.id, n, err, s.owners[field]))
			}
		}
	}
	return out, windows
}

// end gives back every hold and checks (d).
func (tr *soTrial) end() {
	tr.note("--- end: every actor gives back what it holds")
	for _, a := range tr.actors {
		for range 20 {
			err := tr.refresh(a)
			tr.mu.Lock()
			held := a.held
			tr.mu.Unlock()
			if held == 0 && !errors.Is(err, rlock.ErrLockLost) {
				break
			}
			uerr := a.m.Unlock(a.ctx(bg))
			after := a.m.Err(a.ctx(bg))
			tr.mu.Lock()
			tr.noteLocked("%s Unlock (end) with %d booked -> %v (Err now %v)", a.id, a.held, uerr, after)
			switch {
			case uerr == nil && a.held > 0:
				a.held--
			case errors.Is(uerr, rlock.ErrNotHeld) && errors.Is(after, rlock.ErrLockLost):
				a.held = max(0, a.held-1)
			case errors.Is(uerr, rlock.ErrNotHeld):
				a.held = 0
			default:
				tr.violation0("%s: Unlock at the end: %v", a.id, uerr)
			}
			tr.mu.Unlock()
		}
	}
	// (d) Nothing left but the fences, within one lease of the last renewal.
	var left []string
	for deadline := time.Now().Add(soWatchdog + time.Second); ; time.Sleep(20 * time.Millisecond) {
		keys, err := tr.admin.Do(context.Background(), tr.admin.B().Keys().Pattern("*"+tr.base+"*").Build()).AsStrSlice()
		if err != nil {
			tr.violation("KEYS: %v", err)
			return
		}
		left = left[:0]
		for _, k := range keys {
			if !strings.HasSuffix(k, ":fence") {
				left = append(left, k)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, k := range left {
		h, _ := tr.admin.Do(context.Background(), tr.admin.B().Hgetall().Key(k).Build()).AsStrMap()
		tr.violation("at the end: key %s left (%v) once every hold was given back", k, h)
	}
}
