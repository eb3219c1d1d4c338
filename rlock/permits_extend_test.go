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
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// staleSends is a hookClient (newStaleSends; its hook: staleSends.hook) that keeps back,
// when told (keepNext), the next script sent through it and answers
// context.DeadlineExceeded, as rueidis answers a request whose reply did not come within its
// deadline though the command may still be on its way: the caller stays and resends. It
// refuses the refuse scripts after that (a refused dial: nothing sent). deliver sends a kept
// script later (hookCall.sendWith), as a connection slower than the resends' would: rueidis
// spreads a client's commands over several connections (PipelineMultiplex), so nothing
// orders a send after the later ones (see keepSend). The scripts of a pipeline go straight
// on.
type staleSends struct {
	*hookClient
	mu       sync.Mutex
	keepNext bool
	refuse   int
	kept     []func(context.Context) rueidis.RedisResult
	keptAt   []time.Time // when each kept script was sent (kept back)
	passed   int         // scripts sent on, and answered
}

// newStaleSends wraps rc in a staleSends, disarmed.
func newStaleSends(rc rueidis.Client) *staleSends {
	c := &staleSends{hookClient: &hookClient{Client: rc}}
	c.set(c.hook)
	return c
}

func (c *staleSends) hook(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
	if cmd.multi {
		return call()
	}
	c.mu.Lock()
	switch {
	case c.keepNext:
		c.keepNext = false
		c.kept = append(c.kept, cmd.sendWith)
		c.keptAt = append(c.keptAt, time.Now())
		c.mu.Unlock()
		return rueidis.NewErrorResult(context.DeadlineExceeded)
	case c.refuse > 0:
		c.refuse--
		c.mu.Unlock()
		return refusedResult()
	}
	c.mu.Unlock()
	res := call()
	c.mu.Lock()
	c.passed++
	c.mu.Unlock()
	return res
}

// passedScripts is the number of scripts sent on and answered.
func (c *staleSends) passedScripts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.passed
}

// arm keeps back the next script and refuses the refuse after it.
func (c *staleSends) arm(refuse int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keepNext, c.refuse = true, refuse
}

// disarm stops refusing, and reports how many sends were refused short of the refuse asked.
func (c *staleSends) disarm() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	left := c.refuse
	c.keepNext, c.refuse = false, 0
	return left
}

// keptLen is the number of scripts kept and not delivered.
func (c *staleSends) keptLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.kept)
}

// deliver sends the i-th kept script now, and forgets it.
func (c *staleSends) deliver(t *testing.T, i int) {
	t.Helper()
	c.mu.Lock()
	send := c.kept[i]
	c.kept = append(c.kept[:i], c.kept[i+1:]...)
	c.keptAt = append(c.keptAt[:i], c.keptAt[i+1:]...)
	c.mu.Unlock()
	require.NoError(t, send(bg).Error())
}

// dropOlder forgets the kept scripts sent more than age ago (they never reach Redis) and
// returns how many it dropped.
func (c *staleSends) dropOlder(age time.Duration) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i := 0; i < len(c.kept); {
		if time.Since(c.keptAt[i]) > age {
			c.kept = append(c.kept[:i], c.kept[i+1:]...)
			c.keptAt = append(c.keptAt[:i], c.keptAt[i+1:]...)
			n++
			continue
		}
		i++
	}
	return n
}

// TestPermitSemaphore_Extend_lateSendCannotShortenALaterLease: an Extend whose first send is
// overtaken by its resend (the resend answers) is followed by an Extend that lengthens the
// lease; the first send of the earlier Extend, arriving last, must not shorten the lease the
// later one set. It did: psem_extend.lua set the lease of every send it got, so the permit,
// which its holder counts on for a minute, ended 50ms later and a second holder could take
// it from a semaphore of one permit.
func TestPermitSemaphore_Extend_lateSendCannotShortenALaterLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		sc := newStaleSends(b.rueidis(t))
		p := onePermitOn(t, sc)
		a, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		require.NoError(t, p.Extend(bg, a.ID, time.Minute)) // loads the script: the kept send is the script itself

		sc.arm(0)
		require.NoError(t, p.Extend(bg, a.ID, 50*time.Millisecond), "an Extend answered by its resend")
		require.NoError(t, p.Extend(bg, a.ID, time.Minute))
		sc.deliver(t, 0) // the 50ms Extend's first send arrives last
		ttl, err := p.TTL(bg, a.ID)
		require.NoError(t, err, "the permit's holder counts on it for a minute")
		require.Greater(t, ttl, 50*time.Second, "a late send of an earlier Extend shortened the lease of a later one")
		time.Sleep(100 * time.Millisecond) // past the 50ms lease
		_, ok, err := b.client(t).PermitSemaphore(p.Name()).TryAcquire(bg, 0, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "a second holder of a semaphore of one permit")
	})
}

// TestPermitSemaphore_Extend_lateSendOfUnknownOutcomeCannotShortenALaterLease: as above, for
// an Extend whose sends all went unanswered (ErrUnknownOutcome), its first send still on its
// way: the caller's next Extend is answered, and the late first send must not undo it.
func TestPermitSemaphore_Extend_lateSendOfUnknownOutcomeCannotShortenALaterLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		sc := newStaleSends(b.rueidis(t))
		p := onePermitOn(t, sc, rlock.WithCleanupTimeout(200*time.Millisecond))
		a, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		require.NoError(t, p.Extend(bg, a.ID, time.Minute))

		sc.arm(1 << 20)
		err = p.Extend(bg, a.ID, 50*time.Millisecond)
		require.Less(t, sc.disarm(), 1<<20, "no resend was refused")
		require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
		require.NoError(t, p.Extend(bg, a.ID, time.Minute))
		sc.deliver(t, 0)
		ttl, err := p.TTL(bg, a.ID)
		require.NoError(t, err, "the permit's holder counts on it for a minute")
		require.Greater(t, ttl, 50*time.Second, "a late send of an earlier Extend of unknown outcome shortened the lease of a later one")
	})
}

// TestPermitSemaphore_Acquire_lateGrantOfAnEarlierAttemptCountedFromIt: an Acquire's first
// attempt, whose first send is kept back and whose resend is refused (no permit free), waits;
// the permit frees without a wake-up, and the kept send arrives then and grants the permit
// (its id is not spent: a refused resend spends nothing). A later attempt, 200ms on, finds
// the permit live under its id and is answered granted. Permit.Expires must not count the
// lease from that later attempt: the lease in Redis runs from the late first send. It did:
// Expires was ~200ms past the lease's end in Redis, and the permit could be another's while
// its holder counted on it.
func TestPermitSemaphore_Acquire_lateGrantOfAnEarlierAttemptCountedFromIt(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		sc := newStaleSends(b.rueidis(t))
		p := onePermitOn(t, sc)
		other := b.client(t).PermitSemaphore(p.Name())
		held, err := other.Acquire(bg, time.Minute)
		require.NoError(t, err)
		_, ok, err := p.TryAcquire(bg, 0, time.Second) // loads the script: the kept send is the script itself
		require.NoError(t, err)
		require.False(t, ok)

		const lease = 400 * time.Millisecond
		sc.arm(0)
		before := sc.passedScripts()
		type result struct {
			permit rlock.Permit
			err    error
		}
		got := make(chan result, 1)
		go func() {
			permit, err := p.Acquire(bg, lease)
			got <- result{permit, err}
		}()
		redistest.WaitFor(t, 5*time.Second, "the first attempt's resend to be answered", func() bool { return sc.passedScripts() > before })
		subscribed(t, b, p.Key()+":released", 1)
		_, err = b.do(t, "ZREM", p.Key()+":leases", held.ID) // the permit frees; nobody is told
		require.NoError(t, err)
		sc.deliver(t, 0) // the first attempt's first send grants now
		granted := time.Now()
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, other.AddPermits(bg, 1)) // wakes the waiter: its next attempt
		var r result
		select {
		case r = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the Acquire did not return")
		}
		require.NoError(t, r.err)
		require.False(t, r.permit.Expires.After(granted.Add(lease)), "Expires %v past the lease's end in Redis, %v after the late first send granted it",
			r.permit.Expires.Sub(granted.Add(lease)), lease)
		ttl, err := p.TTL(bg, r.permit.ID)
		require.NoError(t, err)
		require.False(t, r.permit.Expires.After(time.Now().Add(ttl+time.Millisecond)), "Expires past the lease's end in Redis (TTL %v)", ttl)
	})
}

// envPsemExtendSeed replays one sequence of TestPermitSemaphore_Extend_lateSendsExplore.
const envPsemExtendSeed = "RELOCK_PSEM_EXTEND_SEED"

// TestPermitSemaphore_Extend_lateSendsExplore: a seeded random walk of one holder's Extends
// on a permit (leases that lengthen or shorten it), some of whose first sends are kept back
// and delivered at a random later step, before or after the caller's later Extends (their
// resends answered, or all refused: ErrUnknownOutcome). After every step it checks against
// Redis that the permit's lease does not end before the deadline its holder counts on
// (Permit.Expires, then the deadline of the last Extend answered: its start plus its lease
// less the drift allowance; an Extend that failed lowers it to its own when that is
// earlier, as Extend's godoc tells), and that no second Client gets a permit of the
// semaphore of one while that deadline lasts: a grant answered before it. (Redis grants
// anywhere between the send and the answer, so the send's time bounds nothing: on a loaded
// machine a send went before the deadline and reached Redis after it, seeds
// 1796484721207415579 and 1796487834325186131. The second Client's send is held back past
// the deadline at some steps where it is near, as load would.) A failure prints the seed to
// replay (RELOCK_PSEM_EXTEND_SEED=<n>).
func TestPermitSemaphore_Extend_lateSendsExplore(t *testing.T) {
	t.Parallel()
	seeds := []uint64{uint64(time.Now().UnixNano()), uint64(time.Now().UnixNano()) + 1, uint64(time.Now().UnixNano()) + 2}
	if v := os.Getenv(envPsemExtendSeed); v != "" {
		n, err := strconv.ParseUint(v, 0, 64)
		require.NoError(t, err, envPsemExtendSeed)
		seeds = []uint64{n}
	}
	b := realBackend(t)
	for _, seed := range seeds {
		if !exploreLateExtends(t, b, seed) {
			t.Fatalf("replay: %s=%d go test -race -count=1 -run 'TestPermitSemaphore_Extend_lateSendsExplore' ./rlock/", envPsemExtendSeed, seed)
		}
	}
}

func exploreLateExtends(t *testing.T, b *backend, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	const cleanup = 150 * time.Millisecond
	sc := newStaleSends(b.rueidis(t))
	c, err := rlock.New(sc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	name := redistest.Name(t) + "-" + strconv.FormatUint(seed, 16)
	p := c.PermitSemaphore(name)
	// The second Client's acquires wait in held's hook until holdUntil (zero: none), as a
	// send slow to reach Redis on a loaded machine would. Whether and how long to hold are
	// drawn from a generator of their own (lag), so that a seed's plan of Extends is the one
	// it had before the holds.
	held := &hookClient{Client: b.rueidis(t)}
	var holdMu sync.Mutex
	var holdUntil time.Time
	held.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		holdMu.Lock()
		until := holdUntil
		holdMu.Unlock()
		if cmd.script == "psem_acquire" {
			time.Sleep(time.Until(until))
		}
		return call()
	})
	oc, err := rlock.New(held)
	require.NoError(t, err)
	defer oc.Close()
	other := oc.PermitSemaphore(name)
	lag := rand.New(rand.NewPCG(seed^0x9e3779b97f4a7c15, seed>>3|1))
	setPermits(t, p, 1)
	var log []string
	t0 := time.Now()
	logf := func(format string, args ...any) {
		log = append(log, fmt.Sprintf("%8.1fms ", float64(time.Since(t0).Microseconds())/1000)+fmt.Sprintf(format, args...))
	}
	fail := func(format string, args ...any) bool {
		logf("VIOLATION: "+format, args...)
		t.Errorf("seed %d: "+format+"\n%s", append(append([]any{seed}, args...), joinLines(log))...)
		return false
	}
	driftOf := func(d time.Duration) time.Duration { return d/100 + 2*time.Millisecond }
	var permit rlock.Permit
	var deadline time.Time // the end the holder counts on; zero: it holds none
	for step := 0; step < 40; step++ {
		if deadline.IsZero() || time.Until(deadline) < 5*time.Millisecond {
			if permit.ID != "" {
				_ = p.Release(bg, permit.ID) // ended, or about to: its holder gives it up
			}
			permit, deadline = rlock.Permit{}, time.Time{}
			got, ok, err := p.TryAcquire(bg, 2*time.Second, time.Duration(50+rng.IntN(400))*time.Millisecond)
			require.NoError(t, err)
			if !ok {
				return fail("no permit within 2s (a permit left held by nobody)")
			}
			permit, deadline = got, got.Expires
			logf("acquired %s to %s", permit.ID, fmtDur(deadline.Sub(t0)))
		}
		lease := time.Duration(10+rng.IntN(600)) * time.Millisecond
		// A send stays in flight at most the cleanup timeout (the bound psem_extend.lua's
		// record of the last Extend applied is kept for: twice it); one kept longer is lost.
		// Seed 1796333105217024600 delivered a send 380 ms after it went (cleanup 150 ms): it
		// found the later Extend's record gone and shortened the lease, as the script's
		// header says it may past that bound.
		if n := sc.dropOlder(cleanup); n > 0 {
			logf("%d kept send(s) lost: in flight past the cleanup timeout", n)
		}
		switch d := rng.Float64(); {
		case d < 0.2 && sc.keptLen() > 0:
			i := rng.IntN(sc.keptLen())
			sc.deliver(t, i)
			logf("delivered kept send %d (%d left)", i, sc.keptLen())
		case d < 0.3:
			time.Sleep(time.Duration(rng.IntN(60)) * time.Millisecond)
		default:
			mode, refuse := "plain", 0
			switch e := rng.Float64(); {
			case e < 0.35:
				mode = "kept, resend answered"
				sc.arm(0)
			case e < 0.5:
				mode, refuse = "kept, resends refused", 1<<20
				sc.arm(refuse)
			}
			start := time.Now()
			err := p.Extend(bg, permit.ID, lease)
			sc.disarm()
			logf("Extend(%s, %v) [%s] -> %v (%s)", permit.ID, lease, mode, err, fmtDur(time.Since(start)))
			own := start.Add(lease - driftOf(lease))
			switch {
			case err == nil:
				deadline = own
			case errors.Is(err, rlock.ErrNotHeld), errors.Is(err, rlock.ErrUnknownOutcome):
				if own.Before(deadline) {
					deadline = own
				}
				if errors.Is(err, rlock.ErrNotHeld) {
					if time.Now().Before(deadline) {
						return fail("Extend answered not held while its holder counts on the permit to %s", fmtDur(deadline.Sub(t0)))
					}
					deadline = time.Time{}
				}
			default:
				return fail("Extend: %v", err)
			}
		}
		if deadline.IsZero() {
			continue
		}
		// Redis's lease end is at most after + ttl (+1ms: TTL is truncated to whole ms).
		ttl, err := p.TTL(bg, permit.ID)
		after := time.Now()
		switch {
		case errors.Is(err, rlock.ErrNotHeld):
			if after.Before(deadline) {
				return fail("the permit is gone from Redis; its holder counts on it to %s", fmtDur(deadline.Sub(t0)))
			}
		case err != nil:
			return fail("TTL: %v", err)
		case after.Add(ttl + time.Millisecond).Before(deadline):
			return fail("the lease ends in Redis by %s, before %s that its holder counts on", fmtDur(after.Add(ttl+time.Millisecond).Sub(t0)), fmtDur(deadline.Sub(t0)))
		}
		sent := time.Now()
		holdMu.Lock()
		holdUntil = time.Time{}
		if left := deadline.Sub(sent); left > 0 && left < 30*time.Millisecond && lag.IntN(2) == 0 {
			holdUntil = deadline.Add(time.Duration(10+lag.IntN(10)) * time.Millisecond)
		}
		until := holdUntil
		holdMu.Unlock()
		got, ok, err := other.TryAcquire(bg, 0, time.Minute)
		answered := time.Now()
		require.NoError(t, err)
		if !until.IsZero() {
			logf("a second Client's acquire sent at %s, held back to %s: granted %v", fmtDur(sent.Sub(t0)), fmtDur(until.Sub(t0)), ok)
		}
		if ok {
			_ = other.Release(bg, got.ID)
			// Redis granted it at the answer at the latest, perhaps long after the send: only
			// a grant answered before the deadline took the holder's permit while it counted
			// on it.
			if answered.Before(deadline) {
				return fail("a second Client got a permit of 1, answered at %s (sent at %s); the holder counts on its own to %s",
					fmtDur(answered.Sub(t0)), fmtDur(sent.Sub(t0)), fmtDur(deadline.Sub(t0)))
			}
		}
	}
	if testing.Verbose() {
		t.Logf("seed %d passed:\n%s", seed, joinLines(log))
	}
	return true
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "    " + l + "\n"
	}
	return out
}

// The give-back of a permit that a lost send of an acquire granted, which the spend of its id
// found (spendOn, then giveBackCanceled), has a whole cleanup timeout of its own. Before, it
// shared the one cleanup timeout of the spend before it: a spend that a slow Redis answered
// late left the give-back a few milliseconds, and a Redis that answered it in good time, but
// not in those, left the permit held for nobody until its lease ended.
func TestPermitSemaphore_spendsGiveBackOfALostSendsGrantHasAWholeCleanupTimeout(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; bounds of hundreds of milliseconds
	b := realBackend(t)
	// The bounds leave a loaded machine (CI: -race, two cores) whole seconds: the spend's
	// answer does not depend on the time it has left (sent without the deadline, below), and
	// the give-back's slow answer comes 1.6 s inside its own cleanup timeout; with the
	// timeout it shared, at most left.
	const (
		cleanup = 2 * time.Second
		left    = 150 * time.Millisecond // what the slow spend leaves of its cleanup timeout
		slow    = 400 * time.Millisecond // the give-back takes this long to answer
		lease   = time.Minute
	)
	var keep, resends, spendSlow, releaseSlow atomic.Bool
	kept := make(chan func(context.Context) rueidis.RedisResult, 1)
	gaveBack := make(chan error, 1)
	hc := &hookClient{Client: b.rueidis(t)}
	hc.set(func(hctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		id := ""
		if cmd.script == "psem_acquire" && len(cmd.args) > 3 {
			id = cmd.args[3]
		}
		switch {
		case cmd.script == "psem_acquire" && keep.CompareAndSwap(true, false):
			// The first send goes astray: kept back, delivered later, its reply lost.
			kept <- cmd.sendWith
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		case cmd.script == "psem_acquire" && resends.Load() && !strings.HasPrefix(id, "!"):
			// Its resends get no answer for the whole cleanup timeout: the outcome stays
			// unknown and the id loose.
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		case cmd.script == "psem_acquire" && spendSlow.CompareAndSwap(true, false):
			// The kept send arrives first and takes the permit; the spend of the id, answered
			// by a slow Redis with little of its cleanup timeout left, finds it.
			if err := (<-kept)(context.Background()).Error(); err != nil {
				t.Errorf("the kept send: %v", err)
			}
			if dl, ok := hctx.Deadline(); ok {
				select {
				case <-time.After(time.Until(dl) - left):
				case <-hctx.Done():
				}
			}
			releaseSlow.Store(true)
			return cmd.sendWith(context.Background())
		case cmd.script == "psem_release" && releaseSlow.CompareAndSwap(true, false):
			// The give-back of the permit: Redis answers it within the cleanup timeout.
			res := answerAfter(hctx, slow, call)
			gaveBack <- res.Error()
			return res
		}
		return call()
	})
	c, err := rlock.New(hc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	p := c.PermitSemaphore(redistest.Name(t))
	ok, err := p.TrySetPermits(bg, 1)
	require.NoError(t, err)
	require.True(t, ok)
	warm, err := p.Acquire(bg, lease) // the scripts are loaded: no NOSCRIPT resend goes through the hook
	require.NoError(t, err)
	require.NoError(t, p.Release(bg, warm.ID))
	keep.Store(true)
	resends.Store(true)
	spendSlow.Store(true)
	_, ok, err = p.TryAcquire(bg, cleanup/2, lease)
	require.ErrorIs(t, err, rlock.ErrUnknownOutcome)
	require.False(t, ok)
	resends.Store(false)
	require.NoError(t, await(t, gaveBack, 10*time.Second, "the give-back of the lost send's permit"),
		"the give-back, sent after the spend left %v of the cleanup timeout", left)
	n, err := p.AvailablePermits(bg)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the permit given back")
}
