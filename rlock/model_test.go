package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/fastform"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The model-based, randomized state-machine test (issue 9).
//
// A seeded driver runs many short operation sequences against real redis-servers (one per
// worker), each on a fresh lock name, across 2-3 Clients (watchdog timeout 300-600ms,
// cleanup timeout 300-500ms, each on its own rueidis client wrapped in a hookClient) and
// 1-3 owners per Client: handle owners, handles shared by two goroutines, and context owners
// (WithOwner, one or two goroutines each with a handle of its own). A sequence is 3-7
// rounds: in a round every goroutine runs 1-4 operations concurrently (Lock with a ctx that
// times out or is cancelled at a random point; TryLock with wait 0 / 10-100ms / 200-800ms and
// lease watchdog / fixed 30-300ms / tiny; nested re-entry; a re-lock timed at the end of a
// fixed lease, where the Client's and Redis's ends drift apart; Unlock, also with a
// cancelled ctx, and stray Unlocks; ForceUnlock; sleeps that let fixed leases run out; Err).
// The read-write lock takes both sides (read holds of several owners, write holds,
// downgrades, refused upgrades); the permit semaphore Acquire, TryAcquire, Release and
// Extend. The same driver runs every kind; a subject (lockSubject, permitSubject) says how
// to act on it and what to check.
//
// Faults: a quarter of the operations (two fifths in stormy sequences) carry a fault in their
// context, which modelFaults (their hookClient's hook) applies to their script calls: the
// reply of an applied script lost (as a timeout loses it), a late reply (20-150ms), refused
// dials (nothing sent), a definitive error reply (ERR) or a transient one (LOADING), the
// late first send (an acquire's or release's first send kept back, its caller told what a
// lost reply tells, and delivered after its replay was answered: 0-300ms later, or just
// after the owner's next operation; its reply discarded, and it must change nothing:
// lateSend), at the first call or a later one (the replay, the give-back of a grant that
// came after the caller left, a queue's leave), and for a quarter of those a second stage
// that fails a later call. Per round,
// depending on the sequence's profile (calm: none, so that every check applies in full;
// normal; stormy): Redis SIGSTOPped for 50-200ms, renewals refused for 100-400ms, a DEL of
// the lock behind the holders' backs, ForceUnlock calls, replies-lost (every reply to one
// owner's script calls lost for the whole round: applied, the replies of its replays and of
// the work it leaves to the background lost too; half the time also its Client's renewal
// replies, applied, for 100-400ms, so that a lease declared lost lives on in Redis for up to
// a lease: drawn from a stream of its own, so that the other draws of a seed stay as they
// were); between rounds a DEL at a quiescent
// point (after which every holder is owed a loss notice by its next renewal) or an idle
// spell. Stalls of this process (a 5ms ticker) and of Redis (a PING every 20ms) are measured
// and count as pauses. A third of the sequences end by closing a Client while Redis is
// paused and calls are in flight.
//
// At every quiescent point (all operations returned) the driver checks, for every owner and
// side, the model (the holds its goroutines took and did not give back), the Client's hold
// table (export_model_test.go) and Redis (HGET, or the live holds of a read-write lock),
// retrying for settleMax while timers may still settle a mismatch; at the end of a sequence
// every goroutine gives back what it holds and the driver checks the keys left, the tables,
// and mutual exclusion and fencing tokens over the whole sequence. The checks, by name:
//
//	phantom, dropped      the Client counts more holds than the callers have, or loses
//	                      count of holds that surely last, without a loss notice
//	redis-ghost           Redis counts holds the Client does not (beyond its known orphans
//	                      and operations of unknown outcome); after the last Unlock, the lock
//	                      is still held
//	redis-missing         Redis lost holds the Client still counts, with nothing injected
//	                      that could explain it
//	redis-lost            Redis counts holds of an owner side told of a loss (or that gave
//	                      back every hold since) past lostBound: the longest lease the side
//	                      asked for after the later of the loss's first sighting and its
//	                      last acquire's possible effect, plus expirySlack, settleMax and
//	                      the pauses (a lost hold is no longer renewed); at the end of a
//	                      sequence the check waits for the bound
//	loss-spurious         a loss notice (ErrLockLost from a call or from Err, a tenure ended
//	                      lost) that no DEL, ForceUnlock, pause, stall (of this process, of
//	                      Redis, of a renewal round: renewal-slow, of the watchdog, which
//	                      declared an expiry past the lease's end: renewal-late, wdClock),
//	                      refused renewal or unknown outcome explains; loss-abandon: one from
//	                      a failed give-back; loss-at-expiry: an Unlock racing its fixed
//	                      lease's end told a loss
//	loss-unnoticed        a holder in watchdog mode not told of a DEL within its lease
//	reentry, upgrade      a re-entry that waited or failed; a refused upgrade not refused
//	acquire-not-held,     a successful acquire the Client does not record; an Unlock of a
//	unlock-notheld        hold that surely lasted answered ErrNotHeld
//	hold-state, err-view  the Client's count, tenure and Err disagree
//	table-idle,           the hold table keeps idle entries, or anything after the last
//	table-leftover,       Unlock; hand-off queues while nobody waits
//	table-handoff
//	ctx-bound             Lock and TryLock outlive their ctx by more than returnGrace plus
//	                      schedSlack (less this process's stalls); ctx-bound-pause: so, while
//	                      Redis was paused; wait-bound: other calls outlive their bound (a
//	                      TryLock's wait, an Unlock's cleanup timeout) by more than ctxSlack
//	                      plus their injected delays and the pauses
//	end-keys, claim-left  keys other than the fence and release records left once every
//	                      owner gave back and the longest lease passed; a fair queue's place
//	                      or a writer's claim left by a waiter that gave up unhindered
//	exclusion, fence      accepted critical sections of different owners overlap (or more
//	                      permits are held than exist) without a loss, or fencing tokens do not
//	                      rise along them
//	refused-replay,       a reply lost and its replay refused taken for the outcome; a
//	handoff-refused       refused release ending a parked waiter's Lock
//	closed-prompt, close  calls in flight at Close not ended promptly with ErrClosed
//	permit-*              a permit the model holds missing from Redis, one kept past its
//	                      lease, live permits nobody holds, Expires out of the lease
//	unexpected-error      an error no injected fault explains
//	hang                  a round that does not end (a call that outlives every bound)
//
// No goroutine may be left once the sequences' Clients are closed (checked per kind, and by
// goleak in TestMain).
//
// Environment:
//
//	RELOCK_MODEL_SEED=<n>     replay one sequence (its seed is printed when it fails)
//	RELOCK_MODEL_SECONDS=<s>  each kind's budget, the kinds side by side (default 42 with RELOCK_FULL=1, as
//	                          .ci/run sets it, else 6; the sequences
//	                          running when it ends finish: the test takes ~60s). -short skips
//	                          the test unless this is set (RELOCK_MODEL_SECONDS=4 -short: a
//	                          smoke run of shorter sequences)
//	RELOCK_MODEL_WORKERS=<n>  sequences run in parallel over the kinds, each worker on its own
//	                          server (4: the kinds side by side, each with its share of them,
//	                          at least one: Mutex 2, the others 1)
//	RELOCK_MODEL_KNOWN=off    report, without failing, the checks that only the defects known
//	                          from issue 9 trip (knownDefectChecks)
//	RELOCK_MODEL_SKIP=a,b     report, without failing, the violations of the checks named
//	RELOCK_MODEL_ALL=1        keep going after a failing sequence
//	RELOCK_MODEL_LOG=1        print a replayed sequence's log even when it passes (to
//	                          compare a passing replay with the failure it did not repeat)
const (
	envModelSeed    = "RELOCK_MODEL_SEED"
	envModelSeconds = "RELOCK_MODEL_SECONDS"
	envModelWorkers = "RELOCK_MODEL_WORKERS"
	envModelKnown   = "RELOCK_MODEL_KNOWN"
	envModelAll     = "RELOCK_MODEL_ALL"
	envModelSkip    = "RELOCK_MODEL_SKIP"
	envModelLog     = "RELOCK_MODEL_LOG"
)

// knownDefectChecks are the checks that the defects of issue 9 under repair trip. With
// RELOCK_MODEL_KNOWN=off their violations are logged, not failed; by default every check is
// on.
var knownDefectChecks = map[string]string{
	"reentry":         "a nested Lock queues behind its own Client's waiters (issue 9 #1)",
	"phantom":         "a failed give-back leaves a hold renewed forever (#2)",
	"redis-ghost":     "a re-lock in a fixed lease's drift window leaves a ghost hold (#3)",
	"table-idle":      "expired fixed-lease holds never leave the hold table (#4)",
	"loss-spurious":   "a hand-off racing a re-entry on a shared handle is reported as a loss (#5)",
	"tiny-lease":      "tiny leases are accepted (#8)",
	"ctx-bound-pause": "Lock outlives its ctx while Redis is paused (#9)",
	"closed-prompt":   "calls after Close retry until the cleanup timeout",
}

// Timing bounds of the checks.
const (
	// ctxSlack: no call outlives its ctx (or its wait bound, or for Unlock the cleanup
	// timeout) by more than this, plus the delays injected into its own replies and the
	// time Redis was paused during it.
	ctxSlack = 400 * time.Millisecond
	// returnGrace: Lock and TryLock never outlive ctx by more than this (mutex.go).
	returnGrace = 100 * time.Millisecond
	// schedSlack: what a loaded machine (two cores, -race, parallel packages) may add.
	schedSlack = 150 * time.Millisecond
	// reentrySlack: a re-entry returns within this (plus injected delays and pauses).
	reentrySlack = 300 * time.Millisecond
	// settleMax: how long a quiescent check is retried before a mismatch counts: timers that
	// end fixed leases (locally and in Redis, drift apart by 1% + 2ms) fire late on a
	// loaded machine.
	settleMax = 300 * time.Millisecond
	// expirySlack: a fixed lease within this of its end is treated as possibly ended.
	expirySlack = 50 * time.Millisecond
	// stallThreshold: a longer gap between ticks of a 5ms ticker is a stall of the process.
	stallThreshold = 50 * time.Millisecond
	// roundHang: a round that takes longer has a call that hangs.
	roundHang = 30 * time.Second
)

type modelConfig struct {
	total   time.Duration
	seed    uint64
	replay  bool
	workers int
	short   bool // -short: sequences cut short
	known   bool // the checks in knownDefectChecks fail the test
	skip    map[string]bool
	all     bool
	log     bool // RELOCK_MODEL_LOG=1: a replayed sequence's log, even when it passes
}

func loadModelConfig(t *testing.T) modelConfig {
	c := modelConfig{total: 42 * time.Second, workers: 4, known: true}
	if !fullRun() {
		c.total = 6 * time.Second // RELOCK_FULL=1 (.ci/run) runs the full 42 s
	}
	if testing.Short() {
		// A smoke run: shorter sequences (the same draws, cut after two rounds and without
		// the close phase: replay a seed without -short).
		c.total, c.short = 4*time.Second, true
	}
	if v := os.Getenv(envModelSeconds); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			t.Fatalf("%s=%q: want a positive number of seconds", envModelSeconds, v)
		}
		c.total = time.Duration(f * float64(time.Second))
	}
	if v := os.Getenv(envModelSeed); v != "" {
		n, err := strconv.ParseUint(v, 0, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envModelSeed, v, err)
		}
		c.seed, c.replay = n, true
	} else {
		c.seed = uint64(time.Now().UnixNano())
	}
	if v := os.Getenv(envModelWorkers); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", envModelWorkers, v)
		}
		c.workers = n
	}
	c.known = os.Getenv(envModelKnown) != "off"
	c.skip = map[string]bool{}
	for _, name := range strings.Split(os.Getenv(envModelSkip), ",") {
		if name = strings.TrimSpace(name); name != "" {
			c.skip[name] = true
		}
	}
	c.all = os.Getenv(envModelAll) != ""
	switch v := os.Getenv(envModelLog); v {
	case "", "0":
	case "1":
		c.log = true
	default:
		t.Fatalf("%s=%q: want 1 or 0", envModelLog, v)
	}
	return c
}

// TestModel runs the model-based test on each kind with its share of the budget.
func TestModel(t *testing.T) {
	if testing.Short() && os.Getenv(envModelSeconds) == "" {
		t.Skip("long: the model-based test, 42 s (run without -short, or with RELOCK_MODEL_SECONDS=4 for a smoke run)")
	}
	cfg := loadModelConfig(t)
	kinds := []struct {
		share float64
		subj  func() subject
	}{
		{0.40, func() subject { return &lockSubject{api: mutexAPI} }},
		{0.15, func() subject { return &lockSubject{api: fairAPI} }},
		{0.25, func() subject { return &lockSubject{api: rwAPI} }},
		{0.20, func() subject { return &permitSubject{} }},
	}
	// The kinds run side by side, each on servers of its own, for the whole budget, their
	// share of it now a share of the workers (of RELOCK_MODEL_WORKERS, at least one each):
	// the sequences running at once stay about as many as when the kinds ran one after
	// another with every worker each (26 s for a 12 s budget then, each kind's last sequences
	// running on past its share). With every worker for every kind side by side, four times
	// the sequences at once under -race delayed an Unlock's send past a fixed lease's end with
	// no stall of the process seen (CI at a331217: TestModel/RWMutex seed
	// 18331198227340992664, unlock-notheld, which passes when replayed). Once all have ended, no goroutine
	// of relock's is left (goleak checks the package at its end; the servers and admin
	// connections go at the subtests' cleanups, which run before this one).
	base := relockGoroutines()
	t.Cleanup(func() {
		end := time.Now().Add(5 * time.Second)
		for relockGoroutines() > base && time.Now().Before(end) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := relockGoroutines(); n > base {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines of relock's left after the sequences' Clients were closed (baseline %d):\n%s", n-base, base, buf[:runtime.Stack(buf, true)])
		}
	})
	for _, k := range kinds {
		t.Run(k.subj().kind(), func(t *testing.T) {
			t.Parallel()
			runModel(t, cfg, max(1, int(math.Round(k.share*float64(cfg.workers)))), cfg.total, k.subj)
		})
	}
}

// seqSeed is the seed of the i-th sequence of a run (splitmix64).
func seqSeed(master uint64, i int) uint64 {
	z := master + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// kindSalt tells apart the sequences of the kinds run with one master seed.
func kindSalt(kind string) uint64 {
	var h uint64 = 14695981039346656037
	for i := 0; i < len(kind); i++ {
		h = (h ^ uint64(kind[i])) * 1099511628211
	}
	return h
}

type modelStats struct {
	mu        sync.Mutex
	sequences int
	ops       int
	rounds    int
	faults    map[string]int
	known     map[string]int
	failed    []*mseq
}

func runModel(t *testing.T, cfg modelConfig, workers int, budget time.Duration, mk func() subject) {
	if budget < time.Second {
		budget = time.Second
	}
	if cfg.replay {
		workers = 1
	}
	type worker struct {
		srv   *redistest.Server
		admin rueidis.Client
	}
	ws := make([]worker, workers)
	for i := range ws {
		ws[i].srv = redistest.Start(t)
		ws[i].admin = ws[i].srv.Client(t)
	}
	st := &modelStats{faults: map[string]int{}, known: map[string]int{}}
	began := time.Now()
	deadline := began.Add(budget)
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				i := int(next.Add(1) - 1)
				seed := seqSeed(cfg.seed^kindSalt(mk().kind()), i)
				if cfg.replay {
					if i > 0 {
						return
					}
					seed = cfg.seed
				} else if time.Now().After(deadline) {
					return
				}
				s := runSequence(t, cfg, mk(), w.srv, w.admin, seed)
				st.add(s)
				if cfg.replay && cfg.log && !s.failed() {
					t.Logf("%s", s.report())
				}
				if s.failed() && !cfg.all {
					stop.Store(true)
				}
				if s.hung {
					stop.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, s := range st.failed {
		t.Errorf("%s", s.report())
	}
	t.Logf("%s: %d sequences, %d rounds, %d operations in %v (budget %v, %d workers, master seed %d); faults: %v",
		mk().kind(), st.sequences, st.rounds, st.ops, time.Since(began).Round(time.Millisecond), budget, workers, cfg.seed, st.faults)
	if mk().kind() == "Mutex" && st.ops >= 500 && st.faults["fast-grant"] == 0 {
		// A handle owner's fresh Lock after an uncontended one within a second is a fast
		// grant (fast.go): in 500 operations some are. None means the model no longer
		// exercises the transaction, or the Client no longer sends it.
		t.Errorf("Mutex: no fast grant in %d operations", st.ops)
	}
	if len(st.known) > 0 {
		t.Logf("checks tripped but not failed (%s=off, %s): %v", envModelKnown, envModelSkip, st.known)
	}
}

// relockGoroutines counts the goroutines running relock's code (rlock, watchdog, pubsub),
// not its tests'.
func relockGoroutines() int {
	buf := make([]byte, 1<<22)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		for _, pkg := range []string{"relock/rlock.", "relock/watchdog.", "relock/pubsub."} {
			if strings.Contains(g, "relock-go/"+pkg) {
				n++
				break
			}
		}
	}
	return n
}

func (st *modelStats) add(s *mseq) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sequences++
	st.ops += s.ops
	st.rounds += s.rounds
	for k, v := range s.faults {
		st.faults[k] += v
	}
	for _, v := range s.viols {
		if v.known {
			st.known[v.check]++
		}
	}
	if s.failed() {
		st.failed = append(st.failed, s)
	}
}

// ---- the fault-injecting rueidis client ----

type faultKind uint8

const (
	fNone     faultKind = iota
	fDrop               // the script runs; its reply is lost (as a timeout would lose it)
	fDelay              // the reply comes late (lost if the caller's ctx ends first)
	fRefuse             // a refused dial: nothing is sent
	fRedisErr           // a definitive error reply; nothing is written
	fBusy               // a transient error reply (LOADING); nothing is written
	fLate               // a first send kept back, its reply lost; Redis gets it after its replay
)

var faultNames = [...]string{"none", "drop", "delay", "refuse", "rediserr", "busy", "late"}

// faultStage injects kind into an operation's script calls number from to from+n-1
// (counting every script the operation sends: attempts, replays, give-backs, leaves).
type faultStage struct {
	kind  faultKind
	from  int32
	n     int32
	delay time.Duration
	next  bool // fLate: delivered after the owner's next operation, not delay after the replay
}

// opFault is the fault injected into one operation: one stage, or two (say, a lost reply and
// then a refused give-back).
type opFault struct {
	stages []faultStage
	// allLost: the round's replies-lost fault (repliesLost): one fDrop stage over every
	// call, replays of replays and background work included; replays for the cleanup
	// timeout (its extra).
	allLost time.Duration
	calls   atomic.Int32
	hits    atomic.Int32
	kinds   atomic.Uint32 // bit 1<<kind: a stage of that kind was applied
	late    atomic.Int32  // stages applied to a call after the first (replays, give-backs...)
	first   atomic.Int64  // UnixNano of its first script call (0: none yet)

	mu       sync.Mutex
	lost     map[string]bool // requests applied whose reply was lost
	replayNo bool            // an error reply was injected into the replay of such a request
	seen     map[string]bool // the sequence numbers its calls carried (sendIDs)
}

// requestOf identifies a script call's request by its words after the script (hookCall.args):
// its keys and arguments (a replay sends the same request id; an acquire's replay marks it
// with a leading '+' or '!', which is dropped here), whichever of EVALSHA and EVAL carries it.
func requestOf(args []string) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		if strings.HasPrefix(a, "+") || strings.HasPrefix(a, "!") {
			a = a[1:]
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, "\x00")
}

func (f *opFault) noteLost(req string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == nil {
		f.lost = map[string]bool{}
	}
	f.lost[req] = true
}

func (f *opFault) noteAnswered(req string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.lost, req)
}

func (f *opFault) noteRefused(req string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost[req] {
		f.replayNo = true
	}
}

func newFault(kind faultKind, from, n int32) *opFault {
	return &opFault{stages: []faultStage{{kind: kind, from: from, n: n}}}
}

func (f *opFault) String() string {
	if f == nil || len(f.stages) == 0 {
		return ""
	}
	if f.allLost > 0 {
		return " fault=replies-lost"
	}
	var b strings.Builder
	b.WriteString(" fault=")
	for i, st := range f.stages {
		if i > 0 {
			b.WriteString("+")
		}
		fmt.Fprintf(&b, "%s@%d", faultNames[st.kind], st.from)
		if st.n > 1 {
			fmt.Fprintf(&b, "x%d", st.n)
		}
		switch {
		case st.kind == fLate && st.next:
			b.WriteString("(next op)")
		case st.kind == fDelay, st.kind == fLate:
			fmt.Fprintf(&b, "(%v)", st.delay.Round(time.Millisecond))
		}
	}
	return b.String()
}

// hitNote tells how many of the operation's calls its fault has hit so far (String, which
// an operation's description takes before the call, does not: it would always say 0).
func (f *opFault) hitNote() string {
	if f == nil || len(f.stages) == 0 {
		return ""
	}
	return fmt.Sprintf(" [hit %d]", f.hits.Load())
}

// extra is how much the fault may lengthen the operation.
func (f *opFault) extra() time.Duration {
	if f == nil {
		return 0
	}
	d := f.allLost // an acquire's or release's replays, all lost, for the cleanup timeout
	for _, st := range f.stages {
		switch st.kind {
		case fDelay:
			d += time.Duration(st.n) * st.delay
		case fRefuse, fBusy:
			d += time.Duration(st.n) * 50 * time.Millisecond // backoff between retries
		}
	}
	return d
}

func (f *opFault) hit() bool { return f != nil && f.hits.Load() > 0 }

// firstSend is when the operation made its first script call (zero: none, or f nil).
func (f *opFault) firstSend() time.Time {
	if f == nil || f.first.Load() == 0 {
		return time.Time{}
	}
	return time.Unix(0, f.first.Load())
}

// applied reports whether a stage of kind k was applied to one of the operation's calls.
func (f *opFault) applied(k faultKind) bool { return f != nil && f.kinds.Load()&(1<<k) != 0 }

// refusedReplay reports whether the call returned an injected error reply that answered the
// replay of a request applied with its reply lost: it says nothing of the first send
// (TestModelRegression_refusedReplayTakenAsOutcome).
func refusedReplay(f *opFault, err error) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	no := f.replayNo
	f.mu.Unlock()
	var re *rueidis.RedisError
	return no && errors.As(err, &re) && injected(err)
}

// stage returns the stage that applies to script call i, if any.
func (f *opFault) stage(i int32) (faultStage, bool) {
	for _, st := range f.stages {
		if i >= st.from && i < st.from+st.n {
			return st, true
		}
	}
	return faultStage{}, false
}

type faultCtxKey struct{}

// withFault marks ctx as an operation's, with the fault f (nil: none): the calls made
// outside any operation are the watchdog's renewals.
func withFault(ctx context.Context, f *opFault) context.Context {
	if f == nil {
		f = &opFault{}
	}
	return context.WithValue(ctx, faultCtxKey{}, f)
}

// modelFaults injects the faults that an operation's context carries into its script
// calls, and refuses the scripts sent outside any operation (the watchdog's renewals) while
// told to: it is the hook of the hookClient its Client runs on (hc). Everything else
// (Receive, Dedicated, the commands that are not scripts, ...) goes straight on, and so do
// the scripts of an operation's DoMulti pipeline (an acquire and its WAIT); the watchdog's
// batched renewals (a pipeline, when a Client's holds differ in script or lease) are refused
// with the others.
type modelFaults struct {
	hc             *hookClient    // the rueidis client to give the Client
	rc             rueidis.Client // the client hc wraps: the injected error replies come from it
	replies        sync.Map       // message -> *rueidis.RedisError (errorReply)
	refuseRenewals atomic.Bool
	loseRenewals   atomic.Bool // the renewals are applied and their replies lost (repliesLost)

	// The first sends kept back by fLate stages, until they are delivered (lateSend).
	lateMu sync.Mutex
	kept   []*lateSend
	lateWG sync.WaitGroup // deliveries under way
	seq    *mseq          // logs and counts the deliveries (nil: neither)
}

// newModelFaults wraps rc in a hookClient (mf.hc) whose hook injects the faults; s (nil:
// none) logs and counts the late deliveries.
func newModelFaults(rc rueidis.Client, s *mseq) *modelFaults {
	mf := &modelFaults{hc: &hookClient{Client: rc}, rc: rc, seq: s}
	mf.hc.set(mf.hook)
	return mf
}

func refusedResult() rueidis.RedisResult {
	return rueidis.NewErrorResult(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
}

// hook is mf's scriptHook.
func (mf *modelFaults) hook(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
	f, _ := ctx.Value(faultCtxKey{}).(*opFault)
	if f != nil {
		f.first.CompareAndSwap(0, time.Now().UnixNano())
	}
	if s := mf.seq; cmd.fast && s != nil {
		s.fault("fast-grant") // not a fault: counted to show the transaction is exercised
	}
	if f == nil && mf.loseRenewals.Load() && !mf.refuseRenewals.Load() {
		// The watchdog's renewals (and the Client's other scripts outside any operation)
		// are applied, their replies lost.
		res := call()
		if res.Error() == nil {
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		}
		return res
	}
	if cmd.multi && (f != nil || !mf.refuseRenewals.Load()) {
		// An operation's pipeline (an acquire and its WAIT): never faulted (see modelFaults).
		// The watchdog's batched renewals (one pipeline when a Client's holds differ in script
		// or lease: an RWMutex's read and write holds) are refused with the others.
		return call()
	}
	if f == nil {
		if mf.refuseRenewals.Load() {
			return refusedResult()
		}
		return call()
	}
	i := f.calls.Add(1) - 1
	st, ok := f.stage(i)
	ids, replay := f.sendIDs(cmd.args)
	if ok && st.kind == fLate && (replay || !lateScripts[cmd.script]) {
		ok = false // only the first send of a request that carries a sequence number is kept
	}
	req := requestOf(cmd.args)
	if !ok {
		res := call()
		if re, isReply := rueidis.IsRedisErr(res.Error()); res.Error() == nil || isReply && !strings.HasPrefix(re.Error(), "NOSCRIPT") {
			f.noteAnswered(req) // a replay answered: the lost reply's request is resolved
			mf.lateAnswered(f, ids)
		}
		return res
	}
	defer func() { f.kinds.Or(1 << st.kind) }()
	if i > 0 {
		f.late.Add(1)
	}
	switch st.kind {
	case fRefuse:
		f.hits.Add(1)
		return refusedResult()
	case fRedisErr, fBusy:
		f.hits.Add(1)
		f.noteRefused(req)
		msg := "ERR model: injected error"
		if st.kind == fBusy {
			msg = "LOADING model: injected error"
		}
		return mf.errorReply(ctx, msg)
	case fDrop:
		res := call()
		if res.Error() != nil {
			return res
		}
		f.hits.Add(1)
		f.noteLost(req)
		return rueidis.NewErrorResult(context.DeadlineExceeded)
	case fLate:
		f.hits.Add(1)
		f.noteLost(req)
		mf.keep(&lateSend{f: f, send: cmd.sendWith, script: cmd.script, ids: ids, stage: st})
		return rueidis.NewErrorResult(context.DeadlineExceeded)
	case fDelay:
		res := call()
		f.hits.Add(1)
		tm := time.NewTimer(st.delay)
		defer tm.Stop()
		select {
		case <-tm.C:
			return res
		case <-ctx.Done():
			if res.Error() == nil {
				f.noteLost(req)
			}
			return rueidis.NewErrorResult(ctx.Err())
		}
	}
	return call()
}

// errorReply returns Redis's error reply msg (a *rueidis.RedisError, which only a reply
// makes), asked of Redis once per message and then answered at once: a refusal writes
// nothing, and a round trip per injected refusal let a deadline cut one in flight under load,
// which the Client rightly takes for an unknown outcome
// (TestModelRegression_refusedReleaseEndsParkedWaiter beside a CPU hog, 1 run in 13:
// "outcome unknown: context deadline exceeded", want the injected error).
func (mf *modelFaults) errorReply(ctx context.Context, msg string) rueidis.RedisResult {
	if re, ok := mf.replies.Load(msg); ok {
		return rueidis.NewErrorResult(re.(*rueidis.RedisError))
	}
	res := mf.rc.Do(ctx, mf.rc.B().Eval().Script("return redis.error_reply(ARGV[1])").Numkeys(0).Arg(msg).Build())
	if re, ok := rueidis.IsRedisErr(res.Error()); ok {
		mf.replies.Store(msg, re)
	}
	return res
}

// lateSend is the first send of a script call that an fLate stage kept back: its caller got
// the error a lost reply gives, and the Client replays it. It is delivered to Redis on the
// side, its reply discarded, once a replay of it was answered: stage.delay later, or with
// stage.next after the next operation of the same owner (the driver tells: afterOp); at
// the latest when the sequence flushes them (flushLate). Whatever the replay found, the
// late copy must change nothing: the model's checks (the Client's and Redis's counts,
// redis-ghost, exclusion) verify that, and the operation's outcome stays the replay's.
type lateSend struct {
	f      *opFault
	send   func(context.Context) rueidis.RedisResult // hookCall.sendWith
	script string
	ids    []string // the sequence numbers (request ids) it carries
	stage  faultStage
	// guarded by modelFaults.lateMu
	answered time.Time // when a replay was answered (zero: not yet)
	owner    *mowner   // the owner of the operation, once it returned (afterOp)
	opDone   bool      // that operation returned
	sent     bool      // delivered, or being delivered
}

// lateScripts are the scripts whose first sends fLate keeps back, by name: the acquire and
// release scripts of the lock kinds and of the permit semaphore. Each of their calls carries
// a sequence number (a request id), by which Redis must refuse, or answer without applying,
// a send that arrives after its replay.
var lateScripts = map[string]bool{
	"acquire": true, "release": true, "fair_acquire": true, "fair_release": true,
	"rw_acquire": true, "rw_release": true, "psem_acquire": true, "psem_release": true,
}

// seqRE matches a sequence number (a request id, Client.newRequest), with the mark a replay
// or a resend for a caller that has gone puts before it.
var seqRE = regexp.MustCompile(`^[+!]?[0-9a-f]{32}\.[0-9]+$`)

// sendIDs returns the sequence numbers that a script call carries (args: hookCall.args),
// unmarked, and whether it is a replay: one of them is marked, or was carried by an earlier
// call of the operation (a release's replay repeats its number unmarked). It records them
// as seen.
func (f *opFault) sendIDs(args []string) (ids []string, replay bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	for _, a := range args {
		if !seqRE.MatchString(a) {
			continue
		}
		if a[0] == '+' || a[0] == '!' {
			a, replay = a[1:], true
		}
		replay = replay || f.seen[a]
		ids = append(ids, a)
	}
	for _, id := range ids {
		f.seen[id] = true
	}
	return ids, replay
}

func (mf *modelFaults) keep(k *lateSend) {
	mf.lateMu.Lock()
	mf.kept = append(mf.kept, k)
	mf.lateMu.Unlock()
	if s := mf.seq; s != nil {
		s.fault("late-kept-" + k.script)
		s.logf("LATE kept back: the first send of %s %v (%s)", k.script, k.ids, strings.TrimSpace(k.f.String()))
	}
}

// lateAnswered notes that a call of f carrying ids was answered by Redis: a replay of the
// kept sends that carry one of them. Those delivered after a delay are scheduled.
func (mf *modelFaults) lateAnswered(f *opFault, ids []string) {
	if len(ids) == 0 {
		return
	}
	mf.lateMu.Lock()
	defer mf.lateMu.Unlock()
	for _, k := range mf.kept {
		if k.f != f || !k.answered.IsZero() || k.sent || !overlaps(k.ids, ids) {
			continue
		}
		k.answered = time.Now()
		if !k.stage.next {
			k.sent = true
			mf.lateWG.Add(1)
			time.AfterFunc(k.stage.delay, func() { mf.deliver(k) })
		}
	}
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// afterOp tells that an operation of owner o with fault f (nil: none) returned: the kept
// sends of o's earlier operations waiting for the next one, and already answered by their
// replays, are delivered now.
func (mf *modelFaults) afterOp(o *mowner, f *opFault) {
	mf.lateMu.Lock()
	defer mf.lateMu.Unlock()
	for _, k := range mf.kept {
		switch {
		case k.sent:
		case f != nil && k.f == f:
			k.owner, k.opDone = o, true
		case k.opDone && k.owner == o && k.stage.next && !k.answered.IsZero():
			k.sent = true
			mf.lateWG.Add(1)
			go mf.deliver(k)
		}
	}
}

// flushLate delivers every kept send not delivered yet (answered by a replay or not) and
// waits for every delivery to end.
func (mf *modelFaults) flushLate() {
	mf.lateMu.Lock()
	for _, k := range mf.kept {
		if !k.sent {
			k.sent = true
			mf.lateWG.Add(1)
			go mf.deliver(k)
		}
	}
	mf.lateMu.Unlock()
	mf.lateWG.Wait()
	mf.lateMu.Lock()
	mf.kept = nil
	mf.lateMu.Unlock()
}

// deliver sends k to Redis, its reply discarded (but logged).
func (mf *modelFaults) deliver(k *lateSend) {
	defer mf.lateWG.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mf.lateMu.Lock()
	answered := k.answered
	mf.lateMu.Unlock()
	res := k.send(ctx)
	if s := mf.seq; s != nil && strings.HasSuffix(k.script, "acquire") {
		s.mu.Lock()
		s.lateAcqAt = time.Now()
		if strings.HasPrefix(k.script, "acquire") && res.Error() == nil {
			// What it wrote may be a ghost of the owner's (DESIGN 5: a fast grant's
			// transaction that lands after its replay, on a lock freed meanwhile), which a
			// stray Unlock of that handle gives back (release.lua reads no fence), answered nil
			// (Mutex's godoc): Mutex seed 10720930743673178533 (CI proof at f969563), a stray
			// Unlock in the round after the delivery. The operation is not always known here
			// (k.owner), so every handle owner is excused until the longest lease it may have
			// asked for has surely ended.
			s.ghostUntil = time.Now().Add(max(s.maxLease, time.Second) + expirySlack)
		}
		s.mu.Unlock()
	}
	if s := mf.seq; s != nil {
		v, err := res.ToAny()
		when := "its replay unanswered"
		if !answered.IsZero() {
			when = fmt.Sprintf("%s after its replay was answered", fmtDur(time.Since(answered)))
		}
		s.fault("late-delivered")
		s.logf("LATE delivered, %s: the first send of %s %v -> %v %v", when, k.script, k.ids, v, err)
	}
}

// injected reports whether err is one of the faults injected into an operation's calls.
func injected(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "model: injected") || errors.Is(err, syscall.ECONNREFUSED))
}

// ---- random draws ----

// draws returns n uniform numbers in [0, 1): every call draws the same count, so that a
// goroutine's stream of draws does not depend on the results it saw.
func draws(r *rand.Rand, n int) []float64 {
	d := make([]float64, n)
	for i := range d {
		d[i] = r.Float64()
	}
	return d
}

func between(x float64, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(x*float64(hi-lo))
}

// drawFault draws an operation's fault (always 9 draws): a quarter of the operations get
// one, a quarter of those a second stage that fails a later call (the replay, the give-back
// of a grant that came after the caller left, the leave of a queue).
func drawFault(r *rand.Rand, rate float64) *opFault {
	d := draws(r, 9)
	if d[0] >= rate {
		return nil
	}
	st := faultStage{n: 1}
	switch {
	case d[1] < 0.3 && d[3] < 0.5:
		st.kind = fDrop
	case d[1] < 0.3:
		// The first send kept back and delivered after its replay: right after the owner's
		// next operation, or 0-300ms after the replay's answer.
		st.kind = fLate
		st.next = d[4] < 0.5
		st.delay = between(d[4], 0, 300*time.Millisecond)
	case d[1] < 0.5:
		st.kind = fDelay
		st.delay = between(d[3], 20*time.Millisecond, 150*time.Millisecond)
	case d[1] < 0.7:
		st.kind = fRefuse
		st.n = 1 + int32(d[4]*3)
	case d[1] < 0.85:
		st.kind = fRedisErr
	default:
		st.kind = fBusy
		st.n = 1 + int32(d[4]*3)
	}
	if d[2] < 0.25 {
		st.from = 1 // the replay, the give-back, the leave, or a later attempt
	}
	f := &opFault{stages: []faultStage{st}}
	if d[5] < 0.25 {
		nd := faultStage{from: st.from + st.n + int32(d[7]*2), n: 1 + int32(d[8]*3)}
		switch {
		case d[6] < 0.4:
			nd.kind = fRefuse
		case d[6] < 0.7:
			nd.kind = fRedisErr
		default:
			nd.kind = fBusy
		}
		f.stages = append(f.stages, nd)
	}
	return f
}

// repliesLost returns the fault of an operation of g's: while g's owner is the round's
// replies-lost owner, every reply to its script calls is lost (applied, reply dropped: fDrop
// on every call, so that the replays of replays are lost too, and the work it leaves to the
// background), else f (drawn all the same, so that g's draws stay as they were).
func (s *mseq) repliesLost(g *mgor, f *opFault) *opFault {
	s.mu.Lock()
	lost := s.roundLost == g.o
	s.mu.Unlock()
	if !lost {
		return f
	}
	// Its calls replay for a cleanup timeout, and may first wait for a sibling's call (a
	// shared handle, a context owner's other goroutine) that does the same: Lock, a re-entry
	// and TryLock with wait 0 within ctx, another TryLock within its wait; or for work that
	// an earlier call of the owner, the goroutine's own included, left to the background (a
	// cancelled Lock's replays), hence one more cleanup timeout than the owner has goroutines
	// (FairMutex seed 16508855005855110138: g7, its owner's only goroutine, whose Lock with a
	// 20 ms ctx left its replays to the background, then ran TryLock with wait 0, which
	// waited 400 ms for that work's turn and replayed for a cleanup timeout: 900 ms past its
	// start, the allowance 400 + 500). A writer's (or a
	// fair waiter's) leave after its own replays may wait for the sibling's turn, within a
	// cleanup timeout (RWMutex seed 10071870183985473747 sent its attempt 450 ms past a
	// 53 ms wait, behind the sibling's, and returned 1.45 s past its bound).
	return &opFault{stages: []faultStage{{kind: fDrop, n: 1 << 30}}, allLost: time.Duration(len(g.o.gors)+1) * g.o.cl.cleanup}
}

func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// ---- a sequence ----

type mclient struct {
	idx     int
	rc      rueidis.Client
	faults  *modelFaults
	c       *rlock.Client
	wd      time.Duration // watchdog timeout
	cleanup time.Duration
	waiter  time.Duration
}

type mowner struct {
	mu    sync.Mutex // guards its goroutines' stacks against reads by siblings
	idx   int
	cl    *mclient
	label string // handle, shared, ctx
	ctxID string // the WithOwner id of a context owner
	id    string // the owner id in Redis
	gors  []*mgor
	sides []*mside
	fixed []*mentry // every fixed-lease hold its goroutines took (guarded by mu): fixedOverlapping
}

// mside is one owner's holds of one kind (a read-write lock has two), with what may excuse a
// mismatch or a loss.
type mside struct {
	o    *mowner
	side int
	// guarded by mseq.mu
	destroyed   bool      // its state in Redis may have been destroyed behind its back
	destroyedAt time.Time // when, if by a DEL at a quiescent point
	disturbed   bool      // renewals may not have got through (pause, refused renewals)
	ambiguous   int       // operations whose outcome is unknown
	// lostAt: when the model first saw a loss of this side (a call or Err told ErrLockLost,
	// the Client's view has Lost, a tenure ended lost); zero once it starts afresh or holds
	// a new tenure. From then on Redis may count holds of it only within lostBound.
	lostAt time.Time
	// leaseHi: the longest lease an acquire of this side asked for since it last started
	// afresh (watchdog mode: the Client's watchdog timeout).
	leaseHi time.Duration
	// acqUntil: the latest time Redis may still apply a request of an acquire of this side
	// (its return; plus two cleanup timeouts when its caller left before the outcome, for
	// the resolution or give-back it left to the background). An acquire refused before it
	// sent anything (the side's loss stood through the call: Mutex.attempt) does not count.
	acqUntil time.Time
}

func (ms *mside) flagged() bool { return ms.destroyed || ms.disturbed || ms.ambiguous > 0 }

func (ms *mside) String() string {
	return fmt.Sprintf("o%d/%s", ms.o.idx, sideName(ms.side))
}

type mgor struct {
	idx     int
	busy    atomic.Int64 // when the operation it runs began (UnixNano), 0 between operations
	ended   atomic.Int64 // when its last operation returned (UnixNano)
	o       *mowner
	rng     *rand.Rand
	h       any // the handle it uses
	ctx     context.Context
	stack   []*mentry  // holds taken and not given back (lock kinds)
	permits []*mpermit // permits taken and not given back
}

func (g *mgor) String() string {
	return fmt.Sprintf("g%d(o%d/c%d %s)", g.idx, g.o.idx, g.o.cl.idx, g.o.label)
}

// mentry is one hold taken by a goroutine.
type mentry struct {
	side  int
	fixed bool
	lease time.Duration
	start time.Time // the acquire was called
	ret   time.Time // it returned
	end   time.Time // fixed: the earliest the lease may end locally (start + lease - drift)
	ten   rlock.ModelTenure
	token int64
	sec   *msection
}

// msection is an accepted critical section: from the acquire's return to the Unlock call
// (or to the fixed lease's earliest end).
type msection struct {
	g       *mgor
	side    int
	start   time.Time
	end     time.Time // zero while open
	token   int64
	ten     rlock.ModelTenure
	certain bool // its tenure and token were read while it surely lasted
	excused bool // its owner was told of a loss, or its state was destroyed or disturbed
}

type violation struct {
	check string
	at    time.Duration
	msg   string
	known bool
}

type boundCheck struct {
	g          *mgor
	what       string
	start, ret time.Time
	limit      time.Time
	strict     bool // limit is the end of the call's ctx, which binds it to returnGrace
	extra      time.Duration
}

type faultedOp struct {
	g *mgor
	f *opFault
}

// settleFaults marks the owners of operations whose fault met a later call (a replay, a
// give-back, a leave, possibly in the background after the call returned) as of unknown
// outcome: a give-back that failed leaves a hold in Redis until its lease ends (documented:
// hold.abandon), which neither the model nor the Client counts.
func (s *mseq) settleFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range s.faulted {
		if op.f.late.Load() > 0 {
			for _, ms := range op.g.o.sides {
				ms.ambiguous++
			}
		}
	}
	s.faulted = nil
}

// mayOrphan reports whether owner o may have holds in Redis that nobody counts: an
// operation of unknown outcome, or one whose fault met a later call (see settleFaults),
// this round or before.
func (s *mseq) mayOrphan(o *mowner, side int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o.sides[side].ambiguous > 0 || o.label != "ctx" && time.Now().Before(s.ghostUntil) {
		return true
	}
	for _, op := range s.faulted {
		if op.g.o == o && op.f.late.Load() > 0 {
			return true
		}
	}
	return false
}

type expectation struct {
	ms         *mside
	check, msg string
	at         time.Duration
	when       time.Time
}

type lossObs struct {
	ms         *mside
	what       string
	at         time.Duration
	nearExpiry bool // an Unlock that found a fixed lease gone right at its end
}

// faultProfile is how often a sequence injects each fault. A calm sequence injects only
// faults into single operations (none of which can explain a loss), so that every check
// applies in full.
type faultProfile struct {
	name                           string
	op                             float64 // share of operations with a fault
	pause, renewals, del, quietDel float64 // per round
	force                          float64 // per operation
	// repliesLost (per round): for the whole round, every reply to one owner's script calls
	// is lost (applied; its replays' replies lost too): repliesLost.
	repliesLost float64
}

var faultProfiles = []struct {
	share float64
	p     faultProfile
}{
	{0.35, faultProfile{name: "calm", op: 0.25}},
	{0.50, faultProfile{name: "normal", op: 0.25, pause: 0.10, renewals: 0.06, del: 0.04, quietDel: 0.06, force: 0.004, repliesLost: 0.12}},
	{0.15, faultProfile{name: "stormy", op: 0.4, pause: 0.3, renewals: 0.2, del: 0.15, quietDel: 0.15, force: 0.02, repliesLost: 0.25}},
}

type mseq struct {
	prof   faultProfile
	t      *testing.T
	cfg    modelConfig
	seed   uint64
	rng    *rand.Rand
	lrng   *rand.Rand // the replies-lost draws (a stream of their own: the others' seeds replay as before)
	subj   subject
	srv    *redistest.Server
	admin  rueidis.Client
	name   string
	t0     time.Time
	nround int

	clients []*mclient
	owners  []*mowner
	gors    []*mgor
	sides   []*mside

	rounds int
	ops    int
	hung   bool
	faults map[string]int

	mu           sync.Mutex
	log          []string
	viols        []violation
	sections     []*msection
	losses       []lossObs
	expects      []expectation
	faulted      []faultedOp // operations with a fault, since the last quiescent point
	bounds       []boundCheck
	pauses       [][2]time.Time
	stalls       [][2]time.Time // this process did not run (a loaded machine)
	rstalls      [][2]time.Time // Redis did not answer promptly (a loaded machine): as a pause
	renewOff     [][2]time.Time // renewals were refused
	pausing      bool           // an injected pause is under way
	roundStart   time.Time
	roundDestroy bool
	roundDisturb bool
	idleStalled  bool // the process stalled between rounds: the next round is disturbed
	inRound      bool // a round runs (runRound), its disturbances not yet applied to the sides
	destroyedAny bool
	leaveMayFail bool // a waiter that gave up may have failed to leave (a fault, a pause)
	maxLease     time.Duration
	ghostUntil   time.Time // a late acquire's first send delivered: a handle's ghost may last until then (mayOrphan)
	roundLost    *mowner   // the owner whose replies are all lost this round (repliesLost), or nil
	lateAcqAt    time.Time // the last delivery of a kept-back first send of an acquire (fLate)
	snapClosed   bool      // close waits for the snapshots at loss: no more start (snapAtLoss)
	snapWG       sync.WaitGroup
}

func (s *mseq) since() time.Duration { return time.Since(s.t0) }

func fmtDur(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) + "ms" }

func (s *mseq) logf(format string, args ...any) {
	line := fmt.Sprintf("%9s ", fmtDur(s.since())) + fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.log = append(s.log, line)
	s.mu.Unlock()
}

func (s *mseq) violate(check, format string, args ...any) {
	v := violation{check: check, at: s.since(), msg: fmt.Sprintf(format, args...)}
	_, k := knownDefectChecks[check]
	v.known = (k && !s.cfg.known) || s.cfg.skip[check]
	s.logf("VIOLATION %s: %s", check, v.msg)
	s.mu.Lock()
	s.viols = append(s.viols, v)
	s.mu.Unlock()
}

func (s *mseq) failed() bool {
	for _, v := range s.viols {
		if !v.known {
			return true
		}
	}
	return false
}

func (s *mseq) fault(kind string) {
	s.mu.Lock()
	s.faults[kind]++
	s.mu.Unlock()
}

func (s *mseq) report() string {
	var b strings.Builder
	outcome := "passed"
	if s.failed() {
		outcome = "failed"
	}
	fmt.Fprintf(&b, "model %s: sequence with seed %d %s (replay: %s=%d go test -race -count=1 -run 'TestModel/^%s$' ./rlock/)\n",
		s.subj.kind(), s.seed, outcome, envModelSeed, s.seed, s.subj.kind())
	for _, v := range s.viols {
		k := ""
		if v.known {
			k = " (known, not failed)"
		}
		fmt.Fprintf(&b, "  VIOLATION at %s: %s%s: %s\n", fmtDur(v.at), v.check, k, v.msg)
	}
	fmt.Fprintf(&b, "  setup:\n")
	for _, c := range s.clients {
		fmt.Fprintf(&b, "    c%d: watchdog %v, cleanup %v, waiter %v\n", c.idx, c.wd, c.cleanup, c.waiter)
	}
	for _, o := range s.owners {
		fmt.Fprintf(&b, "    o%d: c%d %s %s, goroutines", o.idx, o.cl.idx, o.label, o.id)
		for _, g := range o.gors {
			fmt.Fprintf(&b, " g%d", g.idx)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "  log (%d lines):\n", len(s.log))
	for _, l := range s.log {
		b.WriteString("    " + l + "\n")
	}
	return b.String()
}

// subject is what the driver runs: a kind of lock (lockSubject) or the permit semaphore.
type subject interface {
	kind() string
	options(s *mseq, c *mclient) []rlock.Option
	// owner says how many owners and goroutines to make (lock kinds: several shapes).
	setup(s *mseq)
	bind(s *mseq, g *mgor) // give g its handle
	op(s *mseq, g *mgor)
	destroy(s *mseq) []string // the keys a DEL behind the holders' backs removes
	destroyQuiescent(s *mseq) // DEL them between rounds
	afterClose(s *mseq, cl *mclient) error
	// inflight makes a call that waits for Redis (paused) until the Client is closed.
	inflight(s *mseq, g *mgor, i int) (what string, err error)
	// excused says whether what happened to ms explains a failed expectation: its state was
	// destroyed behind its back, an outcome is unknown, or it was told of a loss.
	excused(s *mseq, ms *mside) bool
	quiescent(s *mseq, final bool)
	drain(s *mseq, g *mgor)
	endKeys(s *mseq)
	finish(s *mseq)
}

func runSequence(t *testing.T, cfg modelConfig, subj subject, srv *redistest.Server, admin rueidis.Client, seed uint64) *mseq {
	s := &mseq{t: t, cfg: cfg, seed: seed, subj: subj, srv: srv, admin: admin, faults: map[string]int{},
		rng: rand.New(rand.NewPCG(seed, 0x6d6f64656c)), lrng: rand.New(rand.NewPCG(seed, 0x6c6f7374))}
	s.name = fmt.Sprintf("model-%x", seed)
	s.t0 = time.Now()
	x := s.rng.Float64()
	for _, fp := range faultProfiles {
		s.prof = fp.p
		if x < fp.share {
			break
		}
		x -= fp.share
	}
	s.build()
	defer s.close()
	subj.setup(s)
	s.nround = 3 + s.rng.IntN(5)
	if cfg.short {
		s.nround = 2
	}
	s.logf("sequence %d: %s %q, %d clients, %d owners, %d goroutines, %d rounds, %s faults", seed, subj.kind(), s.name, len(s.clients), len(s.owners), len(s.gors), s.nround, s.prof.name)
	for r := 0; r < s.nround; r++ {
		s.runRound(r)
		if s.hung {
			return s
		}
		s.settleFaults()
		subj.quiescent(s, false)
		s.betweenRounds()
	}
	s.logf("drain: every goroutine gives back what it holds")
	// A stall of the idle before the drain lets a lease run out as one before a round does
	// (idle), and the round it would have disturbed is the drain: every side is disturbed.
	// Before, the drain's Unlocks told of that loss as spurious (FairMutex seed
	// 7223547918686020548 at a 300 s budget: 69 and 229 ms stalls of the process, a 500 ms
	// watchdog lease unrenewed, every Unlock of the drain "lease expired before a renewal was
	// confirmed").
	s.mu.Lock()
	if s.idleStalled {
		s.idleStalled = false
		s.disturbAllLocked()
	}
	s.mu.Unlock()
	for _, g := range s.gors {
		subj.drain(s, g)
	}
	s.flushLate()
	s.settleFaults()
	subj.quiescent(s, true)
	subj.endKeys(s)
	subj.finish(s)
	s.closePhase()
	return s
}

// closePhase (a third of the sequences): calls in flight on a Client while Redis does not
// answer end promptly when the Client is closed, with ErrClosed; a request already on the
// wire ends with its call's ctx at the latest (README guarantee 6).
func (s *mseq) closePhase() {
	d := draws(s.rng, 2)
	if d[0] >= 0.3 || len(s.clients) == 0 || s.cfg.short {
		return
	}
	cl := s.clients[int(d[1]*float64(len(s.clients)))]
	type result struct {
		g     *mgor
		what  string
		err   error
		at    time.Time
		start time.Time
	}
	var gs []*mgor
	for _, g := range s.gors {
		if g.o.cl == cl {
			gs = append(gs, g)
		}
	}
	s.srv.Pause(s.t)
	s.logf("close phase: redis paused; c%d closed while %d calls are in flight", cl.idx, len(gs))
	stalled := s.watchStalls()
	// The watcher stops on stalled's first call; with no call in flight on cl (gs empty) no
	// result would call it, and its goroutine outlived the test (goleak, CI of stop 19).
	defer stalled(time.Time{}, time.Time{})
	results := make(chan result, len(gs))
	for i, g := range gs {
		go func() {
			start := time.Now()
			what, err := s.subj.inflight(s, g, i)
			results <- result{g, what, err, time.Now(), start}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	closeStart := time.Now()
	_ = cl.c.Close()
	closed := time.Now()
	if d := closed.Sub(closeStart); d > 2*time.Second {
		s.violate("closed-prompt", "c%d: Close took %v while Redis did not answer", cl.idx, d)
	}
	timeout := time.After(10 * time.Second)
	var rs []result
	for range gs {
		select {
		case r := <-results:
			rs = append(rs, r)
		case <-timeout:
			stalled(time.Time{}, time.Time{})
			s.violate("hang", "calls in flight on c%d did not return within 10s of Close", cl.idx)
			s.srv.Resume(s.t)
			return
		}
	}
	for _, r := range rs {
		st := stalled(r.start, r.at)
		s.logf("%s %s -> %s (%s after Close returned; the process stalled %s of it)", r.g, r.what, errString(r.err), fmtDur(r.at.Sub(closed)), fmtDur(st))
		// Close ends at once every call that waits, replays or works in the background
		// (ErrClosed); a request already on the wire ends with its call's ctx (2s here) or
		// when rueidis gives it up, and then with ErrClosed (README guarantee 6). A stall of
		// this process delays the call's own ctx timer as it delays the call: it is allowed
		// for, as checkBounds allows for it.
		if late, took := r.at.Sub(closed)-st, r.at.Sub(r.start)-st; late > schedSlack && took > 2*time.Second+returnGrace+schedSlack {
			s.violate("closed-prompt", "%s %s returned %v after Close returned, %v after it began, less %v of stalls (%v)", r.g, r.what, late, took, st, r.err)
		}
		if r.err != nil && !errors.Is(r.err, rlock.ErrClosed) && !errors.Is(r.err, context.DeadlineExceeded) {
			s.violate("closed-prompt", "%s %s in flight at Close returned %v, want ErrClosed (or its ctx's end)", r.g, r.what, r.err)
		}
	}
	s.srv.Resume(s.t)
}

// watchStalls measures, until the first call of the function it returns, the stalls of this
// process (a loaded machine: a goroutine woken by a timer runs more than stallThreshold
// late), as the rounds do; that function returns how long the process stalled between
// start and end.
func (s *mseq) watchStalls() func(start, end time.Time) time.Duration {
	return watchStallsOver(stallThreshold, func(gap time.Duration) {
		s.fault("stall")
		s.logf("STALL: the process did not run for %v", gap.Round(time.Millisecond))
	})
}

func (s *mseq) build() {
	nc := 2 + s.rng.IntN(2)
	for i := 0; i < nc; i++ {
		d := draws(s.rng, 3)
		cl := &mclient{idx: i,
			wd:      300*time.Millisecond + time.Duration(int(d[0]*4))*100*time.Millisecond,
			cleanup: 300*time.Millisecond + time.Duration(int(d[1]*3))*100*time.Millisecond,
			waiter:  300*time.Millisecond + time.Duration(int(d[2]*3))*100*time.Millisecond,
		}
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.srv.Addr()}, ForceSingleClient: true})
		if err != nil {
			s.violate("setup", "rueidis client: %v", err)
			continue
		}
		cl.rc = rc
		cl.faults = newModelFaults(rc, s)
		// The watchdog's rounds go into the log: a loss that no injected fault explains
		// then shows whether renewals were sent, answered, and how late (the 600 s run at
		// d3de481: Mutex seed 4962524923238436907, a loss-spurious with neither stall watcher
		// firing, not reproduced in 15 replays).
		idx := i
		wdc := newWDClock(cl.wd)
		obs := rlock.WithObserver(&rlock.Observer{RenewalRound: func(e rlock.RenewalRoundInfo) {
			wdc.round(time.Now(), e)
			s.logf("c%d renewal round: %d lease(s), %d script(s), %d failed, %d lost, took %v, err %v", idx, e.Leases, e.Scripts, e.Failures, e.Lost, e.Took.Round(100*time.Microsecond), e.Err)
			if e.Lost > 0 {
				s.snapAtLoss(idx)
			}
			if e.Took > stallThreshold {
				// A round answered late lets a lease run out as a pause of Redis would: the
				// watchdog renews at 2/3 of a 300-700ms lease, so 100-230ms late loses it, and
				// this process and Redis can each be held up a little less than the stall
				// watchers see (stallThreshold) and together more. Treated as a Redis stall,
				// as the watchdog's late expiry is (disturbNow): within a round it disturbs that
				// round; between rounds (a quiescent check, an idle), every side now and the
				// next round. Before, it set roundDisturb alone, which the next round's start
				// overwrote when it came between rounds: a lease that the slow round let run
				// out during round 0's quiescent check (Mutex seed 1734763499785530468, flake29
				// r3: c1's round took 99.9 ms and timed out at the lease's end, 311.8 ms; the
				// loss at 391.9 ms) was reported as loss-spurious at every later check.
				now := time.Now()
				s.fault("renewal-slow")
				s.disturbNow(now.Add(-e.Took), now)
			}
		}, Replay: func(e rlock.ReplayInfo) {
			s.logf("c%d replay: %s of %s on %s, %d send(s), err %v", idx, e.Op, e.Owner, e.Name, e.Sends, e.Err)
		}, GiveBack: func(e rlock.GiveBackInfo) {
			s.logf("c%d give-back (%s) of %d hold(s) of %s on %s: err %v", idx, e.Reason, e.Holds, e.Owner, e.Name, e.Err)
			failed := e.Err != nil && !errors.Is(e.Err, rlock.ErrNotHeld)
			ps, isPermit := s.subj.(*permitSubject)
			switch {
			case !failed:
			case isPermit:
				// Permits that no caller keeps (a grant that reached a caller who had gone)
				// and whose give-back failed: the Client stopped counting them, and they live
				// until their lease ends (GiveBackInfo.Err). Before, the model counted them as
				// ghosts (the 600 s run of session 29: seed 3872579258206145105, an Acquire
				// whose ctx was cancelled, its background give-back hit by an injected error
				// reply; "permit-ghost: 1 live permits that no caller holds").
				s.mu.Lock()
				ps.ambiguous += max(e.Holds, 1)
				s.mu.Unlock()
			case e.Name == s.name:
				// The same for a lock's holds: the owner's sides may be counted in Redis
				// until the lease ends. settleFaults sees most of these (a fault that met a
				// later call of the operation), but not a give-back that was the operation's
				// first script (a hand-off to a Lock that had sent nothing of its own).
				s.mu.Lock()
				for _, o := range s.owners {
					if o.id == e.Owner {
						for _, ms := range o.sides {
							ms.ambiguous++
						}
					}
				}
				s.mu.Unlock()
			}
		}, AcquireDone: func(_ context.Context, e rlock.AcquireDoneInfo) {
			wdc.acquired(time.Now(), e)
		}, HoldEnd: func(e rlock.HoldEndInfo) {
			// A lease declared lost by expiry well after its end: the watchdog's goroutines
			// were not run at its renewal nor at its deadline (wdClock), a disturbance of the
			// machine as a slow round is (the 600 s run of session 25: Mutex seed
			// 4615490555978934774, c2's rounds 530 ms apart with a 200 ms renewal period).
			now := time.Now()
			if from, by, ok := wdc.late(now, e, stallThreshold); ok {
				s.fault("renewal-late")
				s.logf("c%d watchdog late: %s/%s lost by expiry %v past its lease's latest end (renewal due by %s)", idx, e.Name, e.Owner, by.Round(100*time.Microsecond), fmtDur(from.Sub(s.t0)))
				s.disturbNow(from, now)
			}
		}})
		opts := append([]rlock.Option{rlock.WithWatchdogTimeout(cl.wd), rlock.WithCleanupTimeout(cl.cleanup),
			rlock.WithWaiterTimeout(cl.waiter), obs}, s.subj.options(s, cl)...)
		if cl.c, err = rlock.New(cl.faults.hc, opts...); err != nil {
			s.violate("setup", "rlock.New: %v", err)
			rc.Close()
			continue
		}
		if s.rng.IntN(2) == 0 {
			// Half the Clients send every eligible fresh acquire as a fast grant (fast.go), not
			// only those that follow an uncontended grant: the transaction then meets the
			// contention, and the faults, of every round.
			rlock.SetFastAlways(cl.c, true)
			s.logf("c%d sends every eligible fresh acquire as a fast grant", idx)
		}
		s.clients = append(s.clients, cl)
		s.maxLease = max(s.maxLease, cl.wd)
	}
}

// addOwner makes an owner on cl with n goroutines.
func (s *mseq) addOwner(cl *mclient, label string, n int) *mowner {
	o := &mowner{idx: len(s.owners), cl: cl, label: label}
	if label == "ctx" {
		o.ctxID = fmt.Sprintf("model-%x-%d", s.seed, o.idx)
	}
	s.owners = append(s.owners, o)
	for i := 0; i < n; i++ {
		g := &mgor{idx: len(s.gors), o: o, rng: rand.New(rand.NewPCG(s.seed, uint64(len(s.gors)+1))), ctx: context.Background()}
		if o.ctxID != "" {
			g.ctx = rlock.WithOwner(g.ctx, o.ctxID)
		}
		if label == "shared" && i > 0 {
			g.h = o.gors[0].h
		} else {
			s.subj.bind(s, g)
		}
		o.gors = append(o.gors, g)
		s.gors = append(s.gors, g)
	}
	return o
}

func (s *mseq) close() {
	s.flushLate()
	defer func() {
		s.mu.Lock()
		s.snapClosed = true
		s.mu.Unlock()
		s.snapWG.Wait()
	}()
	for _, cl := range s.clients {
		start := time.Now()
		_ = cl.c.Close()
		if d := time.Since(start); d > 2*time.Second {
			s.violate("close", "c%d: Close took %v", cl.idx, d)
		}
		// Calls after Close end at once with ErrClosed.
		if len(s.gors) > 0 {
			start = time.Now()
			err := s.subj.afterClose(s, cl)
			if d := time.Since(start); d > 100*time.Millisecond || !errors.Is(err, rlock.ErrClosed) {
				s.violate("closed-prompt", "c%d: a call after Close returned %v after %v", cl.idx, err, d)
			}
		}
		cl.rc.Close()
	}
}

func (s *mseq) pauseOverlap(start, end time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return overlap(s.pauses, start, end) + overlap(s.rstalls, start, end)
}

// paused reports whether an injected pause is under way or covered t.
func (s *mseq) paused(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pausing || overlap(s.pauses, t, t.Add(time.Millisecond)) > 0
}

func (s *mseq) stallOverlap(start, end time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return overlap(s.stalls, start, end)
}

// disturbNow records [from, to] as a window in which Redis may have let leases run out unseen
// (as a Redis stall), and disturbs the round under way, or, between rounds, every side now
// (a loss told before the next quiescent point) and the next round.
func (s *mseq) disturbNow(from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rstalls = append(s.rstalls, [2]time.Time{from, to})
	if s.inRound {
		s.roundDisturb = true
		return
	}
	s.idleStalled = true
	s.disturbAllLocked()
}

// disturbAllLocked marks every side disturbed (a loss it is told of may come from a
// disturbance) and lets a waiter's leave fail; s.mu is held.
func (s *mseq) disturbAllLocked() {
	for _, ms := range s.sides {
		ms.disturbed = true
	}
	s.leaveMayFail = true
}

// overlap is how much of [start, end] the windows cover.
func overlap(windows [][2]time.Time, start, end time.Time) time.Duration {
	var d time.Duration
	for _, p := range windows {
		lo, hi := p[0], p[1]
		if lo.Before(start) {
			lo = start
		}
		if hi.After(end) {
			hi = end
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// runRound runs one round: every goroutine runs its operations while the round's faults
// happen, and returns once all have returned.
func (s *mseq) runRound(r int) {
	s.rounds++
	s.mu.Lock()
	s.roundStart = time.Now()
	s.roundDestroy, s.roundDisturb = false, s.idleStalled
	s.idleStalled = false
	s.inRound = true
	s.mu.Unlock()
	d := draws(s.rng, 9)
	var fw sync.WaitGroup
	s.logf("round %d", r)
	if ld := draws(s.lrng, 5); ld[0] < s.prof.repliesLost && len(s.owners) > 0 {
		o := s.owners[int(ld[1]*float64(len(s.owners)))]
		s.fault("replies-lost")
		s.logf("FAULT replies-lost: every reply to o%d's script calls is lost this round", o.idx)
		s.mu.Lock()
		s.roundLost = o
		s.mu.Unlock()
		if ld[2] < 0.5 {
			// Half the time, the renewals of its Client too, for a while: applied, so that
			// Redis keeps the holds of a lease the Client declares lost (its deadline passes
			// unconfirmed) for up to a lease more (redis-lost's bound).
			off, dur := between(ld[3], 0, 200*time.Millisecond), between(ld[4], 100*time.Millisecond, 400*time.Millisecond)
			s.fault("renewal-replies-lost")
			s.mu.Lock()
			s.roundDisturb = true
			s.mu.Unlock()
			fw.Add(1)
			go func() {
				defer fw.Done()
				time.Sleep(off)
				s.logf("FAULT c%d's renewal replies lost for %v", o.cl.idx, dur)
				o.cl.faults.loseRenewals.Store(true)
				start := time.Now()
				time.Sleep(dur)
				o.cl.faults.loseRenewals.Store(false)
				s.mu.Lock()
				s.renewOff = append(s.renewOff, [2]time.Time{start, time.Now()})
				s.mu.Unlock()
				s.logf("FAULT c%d's renewal replies let through", o.cl.idx)
			}()
		}
	}
	if d[0] < s.prof.pause {
		off, dur := between(d[1], 0, 150*time.Millisecond), between(d[2], 50*time.Millisecond, 200*time.Millisecond)
		s.fault("pause")
		s.mu.Lock()
		s.roundDisturb = true
		s.mu.Unlock()
		fw.Add(1)
		go func() {
			defer fw.Done()
			time.Sleep(off)
			s.mu.Lock()
			s.pausing = true
			s.mu.Unlock()
			s.srv.Pause(s.t)
			start := time.Now()
			s.logf("FAULT redis paused for %v", dur)
			time.Sleep(dur)
			s.srv.Resume(s.t)
			s.mu.Lock()
			s.pauses = append(s.pauses, [2]time.Time{start, time.Now()})
			s.pausing = false
			s.mu.Unlock()
			s.logf("FAULT redis resumed")
		}()
	}
	if d[3] < s.prof.renewals {
		off, dur := between(d[4], 0, 200*time.Millisecond), between(d[5], 100*time.Millisecond, 400*time.Millisecond)
		s.fault("renewals")
		s.mu.Lock()
		s.roundDisturb = true
		s.mu.Unlock()
		fw.Add(1)
		go func() {
			defer fw.Done()
			time.Sleep(off)
			s.logf("FAULT renewals refused for %v", dur)
			for _, cl := range s.clients {
				cl.faults.refuseRenewals.Store(true)
			}
			start := time.Now()
			time.Sleep(dur)
			for _, cl := range s.clients {
				cl.faults.refuseRenewals.Store(false)
			}
			s.mu.Lock()
			s.renewOff = append(s.renewOff, [2]time.Time{start, time.Now()})
			s.mu.Unlock()
			s.logf("FAULT renewals let through")
		}()
	}
	if d[6] < s.prof.del {
		off := between(d[7], 0, 300*time.Millisecond)
		s.fault("del")
		s.mu.Lock()
		s.roundDestroy = true
		s.destroyedAny = true
		s.mu.Unlock()
		fw.Add(1)
		go func() {
			defer fw.Done()
			time.Sleep(off)
			s.del("concurrent")
		}()
	}
	// A stall of this process (a loaded machine) delays renewals as a pause of Redis would:
	// a loss it causes is no defect. It is measured, and treated as a pause.
	stallDone := make(chan struct{})
	fw.Add(1)
	go func() {
		defer fw.Done()
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		last := time.Now()
		for {
			select {
			case <-stallDone:
				return
			case now := <-tk.C:
				if gap := now.Sub(last); gap > stallThreshold {
					s.fault("stall")
					s.logf("STALL: the process did not run for %v", gap.Round(time.Millisecond))
					s.mu.Lock()
					s.roundDisturb = true
					s.stalls = append(s.stalls, [2]time.Time{last, now})
					s.mu.Unlock()
				}
				last = now
			}
		}
	}()
	// So does a Redis server that a loaded machine does not run: its replies (renewals
	// included) come late. It is measured with a PING every 20ms.
	fw.Add(1)
	go func() {
		defer fw.Done()
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stallDone:
				return
			case <-tk.C:
			}
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := s.admin.Do(ctx, s.admin.B().Ping().Build()).Error()
			cancel()
			if rtt := time.Since(sent); rtt > stallThreshold && !s.paused(sent) {
				s.fault("redis-stall")
				s.logf("STALL: Redis answered a PING after %v (%v)", rtt.Round(time.Millisecond), err)
				s.mu.Lock()
				s.roundDisturb = true
				s.rstalls = append(s.rstalls, [2]time.Time{sent, time.Now()})
				s.mu.Unlock()
			}
		}
	}()
	done := make(chan struct{})
	var gw sync.WaitGroup
	for _, g := range s.gors {
		n := 1 + g.rng.IntN(4)
		gw.Add(1)
		go func() {
			defer gw.Done()
			for i := 0; i < n; i++ {
				g.busy.Store(time.Now().UnixNano())
				s.subj.op(s, g)
				g.busy.Store(0)
				g.ended.Store(time.Now().UnixNano())
			}
		}()
	}
	go func() {
		gw.Wait()
		s.mu.Lock()
		s.roundLost = nil
		s.mu.Unlock()
		close(stallDone)
		fw.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(roundHang):
		buf := make([]byte, 1<<20)
		s.violate("hang", "round %d still running after %v (a call outlives every bound); goroutines:\n%s", r, roundHang, buf[:runtime.Stack(buf, true)])
		select {
		case <-done:
		case <-time.After(roundHang):
			s.hung = true
			return
		}
	}
	s.mu.Lock()
	destroy, disturb := s.roundDestroy, s.roundDisturb
	s.inRound = false
	s.mu.Unlock()
	if destroy || disturb {
		s.mu.Lock()
		for _, ms := range s.sides {
			ms.destroyed = ms.destroyed || destroy
			ms.disturbed = ms.disturbed || disturb
		}
		s.leaveMayFail = s.leaveMayFail || disturb // a leave may have met the pause
		s.mu.Unlock()
	}
	s.checkBounds()
	s.judgeExpectations()
}

func (s *mseq) del(when string) {
	keys := s.subj.destroy(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := s.admin.Do(ctx, s.admin.B().Del().Key(keys...).Build()).AsInt64()
	s.logf("FAULT DEL %v (%s): %d deleted, err %v", keys, when, n, err)
}

func (s *mseq) bound(g *mgor, what string, start, ret, limit time.Time, f *opFault) {
	s.boundCtx(g, what, start, ret, limit, false, f)
}

func (s *mseq) boundCtx(g *mgor, what string, start, ret, limit time.Time, strict bool, f *opFault) {
	s.mu.Lock()
	if f != nil && len(f.stages) > 0 {
		s.faulted = append(s.faulted, faultedOp{g: g, f: f})
		for _, st := range f.stages {
			s.faults["op-"+faultNames[st.kind]]++
		}
	}
	s.bounds = append(s.bounds, boundCheck{g: g, what: what, start: start, ret: ret, limit: limit, strict: strict, extra: f.extra()})
	s.ops++
	s.mu.Unlock()
	for _, cl := range s.clients {
		cl.faults.afterOp(g.o, f)
	}
}

// flushLate delivers the first sends still kept back (fLate) and waits for every delivery.
func (s *mseq) flushLate() {
	for _, cl := range s.clients {
		cl.faults.flushLate()
	}
}

// checkBounds: Lock and TryLock never outlive their ctx by more than returnGrace (100ms,
// as documented, even while Redis does not answer), plus schedSlack for a loaded machine:
// ctx-bound, or ctx-bound-pause when Redis was paused during the call. Calls bounded by
// something else (a TryLock's wait with a ctx that does not end, an Unlock's cleanup
// timeout) end within ctxSlack of it, plus the delays injected into their replies and the
// time Redis was paused: wait-bound.
func (s *mseq) checkBounds() {
	s.mu.Lock()
	bs := s.bounds
	s.bounds = nil
	s.mu.Unlock()
	for _, b := range bs {
		over := b.ret.Sub(b.limit) - s.stallOverlap(b.start, b.ret)
		p := s.pauseOverlap(b.start, b.ret)
		switch {
		case b.strict && over > returnGrace+schedSlack:
			check := "ctx-bound"
			if p > 0 {
				check = "ctx-bound-pause"
			}
			s.violate(check, "%s %s returned %v after its ctx ended (Redis paused %v of it)", b.g, b.what, over, p)
		case !b.strict && over > ctxSlack+b.extra+p:
			s.violate("wait-bound", "%s %s returned %v after its bound (Redis paused %v of it)", b.g, b.what, over, p)
		}
	}
}

func (s *mseq) betweenRounds() {
	d := draws(s.rng, 3)
	switch {
	case d[0] < s.prof.quietDel:
		s.fault("del-quiescent")
		s.subj.destroyQuiescent(s)
	case d[0] < s.prof.quietDel+0.17:
		w := between(d[1], 100*time.Millisecond, 350*time.Millisecond)
		s.logf("idle %v (leases run on)", w)
		s.idle(w)
	default:
		s.idle(between(d[2], 0, 30*time.Millisecond))
	}
}

// idle waits d between rounds, watching for stalls of the process as a round does (the
// round's watcher has stopped): the watchdogs renew meanwhile, and a stall lets a lease run
// out. A stall found makes the next round disturbed, as one within it does. (The README's
// go test ./... at ab8d080, beside the chaos package: an idle of 180 ms took 500 ms with no
// renewal round run, and the losses it caused were reported as spurious: RWMutex seeds
// 8036796822870630227 and 490641509166908568.)
func (s *mseq) idle(d time.Duration) {
	end := time.Now().Add(d)
	last := time.Now()
	for now := last; now.Before(end); last = now {
		time.Sleep(min(5*time.Millisecond, end.Sub(now)))
		now = time.Now()
		if gap := now.Sub(last); gap > stallThreshold {
			s.fault("stall")
			s.logf("STALL (between rounds): the process did not run for %v", gap.Round(time.Millisecond))
			s.mu.Lock()
			s.idleStalled = true
			s.stalls = append(s.stalls, [2]time.Time{last, now})
			s.mu.Unlock()
		}
	}
}

// opCtx makes an operation's context from draws x (mode) and y (duration): no bound, a
// timeout, or a cancellation at a random point. limit is when it ends (zero: never).
func opCtx(base context.Context, f *opFault, mode, y float64, bounded bool) (ctx context.Context, cancel context.CancelFunc, limit time.Time, desc string) {
	ctx = withFault(base, f)
	d := between(y/0.3, 20*time.Millisecond, 150*time.Millisecond)
	if y >= 0.3 {
		d = between((y-0.3)/0.7, 150*time.Millisecond, 800*time.Millisecond)
	}
	switch {
	case mode < 0.5 && bounded, mode < 0.2:
		ctx, cancel = context.WithTimeout(ctx, d)
		return ctx, cancel, time.Now().Add(d), fmt.Sprintf(" ctx=timeout(%v)", d)
	case bounded, mode < 0.3:
		ctx, c := context.WithCancel(ctx)
		tm := time.AfterFunc(d, c)
		return ctx, func() { tm.Stop(); c() }, time.Now().Add(d), fmt.Sprintf(" ctx=cancel(%v)", d)
	}
	return ctx, func() {}, time.Time{}, ""
}

func sideName(side int) string {
	if side == 1 {
		return "r"
	}
	return "w"
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// ---- lock kinds: Mutex, FairMutex, RWMutex ----

// lockAPI is what tells the lock kinds apart for the driver.
type lockAPI struct {
	name    string
	sides   int // 2 for a read-write lock: side 0 the write hold, 1 the read holds
	handle  func(c *rlock.Client, name string) any
	acquire func(h any, ctx context.Context, side int, wait, lease time.Duration, blocking bool) (bool, error)
	release func(h any, ctx context.Context, side int) error
	force   func(h any, ctx context.Context) (bool, error)
	hold    func(h any, ctx context.Context, side int) rlock.ModelHold
	errOf   func(h any, ctx context.Context, side int) error
	ownerID func(h any, ctx context.Context) string
	key     func(h any) string
	// counts returns owner's live hold count per side in Redis.
	counts  func(s *mseq, key, owner string) ([]int, error)
	extra   []string // key suffixes beside the lock's hash and fence that expire by themselves
	destroy []string // key suffixes a DEL behind the holders' backs removes
}

func mutexHandle(h any) *rlock.Mutex { return h.(*rlock.Mutex) }

var mutexAPI = &lockAPI{
	name:  "Mutex",
	sides: 1,
	handle: func(c *rlock.Client, name string) any {
		return c.Mutex(name)
	},
	acquire: func(h any, ctx context.Context, _ int, wait, lease time.Duration, blocking bool) (bool, error) {
		m := mutexHandle(h)
		if blocking {
			err := m.Lock(ctx)
			return err == nil, err
		}
		return m.TryLock(ctx, wait, lease)
	},
	release: func(h any, ctx context.Context, _ int) error { return mutexHandle(h).Unlock(ctx) },
	force:   func(h any, ctx context.Context) (bool, error) { return mutexHandle(h).ForceUnlock(ctx) },
	hold: func(h any, ctx context.Context, _ int) rlock.ModelHold {
		return rlock.ModelMutexHold(mutexHandle(h), ctx)
	},
	errOf:   func(h any, ctx context.Context, _ int) error { return mutexHandle(h).Err(ctx) },
	ownerID: func(h any, ctx context.Context) string { return rlock.ModelOwnerID(mutexHandle(h), ctx) },
	key:     func(h any) string { return mutexHandle(h).Key() },
	counts:  hashCounts,
	destroy: []string{""},
}

// The fair lock is a Mutex with another variant: the same calls on its embedded *Mutex.
var fairAPI = func() *lockAPI {
	a := *mutexAPI
	a.name = "FairMutex"
	a.handle = func(c *rlock.Client, name string) any { return c.FairMutex(name).Mutex }
	a.extra = []string{":queue", ":alive"}
	return &a
}()

func rwHandle(h any) *rlock.RWMutex { return h.(*rlock.RWMutex) }

var rwAPI = &lockAPI{
	name:  "RWMutex",
	sides: 2,
	handle: func(c *rlock.Client, name string) any {
		return c.RWMutex(name)
	},
	acquire: func(h any, ctx context.Context, side int, wait, lease time.Duration, blocking bool) (bool, error) {
		rw := rwHandle(h)
		switch {
		case side == 0 && blocking:
			err := rw.Lock(ctx)
			return err == nil, err
		case side == 0:
			return rw.TryLock(ctx, wait, lease)
		case blocking:
			err := rw.RLock(ctx)
			return err == nil, err
		}
		return rw.TryRLock(ctx, wait, lease)
	},
	release: func(h any, ctx context.Context, side int) error {
		if side == 0 {
			return rwHandle(h).Unlock(ctx)
		}
		return rwHandle(h).RUnlock(ctx)
	},
	force: func(h any, ctx context.Context) (bool, error) { return rwHandle(h).ForceUnlock(ctx) },
	hold: func(h any, ctx context.Context, side int) rlock.ModelHold {
		return rlock.ModelRWHold(rwHandle(h), ctx, side == 1)
	},
	errOf: func(h any, ctx context.Context, side int) error {
		if side == 0 {
			return rwHandle(h).Err(ctx)
		}
		return rwHandle(h).RLocker().Err(ctx)
	},
	ownerID: func(h any, ctx context.Context) string { return rlock.ModelRWOwnerID(rwHandle(h), ctx) },
	key:     func(h any) string { return rwHandle(h).Key() },
	counts:  rwCounts,
	extra:   []string{":leases", ":writers"},
	destroy: []string{"", ":leases"},
}

func hashCounts(s *mseq, key, owner string) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := redisHashCount(ctx, s.admin, key, owner)
	return []int{n}, err
}

// redisHashCount is owner's hold count in the lock hash at key of a Mutex (FairMutex,
// SpinMutex) as relock's readers take it (internal/fastform): its count field, else 1 for its
// live fast form (docs/DESIGN.md section 5), else 0 (a fast form whose sequence number the
// fence records as spent is a ghost: a free lock).
func redisHashCount(ctx context.Context, admin rueidis.Client, key, owner string) (int, error) {
	fields, fence, nowMs, err := readLockHash(ctx, admin, key)
	if err != nil {
		return 0, err
	}
	return int(fastform.Count(fields, owner, fence, nowMs)), nil
}

// redisGhost reports whether the lock hash at key is a fast form's ghost: a free lock, which
// stays until its lease ends or the next script that writes the lock deletes it.
func redisGhost(ctx context.Context, admin rueidis.Client, key string) (bool, error) {
	fields, fence, nowMs, err := readLockHash(ctx, admin, key)
	if err != nil {
		return false, err
	}
	return fastform.Ghost(fields, fence, nowMs), nil
}

// readLockHash reads the hash at key, its fence's value ("" when absent or of another type)
// and the server's clock in ms, in one round trip. A fast form written as a string (the fast
// grant's SET: "~<owner> <seq>") is read as its hash form, {token: value}
// (fastform.FromString), as relock's readers read it; another string is an error.
// The string's conversion to its hash form between the two reads is read again.
func readLockHash(ctx context.Context, admin rueidis.Client, key string) (map[string]string, string, int64, error) {
	var res []rueidis.RedisResult
	var fields map[string]string
	for try := 0; ; try++ {
		res = admin.DoMulti(ctx, admin.B().Hgetall().Key(key).Build(), admin.B().Get().Key(key+":fence").Build(),
			admin.B().Time().Build(), admin.B().Get().Key(key).Build())
		var err error
		if fields, err = res[0].AsStrMap(); err == nil {
			break
		}
		v, serr := res[3].ToString()
		if f, ok := fastform.FromString(v); serr == nil && ok {
			fields = f
			break
		}
		if re, ok := rueidis.IsRedisErr(serr); !ok || !strings.HasPrefix(re.Error(), "WRONGTYPE") || try == 2 {
			return nil, "", 0, err
		}
	}
	fence, _ := res[1].ToString()
	tm, err := res[2].AsStrSlice()
	if err != nil || len(tm) != 2 {
		return nil, "", 0, fmt.Errorf("TIME: %v %v", tm, err)
	}
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	return fields, fence, sec*1000 + usec/1000, nil
}

// rwCountScript: an owner's write and read hold counts whose lease is live (as rw_state.lua
// counts them: a hold whose lease ended stays in the hash until the next script drops it).
const rwCountScript = `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('type', KEYS[1]).ok ~= 'hash' then return {0, 0} end
local function live(f)
  local s = redis.call('zscore', KEYS[2], f)
  if s and tonumber(s) > now then return tonumber(redis.call('hget', KEYS[1], f) or '0') end
  return 0
end
local w = 0
if redis.call('hget', KEYS[1], 'writer') == ARGV[1] then w = live(ARGV[1]) end
return {w, live('r:' .. ARGV[1])}`

func rwCounts(s *mseq, key, owner string) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vals, err := s.admin.Do(ctx, s.admin.B().Eval().Script(rwCountScript).Numkeys(2).Key(key, key+":leases").Arg(owner).Build()).AsIntSlice()
	if err != nil || len(vals) != 2 {
		return nil, fmt.Errorf("rw counts: %v %v", vals, err)
	}
	return []int{int(vals[0]), int(vals[1])}, nil
}

type lockSubject struct {
	api *lockAPI
	key string
}

func (ls *lockSubject) kind() string { return ls.api.name }

func (ls *lockSubject) options(*mseq, *mclient) []rlock.Option { return nil }

func (ls *lockSubject) setup(s *mseq) {
	for _, cl := range s.clients {
		n := 1 + s.rng.IntN(3)
		for i := 0; i < n && len(s.gors) < 9; i++ {
			switch x := s.rng.Float64(); {
			case x < 0.45:
				s.addOwner(cl, "handle", 1)
			case x < 0.75:
				s.addOwner(cl, "shared", 2)
			default:
				s.addOwner(cl, "ctx", 1+s.rng.IntN(2))
			}
		}
	}
	for _, o := range s.owners {
		g := o.gors[0]
		o.id = ls.api.ownerID(g.h, g.ctx)
		for side := 0; side < ls.api.sides; side++ {
			ms := &mside{o: o, side: side}
			o.sides = append(o.sides, ms)
			s.sides = append(s.sides, ms)
		}
	}
	if len(s.gors) > 0 {
		ls.key = ls.api.key(s.gors[0].h)
	}
}

func (ls *lockSubject) bind(s *mseq, g *mgor) { g.h = ls.api.handle(g.o.cl.c, s.name) }

func (ls *lockSubject) destroy(s *mseq) []string {
	keys := make([]string, 0, len(ls.api.destroy))
	for _, suf := range ls.api.destroy {
		keys = append(keys, ls.key+suf)
	}
	return keys
}

// destroyQuiescent deletes the lock between rounds: every owner that counts holds is then
// owed a loss notice (watchdog mode: by its next renewal).
func (ls *lockSubject) destroyQuiescent(s *mseq) {
	// Who holds now is owed a loss notice (watchdog mode: by its next renewal); who holds
	// nothing is not concerned.
	held := map[*mside]bool{}
	for _, ms := range s.sides {
		g := ms.o.gors[0]
		held[ms] = ls.api.hold(g.h, g.ctx, ms.side).Count > 0
	}
	s.del("quiescent")
	now := time.Now()
	s.mu.Lock()
	s.destroyedAny = true
	for _, ms := range s.sides {
		ms.destroyed = true
		if held[ms] && ms.destroyedAt.IsZero() {
			ms.destroyedAt = now
		}
	}
	for _, sec := range s.sections {
		if sec.end.IsZero() {
			sec.excused = true
		}
	}
	s.mu.Unlock()
}

func (ls *lockSubject) afterClose(s *mseq, cl *mclient) error {
	for _, g := range s.gors {
		if g.o.cl == cl {
			_, err := ls.api.acquire(g.h, g.ctx, 0, 0, 0, false)
			return err
		}
	}
	return rlock.ErrClosed
}

// setStack replaces g's stack (siblings read it under o.mu).
func (g *mgor) setStack(st []*mentry) {
	g.o.mu.Lock()
	g.stack = st
	g.o.mu.Unlock()
}

func (ls *lockSubject) inflight(s *mseq, g *mgor, i int) (string, error) {
	ctx, cancel := context.WithTimeout(g.ctx, 2*time.Second)
	defer cancel()
	side := i % ls.api.sides
	switch i % 3 {
	case 0:
		_, err := ls.api.acquire(g.h, ctx, side, 0, 0, true)
		return fmt.Sprintf("Lock[%s](ctx=timeout(2s))", sideName(side)), err
	case 1:
		_, err := ls.api.acquire(g.h, ctx, side, time.Second, 200*time.Millisecond, false)
		return fmt.Sprintf("TryLock[%s](wait=1s lease=200ms ctx=timeout(2s))", sideName(side)), err
	}
	return fmt.Sprintf("Unlock[%s](stray)", sideName(side)), ls.api.release(g.h, g.ctx, side)
}

func (ls *lockSubject) excused(s *mseq, ms *mside) bool {
	s.mu.Lock()
	flagged := ms.destroyed || ms.ambiguous > 0
	s.mu.Unlock()
	if flagged {
		return true
	}
	g := ms.o.gors[0]
	if ls.api.hold(g.h, g.ctx, ms.side).Lost != nil {
		return true
	}
	for _, e := range ms.o.entries(ms.side) {
		if errors.Is(e.ten.Cause(), rlock.ErrLockLost) {
			return true
		}
	}
	return false
}

// side returns g's owner's state for side.
func (g *mgor) side(side int) *mside { return g.o.sides[side] }

// fixedEndedDuring reports whether one of es (the owner's fixed holds on the side that may
// have lasted into an acquire: fixedOverlapping) is a fixed lease that may have ended by ret.
// A waiting Lock becomes a re-entry of the tenure that another goroutine of its owner begins
// meanwhile, and that tenure may also end before the Lock returns: FairMutex seed
// 590653666996461307 (g4's Lock waited from 472.6ms; g5, of the same context owner, took the
// lock with a 90ms lease at about 624ms; g4's re-entry, its reply delayed 137ms, came back
// after the lease and was refused with ErrLeaseExpired, as Lock's godoc says) and RWMutex seed
// 18044337897075111194 (g1's TryLock with a 76ms lease was in flight when g2's Lock began and
// unlocked before it returned; g2's send, delayed 79ms, re-entered it):
// TestModelRegression_reentryOfATenureBegunDuringTheWait.
func fixedEndedDuring(es []*mentry, ret time.Time) bool {
	for _, e := range es {
		if e.fixed && e.end.Before(ret.Add(expirySlack)) {
			return true
		}
	}
	return false
}

// tookFixed records a fixed-lease hold of o for fixedOverlapping.
func (o *mowner) tookFixed(e *mentry) {
	o.mu.Lock()
	o.fixed = append(o.fixed, e)
	o.mu.Unlock()
}

// fixedOverlapping returns o's fixed-lease holds on side that may have been held at some time
// between start and ret: acquired (called) before ret, and their lease, counted from the
// acquire's return, not surely over by start. Whether they were still on a stack at start or
// at ret does not matter: one may be taken and given back while the acquire waits.
func (o *mowner) fixedOverlapping(side int, start, ret time.Time) []*mentry {
	o.mu.Lock()
	defer o.mu.Unlock()
	var es []*mentry
	for _, e := range o.fixed {
		if e.side == side && e.start.Before(ret) && e.ret.Add(e.lease+expirySlack).After(start) {
			es = append(es, e)
		}
	}
	return es
}

func (o *mowner) entries(side int) []*mentry {
	o.mu.Lock()
	defer o.mu.Unlock()
	var es []*mentry
	for _, g := range o.gors {
		for _, e := range g.stack {
			if e.side == side {
				es = append(es, e)
			}
		}
	}
	return es
}

// sure reports whether e surely lasts through an operation starting now: its tenure lasts,
// its fixed lease is not about to end, and nothing may have destroyed it.
func (s *mseq) sure(ms *mside, e *mentry, now time.Time) bool {
	s.mu.Lock()
	flagged := ms.destroyed || ms.ambiguous > 0
	s.mu.Unlock()
	switch {
	case flagged, !e.ten.Valid(), e.ten.Cause() != nil:
		return false
	case e.fixed && e.end.Before(now.Add(expirySlack)):
		return false
	}
	return true
}

func (ls *lockSubject) op(s *mseq, g *mgor) {
	d := draws(g.rng, 12)
	f := s.repliesLost(g, drawFault(g.rng, s.prof.op))
	side := 0
	if ls.api.sides > 1 && d[0] < 0.5 {
		side = 1
	}
	if d[10] < s.prof.force {
		ls.forceOp(s, g, f)
		return
	}
	switch p := d[1]; {
	case p < 0.40:
		ls.acquireOp(s, g, side, d, f)
	case p < 0.47:
		// Re-lock right where a fixed lease of the owner ends: locally, or in Redis a drift
		// allowance (1% + 2ms) later.
		var next *mentry
		for _, e := range g.o.entries(side) {
			if e.fixed && time.Until(e.end) > 0 && time.Until(e.end) < 400*time.Millisecond && (next == nil || e.end.Before(next.end)) {
				next = e
			}
		}
		if next != nil {
			at := next.end.Add(between(d[11], -2*time.Millisecond, 8*time.Millisecond))
			s.logf("%s re-locks at the end of the lease of its hold from %s (+%s)", g, fmtDur(next.start.Sub(s.t0)), fmtDur(at.Sub(next.end)))
			time.Sleep(time.Until(at))
		}
		ls.acquireOp(s, g, side, d, f)
	case p < 0.80:
		ls.releaseOp(s, g, side, d, f)
	case p < 0.94:
		w := between(d[2], 5*time.Millisecond, 150*time.Millisecond)
		if d[3] < 0.1 {
			w = between(d[2], 150*time.Millisecond, 400*time.Millisecond)
		}
		time.Sleep(w)
	default:
		ls.inspectOp(s, g, side)
	}
}

func (ls *lockSubject) acquireOp(s *mseq, g *mgor, side int, d []float64, f *opFault) {
	blocking := d[3] < 0.3
	var wait, lease time.Duration
	switch {
	case d[4] < 0.35:
	case d[4] < 0.7:
		wait = between(d[5], 10*time.Millisecond, 100*time.Millisecond)
	default:
		wait = between(d[5], 200*time.Millisecond, 800*time.Millisecond)
	}
	switch {
	case blocking, d[6] < 0.2:
	case d[6] < 0.4:
		lease = -time.Millisecond
	case d[6] < 0.97:
		lease = between(d[7], 30*time.Millisecond, 300*time.Millisecond).Round(time.Millisecond)
	default:
		lease = between(d[7], time.Millisecond, 9*time.Millisecond).Round(time.Millisecond)
	}
	ctx, cancel, limit, cdesc := opCtx(g.ctx, f, d[8], d[9], blocking)
	defer cancel()
	strict := !limit.IsZero()
	if !blocking && (limit.IsZero() || time.Now().Add(wait).Before(limit)) {
		limit, strict = time.Now().Add(wait), false
	}
	desc := fmt.Sprintf("TryLock[%s](wait=%v lease=%v%s%s)", sideName(side), wait, lease, cdesc, f)
	if blocking {
		desc = fmt.Sprintf("Lock[%s](%s%s)", sideName(side), strings.TrimSpace(cdesc), f)
	}
	ms := g.side(side)
	// Expectations from what g itself holds: a re-entry succeeds at once; a read-write
	// lock's owner that holds read holds and not the write hold is refused the write hold.
	now := time.Now()
	var reentryBy, upgradeBy []*mentry // the holds the expectations rest on
	for _, e := range g.stack {
		if (e.side == side || (side == 1 && e.side == 0)) && s.sure(g.side(e.side), e, now) {
			reentryBy = append(reentryBy, e)
		}
	}
	if ls.api.sides == 2 && side == 0 && (lease <= 0 || lease >= 10*time.Millisecond) && len(g.o.gors) == 1 && len(g.o.entries(0)) == 0 {
		for _, e := range g.o.entries(1) {
			if s.sure(g.side(1), e, now) {
				upgradeBy = append(upgradeBy, e)
			}
		}
	}
	asked := lease // the lease the acquire sets in Redis
	if asked <= 0 {
		asked = g.o.cl.wd
	}
	s.mu.Lock()
	ms.leaseHi = max(ms.leaseHi, asked)
	s.mu.Unlock()
	lostBefore := ls.api.hold(g.h, g.ctx, side).Lost
	// When the ctx's Done closed: the runtime fires its timer from the heap of the scheduler
	// slot it was set on, late when the OS leaves that slot's thread unscheduled, and the
	// library can see the end only then (TestExplore_WaitBound's wbCall.ended). The ctx's
	// end is the later of its limit and this. (The 600 s run of session 29 under heavy
	// load: two ctx-bound-pause verdicts of 271 and 301 ms beside a watchdog 135 ms late
	// and stall watchers that saw 90 ms.)
	var ended atomic.Int64
	stopEnded := context.AfterFunc(ctx, func() { ended.Store(time.Now().UnixNano()) })
	start := time.Now()
	ok, err := ls.api.acquire(g.h, ctx, side, wait, lease, blocking)
	ret := time.Now()
	stopEnded()
	if n := ended.Load(); strict && n != 0 {
		limit = maxTime(limit, time.Unix(0, n))
	}
	// The same loss (one error value: a loss recorded anew is another) before and after
	// the call, and the call refused for it: every attempt was refused before it sent.
	if lost := ls.api.hold(g.h, g.ctx, side).Lost; lostBefore == nil || lost != lostBefore || !errors.Is(err, rlock.ErrLockLost) {
		until := ret
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			until = ret.Add(2 * g.o.cl.cleanup) // the caller left: work in the background
		}
		s.mu.Lock()
		ms.acqUntil = maxTime(ms.acqUntil, until)
		s.mu.Unlock()
	}
	// An expectation holds only if a hold it rests on lasted through the call: a fixed
	// lease may run out while the call waits for a paused or slow Redis.
	lasted := func(es []*mentry) bool {
		for _, e := range es {
			if (!e.fixed || e.end.After(ret.Add(expirySlack))) && e.ten.Cause() == nil {
				return true
			}
		}
		return false
	}
	reentry, upgrade := lasted(reentryBy), lasted(upgradeBy)
	s.boundCtx(g, desc, start, ret, limit, strict, f)
	if !ok && (blocking || wait > 0) && f.hit() {
		// Its leave (a fair queue's place, a writer's claim), sent as it returned, may
		// have met the fault.
		s.mu.Lock()
		s.leaveMayFail = true
		s.mu.Unlock()
	}
	s.logf("%s %s -> %v %s (%s)", g, desc+f.hitNote(), ok, errString(err), fmtDur(ret.Sub(start)))
	if lease > 0 && lease <= 2*time.Millisecond && !errors.Is(err, rlock.ErrInvalid) {
		s.violate("tiny-lease", "%s %s: a lease the drift allowance swallows was accepted (%v, %v)", g, desc, ok, err)
	}
	if ok && err == nil {
		snap := ls.api.hold(g.h, g.ctx, side)
		at := time.Now()
		e := &mentry{side: side, fixed: lease > 0, lease: lease, start: start, ret: ret}
		if e.fixed {
			e.end = start.Add(lease - drift(lease))
		}
		if snap.Held {
			e.ten, e.token = snap.Tenure, snap.Token
		}
		certain := e.ten.Valid() && (!e.fixed || at.Before(e.end.Add(-20*time.Millisecond)))
		if !snap.Held && snap.Lost == nil && (!e.fixed || at.Before(e.end.Add(-20*time.Millisecond))) {
			s.expect(ms, "acquire-not-held", "%s %s succeeded but the Client records no hold: %+v", g, desc, snap)
		}
		e.sec = &msection{g: g, side: side, start: ret, token: e.token, ten: e.ten, certain: certain}
		if e.fixed {
			e.sec.end = time.Time{}
		}
		s.mu.Lock()
		s.sections = append(s.sections, e.sec)
		if e.fixed {
			s.maxLease = max(s.maxLease, lease)
		}
		s.mu.Unlock()
		g.setStack(append(g.stack, e))
		if e.fixed {
			g.o.tookFixed(e)
		}
		if upgrade {
			s.expect(ms, "upgrade", "%s %s: an owner holding only read holds got the write hold", g, desc)
		}
		return
	}
	extra := f.extra() + s.pauseOverlap(start, ret)
	switch {
	case err == nil:
		if reentry {
			s.expect(ms, "reentry", "%s %s: a re-entry by an owner that holds the lock failed without an error", g, desc)
		}
	case errors.Is(err, rlock.ErrUpgrade):
		orphanRead := ls.api.sides == 2 && s.mayOrphan(g.o, 1)
		if ls.api.sides != 2 || side != 0 || (len(g.o.gors) == 1 && !upgrade && len(g.o.entries(1)) == 0 && !orphanRead && !f.hit()) {
			s.violate("unexpected-error", "%s %s: ErrUpgrade for an owner without read holds", g, desc)
		}
		if upgrade && ret.Sub(start) > reentrySlack+extra {
			s.expect(ms, "upgrade", "%s %s: the refused upgrade took %v", g, desc, ret.Sub(start))
		}
		return
	case errors.Is(err, rlock.ErrLockLost):
		s.lossSeen(ms, fmt.Sprintf("%s %s: %v", g, desc, err), false)
	case errors.Is(err, rlock.ErrUnknownOutcome):
		s.ambiguous(ms, g, desc)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
	case errors.Is(err, rlock.ErrInvalid):
		if lease <= 0 || lease >= 10*time.Millisecond {
			s.violate("unexpected-error", "%s %s: %v", g, desc, err)
		}
	case errors.Is(err, rlock.ErrLeaseExpired) && lease > 0:
		// Documented: every grant came back after its fixed lease ran out (Redis slow).
		s.fault("late-grant")
	case errors.Is(err, rlock.ErrLeaseExpired) && fixedEndedDuring(g.o.fixedOverlapping(side, start, ret), ret):
		// Documented (Lock, e9006b2): a re-entry whose grant came back after the fixed lease
		// of the tenure it re-entered (the owner's holds on this Client) ran out is refused.
		// The sibling that held it may have dropped it before the call returned (seed
		// 12704689980785488623, FairMutex), or taken it after the call began.
		s.fault("reentry-after-lease")
	case refusedReplay(f, err):
		s.violate("refused-replay", "%s %s: an acquire whose reply was lost reports the error reply to its replay as its outcome: %v", g, desc, err)
		s.ambiguous(ms, g, desc)
	case injected(err) && f.hit():
	case handedRefused(err):
		s.violate("handoff-refused", "%s %s: a release that Redis refused (nothing passed on) ended the wait: %v", g, desc, err)
	default:
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
	if upgrade && !(injected(err) && f.hit()) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		s.expect(ms, "upgrade", "%s %s: want ErrUpgrade, got %v %v", g, desc, ok, err)
	}
	if reentry && ret.Sub(start) > reentrySlack+extra {
		s.expect(ms, "reentry", "%s %s: a re-entry took %v", g, desc, ret.Sub(start))
	}
}

// expect records a violation that only counts if nothing injected in this round (a DEL, a
// ForceUnlock, a pause, refused renewals) or before it explains it: it is judged when the
// round's faults are known.
func (s *mseq) expect(ms *mside, check, format string, args ...any) {
	s.mu.Lock()
	s.expects = append(s.expects, expectation{ms: ms, check: check, msg: fmt.Sprintf(format, args...), at: s.since(), when: time.Now()})
	s.mu.Unlock()
}

// judgeExpectations keeps the expectations that nothing excuses: not what happened to their
// owner (subject.excused), nor a pause, stall or refused renewals within a lease before (the
// holds they rest on may have run out in Redis while their renewals could not get through).
func (s *mseq) judgeExpectations() {
	s.mu.Lock()
	es := s.expects
	s.expects = nil
	var keep []expectation
	for _, e := range es {
		lo := e.when.Add(-s.maxLease - settleMax)
		if overlap(s.pauses, lo, e.when)+overlap(s.rstalls, lo, e.when)+overlap(s.stalls, lo, e.when)+overlap(s.renewOff, lo, e.when) == 0 {
			keep = append(keep, e)
		}
	}
	s.mu.Unlock()
	for _, e := range keep {
		if !s.subj.excused(s, e.ms) {
			s.violate(e.check, "at %s: %s", fmtDur(e.at), e.msg)
		}
	}
}

// handedRefused reports whether a Lock's wait ended because a release of its Client that
// Redis refused was taken for a hand-off of unknown outcome
// (TestModelRegression_refusedReleaseEndsParkedWaiter).
func handedRefused(err error) bool {
	var re *rueidis.RedisError
	return err != nil && strings.Contains(err.Error(), "passed on by a release whose outcome is unknown") && errors.As(err, &re)
}

func (s *mseq) lossSeen(ms *mside, what string, nearExpiry bool) {
	s.mu.Lock()
	s.losses = append(s.losses, lossObs{ms: ms, what: what, at: s.since(), nearExpiry: nearExpiry})
	if ms.lostAt.IsZero() {
		ms.lostAt = time.Now()
	}
	s.mu.Unlock()
}

func (s *mseq) ambiguous(ms *mside, g *mgor, desc string) {
	s.mu.Lock()
	ms.ambiguous++
	s.mu.Unlock()
	s.fault("unknown-outcome")
}

// settleEntry waits until a fixed lease that is about to end has ended or is sure to last:
// whether its hold still counts decides whether Unlock may be called for it.
func (ls *lockSubject) settleEntry(s *mseq, g *mgor, e *mentry) {
	for i := 0; i < 40; i++ {
		if !e.ten.Valid() || e.ten.Cause() != nil {
			return
		}
		snap := ls.api.hold(g.h, g.ctx, e.side)
		if !snap.Tenure.Same(e.ten) || snap.Renew || time.Until(snap.End) > expirySlack {
			return
		}
		time.Sleep(time.Until(snap.End) + 10*time.Millisecond)
	}
}

// releaseOp gives back one of g's holds of side (or, with none, tries a stray Unlock).
func (ls *lockSubject) releaseOp(s *mseq, g *mgor, side int, d []float64, f *opFault) {
	var idx []int
	for i, e := range g.stack {
		if e.side == side {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		if len(g.o.gors) == 1 && len(g.o.entries(side)) == 0 && d[2] < 0.3 {
			ls.strayUnlock(s, g, side, f)
		}
		return
	}
	i := idx[len(idx)-1]
	if d[3] >= 0.7 {
		i = idx[int(d[4]*float64(len(idx)))]
	}
	ls.giveBack(s, g, i, d[5] < 0.15, f)
}

// strayUnlock: an owner that holds nothing is told so.
func (ls *lockSubject) strayUnlock(s *mseq, g *mgor, side int, f *opFault) {
	ctx := withFault(g.ctx, f)
	start := time.Now()
	err := ls.api.release(g.h, ctx, side)
	ret := time.Now()
	desc := fmt.Sprintf("Unlock[%s](stray%s)", sideName(side), f)
	s.bound(g, desc, start, ret, start.Add(g.o.cl.cleanup), f)
	s.logf("%s %s -> %s (%s)", g, desc+f.hitNote(), errString(err), fmtDur(ret.Sub(start)))
	switch {
	case errors.Is(err, rlock.ErrNotHeld):
		if errors.Is(err, rlock.ErrLockLost) {
			s.lossSeen(g.side(side), g.String()+" "+desc+": "+err.Error(), false)
		}
	case err == nil:
		if !s.mayOrphan(g.o, side) {
			s.violate("phantom", "%s %s: an owner that took no hold gave one back", g, desc)
		}
	case injected(err) && f.hit():
	case errors.Is(err, rlock.ErrUnknownOutcome):
		s.ambiguous(g.side(side), g, desc)
	default:
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
}

// giveBack unlocks g.stack[i]. A hold whose tenure ran out (its fixed lease ended) is not
// given back when the owner may hold others: an Unlock counts holds per owner, so it would
// give back another one (a careful user checks Err first; so does the driver).
func (ls *lockSubject) giveBack(s *mseq, g *mgor, i int, cancelled bool, f *opFault) {
	e := g.stack[i]
	ms := g.side(e.side)
	if e.fixed {
		ls.settleEntry(s, g, e)
	}
	cause := e.ten.Cause()
	if !e.ten.Valid() || (cause != nil && !errors.Is(cause, rlock.ErrLockLost)) {
		others := false
		for _, o := range g.o.entries(e.side) {
			if o != e && o.ten.Valid() && o.ten.Cause() == nil {
				others = true
			}
		}
		if len(g.o.gors) > 1 || others {
			s.logf("%s drops its %s hold from %s: its tenure ended (%v)", g, sideName(e.side), fmtDur(e.start.Sub(s.t0)), cause)
			g.setStack(append(g.stack[:i:i], g.stack[i+1:]...))
			end := e.end // a fixed lease's (earliest) end
			if !e.fixed {
				end = time.Now() // nothing ends a hold in watchdog mode but Unlock, a loss or Close
			}
			ls.closeSection(s, e, end)
			return
		}
	}
	if f == nil {
		f = &opFault{} // records the release's first send (releaseMetLease)
	}
	ctx := withFault(g.ctx, f)
	if cancelled {
		var c context.CancelFunc
		ctx, c = context.WithCancel(ctx)
		c()
	}
	start := time.Now()
	sure := s.sure(ms, e, start)
	// The critical section ends when the caller asks to give the hold back, whatever the
	// outcome (a retry after an error does not extend it).
	end := start
	if e.fixed && e.end.Before(end) {
		end = e.end
	}
	ls.closeSection(s, e, end)
	err := ls.api.release(g.h, ctx, e.side)
	ret := time.Now()
	desc := fmt.Sprintf("Unlock[%s](hold from %s, lease %v%s%s)", sideName(e.side), fmtDur(e.start.Sub(s.t0)), e.lease, map[bool]string{true: " ctx=cancelled"}[cancelled], f)
	s.bound(g, desc, start, ret, start.Add(g.o.cl.cleanup), f)
	s.logf("%s %s -> %s (%s)", g, desc+f.hitNote(), errString(err), fmtDur(ret.Sub(start)))
	switch {
	case err == nil, errors.Is(err, rlock.ErrNotHeld):
		g.setStack(append(g.stack[:i:i], g.stack[i+1:]...))
		if err == nil {
			return
		}
		near := e.fixed && e.end.Before(start.Add(expirySlack))
		if errors.Is(err, rlock.ErrLockLost) {
			s.lossSeen(ms, g.String()+" "+desc+": "+err.Error(), near)
		}
		if sure && !releaseMetLease(e, f, ret) {
			sure = false
		}
		if sure {
			s.expect(ms, "unlock-notheld", "%s %s: a hold that surely lasted was not held: %v", g, desc, err)
		}
	case errors.Is(err, rlock.ErrUnknownOutcome):
		s.ambiguous(ms, g, desc)
	case refusedReplay(f, err):
		s.violate("refused-replay", "%s %s: an Unlock whose reply was lost reports the error reply to its replay as its outcome: %v", g, desc, err)
		s.ambiguous(ms, g, desc)
	case injected(err) && f.hit():
	case errors.Is(err, context.DeadlineExceeded) && g.siblingBusySince(start):
		// Another goroutine of the owner ran a call on the lock (its replays through
		// injected faults) for the whole cleanup timeout: this Unlock sent nothing, and
		// the hold stays (Unlock's godoc, case 4; seed 9007142354052241084, FairMutex).
	default:
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
}

// siblingBusySince reports whether another goroutine of g's owner has been running an
// operation since t or before.
//
// A call that returned may still hold the lock for its owner that long: work it left to the
// background (the replays of a request whose replies were lost, a give-back) runs under the
// owner's operation lock for up to the cleanup timeout after the caller left. So a sibling
// whose call ended within the cleanup timeout before t counts as busy too (seed
// 10376536682305928891, FairMutex, replies-lost: g3's Lock left at its deadline, its
// replays went on, and g2's Unlock 130 ms later found the lock busy for its whole cleanup
// timeout).
// releaseMetLease reports whether the release of e, a hold that surely lasted when it was
// called, surely reached Redis while e lasted there, so that ErrNotHeld is a hold wrongly
// denied: f is the release's fault (never nil: it records the first send), ret its return.
func releaseMetLease(e *mentry, f *opFault, ret time.Time) bool {
	if e.fixed {
		if t := f.firstSend(); !t.IsZero() && e.end.Before(t.Add(expirySlack)) {
			// The release made its first send near or after the fixed lease's end, though
			// called well before it: it waited for another goroutine of the owner whose call
			// on the lock held the hold's operations (Unlock's godoc, case 4). Seed
			// 16168448657392341871 (RWMutex): o0's write hold taken at 7.1ms with a 158ms
			// lease; g1's Unlock at 10.1ms waited behind g0's re-entry TryLock, whose reply a
			// fault delayed 149ms, and reached Redis after the lease ended there: "not held"
			// (157.1ms) is Redis's state (TestModelRegression_unlockBehindOwnersDelayedCall).
			return false
		}
	}
	if e.fixed && (f.applied(fDrop) || f.applied(fLate)) && e.end.Before(ret.Add(expirySlack)) {
		// The first send's reply was lost (or the send kept back: fLate): the Client
		// learns the outcome from a replay, and one that finds the holds gone tells a
		// release from an expiry only when it was sent before the lease's
		// conservative end. The answered replay went out
		// before ret, perhaps after that end: ErrNotHeld is the conservative answer
		// (guarantee 3), not a hold wrongly denied.
		return false
	}
	if e.fixed && (f.applied(fBusy) || f.applied(fRefuse)) && e.end.Before(ret.Add(expirySlack)) {
		// A send refused (a refused dial: nothing sent) or answered BUSY (LOADING: the
		// script did not run) applied nothing, and the Client sent the release again
		// after a backoff: the only send that Redis ran went out before ret, perhaps
		// after the fixed lease ended, and then found the hold expired. Seed
		// 1569544937194548789 (RWMutex): a write hold taken at 117.3ms with a 115ms lease
		// (gone in Redis at ~232ms), Unlock at 159.9ms (fault=busy@0x2+refuse@3x3): two
		// LOADING, an EVALSHA answered NOSCRIPT, three refused EVALs, another NOSCRIPT,
		// and the EVAL that ran, at 321.0ms, returned -1 (not held); Redis had granted the
		// write lock to another owner at 234.3ms, so the hold had surely ended before
		// the release ran: ErrNotHeld is Redis's state, not a hold wrongly denied.
		return false
	}
	return true
}

func (g *mgor) siblingBusySince(t time.Time) bool {
	for _, o := range g.o.gors {
		if o == g {
			continue
		}
		if b := o.busy.Load(); b != 0 && b <= t.UnixNano() {
			return true
		}
		if e := o.ended.Load(); e != 0 && e >= t.Add(-g.o.cl.cleanup).UnixNano() {
			return true
		}
	}
	return false
}

func (ls *lockSubject) closeSection(s *mseq, e *mentry, end time.Time) {
	s.mu.Lock()
	if e.sec.end.IsZero() {
		e.sec.end = end
	}
	s.mu.Unlock()
}

func (ls *lockSubject) forceOp(s *mseq, g *mgor, f *opFault) {
	s.mu.Lock()
	s.roundDestroy = true
	s.destroyedAny = true
	s.mu.Unlock()
	s.fault("force")
	ctx, cancel := context.WithTimeout(withFault(g.ctx, f), 2*time.Second)
	defer cancel()
	start := time.Now()
	ok, err := ls.api.force(g.h, ctx)
	ret := time.Now()
	desc := "ForceUnlock(" + strings.TrimSpace(f.String()) + ")"
	s.bound(g, desc, start, ret, start.Add(2*time.Second), f)
	s.logf("%s %s -> %v %s (%s)", g, desc+f.hitNote(), ok, errString(err), fmtDur(ret.Sub(start)))
	if err != nil && !(injected(err) && f.hit()) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
}

func (ls *lockSubject) inspectOp(s *mseq, g *mgor, side int) {
	err := ls.api.errOf(g.h, g.ctx, side)
	s.logf("%s Err[%s] -> %s", g, sideName(side), errString(err))
	if errors.Is(err, rlock.ErrLockLost) {
		s.lossSeen(g.side(side), g.String()+" Err: "+err.Error(), false)
	}
}

// osState is one owner side at a quiescent point.
type osState struct {
	ms    *mside
	snap  rlock.ModelHold
	redis int
	// lostDue: Redis counts holds of a side told of a loss (or that gave back every hold
	// since), within lostBound, which ends then (zero: nothing pending).
	lostDue time.Time
}

// lostBound is when Redis must count no hold of side ms, told of a loss first seen at
// lostAt (or that has given back every hold since), any longer. A lost hold is no longer
// renewed (the watchdog dropped its lease: hold.onLost, hold.endLocked), and the owner's
// acquires are refused before they send while the loss stands (Mutex.attempt), so what
// Redis still counts of it (the lost holds; orphans, which endLocked forgets; holds of
// acquires of unknown outcome, which nothing finds once nobody renews them) ends with the
// lease it had (HoldCount's godoc: 'its lease ends once nobody renews the owner's holds'):
// the longest lease the side asked for (the watchdog timeout in watchdog mode), counted from
// the later of the loss's first sighting, the last moment Redis may apply a request of one of
// the side's acquires (acqUntil: its return, plus two cleanup timeouts of background work
// when its caller left), and the last delivery of a kept-back acquire (fLate); plus expirySlack and settleMax, and
// the pauses and stalls since a lease before (a renewal sent before the loss and applied once
// Redis resumed sets the lease from then).
func (s *mseq) lostBound(ms *mside, now time.Time) (due, from time.Time, lease time.Duration) {
	s.mu.Lock()
	from = maxTime(ms.lostAt, maxTime(ms.acqUntil, s.lateAcqAt))
	lease = ms.leaseHi
	s.mu.Unlock()
	if lease <= 0 {
		lease = ms.o.cl.wd
	}
	lo := from.Add(-lease)
	return from.Add(lease + expirySlack + settleMax + s.pauseOverlap(lo, now) + s.stallOverlap(lo, now)), from, lease
}

// checkState compares, for every owner side, the model (holds taken and not given back),
// the Client's hold table and Redis, and the Client's tables. It changes nothing: the
// caller retries it while timers may still settle a mismatch.
func (ls *lockSubject) checkState(s *mseq, final bool) (vs []violation, states []osState) {
	v := func(check, format string, args ...any) {
		vs = append(vs, violation{check: check, msg: fmt.Sprintf(format, args...)})
	}
	now := time.Now()
	for _, o := range s.owners {
		g := o.gors[0]
		counts, err := ls.api.counts(s, ls.key, o.id)
		if err != nil {
			v("admin", "counts of %s: %v", o.id, err)
			continue
		}
		for side, ms := range o.sides {
			snap := ls.api.hold(g.h, g.ctx, side)
			r := counts[side]
			states = append(states, osState{ms: ms, snap: snap, redis: r})
			s.mu.Lock()
			destroyed, disturbed, ambiguous, destroyedAt := ms.destroyed, ms.disturbed, ms.ambiguous, ms.destroyedAt
			s.mu.Unlock()
			flagged := destroyed || disturbed || ambiguous > 0
			es := o.entries(side)
			all, sure := len(es), 0
			for _, e := range es {
				if !flagged && e.ten.Valid() && e.ten.Cause() == nil && (!e.fixed || e.end.After(now.Add(expirySlack))) {
					sure++
				}
			}
			l := snap.Count
			desc := fmt.Sprintf("%s (c%d %s): model %d holds (%d sure), Client %d (held %v, lost %v, orphans %d), Redis %d", ms, o.cl.idx, o.id, all, sure, l, snap.Held, snap.Lost, snap.Orphans, r)
			// The Client's own view agrees with what it tells the owner.
			switch err := ls.api.errOf(g.h, g.ctx, side); {
			case snap.Held && err != nil,
				!snap.Held && snap.Lost != nil && !errors.Is(err, rlock.ErrLockLost),
				!snap.Held && snap.Lost == nil && !errors.Is(err, rlock.ErrNotHeld):
				v("err-view", "%s: Err says %v", desc, err)
			}
			if snap.Held != (l > 0) && !(snap.Lost != nil && !snap.Held) {
				v("hold-state", "%s: a tenure without holds or holds without a tenure", desc)
			}
			// redis-lost: an owner side told of a loss, or that has given back every hold
			// since (model and Client 0), may be counted in Redis only within lostBound:
			// a hold left there blocks every other owner until its lease ends (forever if
			// something renews it).
			s.mu.Lock()
			lostAt := ms.lostAt
			s.mu.Unlock()
			if !lostAt.IsZero() && r > 0 && (snap.Lost != nil || (!snap.Held && l == 0 && all == 0)) {
				due, from, lease := s.lostBound(ms, now)
				if now.After(due) {
					v("redis-lost", "%s: Redis still counts %d hold(s) (key TTL %v) %v after the loss was first seen (at %s; bound from %s: lease %v, due at %s)",
						desc, r, s.pttl(ls.key), now.Sub(lostAt).Round(time.Millisecond), fmtDur(lostAt.Sub(s.t0)), fmtDur(from.Sub(s.t0)), lease, fmtDur(due.Sub(s.t0)))
				} else {
					states[len(states)-1].lostDue = due
				}
			}
			if snap.Lost != nil {
				continue // told: the counts may differ until every hold is unlocked (redis-lost bounds Redis's)
			}
			if l > all {
				v("phantom", "%s: the Client counts holds that no caller has", desc)
			} else if l < sure {
				v("dropped", "%s: the Client lost count of holds it did not report lost", desc)
			}
			// Redis counts the Client's holds, and may count its known orphans (re-entries
			// granted to callers that had gone, whose give-back failed: they ride with the
			// tenure and go with its last hold).
			switch {
			case r > l+snap.Orphans && r-l-snap.Orphans > ambiguous:
				v("redis-ghost", "%s: Redis counts holds the Client does not", desc)
			case r < l && !flagged:
				v("redis-missing", "%s: Redis lost holds the Client still counts, unannounced", desc)
			}
			if !destroyedAt.IsZero() && snap.Held && snap.Renew && r < l && now.Sub(destroyedAt) > o.cl.wd+300*time.Millisecond {
				v("loss-unnoticed", "%s: deleted %v ago, not told", desc, now.Sub(destroyedAt).Round(time.Millisecond))
			}
		}
	}
	for _, cl := range s.clients {
		holds, handoffs := rlock.ModelTables(cl.c)
		for _, h := range holds {
			if h.Refs == 0 && h.Count == 0 && !h.Held && h.Lost == nil {
				v("table-idle", "c%d: the hold table keeps an idle entry %+v", cl.idx, h)
			} else if final {
				v("table-leftover", "c%d: after every hold was given back the hold table has %+v", cl.idx, h)
			}
		}
		if handoffs > 0 {
			v("table-handoff", "c%d: %d locks with hand-off candidates while nobody waits", cl.idx, handoffs)
		}
	}
	return vs, states
}

func (ls *lockSubject) quiescent(s *mseq, final bool) {
	start := time.Now()
	settle := settleMax
	if final {
		// Work a call left to the background (the replays of a request whose replies were
		// all lost) keeps its hold's entry in the table for up to the cleanup timeout after
		// the call returned (seed 3856332744581732445, Mutex, replies-lost: a TryLock that
		// left at its ctx's end 3 ms before the drain; its entry went 500 ms later, past
		// settleMax).
		for _, cl := range s.clients {
			settle = max(settle, cl.cleanup+settleMax)
		}
	}
	var vs []violation
	var states []osState
	for {
		vs, states = ls.checkState(s, final)
		if len(vs) == 0 || time.Since(start) > settle {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, st := range states {
		s.mu.Lock()
		lostAt := st.ms.lostAt
		s.mu.Unlock()
		if !lostAt.IsZero() {
			s.logf("quiescent: %s told of a loss at %s: Redis counts %d, the Client %d (lost %v), the model %d", st.ms, fmtDur(lostAt.Sub(s.t0)), st.redis, st.snap.Count, st.snap.Lost != nil, len(st.ms.o.entries(st.ms.side)))
		}
		if !st.lostDue.IsZero() {
			s.fault("lost-counted") // Redis counts holds of a side told of a loss, within its bound
		}
	}
	if final {
		// Every hold is given back: Redis must count none of a side told of a loss once its
		// bound (lostBound) has passed. Wait for it (the rounds do not: their next quiescent
		// point checks), and take only the redis-lost verdicts of the checks that follow (the
		// others had their settleMax above).
		for wait := time.Now().Add(5 * time.Second); ; {
			var due time.Time
			for _, st := range states {
				due = maxTime(due, st.lostDue)
			}
			if due.IsZero() || time.Now().After(wait) {
				break
			}
			time.Sleep(min(time.Until(due)+10*time.Millisecond, 100*time.Millisecond))
			var again []violation
			again, states = ls.checkState(s, final)
			found := false
			for _, v := range again {
				if v.check == "redis-lost" {
					vs, found = append(vs, v), true
				}
			}
			if found {
				break // once: the next check would repeat it
			}
		}
	}
	for _, v := range vs {
		s.violate(v.check, "%s", v.msg)
	}
	// Losses: every notice must have a cause the sequence injected.
	s.mu.Lock()
	losses := s.losses
	s.losses = nil
	s.mu.Unlock()
	now := time.Now()
	for _, st := range states {
		if st.snap.Lost != nil {
			losses = append(losses, lossObs{ms: st.ms, what: fmt.Sprintf("%s: the Client reports %v", st.ms, st.snap.Lost), at: s.since()})
		}
	}
	for _, o := range s.owners {
		for _, g := range o.gors {
			for _, e := range g.stack {
				if c := e.ten.Cause(); errors.Is(c, rlock.ErrLockLost) {
					losses = append(losses, lossObs{ms: g.side(e.side), what: fmt.Sprintf("%s: its hold from %s ended: %v", g, fmtDur(e.start.Sub(s.t0)), c), at: s.since()})
				}
			}
		}
	}
	s.mu.Lock()
	var spurious, atExpiry []lossObs
	for _, l := range losses {
		if l.ms.lostAt.IsZero() {
			l.ms.lostAt = now // first seen at this quiescent point (redis-lost's bound runs from it)
		}
	}
	for _, st := range states {
		if st.snap.Lost != nil {
			s.faults["lost-side"]++ // told of a loss at this quiescent point
		}
	}
	for _, st := range states {
		if st.snap.Held && st.snap.Lost == nil && !st.ms.lostAt.IsZero() {
			// A new tenure since the loss (its holds all unlocked, a fresh grant that gave
			// back what Redis still counted: granted's extra): the other checks apply again.
			st.ms.lostAt = time.Time{}
		}
	}
	for _, l := range losses {
		switch {
		case l.ms.flagged():
		case l.nearExpiry:
			atExpiry = append(atExpiry, l)
		default:
			spurious = append(spurious, l)
		}
	}
	// Sections open during the round of a flagged owner side are excused from exclusion.
	for _, sec := range s.sections {
		if ms := sec.g.side(sec.side); ms.flagged() && (sec.end.IsZero() || !sec.end.Before(s.roundStart)) {
			sec.excused = true
		}
	}
	// An owner side that holds nothing anywhere, and whose acquires can no longer be applied
	// (acqUntil: the background work of one whose caller left may still replay it and be
	// granted), starts afresh. Before, a side whose Lock left at its deadline in a
	// replies-lost round started afresh at the round's end while its replays went on in the
	// background; one granted 16 ms later, its reply lost too, left a hold that the Client
	// rightly did not count (Observer.Replay reported its outcome unknown) and the model,
	// its ambiguity forgotten, called a ghost (RWMutex seed 14194729840834505905).
	for _, st := range states {
		if st.snap.Count == 0 && st.snap.Lost == nil && !st.snap.Held && st.redis == 0 && len(st.ms.o.entries(st.ms.side)) == 0 && !now.Before(st.ms.acqUntil) {
			st.ms.destroyed, st.ms.disturbed, st.ms.ambiguous, st.ms.destroyedAt = false, false, 0, time.Time{}
			st.ms.lostAt, st.ms.leaseHi = time.Time{}, 0
		}
	}
	s.mu.Unlock()
	seen := map[string]bool{}
	for _, l := range spurious {
		if !seen[l.what] {
			seen[l.what] = true
			check := "loss-spurious"
			if strings.Contains(l.what, "lock lost: unlock") {
				// A give-back that failed ended the owner's tenure as lost
				// (TestModelRegression_failedGiveBackOfReentryReportsLoss).
				check = "loss-abandon"
			}
			s.violate(check, "at %s: %s (no DEL, ForceUnlock, pause, refused renewal or unknown outcome could explain it)", fmtDur(l.at), l.what)
		}
	}
	for _, l := range atExpiry {
		if strings.Contains(l.what, "lock lost: unlock") {
			continue // reported as loss-abandon
		}
		s.violate("loss-at-expiry", "at %s: %s (an Unlock racing its fixed lease's end is told a loss, not ErrLeaseExpired)", fmtDur(l.at), l.what)
	}
}

func (ls *lockSubject) drain(s *mseq, g *mgor) {
	for tries := 0; len(g.stack) > 0 && tries < 100; tries++ {
		ls.giveBack(s, g, len(g.stack)-1, false, nil)
	}
	if len(g.stack) > 0 {
		s.violate("drain", "%s could not give back %d holds", g, len(g.stack))
		g.setStack(nil)
	}
	if g != g.o.gors[len(g.o.gors)-1] {
		return
	}
	// Every goroutine of the owner has drained. giveBack drops without an Unlock a hold
	// whose tenure it does not know to last (ended, or already lost when the acquire
	// returned: the snapshot then names no tenure) while the owner has other goroutines; but
	// a lost hold stays in the Client's table, counted, until the owner's Unlock reports the
	// loss (the hold table's documented rule). The owner's Unlocks report it now, as a
	// careful user's would. (Without this, a hold that a concurrent ForceUnlock and re-entry
	// made lost before its acquire's snapshot was left in the table: table-leftover, seed
	// 16912021949326544437 replayed beside a heavy load, 1 in 75.)
	for side := 0; side < ls.api.sides; side++ {
		for tries := 0; tries < 10; tries++ {
			snap := ls.api.hold(g.h, g.ctx, side)
			if snap.Count == 0 || snap.Lost == nil || snap.Held || len(g.o.entries(side)) > 0 {
				break
			}
			start := time.Now()
			err := ls.api.release(g.h, g.ctx, side)
			desc := fmt.Sprintf("Unlock[%s](a lost hold dropped unreported)", sideName(side))
			s.logf("%s %s -> %s (%s)", g, desc, errString(err), fmtDur(time.Since(start)))
			if !errors.Is(err, rlock.ErrNotHeld) {
				s.violate("unexpected-error", "%s %s: %v", g, desc, err)
				break
			}
		}
	}
}

// endKeys: once every owner has unlocked and the longest lease given has passed, only the
// documented keys are left: the fence (no expiry) and the release record (while its short
// time to live lasts). A key that may outlive that is an error at once; the others are
// waited for.
func (ls *lockSubject) endKeys(s *mseq) {
	maxCleanup := time.Duration(0)
	maxWaiter := time.Duration(0)
	for _, cl := range s.clients {
		maxCleanup, maxWaiter = max(maxCleanup, cl.cleanup), max(maxWaiter, cl.waiter)
	}
	s.mu.Lock()
	excused := s.destroyedAny
	for _, ms := range s.sides {
		excused = excused || ms.flagged()
	}
	maxLease := s.maxLease
	s.mu.Unlock()
	limits := map[string]time.Duration{
		ls.key + ":rel": 2*maxCleanup + 50*time.Millisecond,
		// The forced record outlives the lease a ForceUnlock ended by a minute at least.
		ls.key + ":forced": maxLease + max(time.Minute, 2*maxCleanup) + 50*time.Millisecond,
	}
	for _, suf := range []string{"", ":leases"} {
		limits[ls.key+suf] = maxLease + 50*time.Millisecond
	}
	for _, suf := range ls.api.extra {
		if _, ok := limits[ls.key+suf]; !ok {
			limits[ls.key+suf] = maxWaiter + 50*time.Millisecond
		}
	}
	s.mu.Lock()
	claimsExcused := s.leaveMayFail
	s.mu.Unlock()
	wait := time.Duration(0)
	start := time.Now()
	for {
		keys := s.keyTTLs(ls.key)
		var held, claims []string
		for k, ttl := range keys {
			if k == ls.key+":fence" {
				continue
			}
			lim, ok := limits[k]
			if strings.HasPrefix(k, ls.key+":rel") {
				// Release records (one key per final release, or one hash of them).
				lim, ok = limits[ls.key+":rel"], true
			}
			switch {
			case !ok:
				s.violate("end-keys", "unexpected key %s left (pttl %v)", k, ttl)
			case ttl < 0:
				s.violate("end-keys", "key %s left without an expiry", k)
			case ttl > lim:
				s.violate("end-keys", "key %s left for %v, more than %v", k, ttl, lim)
			case strings.HasPrefix(k, ls.key+":rel"), k == ls.key+":forced":
			case k == ls.key && s.ghost(k):
				// A fast grant's ghost is a free lock (docs/DESIGN.md section 5): only its
				// expiry (the limit above) is checked.
			case k == ls.key || k == ls.key+":leases":
				held = append(held, fmt.Sprintf("%s(%v)", k, ttl))
				wait = max(wait, ttl)
			default:
				claims = append(claims, fmt.Sprintf("%s(%v)", k, ttl))
				wait = max(wait, ttl)
			}
		}
		if len(held)+len(claims) == 0 {
			return
		}
		if !excused && len(held) > 0 && time.Since(start) > settleMax {
			s.violate("redis-ghost", "after every owner gave back its holds Redis still has %v", held)
			excused = true
		}
		if !claimsExcused && len(claims) > 0 && time.Since(start) > settleMax {
			// Every waiter that gave up left (a fair queue's place, a writer's claim) with
			// no fault that could have made its leave fail.
			s.violate("claim-left", "after every waiter gave up Redis still has %v", claims)
			claimsExcused = true
		}
		if time.Since(start) > maxLease+maxWaiter+settleMax {
			s.violate("end-keys", "after every owner gave back its holds and the longest lease passed Redis still has %v", append(held, claims...))
			return
		}
		time.Sleep(min(wait+10*time.Millisecond, 50*time.Millisecond))
	}
}

// ghost reports whether the lock hash at key is a fast form's ghost (redisGhost).
func (s *mseq) ghost(key string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	g, err := redisGhost(ctx, s.admin, key)
	if err != nil {
		s.violate("admin", "ghost %s: %v", key, err)
	}
	return g
}

// pttl is key's remaining time to live (-1: no expiry, -2: no key), for the logs.
// snapScript reads, in one step, each key's type, contents and PTTL.
const snapScript = `
local out = {}
for i, k in ipairs(KEYS) do
  local t = redis.call('type', k).ok
  local v = {}
  if t == 'hash' then v = redis.call('hgetall', k)
  elseif t == 'string' then v = {redis.call('get', k)}
  elseif t == 'zset' then v = redis.call('zrange', k, 0, -1, 'withscores')
  elseif t == 'list' then v = redis.call('lrange', k, 0, -1)
  elseif t == 'set' then v = redis.call('smembers', k) end
  out[i] = {t, v, redis.call('pttl', k)}
end
return out`

// snapKeys are the keys a snapshot at a loss reads, with their labels: the lock's (hash,
// fence, and the keys beside them that renewals read).
func (s *mseq) snapKeys() (keys, labels []string) {
	var base string
	var sufs []string
	switch subj := s.subj.(type) {
	case *lockSubject:
		base, sufs = subj.key, append([]string{"", ":fence"}, subj.api.extra...)
	case *permitSubject:
		base, sufs = subj.key, []string{"", ":leases"}
	}
	if base == "" {
		return nil, nil
	}
	for _, suf := range sufs {
		keys = append(keys, base+suf)
		label := strings.TrimPrefix(suf, ":")
		if suf == "" {
			label = "lock"
		}
		labels = append(labels, label)
	}
	return keys, labels
}

// snapAtLoss logs what Redis holds for the lock when client idx's renewal round lost a lease
// (a loss no fault explains is then read against it: the seed 4303567426744168258
// loss-spurious, model300-s20b). Read at once, off the watchdog's goroutine (a paused Redis
// must not hold it up), with the admin client; close waits for the read.
func (s *mseq) snapAtLoss(idx int) {
	keys, labels := s.snapKeys()
	if len(keys) == 0 {
		return
	}
	s.mu.Lock()
	if s.snapClosed {
		s.mu.Unlock()
		return
	}
	s.snapWG.Add(1)
	s.mu.Unlock()
	at := time.Now()
	go func() {
		defer s.snapWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		res, err := s.admin.Do(ctx, s.admin.B().Eval().Script(snapScript).Numkeys(int64(len(keys))).Key(keys...).Build()).ToArray()
		took := fmtDur(time.Since(at))
		if err == nil && len(res) != len(keys) {
			err = fmt.Errorf("%d results for %d keys", len(res), len(keys))
		}
		if err != nil {
			s.logf("    c%d redis at loss (read %s after the round): %v", idx, took, err)
			return
		}
		var parts []string
		for i, r := range res {
			e, _ := r.ToArray()
			if len(e) != 3 {
				parts = append(parts, labels[i]+" ?")
				continue
			}
			typ, _ := e[0].ToString()
			vals, _ := e[1].AsStrSlice()
			pttl, _ := e[2].AsInt64()
			var body string
			switch typ {
			case "none":
				parts = append(parts, labels[i]+" none")
				continue
			case "string":
				body = fmt.Sprintf("%q", strings.Join(vals, ""))
			case "hash", "zset":
				kv := make([]string, 0, len(vals)/2)
				for j := 0; j+1 < len(vals); j += 2 {
					kv = append(kv, vals[j]+":"+vals[j+1])
				}
				body = "{" + strings.Join(kv, " ") + "}"
			default:
				body = fmt.Sprint(vals)
			}
			ttl := strconv.FormatInt(pttl, 10)
			if pttl >= 0 {
				ttl += "ms"
			}
			parts = append(parts, fmt.Sprintf("%s %s %s pttl %s", labels[i], typ, body, ttl))
		}
		s.logf("    c%d redis at loss (read %s after the round): %s", idx, took, strings.Join(parts, "; "))
	}()
}

func (s *mseq) pttl(key string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ms, err := s.admin.Do(ctx, s.admin.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		return 0
	}
	if ms < 0 {
		return time.Duration(ms)
	}
	return time.Duration(ms) * time.Millisecond
}

// keyTTLs lists the keys of the lock's hash tag with their remaining time to live.
func (s *mseq) keyTTLs(base string) map[string]time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := s.admin.Do(ctx, s.admin.B().Keys().Pattern(base+"*").Build()).AsStrSlice()
	if err != nil {
		s.violate("admin", "KEYS %s*: %v", base, err)
		return nil
	}
	out := make(map[string]time.Duration, len(keys))
	for _, k := range keys {
		ms, err := s.admin.Do(ctx, s.admin.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil || ms == -2 {
			continue
		}
		if ms < 0 {
			out[k] = -1
		} else {
			out[k] = time.Duration(ms) * time.Millisecond
		}
	}
	return out
}

// finish checks mutual exclusion and fencing over the sequence's accepted critical sections.
func (ls *lockSubject) finish(s *mseq) {
	s.mu.Lock()
	secs := append([]*msection(nil), s.sections...)
	s.mu.Unlock()
	for _, sec := range secs {
		if c := sec.ten.Cause(); errors.Is(c, rlock.ErrLockLost) || errors.Is(c, rlock.ErrClosed) {
			sec.excused = true
		}
	}
	sort.Slice(secs, func(i, j int) bool { return secs[i].start.Before(secs[j].start) })
	conflict := func(a, b *msection) bool {
		return a.g.o != b.g.o && (a.side == 0 || b.side == 0)
	}
	for i, a := range secs {
		if !a.certain || a.end.IsZero() || !a.end.After(a.start) {
			continue
		}
		for _, b := range secs[i+1:] {
			if !b.certain || b.end.IsZero() || !b.end.After(b.start) || !conflict(a, b) || a.excused || b.excused {
				continue
			}
			if b.start.Before(a.end) {
				s.violate("exclusion", "%s[%s] holding %s-%s (token %d) overlaps %s[%s] holding %s-%s (token %d)",
					a.g, sideName(a.side), fmtDur(a.start.Sub(s.t0)), fmtDur(a.end.Sub(s.t0)), a.token,
					b.g, sideName(b.side), fmtDur(b.start.Sub(s.t0)), fmtDur(b.end.Sub(s.t0)), b.token)
			} else if a.side == 0 && b.side == 0 && a.token >= b.token {
				s.violate("fence", "%s's token %d (held %s-%s) is not below the later %s's token %d (from %s)",
					a.g, a.token, fmtDur(a.start.Sub(s.t0)), fmtDur(a.end.Sub(s.t0)), b.g, b.token, fmtDur(b.start.Sub(s.t0)))
			}
		}
	}
}

// ---- PermitSemaphore ----

type mpermit struct {
	maybeGone bool // a Release of unknown outcome was sent for it
	id        string
	lease     time.Duration
	start     time.Time
	ret       time.Time
	lo, hi    time.Time // the lease ends in Redis between lo and hi
	sec       *msection
}

type permitSubject struct {
	permits int
	key     string
	// guarded by mseq.mu
	ambiguous int // acquires whose outcome is unknown: their permits may be live, unknown
}

func (ps *permitSubject) kind() string { return "PermitSemaphore" }

func (ps *permitSubject) options(*mseq, *mclient) []rlock.Option { return nil }

func (ps *permitSubject) handle(g *mgor) *rlock.PermitSemaphore { return g.h.(*rlock.PermitSemaphore) }

func (ps *permitSubject) setup(s *mseq) {
	for _, cl := range s.clients {
		n := 1 + s.rng.IntN(3)
		for i := 0; i < n; i++ {
			s.addOwner(cl, "handle", 1)
		}
	}
	ps.permits = 1 + s.rng.IntN(3)
	if len(s.gors) == 0 {
		return
	}
	p := ps.handle(s.gors[0])
	ps.key = p.Key()
	ok, err := p.TrySetPermits(context.Background(), ps.permits)
	s.logf("TrySetPermits(%d) -> %v %v", ps.permits, ok, err)
	if !ok || err != nil {
		s.violate("setup", "TrySetPermits(%d): %v %v", ps.permits, ok, err)
	}
}

func (ps *permitSubject) bind(s *mseq, g *mgor) { g.h = g.o.cl.c.PermitSemaphore(s.name) }

func (ps *permitSubject) destroy(s *mseq) []string { return []string{ps.key + ":leases"} }

func (ps *permitSubject) destroyQuiescent(s *mseq) {
	s.del("quiescent")
	s.mu.Lock()
	s.destroyedAny = true
	s.mu.Unlock()
}

func (ps *permitSubject) inflight(s *mseq, g *mgor, i int) (string, error) {
	ctx, cancel := context.WithTimeout(g.ctx, 2*time.Second)
	defer cancel()
	if i%2 == 1 {
		return "Release(unknown)", ps.handle(g).Release(ctx, "model-unknown-permit")
	}
	_, err := ps.handle(g).Acquire(ctx, time.Second)
	return "Acquire(lease=1s ctx=timeout(2s))", err
}

func (ps *permitSubject) excused(s *mseq, ms *mside) bool { return true }

func (ps *permitSubject) afterClose(s *mseq, cl *mclient) error {
	for _, g := range s.gors {
		if g.o.cl == cl {
			_, _, err := ps.handle(g).TryAcquire(context.Background(), 0, time.Second)
			return err
		}
	}
	return rlock.ErrClosed
}

func (ps *permitSubject) op(s *mseq, g *mgor) {
	d := draws(g.rng, 12)
	f := s.repliesLost(g, drawFault(g.rng, s.prof.op))
	switch p := d[1]; {
	case p < 0.45:
		ps.acquireOp(s, g, d, f)
	case p < 0.75:
		if len(g.permits) > 0 {
			i := len(g.permits) - 1
			if d[3] >= 0.6 {
				i = int(d[4] * float64(len(g.permits)))
			}
			ps.releaseOp(s, g, i, d[5] < 0.15, f)
		}
	case p < 0.85:
		if len(g.permits) > 0 {
			ps.extendOp(s, g, int(d[4]*float64(len(g.permits))), between(d[6], 30*time.Millisecond, 400*time.Millisecond), f)
		}
	default:
		time.Sleep(between(d[2], 5*time.Millisecond, 200*time.Millisecond))
	}
}

func (ps *permitSubject) acquireOp(s *mseq, g *mgor, d []float64, f *opFault) {
	blocking := d[3] < 0.3
	var wait time.Duration
	switch {
	case d[4] < 0.35:
	case d[4] < 0.7:
		wait = between(d[5], 10*time.Millisecond, 100*time.Millisecond)
	default:
		wait = between(d[5], 200*time.Millisecond, 800*time.Millisecond)
	}
	lease := between(d[7], 30*time.Millisecond, 400*time.Millisecond).Round(time.Millisecond)
	if d[6] < 0.03 {
		lease = between(d[7], time.Millisecond, 9*time.Millisecond).Round(time.Millisecond)
	}
	ctx, cancel, limit, cdesc := opCtx(g.ctx, f, d[8], d[9], blocking)
	defer cancel()
	if !blocking && (limit.IsZero() || time.Now().Add(wait).Before(limit)) {
		limit = time.Now().Add(wait)
	}
	p := ps.handle(g)
	start := time.Now()
	var permit rlock.Permit
	var ok bool
	var err error
	desc := fmt.Sprintf("TryAcquire(wait=%v lease=%v%s%s)", wait, lease, cdesc, f)
	if blocking {
		desc = fmt.Sprintf("Acquire(lease=%v%s%s)", lease, cdesc, f)
		permit, err = p.Acquire(ctx, lease)
		ok = err == nil
	} else {
		permit, ok, err = p.TryAcquire(ctx, wait, lease)
	}
	ret := time.Now()
	s.bound(g, desc, start, ret, limit, f)
	s.logf("%s %s -> %v %s %s (%s)", g, desc+f.hitNote(), ok, permit.ID, errString(err), fmtDur(ret.Sub(start)))
	switch {
	case ok && err == nil:
		mp := &mpermit{id: permit.ID, lease: lease, start: start, ret: ret, lo: start.Add(lease), hi: ret.Add(lease)}
		mp.sec = &msection{g: g, start: ret, certain: true}
		if !permit.Expires.After(start.Add(lease-drift(lease)-time.Millisecond)) || permit.Expires.After(ret.Add(lease)) {
			s.violate("permit-expires", "%s %s: Expires %s not within the lease", g, desc, fmtDur(permit.Expires.Sub(s.t0)))
		}
		s.mu.Lock()
		s.sections = append(s.sections, mp.sec)
		s.maxLease = max(s.maxLease, lease)
		s.mu.Unlock()
		g.permits = append(g.permits, mp)
	case err == nil:
	case errors.Is(err, rlock.ErrUnknownOutcome):
		s.mu.Lock()
		ps.ambiguous++
		s.maxLease = max(s.maxLease, lease)
		s.mu.Unlock()
		s.fault("unknown-outcome")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Granted in the background, its give-back may fail: the permit then lives its lease
		// (the GiveBack observer counts it), which the end's wait for the leases must cover.
		s.mu.Lock()
		s.maxLease = max(s.maxLease, lease)
		s.mu.Unlock()
	case errors.Is(err, rlock.ErrInvalid) && lease < 10*time.Millisecond:
	case refusedReplay(f, err):
		s.violate("refused-replay", "%s %s: an acquire whose reply was lost reports the error reply to its replay as its outcome: %v", g, desc, err)
		s.mu.Lock()
		ps.ambiguous++
		s.maxLease = max(s.maxLease, lease)
		s.mu.Unlock()
	case injected(err) && f.hit():
	default:
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
}

// permitEnd is the earliest the section of mp may end: its lease as Expires computes it.
func permitEnd(mp *mpermit) time.Time { return mp.lo.Add(-drift(mp.lease)) }

func (ps *permitSubject) releaseOp(s *mseq, g *mgor, i int, cancelled bool, f *opFault) {
	mp := g.permits[i]
	ctx := withFault(g.ctx, f)
	if cancelled {
		var c context.CancelFunc
		ctx, c = context.WithCancel(ctx)
		c()
	}
	start := time.Now()
	s.mu.Lock()
	if mp.sec.end.IsZero() {
		// The section ends when the caller gives the permit back, whatever the outcome.
		mp.sec.end = minTime(start, permitEnd(mp))
	}
	s.mu.Unlock()
	err := ps.handle(g).Release(ctx, mp.id)
	ret := time.Now()
	desc := fmt.Sprintf("Release(%s from %s, lease %v%s)", mp.id, fmtDur(mp.start.Sub(s.t0)), mp.lease, f)
	s.bound(g, desc, start, ret, start.Add(g.o.cl.cleanup), f)
	s.logf("%s %s -> %s (%s)", g, desc+f.hitNote(), errString(err), fmtDur(ret.Sub(start)))
	switch {
	case err == nil, errors.Is(err, rlock.ErrNotHeld):
		g.permits = append(g.permits[:i], g.permits[i+1:]...)
		s.mu.Lock()
		destroyed := s.destroyedAny
		s.mu.Unlock()
		// Redis ran the release by ret at the latest (a pause may have held it).
		if err != nil && !destroyed && !mp.maybeGone && ret.Before(permitEnd(mp).Add(-expirySlack)) {
			s.violate("unlock-notheld", "%s %s: a permit whose lease surely lasted was not held: %v", g, desc, err)
		}
		if err == nil && start.After(mp.hi.Add(expirySlack)) {
			s.violate("permit-overdue", "%s %s: released after its lease ended", g, desc)
		}
	case errors.Is(err, rlock.ErrUnknownOutcome):
		s.fault("unknown-outcome")
		mp.maybeGone = true // kept, to be released again: Redis may or may not still have it
	case refusedReplay(f, err):
		s.violate("refused-replay", "%s %s: a release whose reply was lost reports the error reply to its replay as its outcome: %v", g, desc, err)
		g.permits = append(g.permits[:i:i], g.permits[i+1:]...)
		s.mu.Lock()
		ps.ambiguous++ // it may still be live
		s.mu.Unlock()
	case injected(err) && f.hit():
	default:
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
}

func (ps *permitSubject) extendOp(s *mseq, g *mgor, i int, lease time.Duration, f *opFault) {
	mp := g.permits[i]
	start := time.Now()
	err := ps.handle(g).Extend(withFault(g.ctx, f), mp.id, lease)
	ret := time.Now()
	desc := fmt.Sprintf("Extend(%s, %v%s)", mp.id, lease, f)
	s.bound(g, desc, start, ret, start.Add(g.o.cl.cleanup), f)
	s.logf("%s %s -> %s (%s)", g, desc+f.hitNote(), errString(err), fmtDur(ret.Sub(start)))
	switch {
	case err == nil:
		if start.After(mp.hi.Add(expirySlack)) {
			s.violate("permit-overdue", "%s %s: an expired permit was extended", g, desc)
		}
		// The lease now ends lease after the Extend ran: the section goes on to its new end
		// if the old one had not passed.
		s.mu.Lock()
		if start.Before(permitEnd(mp)) {
			mp.lo, mp.hi, mp.lease = start.Add(lease), ret.Add(lease), lease
		} else {
			mp.sec.end = permitEnd(mp)
			mp.sec = &msection{g: g, start: ret, certain: true}
			s.sections = append(s.sections, mp.sec)
			mp.lo, mp.hi, mp.lease = start.Add(lease), ret.Add(lease), lease
		}
		s.maxLease = max(s.maxLease, lease)
		s.mu.Unlock()
	case errors.Is(err, rlock.ErrNotHeld):
		// "Not held" may be the answer of a replay to a lease that the first send set: that
		// send ran, its reply was lost, and when the Extend shortened the lease, the lease it
		// set (lease from the first send) may have ended before a replay reached Redis (seed
		// 4165149553999857099: Extend(99.8ms), then Extend(39.7ms fault=drop@0+refuse@1x3):
		// the first send set 39.7ms, the replay 77ms later found the permit purged, and Redis
		// had rightly granted its permit to another 40ms after the Extend began). So the
		// permit may have ended lease after the Extend began, if that is earlier than its end
		// before, and the section ends there: the caller asked for that end and is not told
		// of a later one. The check of a surely lasting permit uses that end too when a
		// reply was lost (otherwise the answer came from the only send Redis ran).
		s.mu.Lock()
		destroyed := s.destroyedAny
		surely := permitEnd(mp)
		if start.Add(lease).Before(mp.lo) {
			mp.lo, mp.lease = start.Add(lease), lease
			if f.applied(fDrop) || f.applied(fDelay) {
				surely = permitEnd(mp)
			}
		}
		s.mu.Unlock()
		if !destroyed && !mp.maybeGone && ret.Before(surely.Add(-expirySlack)) {
			s.violate("unlock-notheld", "%s %s: a permit whose lease surely lasted was not held: %v", g, desc, err)
		}
	case errors.Is(err, rlock.ErrUnknownOutcome):
		// The lease may or may not have been set again: it ends between the two.
		s.mu.Lock()
		mp.hi = maxTime(mp.hi, ret.Add(lease))
		if start.Add(lease).Before(mp.lo) {
			mp.lo = start.Add(lease)
		}
		s.mu.Unlock()
		s.fault("unknown-outcome")
	case refusedReplay(f, err):
		s.violate("refused-replay", "%s %s: an Extend whose reply was lost reports the error reply to its replay as its outcome: %v", g, desc, err)
		s.mu.Lock()
		mp.hi = maxTime(mp.hi, ret.Add(lease))
		if start.Add(lease).Before(mp.lo) {
			mp.lo = start.Add(lease)
		}
		s.mu.Unlock()
	case injected(err) && f.hit():
	default:
		s.violate("unexpected-error", "%s %s: %v", g, desc, err)
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// permitLiveScript: the live permits (lease end after the server's now) and the server's now.
const permitLiveScript = `
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {tostring(now)}
for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf')) do out[#out + 1] = id end
return out`

func (ps *permitSubject) live(s *mseq) map[string]bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vals, err := s.admin.Do(ctx, s.admin.B().Eval().Script(permitLiveScript).Numkeys(1).Key(ps.key+":leases").Build()).AsStrSlice()
	if err != nil {
		s.violate("admin", "live permits: %v", err)
		return nil
	}
	out := map[string]bool{}
	for _, id := range vals[1:] {
		out[id] = true
	}
	return out
}

func (ps *permitSubject) checkState(s *mseq) []violation {
	var vs []violation
	live := ps.live(s)
	now := time.Now()
	s.mu.Lock()
	destroyed, ambiguous := s.destroyedAny, ps.ambiguous
	s.mu.Unlock()
	known := map[string]bool{}
	for _, g := range s.gors {
		for _, mp := range g.permits {
			known[mp.id] = true
			switch {
			case live[mp.id] && now.After(mp.hi.Add(expirySlack)):
				vs = append(vs, violation{check: "permit-overdue", msg: fmt.Sprintf("%s's permit %s (lease %v to %s) is still live", g, mp.id, mp.lease, fmtDur(mp.hi.Sub(s.t0)))})
			case !live[mp.id] && !destroyed && !mp.maybeGone && now.Before(mp.lo.Add(-expirySlack)):
				vs = append(vs, violation{check: "permit-missing", msg: fmt.Sprintf("%s's permit %s (lease %v to %s) is gone from Redis", g, mp.id, mp.lease, fmtDur(mp.lo.Sub(s.t0)))})
			}
		}
	}
	unknown := 0
	for id := range live {
		if !known[id] {
			unknown++
		}
	}
	if unknown > ambiguous {
		vs = append(vs, violation{check: "permit-ghost", msg: fmt.Sprintf("%d live permits that no caller holds (%d acquires of unknown outcome): %v", unknown, ambiguous, live)})
	}
	if len(live) > ps.permits && !destroyed {
		vs = append(vs, violation{check: "exclusion", msg: fmt.Sprintf("%d live permits of %d", len(live), ps.permits)})
	}
	for _, cl := range s.clients {
		holds, handoffs := rlock.ModelTables(cl.c)
		if len(holds) > 0 || handoffs > 0 {
			vs = append(vs, violation{check: "table-leftover", msg: fmt.Sprintf("c%d: a permit semaphore left hold table entries %v, %d hand-off queues", cl.idx, holds, handoffs)})
		}
	}
	return vs
}

func (ps *permitSubject) quiescent(s *mseq, final bool) {
	start := time.Now()
	var vs []violation
	for {
		vs = ps.checkState(s)
		if len(vs) == 0 || time.Since(start) > settleMax {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, v := range vs {
		s.violate(v.check, "%s", v.msg)
	}
}

func (ps *permitSubject) drain(s *mseq, g *mgor) {
	for tries := 0; len(g.permits) > 0 && tries < 100; tries++ {
		ps.releaseOp(s, g, len(g.permits)-1, false, nil)
	}
}

func (ps *permitSubject) endKeys(s *mseq) {
	maxCleanup := time.Duration(0)
	for _, cl := range s.clients {
		maxCleanup = max(maxCleanup, cl.cleanup)
	}
	s.mu.Lock()
	maxLease, ambiguous := s.maxLease, ps.ambiguous
	s.mu.Unlock()
	start := time.Now()
	for {
		keys := s.keyTTLs(ps.key)
		leases, ok := keys[ps.key+":leases"]
		for k, ttl := range keys {
			switch k {
			case ps.key:
				if ttl >= 0 {
					s.violate("end-keys", "the permit count %s expires (%v)", k, ttl)
				}
			case ps.key + ":log", ps.key + ":logx":
				if ttl < 0 || ttl > 2*maxCleanup+50*time.Millisecond {
					s.violate("end-keys", "request log %s left for %v", k, ttl)
				}
			case ps.key + ":leases":
			default:
				s.violate("end-keys", "unexpected key %s left (pttl %v)", k, ttl)
			}
		}
		if !ok {
			return
		}
		// The key lives as long as the longest lease it was given; what must be gone are the
		// live permits (a released one leaves at once, an expired one stays until purged).
		if live := ps.live(s); ambiguous == 0 && len(live) > 0 && time.Since(start) > settleMax {
			s.violate("permit-ghost", "after every permit was released live permits are left: %v", live)
			ambiguous = 1
		}
		if leases < 0 || time.Since(start) > maxLease+settleMax {
			s.violate("end-keys", "after every permit was released and the longest lease passed, %s is left (%v)", ps.key+":leases", leases)
			return
		}
		time.Sleep(min(leases+10*time.Millisecond, 50*time.Millisecond))
	}
}

// finish: at no moment were more permits held (by the sections' conservative ends) than
// there are, unless the leases were deleted behind the holders' backs.
func (ps *permitSubject) finish(s *mseq) {
	s.mu.Lock()
	destroyed := s.destroyedAny
	secs := append([]*msection(nil), s.sections...)
	s.mu.Unlock()
	if destroyed {
		return
	}
	type ev struct {
		at time.Time
		d  int
	}
	var evs []ev
	for _, sec := range secs {
		if sec.end.IsZero() || !sec.end.After(sec.start) {
			continue
		}
		evs = append(evs, ev{sec.start, 1}, ev{sec.end, -1})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at.Equal(evs[j].at) {
			return evs[i].d < evs[j].d
		}
		return evs[i].at.Before(evs[j].at)
	})
	n := 0
	for _, e := range evs {
		n += e.d
		if n > ps.permits {
			s.violate("exclusion", "%d permits held at %s, of %d", n, fmtDur(e.at.Sub(s.t0)), ps.permits)
			return
		}
	}
}

// ---- regressions found by the model test ----

// TestModelRegression_refusedReleaseEndsParkedWaiter: found by the model test (Mutex, seed
// 8470908088395394514: "Lock ... passed on by a release whose outcome is unknown: ... LOADING").
// A final Unlock whose release script Redis refuses with an error reply (LOADING, BUSY, an
// ERR: the script wrote nothing) while a waiter of the same Client is parked as a hand-off
// candidate passed nothing on: the waiter must go on waiting, and get the lock from the next
// Unlock. release (mutex.go) judges sendRelease's error with definitive(), but sendRelease has
// wrapped it (classify) and rueidis.IsRedisErr does not unwrap: the refusal is taken for an
// unknown outcome, handed to the candidate, and the waiter's Lock fails with it.
//
// A BUSY (transient: Redis ran nothing) is since sent again within the cleanup timeout
// (execServed): here every send is refused, so the Unlock fails when that timeout ends.
func TestModelRegression_refusedReleaseEndsParkedWaiter(t *testing.T) {
	t.Parallel() // its own server, Client and names; load only lengthens its waits
	b := realBackend(t)
	mf := newModelFaults(b.rueidis(t), nil)
	c, err := rlock.New(mf.hc, rlock.WithCleanupTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := redistest.Name(t)
	holder, waiter := c.Mutex(name), c.Mutex(name)
	if err := holder.Lock(bg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	for _, kind := range []faultKind{fBusy, fRedisErr} {
		redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(c, holder) == 1 })
		err := holder.Unlock(withFault(bg, newFault(kind, 0, 1000)))
		if !injected(err) {
			t.Fatalf("Unlock with a refused release script: %v, want the injected error", err)
		}
		select {
		case err := <-got:
			t.Fatalf("after a release that Redis refused (%s: nothing was passed on) the waiter's Lock returned %v; it must go on waiting", faultNames[kind], err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err := holder.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if err := await(t, got, 5*time.Second, "the waiter to get the lock"); err != nil {
		t.Fatalf("the waiter's Lock: %v", err)
	}
	if err := waiter.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}

// TestModelRegression_refusedReplayTakenAsOutcome: found by the model test (Mutex, seed
// 17386329436699427583: "TryLock(... fault=drop@0+rediserr@1x3) -> injected error", then at
// the next quiescent point "Client 7 holds, Redis 8"). When a script's reply is lost, relock
// replays it under the same request id "until Redis answers" (Client.replay, mutex.go); but an
// error reply to the replay (BUSY, LOADING, OOM, READONLY, any ERR: the replay wrote nothing)
// says nothing of the first send, which may have been applied. replay returns it as the
// outcome, and the caller reports a Redis error (which, for relock, means "nothing written":
// definitive) while Redis changed: a re-entry or a fresh grant the Client does not count (the
// lock then stays held after the owner's last Unlock, until its lease runs out), or a release
// the Client does not record (an Unlock retried after the error gives back a second hold).
func TestModelRegression_refusedReplayTakenAsOutcome(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no time bound
	lostThenRefused := func() context.Context {
		return withFault(bg, &opFault{stages: []faultStage{{kind: fDrop, n: 1}, {kind: fRedisErr, from: 1, n: 1}}})
	}
	setup := func(t *testing.T) (*rlock.Client, *rlock.Mutex) {
		b := realBackend(t)
		c, err := rlock.New(newModelFaults(b.rueidis(t), nil).hc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		m := c.Mutex(redistest.Name(t))
		// Load the scripts: a fault must meet the script itself, not a NOSCRIPT reply.
		if err := m.Lock(bg); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(bg); err != nil {
			t.Fatal(err)
		}
		return c, m
	}
	// agree fails t unless the Client's count of m's holds is Redis's, or err says that the
	// outcome is unknown.
	agree := func(t *testing.T, m *rlock.Mutex, what string, err error) {
		t.Helper()
		n, herr := m.HoldCount(bg)
		if herr != nil {
			t.Fatal(herr)
		}
		if local := rlock.ModelMutexHold(m, bg).Count; local != n && !errors.Is(err, rlock.ErrUnknownOutcome) {
			t.Fatalf("%s returned %v, yet Redis counts %d holds of the owner and the Client %d", what, err, n, local)
		}
	}
	t.Run("reentry", func(t *testing.T) {
		_, m := setup(t)
		if err := m.Lock(bg); err != nil {
			t.Fatal(err)
		}
		_, err := m.TryLock(lostThenRefused(), 0, 0)
		agree(t, m, "a re-entry whose reply was lost and whose replay Redis refused", err)
	})
	t.Run("fresh", func(t *testing.T) {
		_, m := setup(t)
		_, err := m.TryLock(lostThenRefused(), 0, 0)
		agree(t, m, "an acquire whose reply was lost and whose replay Redis refused", err)
	})
	t.Run("unlock", func(t *testing.T) {
		_, m := setup(t)
		for i := 0; i < 2; i++ {
			if err := m.Lock(bg); err != nil {
				t.Fatal(err)
			}
		}
		err := m.Unlock(lostThenRefused())
		agree(t, m, "an Unlock whose reply was lost and whose replay Redis refused", err)
	})
}

// TestModelRegression_failedGiveBackOfReentryReportsLoss: found by the model test (Mutex, seed
// 1623644580262538866: a shared handle's "TryLock(... ctx=timeout(115ms) fault=delay@0(138ms)+
// refuse@2x3) -> context deadline exceeded", then the other goroutine's holds "lock lost: ...
// dial tcp: connection refused"). An owner holds the lock; a re-entry's reply comes after its
// ctx ended; the re-entry is resolved in the background as granted and given back, and that
// give-back fails (here a refused dial: nothing was even sent). hold.abandon (hold.go) then
// ends the owner's whole tenure as lost: Done closes and HoldContext is cancelled with
// ErrLockLost, though Redis still holds the lock for the owner and nobody else can have it.
// A loss notice must mean the lock was lost (DESIGN.md: no spurious loss); the Client knows
// the orphan it could not give back (this owner id is its own) and can give it back with the
// owner's last Unlock, or retry, instead of declaring the owner's holds lost.
func TestModelRegression_failedGiveBackOfReentryReportsLoss(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a lease, ~1 s (run without -short)")
	}
	b := realBackend(t)
	c, err := rlock.New(newModelFaults(b.rueidis(t), nil).hc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	if err := m.Lock(bg); err != nil { // loads the scripts too
		t.Fatal(err)
	}
	if err := m.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(bg); err != nil {
		t.Fatal(err)
	}
	hctx, cancelHold := m.HoldContext(bg)
	defer cancelHold()
	// The re-entry is applied, its reply comes too late for its ctx; the background resolves
	// it (call 1) and gives it back (call 2, refused, and so are the next ones).
	f := &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: 150 * time.Millisecond}, {kind: fRefuse, from: 2, n: 5}}}
	ctx, cancel := context.WithTimeout(withFault(bg, f), 50*time.Millisecond)
	defer cancel()
	if ok, err := m.TryLock(ctx, 0, 0); ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the re-entry whose reply came after its ctx: %v %v, want ctx's error", ok, err)
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && context.Cause(hctx) == nil {
		time.Sleep(10 * time.Millisecond)
	}
	n, err := m.HoldCount(bg)
	if err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(hctx); cause != nil {
		t.Fatalf("the owner's hold was reported lost (%v, Err %v) while Redis still counts %d holds of it and nobody else holds the lock (fault hits: %d)", cause, m.Err(bg), n, f.hits.Load())
	}
}

// TestModelRegression_lateReentryReplyLeavesGhost: found by the model test (Mutex, seed
// 13559858838513659464: a context owner's "TryLock(wait=11ms lease=0s fault=delay@0(59ms)) ->
// true" sent just before its fixed lease of 55ms ran out; then "model 3 holds, Client 2,
// Redis 3"). A re-entry sent while the owner's fixed lease still runs joins it in Redis
// (count 2, and the re-entry's longer lease); its reply comes back after the fixed lease has
// ended on the Client's clock, and after the moment by which the Client reckons that Redis
// has dropped the expired holds (hold.gone). The Client then records a fresh tenure of 1 and
// judges the extra hold Redis reports: for an owner id of another's making it gives back only
// the holds it noted as stale and whose end has not passed by now (Client.orphans, hold.go:
// time.Now().Before(r.until)) - but what matters is whether the request was sent before
// that end, and it was. The extra hold stays: Redis counts 2 where the Client counts 1, and
// after the owner's Unlock the lock stays held, by nobody, for a whole watchdog lease.
//
// Since e9006b2 such a re-entry is refused (ErrLeaseExpired) and given back. The give-back
// took back only the re-entry's own hold, leaving the hold of the ended tenure, which the
// re-entry's watchdog lease had extended in Redis: Redis counted 1 where the Client counted
// none until the owner's next Unlock (a context owner's gives back what Redis counts of this
// Client's) or, for a handle, until the watchdog lease ran out (found by the model test,
// Mutex, seed 18129566869102455923, "redis-ghost: ... Client 0 ..., Redis 1"). The refusal
// gives back every hold Redis counts of this Client's now, and this test looks well before
// the re-entry's watchdog lease could end it.
func TestModelRegression_lateReentryReplyLeavesGhost(t *testing.T) {
	t.Parallel() // its own servers; it waits out leases
	b := realBackend(t)
	const watchdogTTL = 10 * time.Second
	c, err := rlock.New(newModelFaults(b.rueidis(t), nil).hc, rlock.WithWatchdogTimeout(watchdogTTL))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"context owner", rlock.WithOwner(bg, "owner-of-another-process")},
		{"handle", bg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, m := tc.ctx, c.Mutex(redistest.Name(t))
			if err := m.Lock(ctx); err != nil { // loads the scripts
				t.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// A fixed lease of 500ms: the re-entry below must be sent within it on a loaded
			// machine (50ms, as first written, left a stall no room: the re-entry then went
			// after the lease's end and was granted afresh).
			tryInTime(t, func() (bool, error) { return m.TryLock(ctx, 0, 500*time.Millisecond) })
			// A re-entry in watchdog mode, sent at once (Redis joins it to the fixed lease
			// and extends the key to the watchdog's lease), whose reply comes 1s later,
			// after the fixed lease ran out on the Client's clock.
			start := time.Now()
			late := withFault(ctx, &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: time.Second}}})
			if ok, err := m.TryLock(late, 0, 0); ok || !errors.Is(err, rlock.ErrLeaseExpired) {
				t.Fatalf("the re-entry: %v %v, want ErrLeaseExpired", ok, err)
			}
			// The caller holds nothing now: Redis must count nothing of the owner's long
			// before the re-entry's watchdog lease would end it there.
			var n, local int
			deadline := start.Add(watchdogTTL / 3)
			for {
				var err error
				if n, err = m.HoldCount(ctx); err != nil {
					t.Fatal(err)
				}
				if local = rlock.ModelMutexHold(m, ctx).Count; local == n && n == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond) // the refused grant's give-back runs in the background
			}
			if local != 0 || n != 0 {
				ttl, _ := m.TTL(bg)
				t.Fatalf("%v after a re-entry sent within the fixed lease and answered after it: the Client counts %d holds of the owner, Redis %d (TTL %v)", time.Since(start).Round(time.Millisecond), local, n, ttl)
			}
			if err := m.Unlock(ctx); !errors.Is(err, rlock.ErrLeaseExpired) {
				t.Fatalf("the Unlock of the hold whose fixed lease ran out: %v, want ErrLeaseExpired", err)
			}
			if locked, err := m.IsLocked(bg); err != nil || locked {
				ttl, _ := m.TTL(bg)
				t.Fatalf("after the owner's last Unlock the lock is still held (IsLocked %v, %v; TTL %v)", locked, err, ttl)
			}
		})
	}
}

// TestModelRegression_reentryGrantedAfterLossWipesHolds: found by the model test (FairMutex,
// seed 4540780878549857243: a shared handle holding 6 holds in watchdog mode while "renewals
// refused" and Redis paused; "TryLock(... lease=161ms) -> true" answered after the watchdog
// had reported the tenure lost; then "model 6 holds, Client 0 ...: Err says rlock: lock lost").
// attempt (mutex.go) checks h.lost before it sends, but the watchdog ends a tenure as lost
// without h.op: a re-entry sent before the loss and answered after it found Redis still
// counting the owner's holds (holds > 1), and hold.granted started a fresh tenure over the
// lost holds with the re-entry's fixed lease. The owner re-entered a lock it had been told
// was lost (Guarantee 3), and when that fixed lease ran out (hold.onLost) the count of every
// hold went to 0: the hold left the table while the owner still had holds to unlock, and
// Err, reading the handle's spare hold, still reported the loss.
func TestModelRegression_reentryGrantedAfterLossWipesHolds(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	b := realBackend(t)
	mf := newModelFaults(b.rueidis(t), nil)
	c, err := rlock.New(mf.hc, rlock.WithWatchdogTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	if err := m.Lock(bg); err != nil { // loads the scripts
		t.Fatal(err)
	}
	if err := m.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	if err := m.Lock(bg); err != nil {
		t.Fatal(err)
	}
	mf.refuseRenewals.Store(true) // the watchdog lease is lost ~300ms from now
	// A re-entry with a fixed lease, applied at once (Redis extends the key's TTL: the
	// owner's hold stays there), whose reply comes after the watchdog reported the loss:
	// 1.5 s, about 1.2 s after it, so that a stall of the process across both moments does
	// not deliver the reply first (a 500ms delay, 200ms after the loss, did under a stall
	// injector), and within the re-entry's fixed lease (3 s).
	late := withFault(bg, &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: 1500 * time.Millisecond}}})
	ok, err := m.TryLock(late, 0, 3*time.Second)
	mf.refuseRenewals.Store(false)
	if ok || !errors.Is(err, rlock.ErrLockLost) {
		t.Errorf("a re-entry answered after the owner's hold was reported lost: %v %v, want ErrLockLost", ok, err)
	}
	time.Sleep(2200 * time.Millisecond) // past the re-entry's fixed lease
	if mh := rlock.ModelMutexHold(m, bg); !mh.Present || mh.Count != 1 || mh.Lost == nil {
		t.Errorf("the owner has not unlocked its lost hold, yet the Client's hold table has %+v, want 1 hold, lost", mh)
	}
	if err := m.Err(bg); !errors.Is(err, rlock.ErrLockLost) {
		t.Errorf("Err: %v, want ErrLockLost until the lost hold is unlocked", err)
	}
	if err := m.Lock(bg); !errors.Is(err, rlock.ErrLockLost) {
		t.Errorf("Lock before the lost hold was unlocked: %v, want ErrLockLost", err)
	}
	if err := m.Unlock(bg); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock of the lost hold: %v, want ErrNotHeld", err)
	}
	if err := m.Lock(bg); err != nil {
		t.Fatalf("Lock after every hold was unlocked: %v", err)
	}
	if err := m.Unlock(bg); err != nil {
		t.Fatal(err)
	}
}

// TestModelRegression_notHeldExtendEndedByItsOwnLease: the model test (PermitSemaphore, seed
// 4165149553999857099: "exclusion: 3 permits held ..., of 2") was wrong, not the library, and
// this pins the behaviour it now assumes. An Extend that shortens a permit's lease, whose
// first send Redis ran and whose reply was lost, is replayed; when the lease that first send
// set has ended by the time a replay reaches Redis (here refused dials hold the replays back
// 75ms, past a 20ms lease), the replay finds no live permit and Extend reports ErrNotHeld.
// That is Redis's state: the permit ended lease after the Extend began, and its permit may be
// granted to another at once, long before the lease in force before the Extend ended. The
// model kept the permit held to that earlier end. A MONITOR of the failing run showed the
// first send's ZADD of the 39ms lease end, the acquire of another owner purging the permit
// and taking its place 40ms later, never more than 2 live permits, and the replay finding none.
func TestModelRegression_notHeldExtendEndedByItsOwnLease(t *testing.T) {
	b := realBackend(t)
	c, err := rlock.New(newModelFaults(b.rueidis(t), nil).hc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := c.PermitSemaphore(redistest.Name(t))
	if ok, err := p.TrySetPermits(bg, 2); !ok || err != nil {
		t.Fatalf("TrySetPermits: %v %v", ok, err)
	}
	a, err := p.Acquire(bg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	other, err := p.Acquire(bg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Loads the script: the fault must meet the script itself, not a NOSCRIPT reply.
	if err := p.Extend(bg, a.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	f := &opFault{stages: []faultStage{{kind: fDrop, n: 1}, {kind: fRefuse, from: 1, n: 3}}}
	err = p.Extend(withFault(bg, f), a.ID, 20*time.Millisecond)
	if f.hits.Load() != 4 {
		t.Fatalf("the faults met %d sends, want 4 (the first send's reply lost, 3 refused replays)", f.hits.Load())
	}
	if !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Extend whose first send set a 20ms lease and whose replay came 75ms later: %v, want ErrNotHeld", err)
	}
	// Redis's own state: the first send shortened the lease and it ended (without it the
	// permit would be live for 10s more), and a third Acquire gets its permit now.
	if ttl, err := p.TTL(bg, a.ID); !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("TTL of the permit after the Extend reported it not held: %v %v, want ErrNotHeld", ttl, err)
	}
	third, ok, err := p.TryAcquire(bg, 0, 10*time.Second)
	if !ok || err != nil {
		t.Fatalf("TryAcquire after the shortened permit ended: %v %v, want its permit", ok, err)
	}
	if n, err := p.AcquiredPermits(bg); n != 2 || err != nil {
		t.Fatalf("AcquiredPermits: %d %v, want 2 (never more than there are)", n, err)
	}
	for _, id := range []string{third.ID, other.ID} {
		if err := p.Release(bg, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelRegression_unlockBehindOwnersDelayedCall: the model test (RWMutex, seed
// 16168448657392341871) reported "unlock-notheld" for an Unlock called well within a fixed
// lease that waited, as Unlock's godoc says, for another goroutine of the owner whose call on
// the lock (a re-entry, its reply delayed by a fault) held the lock's operations until the
// lease had ended: its ErrNotHeld is Redis's state, not a hold wrongly denied. The model
// judges a release by when its first send went out (releaseMetLease), not when it was called.
//
// Serial: its set-up must fit well within a 300 ms lease, or it skips.
func TestModelRegression_unlockBehindOwnersDelayedCall(t *testing.T) {
	b := realBackend(t)
	c, err := rlock.New(newModelFaults(b.rueidis(t), nil).hc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, m := rlock.WithOwner(bg, "model-owner"), c.Mutex(redistest.Name(t))
	if err := m.Lock(ctx); err != nil { // loads the scripts
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	const lease = 300 * time.Millisecond
	start := time.Now()
	if ok, err := m.TryLock(ctx, 0, lease); !ok || err != nil {
		t.Fatalf("TryLock: %v %v", ok, err)
	}
	e := &mentry{fixed: true, lease: lease, start: start, end: start.Add(lease - drift(lease))}
	// The owner's other goroutine: a re-entry whose reply a fault holds back past the
	// lease's end (its context ends first: the call's outcome is unknown to it).
	slow := &opFault{stages: []faultStage{{kind: fDelay, n: 1, delay: 2 * lease}}}
	rctx, cancel := context.WithTimeout(withFault(ctx, slow), lease+50*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.TryLock(rctx, 0, 0) //nolint:errcheck // its outcome is not what is tested
	}()
	for slow.hits.Load() == 0 {
		select {
		case <-done:
			t.Fatal("the re-entry returned before its send met the delay")
		case <-time.After(time.Millisecond):
		}
	}
	f := &opFault{}
	called := time.Now()
	if !e.end.After(called.Add(expirySlack)) {
		t.Skipf("the set-up took %v of the %v lease: the Unlock is not called well within it", called.Sub(start), lease)
	}
	err = m.Unlock(withFault(ctx, f))
	ret := time.Now()
	<-done
	if !errors.Is(err, rlock.ErrNotHeld) {
		t.Fatalf("Unlock called %v into a %v lease, behind the owner's re-entry held %v: %v, want ErrNotHeld (the lease ran out while it waited)", called.Sub(start).Round(time.Millisecond), lease, 2*lease, err)
	}
	if first := f.firstSend(); first.IsZero() || first.Before(e.end) {
		t.Fatalf("the Unlock's first send at %v, want after the lease's end at %v (it waits for the re-entry)", first.Sub(start), e.end.Sub(start))
	}
	if releaseMetLease(e, f, ret) {
		t.Fatalf("the model judges the Unlock's ErrNotHeld a hold wrongly denied: called %v into the %v lease, first send %v", called.Sub(start).Round(time.Millisecond), lease, f.firstSend().Sub(start).Round(time.Millisecond))
	}
}

// TestModelRegression_reentryOfATenureBegunDuringTheWait: the model test reported
// "unexpected-error" for a Lock refused with ErrLeaseExpired after it became a re-entry of a
// tenure its owner's other goroutine began while the Lock waited, with a fixed lease that ended
// before the Lock's grant, delayed, came back. FairMutex seed 590653666996461307: the model
// counted only the holds taken before the Lock began; RWMutex seed 18044337897075111194 (CI at
// 928b729): then only those held at its start or at its return, and the other goroutine's
// TryLock (76ms lease) was in flight at the start and unlocked before the return.
func TestModelRegression_reentryOfATenureBegunDuringTheWait(t *testing.T) {
	start := time.Now()
	for _, tc := range []struct {
		name           string
		lease          time.Duration
		taken, lockRet time.Duration // the other goroutine's TryLock call, the Lock's refusal (from start)
		want           bool
	}{
		{"taken during the wait, held at the return", 90 * time.Millisecond, 150 * time.Millisecond, 293 * time.Millisecond, true},
		{"taken as the wait began, given back before the return", 76 * time.Millisecond, -700 * time.Microsecond, 83 * time.Millisecond, true},
		{"a lease that outlasts the return", time.Second, 150 * time.Millisecond, 293 * time.Millisecond, false},
		{"a lease over before the Lock began", 30 * time.Millisecond, -200 * time.Millisecond, 83 * time.Millisecond, false},
	} {
		o := &mowner{}
		taken := start.Add(tc.taken)
		o.tookFixed(&mentry{fixed: true, lease: tc.lease, start: taken, ret: taken.Add(2 * time.Millisecond), end: taken.Add(tc.lease - drift(tc.lease))})
		ret := start.Add(tc.lockRet)
		if got := fixedEndedDuring(o.fixedOverlapping(0, start, ret), ret); got != tc.want {
			t.Errorf("%s: the owner's fixed hold (lease %v, taken %v into the Lock) explains the Lock's ErrLeaseExpired at %v: %v, want %v", tc.name, tc.lease, tc.taken, tc.lockRet, got, tc.want)
		}
	}
}
