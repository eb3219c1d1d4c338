package rlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// wireClient keeps the first script sent through it once armed "on the wire": the call
// waits, whatever its ctx, until answer is closed, and only then reaches Redis, as a
// request written to a server that does not read it yet (rueidis's synchronous path heeds
// only a request's deadline); while block is set, every other script waits for its ctx's
// end and fails with its error, unanswered. onWire closes when the script is kept, ctxDone when the
// kept call's ctx ended (a first send's ends at Close), applied when Redis answered it.
//
// It is a hookClient (its hook: wireClient.hook); the scripts of a pipeline go straight on.
type wireClient struct {
	*hookClient
	armed   atomic.Bool
	block   atomic.Bool // every other script waits for its ctx's end, unanswered
	onWire  chan struct{}
	ctxDone chan struct{}
	answer  chan struct{}
	applied chan struct{}
}

func newWireClient(rc rueidis.Client) *wireClient {
	c := &wireClient{hookClient: &hookClient{Client: rc}, onWire: make(chan struct{}), ctxDone: make(chan struct{}), answer: make(chan struct{}), applied: make(chan struct{})}
	c.set(c.hook)
	return c
}

func (c *wireClient) hook(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
	if cmd.multi {
		return call()
	}
	if !c.armed.CompareAndSwap(true, false) {
		if c.block.Load() {
			<-ctx.Done()
			return rueidis.NewErrorResult(ctx.Err())
		}
		return call()
	}
	close(c.onWire)
	go func() {
		<-ctx.Done()
		close(c.ctxDone)
	}()
	<-c.answer
	res := cmd.sendWith(context.Background())
	close(c.applied)
	return res
}

// waitClosed waits for ch to close, or fails the test after d.
func waitClosed(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// closingSemaphore makes a Client on rc with opts (closed when the test ends) and a
// Semaphore of n permits on it, its acquire script loaded (warmSemAcquire).
func closingSemaphore(t *testing.T, rc rueidis.Client, n int, opts ...rlock.Option) (*rlock.Client, *rlock.Semaphore) {
	t.Helper()
	c, err := rlock.New(rc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	s := c.Semaphore(redistest.Name(t))
	ok, err := s.TrySetPermits(bg, n)
	require.NoError(t, err)
	require.True(t, ok)
	warmSemAcquire(t, s)
	return c, s
}

// giveBackEvents returns an Observer option whose GiveBack events go to the channel returned
// (room for 4).
func giveBackEvents() (rlock.Option, <-chan rlock.GiveBackInfo) {
	gave := make(chan rlock.GiveBackInfo, 4)
	return rlock.WithObserver(&rlock.Observer{GiveBack: func(e rlock.GiveBackInfo) { gave <- e }}), gave
}

// warmSemAcquire loads the acquire script: the kept send is then the one EVALSHA that
// applies it (a first use's EVAL fallback would go on the send's own ctx, ended by Close).
func warmSemAcquire(t *testing.T, s *rlock.Semaphore) {
	t.Helper()
	require.NoError(t, s.Acquire(bg, 1))
	require.NoError(t, s.Release(bg, 1))
}

// semCount reads the count of semaphore s from Redis (0 when there is none).
func semCount(t *testing.T, b *backend, s *rlock.Semaphore) int64 {
	t.Helper()
	msg, err := b.do(t, "GET", s.Key())
	if rueidis.IsRedisNil(err) {
		return 0
	}
	require.NoError(t, err)
	n, err := msg.AsInt64()
	require.NoError(t, err)
	return n
}

// An Acquire whose caller left while its first send was on the wire is resolved in the
// background, and permits it took are given back. A Semaphore's permits never expire, so
// Close, coming while that send is still unanswered, must not drop the resolution: Close
// waits (at most the cleanup timeout) for Redis to tell what the request did, resending it
// under its id, and gives back what it took. Before the fix the background work gave up at
// Close (inflight.wait), the send was applied afterwards, and the semaphore was 2 permits
// short for good (count 1 instead of 3).
func TestSemaphoreClose_leftAcquireGivenBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		wc := newWireClient(b.rueidis(t))
		observe, gave := giveBackEvents()
		c, s := closingSemaphore(t, wc, 3, rlock.WithCleanupTimeout(5*time.Second), observe)

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		wc.armed.Store(true)
		got := make(chan error, 1)
		go func() { got <- s.Acquire(ctx, 2) }()
		waitClosed(t, wc.onWire, 5*time.Second, "the acquire to be on the wire")
		cancel() // the caller leaves: its acquire is handed to the background
		require.ErrorIs(t, <-got, context.Canceled)

		closed := make(chan struct{})
		go func() {
			defer close(closed)
			c.Close()
		}()
		// The first send's ctx ends once Close has ended the Client's life: the background
		// work has seen Close by then. Redis answers the send only now.
		waitClosed(t, wc.ctxDone, 5*time.Second, "Close to end the first send's ctx")
		close(wc.answer)
		waitClosed(t, closed, 10*time.Second, "Close to return")
		waitClosed(t, wc.applied, 5*time.Second, "Redis to answer the first send")

		require.EqualValues(t, 3, semCount(t, b, s), "the permits taken for the caller that left were given back")
		select {
		case e := <-gave:
			require.Equal(t, rlock.GiveBackInfo{Kind: rlock.KindSemaphore, Name: s.Name(), Holds: 2, Reason: rlock.GiveBackCanceled}, e)
		default:
			t.Fatal("no GiveBack event")
		}
	})
}

// When Redis does not answer within the cleanup timeout after Close, Close still returns
// (bounded by the cleanup timeout) and the outcome of the left acquire stays unknown: the
// GiveBack event says so (its Err wraps ErrUnknownOutcome), and permits the
// send takes later are lost (a Semaphore's do not expire: see its Replays section).
func TestSemaphoreClose_leftAcquireUnknownIsReported(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		// Long enough for the set-up's calls (warmSemAcquire's Release, bounded by it) on a
		// loaded machine: 300 ms ran out once there.
		const cleanup = time.Second
		wc := newWireClient(b.rueidis(t))
		observe, gave := giveBackEvents()
		c, s := closingSemaphore(t, wc, 3, rlock.WithCleanupTimeout(cleanup), observe)

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		wc.armed.Store(true)
		got := make(chan error, 1)
		go func() { got <- s.Acquire(ctx, 2) }()
		waitClosed(t, wc.onWire, 5*time.Second, "the acquire to be on the wire")
		// Redis does not answer anything else either: every resend is refused as unserved.
		wc.block.Store(true)
		cancel()
		require.ErrorIs(t, <-got, context.Canceled)

		start := time.Now()
		require.NoError(t, c.Close())
		require.Less(t, time.Since(start), cleanup+time.Second, "Close outlasted the cleanup timeout")
		select {
		case e := <-gave:
			require.Equal(t, rlock.KindSemaphore, e.Kind)
			require.Equal(t, 2, e.Holds)
			require.Equal(t, rlock.GiveBackCanceled, e.Reason)
			require.ErrorIs(t, e.Err, rlock.ErrUnknownOutcome)
		default:
			t.Fatal("no GiveBack event telling that the outcome is unknown")
		}
		wc.block.Store(false)
		close(wc.answer)
		waitClosed(t, wc.applied, 5*time.Second, "Redis to answer the first send")
		require.EqualValues(t, 1, semCount(t, b, s), "the late first send took 2 permits for good")
	})
}

// onWire returns a hookClient on rc that closes the channel returned once the first script
// sent through it after armed was set has gone to rueidis (it is then written to the
// connection within a moment). The scripts of a pipeline go straight on.
func onWire(rc rueidis.Client, armed *atomic.Bool) (*hookClient, <-chan struct{}) {
	hc, sent := &hookClient{Client: rc}, make(chan struct{})
	hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		if !cmd.multi && armed.CompareAndSwap(true, false) {
			close(sent)
		}
		return call()
	})
	return hc, sent
}

// TestSemaphoreClose_leftAcquireGivenBack on a real server paused (SIGSTOP) while the
// acquire is on the wire and resumed once Close has begun: Redis applies the send when it
// resumes, and Close gives the permits back. Before the fix Close returned at once and the
// semaphore stayed 2 permits short (count 1 instead of 3).
func TestSemaphoreClose_pausedServer(t *testing.T) {
	b := realBackend(t)
	var armed atomic.Bool
	wc, sent := onWire(b.rueidis(t), &armed)
	c, s := closingSemaphore(t, wc, 3, rlock.WithCleanupTimeout(5*time.Second))
	logLen := func() int64 {
		msg := b.srv.Do(t, "HLEN", s.Key()+":log")
		n, err := msg.AsInt64()
		require.NoError(t, err)
		return n
	}
	before := logLen()

	b.srv.Pause(t)
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			b.srv.Resume(t)
		}
	})
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	armed.Store(true)
	got := make(chan error, 1)
	go func() { got <- s.Acquire(ctx, 2) }()
	waitClosed(t, sent, 5*time.Second, "the acquire to be sent")
	time.Sleep(20 * time.Millisecond) // written to the connection
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close()
	}()
	ended, endCancel := context.WithCancel(bg)
	endCancel()
	redistest.WaitFor(t, 5*time.Second, "Close to begin", func() bool {
		_, err := s.AvailablePermits(ended) // ErrClosed once closed; sends nothing
		return errors.Is(err, rlock.ErrClosed)
	})
	b.srv.Resume(t)
	resumed = true
	waitClosed(t, closed, 10*time.Second, "Close to return")
	redistest.WaitFor(t, 5*time.Second, "Redis to apply the acquire", func() bool { return logLen() > before })
	require.EqualValues(t, 3, semCount(t, b, s), "the permits taken for the caller that left were given back")
}

// An Acquire still waiting for its first send's answer when Close comes returns ErrClosed at
// once, and Close resolves its request as it does a left one's: permits it took are given
// back. Before, the caller waited for the answer (rueidis's synchronous path heeds only the
// send's deadline, the cleanup timeout), then returned nil holding 2 permits that its closed
// Client could no longer release (or, had rueidis given the send up at Close, an error
// wrapping ErrUnknownOutcome): here it did not return within 5 s of Close.
func TestSemaphoreClose_waitingAcquireEndsAndGivesBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		wc := newWireClient(b.rueidis(t))
		observe, gave := giveBackEvents()
		c, s := closingSemaphore(t, wc, 3, rlock.WithCleanupTimeout(5*time.Second), observe)

		ctx, cancel := context.WithCancel(bg) // never ends before Close
		defer cancel()
		wc.armed.Store(true)
		got := make(chan error, 1)
		go func() { got <- s.Acquire(ctx, 2) }()
		waitClosed(t, wc.onWire, 5*time.Second, "the acquire to be on the wire")

		closed := make(chan struct{})
		go func() {
			defer close(closed)
			c.Close()
		}()
		select {
		case err := <-got:
			require.ErrorIs(t, err, rlock.ErrClosed)
		case <-time.After(5 * time.Second):
			close(wc.answer) // lets the test end
			t.Fatal("Acquire did not return at Close while its first send was unanswered")
		}
		close(wc.answer)
		waitClosed(t, closed, 10*time.Second, "Close to return")
		waitClosed(t, wc.applied, 5*time.Second, "Redis to answer the first send")

		require.EqualValues(t, 3, semCount(t, b, s), "the permits taken for the caller that Close ended were given back")
		select {
		case e := <-gave:
			require.Equal(t, rlock.GiveBackInfo{Kind: rlock.KindSemaphore, Name: s.Name(), Holds: 2, Reason: rlock.GiveBackCanceled}, e)
		default:
			t.Fatal("no GiveBack event")
		}
	})
}

// A Semaphore Acquire whose first send's reply was lost, and that is resending the request
// when Close comes, hands the request over (as one still waiting for its first send's answer
// does) and gets ErrClosed: Close waits for the resends and gives back the permit the first
// send took. Before, Close cut the resends short and the caller got ErrUnknownOutcome with
// ErrClosed: the permit was gone for good, and nothing was reported (found in review).
func TestSemaphoreClose_resendingAcquireHandedOver(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		c, s := closingSemaphore(t, lc, 1, rlock.WithCleanupTimeout(3*time.Second))

		var drops atomic.Int32
		lc.onDrop = func() { drops.Add(1) }
		lc.always.Store(true) // applied, every reply lost: the caller resends
		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		got := make(chan error, 1)
		go func() { got <- s.Acquire(ctx, 1) }()
		redistest.WaitFor(t, 5*time.Second, "the Acquire to be resending", func() bool { return drops.Load() >= 3 })
		closed := make(chan error, 1)
		go func() { closed <- c.Close() }()
		err := await(t, got, 5*time.Second, "Acquire to return at Close")
		require.ErrorIs(t, err, rlock.ErrClosed)
		require.NotErrorIs(t, err, rlock.ErrUnknownOutcome, "handed over, not given up")
		lc.always.Store(false) // Redis answers again: the work Close waits for learns the outcome
		require.NoError(t, await(t, closed, 10*time.Second, "Close"))
		require.EqualValues(t, 1, semCount(t, b, s), "the permit the first send took was given back")
	})
}
