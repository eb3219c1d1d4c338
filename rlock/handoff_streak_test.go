package rlock_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// handoffStreak is rlock's maxHandoffStreak (docs/DESIGN.md section 7, "Direct hand-off": at
// most 8 hand-offs in a row per lock and Client). Written out, not exported from rlock, so
// that a change of the bound fails the test that pins it.
const handoffStreak = 8

// A Client whose goroutines keep passing a lock to one another passes it on directly at most
// handoffStreak times in a row: the next release frees the lock and publishes on its release
// channel, so that a waiter of another Client is woken and gets its turn.
//
// The order of the grants is the server's: every grant (a hand-off, a script's or a fast
// grant's) takes the next fencing token, and the Observer's AcquireDone tells the token and
// whether the grant was a hand-off. A run is a fresh grant and the hand-offs that follow it,
// in token order; each run that had a hand-off and was followed by another grant ended with a
// release that freed the marked lock, which publishes (release.lua): a raw subscriber counts
// those messages.
func TestMutex_handoffStreakIsBounded(t *testing.T) {
	t.Parallel() // its own server, Clients and name
	const (
		workers = 4                    // owners of Client A: a holder and parked candidates
		hold    = 5 * time.Millisecond // each tenure of A's
		enough  = 3                    // runs that reached the bound before B is awaited
		broken  = 4 * handoffStreak    // hand-offs in a row (arrival order) that end the wait early
	)
	b := realBackend(t)
	name := redistest.Name(t)

	type grant struct {
		token     int64
		handedOff bool
	}
	var (
		mu       sync.Mutex
		grants   []grant
		run      int // hand-offs in a row, in the order AcquireDone reports them
		fullRuns int
		tooLong  bool                  // run went past broken
		stopWait = make(chan struct{}) // enough runs reached the bound, or far more than it
		closed   bool
	)
	obs := &rlock.Observer{AcquireDone: func(_ context.Context, e rlock.AcquireDoneInfo) {
		if e.Name != name || e.Outcome != rlock.OutcomeAcquired || e.Reentered {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		grants = append(grants, grant{e.Token, e.HandedOff})
		if !e.HandedOff {
			run = 0
			return
		}
		run++
		if run == handoffStreak {
			fullRuns++
		}
		tooLong = tooLong || run > broken
		if !closed && (fullRuns >= enough || tooLong) {
			closed = true
			close(stopWait)
		}
	}}
	a := b.client(t, rlock.WithObserver(obs))
	channel := a.Mutex(name).Key() + ":released"

	// A raw subscriber to the lock's release channel, listening before anyone waits.
	var published atomic.Int64
	rc := b.srv.Client(t, func(o *rueidis.ClientOption) { o.DisableCache = true })
	subCtx, subCancel := context.WithCancel(bg)
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		_ = rc.Receive(subCtx, rc.B().Subscribe().Channel(channel).Build(), func(rueidis.PubSubMessage) { published.Add(1) })
	}()
	t.Cleanup(func() { subCancel(); <-subDone })
	subscribed(t, b, channel, 1)

	// Client A: distinct owners (handles) taking turns, each holding a few milliseconds. Their
	// Lock calls end only when the test fails early (lockCtx): otherwise every grant reaches
	// a caller and is reported, so the token order has no holes.
	var stop atomic.Bool
	lockCtx, lockCancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := a.Mutex(name)
			for !stop.Load() {
				if err := m.Lock(lockCtx); err != nil {
					if lockCtx.Err() == nil {
						errs <- err
					}
					return
				}
				time.Sleep(hold)
				if err := m.Unlock(bg); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	stopA := func() {
		stop.Store(true)
		wg.Wait()
	}
	t.Cleanup(func() { lockCancel(); stopA() }) // a test that failed early: B may hold the lock
	redistest.WaitFor(t, 10*time.Second, "A's goroutines to pass the lock on", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(grants, func(g grant) bool { return g.handedOff })
	})

	// Client B: one waiter, which gives the lock back as soon as it has it. Its refused
	// attempts mark the lock, so a release that frees it publishes.
	other := b.client(t).Mutex(name)
	bGot := make(chan error, 1)
	var bTook atomic.Int64
	go func() {
		start := time.Now()
		ok, err := other.TryLock(bg, 10*time.Second, 0)
		bTook.Store(int64(time.Since(start)))
		switch {
		case err == nil && ok:
			err = other.Unlock(bg)
		case err == nil:
			err = fmt.Errorf("no turn within the 10s wait")
		}
		bGot <- err
	}()

	within(t, 15*time.Second, fmt.Sprintf("%d hand-off streaks to reach %d (or to run past %d)", enough, handoffStreak, broken), stopWait)
	mu.Lock()
	longRun := tooLong
	mu.Unlock()
	var bErr error
	if !longRun {
		bErr = await(t, bGot, 15*time.Second, "B's turn")
	}
	stopA()
	if longRun { // B's wait goes on until A let go: it ends now, one way or the other
		bErr = await(t, bGot, 15*time.Second, "B's TryLock to return")
		if bErr == nil {
			bErr = fmt.Errorf("B got no turn while A passed the lock on %d times in a row", broken+1)
		}
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// The runs, in the server's order of grants.
	mu.Lock()
	gs := slices.Clone(grants)
	mu.Unlock()
	slices.SortFunc(gs, func(x, y grant) int { return cmp.Compare(x.token, y.token) })
	var runs []int // hand-offs after each fresh grant of A's
	for i, g := range gs {
		require.Positive(t, g.token, "grant %d", i)
		if i > 0 {
			require.Greater(t, g.token, gs[i-1].token, "tokens are distinct")
		}
		switch {
		case !g.handedOff:
			runs = append(runs, 0)
		case len(runs) == 0:
			t.Fatalf("the first grant reported was a hand-off: tokens %v", gs[:i+1])
		default:
			runs[len(runs)-1]++
		}
	}
	longest, atBound, ended := 0, 0, int64(0)
	for i, n := range runs {
		longest = max(longest, n)
		if n >= handoffStreak {
			atBound++
		}
		if n > 0 && i < len(runs)-1 {
			ended++ // freed by a release of a marked lock: published
		}
	}
	t.Logf("%d grants of A in %d runs, longest %d hand-offs in a row, %d at the bound; B's TryLock returned after %v; %d publishes seen",
		len(gs), len(runs), longest, atBound, time.Duration(bTook.Load()), published.Load())
	assert.LessOrEqual(t, longest, handoffStreak, "hand-offs in a row (runs: %v)", runs)
	assert.NoError(t, bErr, "B's waiter got its turn")
	assert.GreaterOrEqual(t, atBound, 1, "a run reached the bound: the test exercised it (runs: %v)", runs)
	// Each release that ended a run with hand-offs published; its message may still be on
	// its way to the subscriber.
	redistest.WaitFor(t, 5*time.Second, fmt.Sprintf("%d publishes (one per run ended)", ended), func() bool {
		return published.Load() >= ended
	})
}

// Two owners of one Client that take turns, each parking only once the other holds the lock,
// pass it on at most handoffStreak times in a row, as more owners do. Each hand-off leaves
// the lock's candidate queue empty for a moment (the candidate it granted leaves it, and the
// other owner has not parked yet): the streak must outlive that.
func TestMutex_handoffStreakOutlivesEmptyQueue(t *testing.T) {
	t.Parallel() // its own server, Client and name
	b := realBackend(t)
	name := redistest.Name(t)
	var mu sync.Mutex
	var passed []bool // for each release that gave back a last hold, in order: passed on
	a := b.client(t, rlock.WithObserver(&rlock.Observer{ReleaseDone: func(_ context.Context, e rlock.ReleaseDoneInfo) {
		if e.Name == name && e.Err == nil && e.Freed {
			mu.Lock()
			passed = append(passed, e.HandedOff)
			mu.Unlock()
		}
	}}))
	holder, waiter := a.Mutex(name), a.Mutex(name)
	require.NoError(t, holder.Lock(bg))
	for i := 0; i < 2*handoffStreak+2; i++ {
		got := make(chan error, 1)
		go func() { got <- waiter.Lock(bg) }()
		redistest.WaitFor(t, 5*time.Second, "the waiter to park", func() bool { return rlock.ParkedCandidates(a, holder) == 1 })
		require.NoError(t, holder.Unlock(bg))
		require.NoError(t, await(t, got, 10*time.Second, "the waiter to hold the lock"))
		holder, waiter = waiter, holder
	}
	require.NoError(t, holder.Unlock(bg))
	mu.Lock()
	defer mu.Unlock()
	run, longest := 0, 0
	for _, p := range passed {
		if run = run + 1; !p {
			run = 0
		}
		longest = max(longest, run)
	}
	require.LessOrEqual(t, longest, handoffStreak, "releases that passed the lock on in a row: %v", passed)
}
