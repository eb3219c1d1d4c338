package rlock_test

import (
	"context"
	"fmt"
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

// lateHooks is an Observer that records the hooks called once Close has returned
// (returned set): Observer's Guarantees say none is, "except the AcquireDone or ReleaseDone
// of a call that was under way when Close began".
type lateHooks struct {
	returned atomic.Bool
	withDone bool // AcquireDone is recorded too (in order with the others)
	mu       sync.Mutex
	late     []string
}

func (l *lateHooks) note(what string) {
	if l.returned.Load() {
		l.mu.Lock()
		l.late = append(l.late, what)
		l.mu.Unlock()
	}
}

func (l *lateHooks) got() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.late...)
}

func (l *lateHooks) observer() *rlock.Observer {
	return &rlock.Observer{
		AcquireStart: func(ctx context.Context, e rlock.AcquireStartInfo) context.Context {
			l.note("AcquireStart")
			return ctx
		},
		ReleaseStart: func(ctx context.Context, e rlock.ReleaseStartInfo) context.Context {
			l.note("ReleaseStart")
			return ctx
		},
		AcquireDone: func(ctx context.Context, e rlock.AcquireDoneInfo) {
			if l.withDone {
				l.note(fmt.Sprintf("AcquireDone %s %s", e.Kind, e.Outcome))
			}
		},
		HoldEnd:      func(e rlock.HoldEndInfo) { l.note(fmt.Sprintf("HoldEnd %s %s", e.Kind, e.Cause)) },
		RenewalRound: func(rlock.RenewalRoundInfo) { l.note("RenewalRound") },
		Replay:       func(e rlock.ReplayInfo) { l.note(fmt.Sprintf("Replay %s %s: %v", e.Kind, e.Op, e.Err)) },
		Subscription: func(e rlock.SubscriptionInfo) { l.note("Subscription " + e.Channel) },
		GiveBack:     func(e rlock.GiveBackInfo) { l.note(fmt.Sprintf("GiveBack %s %s: %v", e.Kind, e.Reason, e.Err)) },
	}
}

// A Lock whose acquire's reply was lost replays it; Close ends the replaying, and the call
// returns ErrClosed (wrapping ErrUnknownOutcome). The Replay event of that replaying is
// told on the caller's goroutine (replayAt's deferred o.replay) whenever that goroutine
// gets to it: nothing orders it before Close's return, and Observer's Guarantees allow
// only the call's AcquireDone after it. Here the replay's send hands back its ctx's end
// only once Close has returned (as a goroutine scheduled late would): the Replay event comes
// after Close returned. TestCloseHunt found it unforced in 3 runs of 3 (40 s each), for
// Mutex, RWMutex (both sides) and a MultiLock's member.
func TestCloseHunt_replayHookAfterCloseReturned(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	hc := &hookClient{Client: b.rueidis(t)}
	closed := make(chan struct{})
	replaying := make(chan struct{})
	var sends atomic.Int32
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "acquire" || cmd.multi {
			return call()
		}
		if sends.Add(1) == 1 {
			_ = call() // applied; its reply lost
			return rueidis.NewErrorResult(context.DeadlineExceeded)
		}
		if sends.Load() == 2 {
			close(replaying)
		}
		<-ctx.Done() // the replay's answer does not come before Close ends it
		select {
		case <-closed:
		case <-time.After(2 * time.Second):
		}
		return rueidis.NewErrorResult(ctx.Err())
	})
	lh := &lateHooks{}
	c, err := rlock.New(hc, rlock.WithObserver(lh.observer()))
	require.NoError(t, err)
	defer c.Close()
	errc := make(chan error, 1)
	go func() { errc <- c.Mutex(redistest.Name(t)).Lock(bg) }()
	within(t, 5*time.Second, "the replay", replaying)
	began := time.Now()
	require.NoError(t, c.Close())
	lh.returned.Store(true)
	took := time.Since(began)
	close(closed)
	require.ErrorIs(t, await(t, errc, 5*time.Second, "Lock to end with Close"), rlock.ErrClosed)
	assert.Less(t, took, time.Second, "Close waited for the caller's replay")
	assert.Empty(t, lh.got(), "hooks called after Close returned")
}

// A FairMutex waiter that Close ends (ErrClosed) leaves its place in the queue: fairLeave
// sends under cleanupCtx, which Close has ended, so nothing is sent. FairMutex's godoc
// ("Leaving, and dead waiters"): "A waiter that gives up (its ctx ends, its wait runs out,
// or an error ends its wait) removes its place at once, before Lock or TryLock returns";
// only a waiter that cannot (its process died, or lost Redis) leaves it to run out with
// the waiter timeout. The lock, once free, is then refused to every other Client's
// FairMutex for the waiter timeout (10 s by default), longer than any lease involved here.
// The control: the same waiter ended by its ctx leaves the lock free at once.
func TestCloseHunt_fairPlaceLeftByClose(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, byClose := range []bool{false, true} {
		t.Run(map[bool]string{false: "ctx", true: "close"}[byClose], func(t *testing.T) {
			t.Parallel()
			name := redistest.Name(t)
			holder, other := b.client(t), b.client(t)
			c := b.client(t)
			hm := holder.FairMutex(name)
			require.NoError(t, hm.LockLease(bg, 5*time.Second))
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- c.FairMutex(name).Lock(ctx) }()
			redistest.WaitFor(t, 5*time.Second, "the waiter's place", func() bool {
				n := redisInt(t, b, "ZCARD", c.FairMutex(name).Key()+":queue")
				return n == 1
			})
			if byClose {
				require.NoError(t, c.Close())
			} else {
				cancel()
			}
			err := await(t, errc, 5*time.Second, "the waiter to end")
			require.Error(t, err)
			require.NoError(t, hm.Unlock(bg))
			ok, err := other.FairMutex(name).TryLock(bg, 0, time.Second)
			require.NoError(t, err)
			n := redisInt(t, b, "ZCARD", c.FairMutex(name).Key()+":queue")
			pttl := redisInt(t, b, "PTTL", c.FairMutex(name).Key()+":queue")
			assert.True(t, ok, "the free lock refused to another Client: the waiter's place is left (%d places, expiring in %dms)", n, pttl)
		})
	}
}

// The same for an RWMutex writer that Close ends while it waits: rwLeave returns at once on a
// closed Client (rwmutex.go: "if m.c.isClosed() { return }"), so its claim is left, and new
// readers of other Clients are refused for the waiter timeout, though nobody holds or
// waits for the lock. RWMutex's godoc: "A writer that gives up (ctx, wait bound, error)
// withdraws its claim before returning, and wakes the readers it held back".
func TestCloseHunt_rwClaimLeftByClose(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, byClose := range []bool{false, true} {
		t.Run(map[bool]string{false: "ctx", true: "close"}[byClose], func(t *testing.T) {
			t.Parallel()
			name := redistest.Name(t)
			holder, reader := b.client(t), b.client(t)
			c := b.client(t)
			hm := holder.RWMutex(name)
			require.NoError(t, hm.RLockLease(bg, 5*time.Second))
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- c.RWMutex(name).Lock(ctx) }()
			redistest.WaitFor(t, 5*time.Second, "the writer's claim", func() bool {
				n := redisInt(t, b, "ZCARD", c.RWMutex(name).Key()+":writers")
				return n == 1
			})
			if byClose {
				require.NoError(t, c.Close())
			} else {
				cancel()
			}
			err := await(t, errc, 5*time.Second, "the writer to end")
			require.Error(t, err)
			require.NoError(t, hm.RUnlock(bg))
			ok, err := reader.RWMutex(name).TryRLock(bg, 0, time.Second)
			require.NoError(t, err)
			pttl := redisInt(t, b, "PTTL", c.RWMutex(name).Key()+":writers")
			assert.True(t, ok, "a reader of another Client refused on a free lock: the closed writer's claim is left (expiring in %dms)", pttl)
		})
	}
}

// The place (or claim) of a wait that Close ended is gone by the time Close returns, for a
// Client made by New and one made by Dial, whose Close closes its rueidis client (and, first,
// the connections dialled within the dial guard's window, all of this young Client's): Close
// waits for the leave before that, so it is not cut off. Checked before the call returns.
func TestCloseHunt_placeGoneWhenCloseReturns(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, dial := range []bool{false, true} {
		for _, kind := range []string{"fair", "rw"} {
			t.Run(map[bool]string{false: "New", true: "Dial"}[dial]+"/"+kind, func(t *testing.T) {
				t.Parallel()
				name := redistest.Name(t)
				holder := b.client(t)
				c := b.client(t)
				if dial {
					var err error
					c, err = rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}})
					require.NoError(t, err)
					defer c.Close()
				}
				var key string
				var wait func() error
				if kind == "fair" {
					require.NoError(t, holder.FairMutex(name).LockLease(bg, 5*time.Second))
					key = c.FairMutex(name).Key() + ":queue"
					wait = func() error { return c.FairMutex(name).Lock(bg) }
				} else {
					require.NoError(t, holder.RWMutex(name).RLockLease(bg, 5*time.Second))
					key = c.RWMutex(name).Key() + ":writers"
					wait = func() error { return c.RWMutex(name).Lock(bg) }
				}
				errc := make(chan error, 1)
				go func() { errc <- wait() }()
				redistest.WaitFor(t, 5*time.Second, "the waiter's place", func() bool { return redisInt(t, b, "ZCARD", key) == 1 })
				require.NoError(t, c.Close())
				assert.Zero(t, redisInt(t, b, "ZCARD", key), "the place of the wait Close ended is left when Close returns")
				require.ErrorIs(t, await(t, errc, 5*time.Second, "the waiter to end"), rlock.ErrClosed)
			})
		}
	}
}

// redisInt runs a command on b's server and returns its integer reply.
func redisInt(t *testing.T, b *backend, args ...string) int64 {
	t.Helper()
	msg := b.srv.Do(t, args...)
	n, err := msg.AsInt64()
	require.NoError(t, err, "%v", args)
	return n
}

// A RedLock reports to the Observer of its first Client that has one; that Client's Close
// ends the report of a tenure (HoldEnd, cause closed) "before that Close returns"
// (redlock_observe.go). A Lock under way when that Client closes can still be granted by
// the other two instances (one Client closed is a minority): the tenure begins after Close
// returned. redObs.watchClose, finding the Client closed, told HoldEnd (closed) at once, on
// the caller's goroutine, before the AcquireDone that began the tenure. Observer's
// Guarantees now say: the call's own report, its AcquireDone then that HoldEnd. Found by
// TestCloseHunt (seed 1796440482242584745 trial 3, first run; its timing does not replay).
func TestCloseHunt_redLockHoldEndAfterCloseReturned(t *testing.T) {
	t.Parallel()
	srvs := redistest.StartN(t, 3)
	lh := &lateHooks{withDone: true}
	c, err := rlock.New(srvs[0].Client(t), rlock.WithObserver(lh.observer()))
	require.NoError(t, err)
	defer c.Close()
	var gates []*gatedSend
	clients := []*rlock.Client{c}
	for _, s := range srvs[1:] {
		g := gateSend(s.Client(t))
		gates = append(gates, g)
		o, err := rlock.New(g)
		require.NoError(t, err)
		defer o.Close()
		clients = append(clients, o)
	}
	name := redistest.Name(t)
	// The duplicate-server check first, so that the gated sends are the acquire's.
	warm := rlock.NewRedLock(name+"-warm", clients)
	require.NoError(t, warm.Lock(bg))
	require.NoError(t, warm.Unlock(bg))
	for _, g := range gates {
		g.armed.Store(true)
	}
	r := rlock.NewRedLock(name, clients, rlock.WithInstanceTimeout(5*time.Second))
	errc := make(chan error, 1)
	go func() { errc <- r.Lock(bg) }()
	for _, g := range gates {
		within(t, 5*time.Second, "the other instances' acquires", g.held)
	}
	require.NoError(t, c.Close())
	lh.returned.Store(true)
	for _, g := range gates {
		close(g.open)
	}
	err = await(t, errc, 10*time.Second, "RedLock.Lock")
	t.Logf("Lock: %v", err)
	if err == nil {
		defer r.Unlock(bg)
		assert.Equal(t, []string{"AcquireDone red_lock acquired", "HoldEnd red_lock closed"}, lh.got(),
			"after Close returned: the call's own report, its tenure's end after its AcquireDone")
		return
	}
	assert.Equal(t, []string{"AcquireDone red_lock error"}, lh.got(), "hooks called after Close returned")
}

// A re-entry on the wire when Close comes: Close ends the owner's tenure (hold.end), then the
// re-entry's grant comes back, and hold.granted takes it for a re-entry of a tenure that ran
// to the end of its fixed lease (errReentryEnded: "not held: its fixed lease ran out: the
// tenure it re-entered ran to the end of its fixed lease before the grant came back"), in
// watchdog mode too. The call returns that error, which wraps ErrLeaseExpired and not
// ErrClosed, though Close ended the tenure and nothing ran out; and the grant's give-back
// (grant: GiveBackLate), run on the caller's goroutine since Close has returned
// (Client.background), fails with ErrClosed and is told to the Observer (GiveBack, and the
// Replay of its release) after Close returned. Found by TestCloseHunt (seed
// 1796440973352682974 trial 4, RWMutex; seed 1796440982372305790 trial 13, FairMutex).
func TestCloseHunt_reentryInFlightAtClose(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	for _, mode := range []string{"lease", "watchdog"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			hr := holdReply(b.rueidis(t))
			lh := &lateHooks{}
			c, err := rlock.New(hr, rlock.WithObserver(lh.observer()))
			require.NoError(t, err)
			defer c.Close()
			m := c.Mutex(redistest.Name(t))
			lock := func() error {
				if mode == "lease" {
					return m.LockLease(bg, 5*time.Second)
				}
				return m.Lock(bg)
			}
			require.NoError(t, lock())
			hr.armed.Store(true)
			errc := make(chan error, 1)
			go func() { errc <- lock() }() // a re-entry
			within(t, 5*time.Second, "the re-entry to be applied", hr.sent)
			require.NoError(t, c.Close())
			lh.returned.Store(true)
			close(hr.open)
			err = await(t, errc, 5*time.Second, "the re-entry")
			t.Logf("re-entry: %v", err)
			assert.ErrorIs(t, err, rlock.ErrClosed, "the re-entry of a tenure Close ended")
			assert.Empty(t, lh.got(), "hooks called after Close returned")
		})
	}
}

// Close waits for the Semaphore acquires whose caller left, at most the cleanup timeout. A
// second Close, made while the first is still waiting, returns nil at once (an Observer hook
// that the first Close's work calls may call Close); the Close godoc says so, and that only
// the first Close's return says the Client's work has ended: no hook is called after it. The
// hunt found the second Close returning first, and the hooks of the work after it, against
// the godoc of the time; the godoc now says what Close does. Here the acquire's sends get no
// answer until their ctx ends (a server that does not answer).
func TestCloseHunt_secondCloseReturnsAtOnce(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	hc := &hookClient{Client: b.rueidis(t)}
	onWire := make(chan struct{}, 1)
	hc.set(func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if cmd.script != "sem_acquire" || cmd.multi {
			return call()
		}
		select {
		case onWire <- struct{}{}:
		default:
		}
		<-ctx.Done() // no answer
		return rueidis.NewErrorResult(ctx.Err())
	})
	lh := &lateHooks{}
	const cleanup = time.Second
	c, err := rlock.New(hc, rlock.WithObserver(lh.observer()), rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	s := c.Semaphore(redistest.Name(t))
	ok, err := b.client(t).Semaphore(s.Name()).TrySetPermits(bg, 3)
	require.NoError(t, err)
	require.True(t, ok)
	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() { errc <- s.Acquire(ctx, 1) }()
	within(t, 5*time.Second, "the acquire on the wire", onWire)
	cancel() // the caller leaves: its acquire is left to the background, which Close waits for
	require.ErrorIs(t, await(t, errc, 5*time.Second, "Acquire"), context.Canceled)

	first := make(chan time.Duration, 1)
	began := time.Now()
	go func() { _ = c.Close(); lh.returned.Store(true); first <- time.Since(began) }()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, c.Close())
	second := time.Since(began)
	firstTook := <-first
	t.Logf("first Close returned after %v, the second after %v", firstTook, second)
	assert.Less(t, second, firstTook, "the second Close waited for the first")
	assert.GreaterOrEqual(t, firstTook, cleanup/2, "the first Close waited for the left acquire")
	assert.Empty(t, lh.got(), "hooks called after the first Close returned")
}
