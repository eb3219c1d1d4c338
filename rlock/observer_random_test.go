package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// invariants is an Observer that checks, as events come, what every Observer may rely on:
// every Start has exactly one Done (the Start's context reaches it), acquisitions in flight
// never go below zero, tenures begun (AcquireDone acquired, not re-entered) and ended
// (HoldEnd) balance per lock and owner with the same tokens, and nothing is told after
// Close returned.
type invariants struct {
	mu       sync.Mutex
	problems []string
	open     map[*int]string // Starts without their Done yet
	inflight int             // acquisitions in flight
	begun    map[string]int  // kind|name|owner -> tenures begun
	ended    map[string]int  // ... -> tenures ended
	tokens   map[int64]int   // tokens begun minus tokens ended
	causes   map[rlock.EndCause]int
	events   int
	replays  int
	gaveBack int
	closed   bool
}

type startKey struct{}

func newInvariants() *invariants {
	return &invariants{open: map[*int]string{}, begun: map[string]int{}, ended: map[string]int{},
		tokens: map[int64]int{}, causes: map[rlock.EndCause]int{}}
}

func (v *invariants) problem(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// event counts an event and checks that the Client was not closed. v.mu must be held.
func (v *invariants) event(what string) {
	v.events++
	if v.closed {
		v.problem("%s after Close returned", what)
	}
}

func (v *invariants) start(ctx context.Context, what string) context.Context {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.event(what)
	id := new(int)
	v.open[id] = what
	return context.WithValue(ctx, startKey{}, id)
}

func (v *invariants) done(ctx context.Context, what string) {
	v.event(what)
	id, _ := ctx.Value(startKey{}).(*int)
	if _, ok := v.open[id]; !ok {
		v.problem("%s without its Start, or twice", what)
		return
	}
	delete(v.open, id)
}

func (v *invariants) observer() *rlock.Observer {
	return &rlock.Observer{
		AcquireStart: func(ctx context.Context, e rlock.AcquireStartInfo) context.Context {
			ctx = v.start(ctx, "AcquireStart")
			v.mu.Lock()
			v.inflight++
			v.mu.Unlock()
			return ctx
		},
		AcquireDone: func(ctx context.Context, e rlock.AcquireDoneInfo) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.done(ctx, "AcquireDone")
			if v.inflight--; v.inflight < 0 {
				v.problem("acquisitions in flight went below zero")
			}
			if e.Outcome == rlock.OutcomeAcquired && !e.Reentered && e.Owner != "" {
				v.begun[string(e.Kind)+"|"+e.Name+"|"+e.Owner]++
				if e.Token > 0 {
					v.tokens[e.Token]++
				}
			}
			if e.Outcome != rlock.OutcomeAcquired && e.Token != 0 {
				v.problem("a token on an acquisition that failed: %+v", e)
			}
		},
		ReleaseStart: func(ctx context.Context, e rlock.ReleaseStartInfo) context.Context {
			return v.start(ctx, "ReleaseStart")
		},
		ReleaseDone: func(ctx context.Context, e rlock.ReleaseDoneInfo) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.done(ctx, "ReleaseDone")
		},
		HoldEnd: func(e rlock.HoldEndInfo) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.event("HoldEnd")
			v.ended[string(e.Kind)+"|"+e.Name+"|"+e.Owner]++
			v.causes[e.Cause]++
			if e.Token > 0 {
				v.tokens[e.Token]--
			}
			if e.Held < 0 {
				v.problem("negative Held %v", e.Held)
			}
		},
		RenewalRound: func(e rlock.RenewalRoundInfo) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.event("RenewalRound")
			if e.Failures < e.Lost || e.Leases < e.Failures || e.Scripts < 1 {
				v.problem("inconsistent round %+v", e)
			}
		},
		Replay:       func(rlock.ReplayInfo) { v.mu.Lock(); v.event("Replay"); v.replays++; v.mu.Unlock() },
		Subscription: func(rlock.SubscriptionInfo) { v.mu.Lock(); v.event("Subscription"); v.mu.Unlock() },
		GiveBack:     func(rlock.GiveBackInfo) { v.mu.Lock(); v.event("GiveBack"); v.gaveBack++; v.mu.Unlock() },
	}
}

// randomSeed is RELOCK_SEED when set (to replay a failure), else a fresh one.
func randomSeed(t *testing.T) uint64 {
	if s := os.Getenv("RELOCK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		return n
	}
	return uint64(time.Now().UnixNano())
}

// Many goroutines take and give back locks of every kind (and a semaphore's permits) on a
// few names, with waits, cancellations, fixed leases that run out, re-entries by owners
// shared between goroutines, lost replies (replays, give-backs), forced unlocks that make
// holders lose their locks, and holds left for Close to end; the
// invariants Observer checks every event, and the balance of tenures once all is done.
func TestObserver_randomInvariants(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		seed := randomSeed(t)
		t.Logf("seed %d (replay with RELOCK_SEED=%d)", seed, seed)
		inv := newInvariants()
		lc := loseReplies(b.rueidis(t)) // drops a script's reply now and then
		c, err := rlock.New(lc, rlock.WithObserver(inv.observer()), rlock.WithWatchdogTimeout(300*time.Millisecond))
		require.NoError(t, err)
		admin := b.client(t)
		base := redistest.Name(t)
		names := []string{base + "-mutex", base + "-fair", base + "-spin", base + "-rw"}
		sem := c.Semaphore(base + "-sem")
		_, err = sem.TrySetPermits(bg, 2)
		require.NoError(t, err)

		// A side is one lock as a worker drives it: a kind's handle on one name.
		type side struct {
			ops   lockOps
			force func() (bool, error)
		}
		makeSides := func(c *rlock.Client) []side {
			m, f, s, rw := c.Mutex(names[0]), c.FairMutex(names[1]), c.SpinMutex(names[2]), c.RWMutex(names[3])
			return []side{
				{lockOps{m.Lock, m.TryLock, m.Unlock}, func() (bool, error) { return admin.Mutex(names[0]).ForceUnlock(bg) }},
				{lockOps{f.Lock, f.TryLock, f.Unlock}, func() (bool, error) { return admin.FairMutex(names[1]).ForceUnlock(bg) }},
				{lockOps{s.Lock, s.TryLock, s.Unlock}, func() (bool, error) { return admin.SpinMutex(names[2]).ForceUnlock(bg) }},
				{lockOps{rw.Lock, rw.TryLock, rw.Unlock}, func() (bool, error) { return admin.RWMutex(names[3]).ForceUnlock(bg) }},
				{lockOps{rw.RLock, rw.TryRLock, rw.RUnlock}, func() (bool, error) { return admin.RWMutex(names[3]).ForceUnlock(bg) }},
			}
		}
		const workers = 8
		steps := 150
		if b.mr != nil {
			steps = 100
		}
		shared := makeSides(c) // workers 0 and 1 share these handles: one owner, two goroutines
		var wg sync.WaitGroup
		for w := range workers {
			sides := shared
			if w >= 2 {
				sides = makeSides(c)
			}
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				held := make([]int, len(sides))
				permits := 0
				unlockAll := func(i int) {
					for ; held[i] > 0; held[i]-- {
						_ = sides[i].ops.unlock(bg)
					}
				}
				for step := 0; step < steps; step++ {
					if rng.IntN(100) < 3 {
						lc.drop.Add(1) // the next applied script's reply is lost: replayed
					}
					i := rng.IntN(len(sides) + 1)
					if i == len(sides) { // the semaphore
						if permits > 0 {
							if err := sem.Release(bg, 1); err != nil {
								t.Errorf("release: %v", err)
							}
							permits--
						} else if ok, err := sem.TryAcquire(bg, 1, time.Duration(rng.IntN(30))*time.Millisecond); err == nil && ok {
							permits++
						}
						continue
					}
					s := sides[i]
					switch r := rng.IntN(100); {
					case r < 3:
						_, _ = s.force()
					case held[i] > 0 && r < 50:
						_ = s.ops.unlock(bg)
						held[i]--
					default:
						var ok bool
						var err error
						lease := time.Duration(0)
						if rng.IntN(3) == 0 {
							lease = time.Duration(30+rng.IntN(200)) * time.Millisecond
						}
						switch rng.IntN(3) {
						case 0:
							ctx, cancel := context.WithTimeout(bg, time.Duration(rng.IntN(80))*time.Millisecond)
							err = s.ops.lock(ctx)
							cancel()
							ok = err == nil
						case 1:
							ok, err = s.ops.tryLock(bg, 0, lease)
						default:
							ok, err = s.ops.tryLock(bg, time.Duration(rng.IntN(40))*time.Millisecond, lease)
						}
						switch {
						case ok:
							held[i]++
						case errors.Is(err, rlock.ErrLockLost):
							unlockAll(i) // the loss blocks the owner until it has unlocked
						}
					}
				}
				if w%3 != 2 { // the others leave theirs to Close
					for i := range sides {
						unlockAll(i)
					}
				}
				for ; permits > 0; permits-- {
					if err := sem.Release(bg, 1); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		require.NoError(t, c.Close())
		inv.mu.Lock()
		inv.closed = true
		events := inv.events
		inv.mu.Unlock()
		// Nothing runs on the Client's behalf any more: the background work ended with Close.
		// Look a little while, for anything told late.
		time.Sleep(200 * time.Millisecond)

		inv.mu.Lock()
		defer inv.mu.Unlock()
		require.Empty(t, inv.problems, "seed %d", seed)
		require.Empty(t, inv.open, "every Start has its Done (seed %d)", seed)
		require.Zero(t, inv.inflight, "seed %d", seed)
		require.Equal(t, inv.begun, inv.ended, "tenures begun and ended balance per lock and owner (seed %d)", seed)
		for tok, n := range inv.tokens {
			require.Zero(t, n, "token %d begun and ended (seed %d)", tok, seed)
		}
		require.Greater(t, len(inv.begun), 4, "the run took locks of several kinds and owners (seed %d)", seed)
		t.Logf("%d events (%d replays, %d give-backs); tenures ended by cause: %v", events, inv.replays, inv.gaveBack, inv.causes)
	})
}

// A seeded run of RedLocks over 3 instances (3 miniredis, 3 redis-servers): workers take and
// give back two names with waits, cancellations, fixed leases that run out, re-entries by an
// owner shared between goroutines, forced unlocks that make holders lose the lock, and holds
// left for Close; the Clients close in a random order. The invariants Observer (on every
// Client) checks every event, and the balance of RedLock tenures (AcquireDone acquired, not
// re-entered, against HoldEnd) with their tokens once all is done.
func TestObserver_randomRedLock(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"miniredis", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			seed := randomSeed(t)
			t.Logf("seed %d (replay with RELOCK_SEED=%d)", seed, seed)
			var addrs []string
			if backend == "redis" {
				addrs = addrsOf(redServers(t, 3))
			} else {
				for range 3 {
					addrs = append(addrs, miniredis.RunT(t).Addr())
				}
			}
			inv := newInvariants()
			// A 2-s watchdog timeout: the per-instance timeout of a watchdog-mode round is a
			// tenth of it by default, and 40 ms (a 400-ms watchdog) let no instance answer on a
			// machine at a load of 13-18 on 2 cores, nor pinned to a core beside a burner at
			// nice 5: every round failed and the run took no lock ("the run took both names
			// with several owners", seed 1796484754258558606, 0 tenures).
			cs := redClients(t, addrs, rlock.WithObserver(inv.observer()), rlock.WithWatchdogTimeout(2*time.Second),
				rlock.WithCleanupTimeout(time.Second))
			admin := redClients(t, addrs) // unobserved: its forced unlocks are not told
			base := redistest.Name(t)
			names := []string{base + "-a", base + "-b"}
			shared := []*rlock.RedLock{rlock.NewRedLock(names[0], cs), rlock.NewRedLock(names[1], cs)}
			const workers = 6
			steps := 60
			var wg sync.WaitGroup
			for w := range workers {
				locks := shared // workers 0 and 1 share these handles: one owner, two goroutines
				if w >= 2 {
					locks = []*rlock.RedLock{rlock.NewRedLock(names[0], cs), rlock.NewRedLock(names[1], cs)}
				}
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					held := make([]int, len(locks))
					unlockAll := func(i int) {
						for ; held[i] > 0; held[i]-- {
							_ = locks[i].Unlock(bg)
						}
					}
					for step := 0; step < steps; step++ {
						i := rng.IntN(len(locks))
						l := locks[i]
						switch r := rng.IntN(100); {
						case r < 4:
							_, _ = rlock.NewRedLock(names[i], admin).ForceUnlock(bg)
						case held[i] > 0 && r < 50:
							_ = l.Unlock(bg)
							held[i]--
						default:
							var ok bool
							var err error
							lease := time.Duration(0)
							if rng.IntN(3) == 0 {
								lease = time.Duration(30+rng.IntN(200)) * time.Millisecond
							}
							switch rng.IntN(3) {
							case 0:
								ctx, cancel := context.WithTimeout(bg, time.Duration(rng.IntN(80))*time.Millisecond)
								err = l.Lock(ctx)
								cancel()
								ok = err == nil
							case 1:
								ok, err = l.TryLock(bg, 0, lease)
							default:
								ok, err = l.TryLock(bg, time.Duration(rng.IntN(40))*time.Millisecond, lease)
							}
							switch {
							case ok:
								held[i]++
							case errors.Is(err, rlock.ErrLockLost):
								unlockAll(i) // the loss blocks the owner until it has unlocked
							}
						}
					}
					if w%3 != 2 { // the others leave theirs to Close
						for i := range locks {
							unlockAll(i)
						}
					}
				}()
			}
			wg.Wait()
			rng := rand.New(rand.NewPCG(seed, workers))
			for _, k := range rng.Perm(len(cs)) {
				require.NoError(t, cs[k].Close())
			}
			inv.mu.Lock()
			inv.closed = true
			events := inv.events
			inv.mu.Unlock()
			time.Sleep(200 * time.Millisecond) // look a little while, for anything told late

			inv.mu.Lock()
			defer inv.mu.Unlock()
			require.Empty(t, inv.problems, "seed %d", seed)
			require.Empty(t, inv.open, "every Start has its Done (seed %d)", seed)
			require.Zero(t, inv.inflight, "seed %d", seed)
			require.Equal(t, inv.begun, inv.ended, "RedLock tenures begun and ended balance per lock and owner (seed %d)", seed)
			for tok, n := range inv.tokens {
				require.Zero(t, n, "token %d begun and ended (seed %d)", tok, seed)
			}
			require.GreaterOrEqual(t, len(inv.begun), 3, "the run took both names with several owners (seed %d)", seed)
			t.Logf("%d events; tenures ended by cause: %v", events, inv.causes)
		})
	}
}
