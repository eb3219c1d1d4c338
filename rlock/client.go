package rlock

import (
	"container/list"
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/pubsub"
	"github.com/relock-go/relock/watchdog"
)

// Client makes locks on one Redis deployment. It owns the watchdog's goroutines (renewing
// every lock it holds in watchdog mode, in batches) and one subscription connection with its
// goroutines (shared by every waiter; on a Cluster with sharded pub/sub, one per master that
// serves a lock someone waits for, see [WithPubSub]), all started on first need and stopped
// by Close.
//
// A Client is safe for concurrent use. Make one per process and Redis deployment, and
// share it.
type Client struct {
	rc    rueidis.Client
	owned bool       // made by Dial: Close closes rc
	dials *dialGuard // made by Dial: Close ends rc's dials in progress (nil otherwise)
	opts  options
	id    string // instance id: uuid without dashes
	// deadlines are the shared deadline channels of first sends (sendCtx).
	deadlines deadlines
	// wdLease is the watchdog timeout in milliseconds, as the scripts take it (leaseArg).
	wdLease string

	wd  *watchdog.Watchdog
	sub *pubsub.Subscriber
	// obs dispatches events to the Observers (WithObserver, WithLogger); nil when there is
	// none, and then no event is built (observe.go).
	obs *observer
	// pubMark is the first byte of every channel argument of a script: "P" to PUBLISH, "S"
	// to SPUBLISH (sharded pub/sub; see WithPubSub and lua/lib_publish.lua).
	pubMark string

	owners atomic.Uint64 // handle owner ids
	reqs   atomic.Uint64 // request ids
	flags  atomic.Bool   // the server takes "#!lua flags=" shebangs (until it refuses one)
	// fastOff: the server refused a fast grant's MULTI (an ACL without it): every acquire
	// goes as a script (fast.go).
	fastOff atomic.Bool
	// fastAlways (tests only: SetFastAlways) sends every eligible fresh acquire as a fast
	// grant, whether or not its handle took the lock uncontended lately.
	fastAlways atomic.Bool

	// redChecked holds the outcome of the duplicate-server check of each set of RedLock
	// Clients (their ids joined) that this Client is the first of, once complete: a nil
	// error (distinct servers) or the ErrInvalid found (redlock_verify.go, RedLock.verify).
	redChecked sync.Map
	// redSilent is until when (unix nanoseconds) this Client's server counts as silent for
	// RedLock rounds: one of its requests in a round got no answer within the round's
	// instance timeout; an answer clears it (redlock_round.go, RedLock.round).
	redSilent atomic.Int64

	mu    sync.Mutex
	holds map[holdKey]*hold
	// ended keeps, by lock and owner, the holds that left the table while their last tenure
	// had run to the end of its fixed lease (hold.expired), the oldest dropped beyond
	// endedCap: an Unlock of such a hold through any handle of this Client, not only the one
	// that used it last (Mutex.spare), finds that the tenure ended (ref, peekFor).
	ended      map[holdKey]*list.Element // of endedOrder; Value is the *hold
	endedOrder list.List                 // oldest first
	handoffs   map[string]*handoffQueue  // parked candidates per lock (handoff.go)
	closed     bool

	// life ends with Close (cause ErrClosed): work done on a caller's behalf past its ctx
	// (cleanupCtx) ends with it. bg counts that work when it goes on after the caller
	// returned (background), so that Close can wait for it.
	life    context.Context
	endLife context.CancelCauseFunc
	bg      sync.WaitGroup
	// late counts the Semaphore acquires whose outcome is not known yet (lateBegin): Close
	// sets lateShut (guarded by mu; no more are counted), waits for them instead of ending
	// them, until closeBy (the cleanup timeout after Close began; set by Close, guarded by
	// mu), then ends drain (drainCtxUntil's parent).
	late     sync.WaitGroup
	lateShut bool
	closeBy  time.Time
	drain    context.Context
	endDrain context.CancelCauseFunc
	// leavers counts the waits that register something in Redis to withdraw when they give
	// up (a FairMutex waiter's place, an RWMutex writer's claim: waitSpec.leave), from their
	// start until that withdrawal is done (leaverBegin). Close sets leaversShut (no more are
	// counted) and waits, until closeBy, for leftAll, closed when leavers falls to 0: the
	// waits Close ended withdraw (withdraw) before a Dial'ed Client's connections close. It
	// then sets leavesOver. All guarded by mu.
	leavers     int
	leaversShut bool
	leftAll     chan struct{}
	leavesOver  bool
	// idle are the workers waiting for work (workers.go; guarded by mu); workers counts the
	// workers' goroutines, so that Close can wait for them.
	idle    []*worker
	workers sync.WaitGroup
	// atClose are called by Close once the holds ended (redlock_observe.go).
	atClose closeHooks
}

// New returns a Client that locks through client. relock borrows client and never closes
// it; close it after [Client.Close]. The options are validated here: an invalid one, or a nil
// one, is an error wrapping [ErrInvalid]. New starts no goroutine and sends nothing to Redis,
// unless asked to keep a record of the Client ([WithClientInfo]).
func New(client rueidis.Client, opts ...Option) (*Client, error) {
	if client == nil {
		return nil, invalid("nil rueidis client")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{
		rc:       client,
		opts:     o,
		id:       strings.ReplaceAll(uuid.NewString(), "-", ""),
		holds:    make(map[holdKey]*hold),
		ended:    make(map[holdKey]*list.Element),
		handoffs: make(map[string]*handoffQueue),
	}
	c.obs = newObserver(o.observers)
	c.wdLease = strconv.FormatInt(o.watchdogTimeout.Milliseconds(), 10)
	c.life, c.endLife = context.WithCancelCause(context.Background())
	c.drain, c.endDrain = context.WithCancelCause(context.Background())
	c.flags.Store(true)
	if c.wd, err = watchdog.New(renewer{c}, watchdog.WithRenewFraction(o.renewFraction)); err != nil {
		return nil, invalid("%v", err)
	}
	cluster := client.Mode() == rueidis.ClientModeCluster
	if o.pubsub == PubSubSharded && !cluster {
		return nil, invalid("PubSubSharded needs a rueidis client in Cluster mode")
	}
	psOpts := []pubsub.Option{pubsub.WithLinger(o.linger)}
	c.pubMark = "P"
	if o.pubsub == PubSubSharded || o.pubsub == PubSubAuto && cluster {
		c.pubMark = "S"
		psOpts = append(psOpts, pubsub.WithSharded())
	}
	if obs := c.obs; obs != nil {
		psOpts = append(psOpts, pubsub.WithNotify(func(channel string, up bool, err error) {
			obs.subscription(SubscriptionInfo{Channel: channel, Up: up, Err: err})
		}))
	}
	if c.sub, err = pubsub.New(client, psOpts...); err != nil {
		return nil, invalid("%v", err)
	}
	c.startClientInfo() // WithClientInfo only
	return c, nil
}

// Dial makes a rueidis client from opt, configured for locks, and a Client that locks
// through it and owns it: [Client.Close] closes it too. It is the fastest way to run relock
// and the one the README shows; use [New] to lock through a rueidis client you already have.
//
// Configured for locks means client-side caching off (opt.DisableCache is set): relock
// never reads through the cache, and a client with caching on keeps every connection in
// rueidis's background mode, where each request crosses two goroutines; without it a lone
// request is written and read on the caller's goroutine (bench/compare measures both). It also spares the lock user the
// CLIENT TRACKING right. Every other field of opt is used as given.
//
// Dial returns an error wrapping [ErrInvalid] for an invalid option (nothing is dialled, but
// for [PubSubSharded], which only the dial tells to be invalid when the server is not a
// Cluster: the rueidis client made is closed before Dial returns), or rueidis's error when it
// cannot connect (as [rueidis.NewClient] does, it dials at once,
// bounded by opt's own timeouts; [DialContext] bounds it by a context).
func Dial(opt rueidis.ClientOption, opts ...Option) (*Client, error) {
	return DialContext(context.Background(), opt, opts...)
}

// Close stops every goroutine the Client started and waits for them (but see the second
// exception below for a subscription connection being dialled). Locks still held are
// not released: like a crashed process's, they expire within their lease (the watchdog
// timeout for locks held in watchdog mode). Their holders are told: the hold's Done channel
// closes and its contexts are cancelled with cause [ErrClosed]. Calls in flight that are
// waiting or replaying a request end promptly with an error wrapping ErrClosed (a request
// whose outcome is then unknown also wraps [ErrUnknownOutcome]; a hold it may have granted
// expires with its lease); every later call on the Client or its handles returns
// ErrClosed. A [FairMutex] waiter or [RWMutex] writer that Close ends first removes its
// place in the queue (or its claim), as one that gives up for another reason does, and
// Close waits for that, within the cleanup timeout since it began: a place left behind
// would refuse the free lock to every other Client for the waiter timeout. A Client made by
// [Dial] then closes its rueidis client (a removal not done by then is not sent: that place
// runs out with the waiter timeout); one made by [New] leaves the caller's open. Close is
// idempotent and always returns nil; on a nil or zero Client (not made by New or Dial) it
// does nothing. A Close made while another is under way
// returns at once, without waiting for it (so that an Observer hook that Close's work calls
// may call Close): only the first Close's return says that the Client's work has ended.
//
// Close returns promptly, with two exceptions. First, permits of a [Semaphore] never
// expire: an Acquire (or DrainPermits) whose caller left (its ctx ended) before Redis
// answered is resolved in the background, and Close waits for that work, at most the cleanup
// timeout ([WithCleanupTimeout]), rather than ending it: it resends the request under its id
// until Redis tells what it did, and gives back the permits it took. An Acquire (or drain)
// still waiting for its first request's answer when Close comes returns ErrClosed at once,
// its request resolved the same way. When Redis does not answer in time, the outcome stays
// unknown and is reported to the Observers (a GiveBack event whose Err wraps
// [ErrUnknownOutcome]; see Replays at [Semaphore]). A [PermitSemaphore]'s permits expire
// with their lease: Close ends that work for them, as it does for locks. Another write of
// the semaphores or the latch whose caller left while its request was on the wire ends with
// Close, but a request rueidis sends on its own goroutine heeds only its deadline: Close
// waits for it, within the cleanup timeout. So it does for the removal of a waiter's place
// or claim (above) that Redis is slow to answer.
//
// Second, Close waits for the Client's subscription goroutines, at most until the cleanup
// timeout since it began (or 0.1 s, when the first exception took all of it), and one of
// them may be dialling a subscription connection (the first wait on a lock, or a
// reconnection) to a server that does not answer. A Client made by Dial ends such a dial
// (Close closes the connections its rueidis client is dialling or setting up). A Client made
// by New cannot, since the rueidis client dials it under a context of its own: Close returns
// at the cleanup timeout and leaves that goroutine to end when the dial fails, by the rueidis
// client's bound on a connection's setup (ClientOption.Dialer.Timeout, 5 s by default, or
// ConnWriteTimeout, 10 s by default, when that is shorter); it then closes the connection it
// got and sends nothing (a goroutine-leak check run at once may see it). So Close returns
// within the cleanup timeout, plus 0.1 s at most when both exceptions meet.
func (c *Client) Close() error {
	if c.usable() != nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.closeBy = time.Now().Add(c.opts.cleanupTimeout)
	c.mu.Unlock()
	c.endLife(ErrClosed)
	c.deadlines.close() // first sends in flight end too
	c.bg.Wait()
	c.mu.Lock()
	c.lateShut = true
	c.mu.Unlock()
	c.late.Wait() // left semaphore acquires, resolved by closeBy (drainCtxUntil)
	c.endDrain(ErrClosed)
	c.workers.Wait() // idle ones end with the Client's life; busy ones after their work
	c.wd.Close()
	c.awaitLeavers() // before a Dial'ed Client's connections close (dials, rc)
	if c.dials != nil {
		c.dials.close() // a subscription connection being dialled: Close does not wait it out
	}
	// Bounded by closeBy: a subscription connection being dialled to a server that does not
	// answer is left to end by itself (the Subscriber's goroutine exits when the dial fails).
	// When the Semaphore drain above took all of it, the goroutines still get a moment to
	// exit, which they do at once unless one dials.
	by := c.closeBy
	if least := time.Now().Add(100 * time.Millisecond); by.Before(least) {
		by = least
	}
	subCtx, cancel := context.WithDeadline(context.Background(), by)
	_ = c.sub.Shutdown(subCtx)
	cancel()
	c.mu.Lock()
	holds := make([]*hold, 0, len(c.holds))
	for _, h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	for _, h := range holds {
		h.end(ErrClosed)
	}
	c.atClose.run()
	if c.obs != nil {
		// No hook but a call's own from now on, and none still being called (observer.shut).
		c.obs.settle(c.closeBy)
	}
	if c.owned {
		c.rc.Close()
	}
	return nil
}

// awaitLeavers waits, until closeBy, for the waits that Close ended (their end of the Client's
// life wakes them) to withdraw what they registered in Redis (withdraw), then tells the
// withdrawals of a Client made by Dial, whose connections Close is about to close, to send
// nothing more.
func (c *Client) awaitLeavers() {
	c.mu.Lock()
	c.leaversShut = true
	var left chan struct{}
	if c.leavers > 0 {
		left = make(chan struct{})
		c.leftAll = left
	}
	c.mu.Unlock()
	if left != nil {
		t := time.NewTimer(time.Until(c.closeBy))
		select {
		case <-left:
		case <-t.C:
		}
		t.Stop()
	}
	c.mu.Lock()
	c.leavesOver = true
	c.mu.Unlock()
}

// background runs work on its own goroutine, counted for Close, unless the Client is
// closed (then it runs work at once, on the caller's goroutine: its context has ended, so it
// ends promptly). Work must therefore wait on nothing that the Client's life does not end
// (life.Done, or a context from cleanupCtx or firstSendCtx made after Close): waiting past
// Close for another call's request on the wire (a claimed hand-off's release, say) would
// hold the caller past its grace, up to that request's cleanup timeout. (A wait's leave is
// the exception: withdraw holds the caller until closeBy at most, since Close waits for it.)
func (c *Client) background(work func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		work()
		return
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		work()
	}()
}

// lateBegin counts, for Close, a semaphore acquire whose permits never expire, from its
// first send until its outcome is known: to its caller, or to the work the caller hands it
// over to when it leaves (handOff), which Close waits for rather than ends, since permits
// it took and did not give back would never come back. Such work bounds its waits by
// drainCtxUntil (which ends the cleanup timeout after Close began at the latest) and heeds
// the Client's life only to stop waiting on its first send (inflight.wait). The count ends
// with late.Done. lateBegin reports false, counting nothing, once Close has stopped
// waiting.
func (c *Client) lateBegin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lateShut {
		return false
	}
	c.late.Add(1)
	return true
}

// leaverBegin counts, for Close, a wait that may register something in Redis to withdraw
// when it gives up (waitSpec.leave), until leaverEnd, called once its withdrawal is done (or
// handed to the background, which Close waits for first). It reports false, counting
// nothing, once Close has stopped waiting for such waits.
func (c *Client) leaverBegin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leaversShut {
		return false
	}
	c.leavers++
	return true
}

// leaverEnd ends a count of leaverBegin's.
func (c *Client) leaverEnd() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leavers--; c.leavers == 0 && c.leftAll != nil {
		close(c.leftAll)
		c.leftAll = nil
	}
}

// withdraw runs send, the removal of what a wait that gave up registered in Redis (a
// FairMutex waiter's place, an RWMutex writer's claim), under a context that keeps ctx's
// values and ends by the cleanup timeout, and by closeBy once Close began, but that Close
// does not end: a place left behind would refuse the free lock to every other Client for the
// waiter timeout, so a wait that Close ended withdraws too, and Close waits for it
// (leaverBegin, awaitLeavers). One that comes after that wait (its goroutine came late, or
// Redis did not answer by closeBy) still goes on a Client made by New, whose rueidis client
// is the caller's, but not on one made by Dial, whose connections Close closes then: the
// place runs out with the waiter timeout, as when send fails.
func (c *Client) withdraw(ctx context.Context, send func(ctx context.Context)) {
	c.mu.Lock()
	over := c.owned && c.leavesOver
	c.mu.Unlock()
	if over {
		return
	}
	wctx, cancel := c.drainCtxUntil(context.Background(), ctx, time.Now().Add(c.opts.cleanupTimeout))
	defer cancel()
	send(wctx)
}

// drainCtxUntil is cleanupCtx for work that Close waits for (lateBegin, withdraw), ending
// at dl: it keeps ctx's values and drops its cancellation; it ends with drain (c.drain, or
// the Client's ended life for work that Close does not wait for, or context.Background for a
// withdrawal), and by the cleanup timeout after Close began (closeBy), but Close does not end
// it at once.
func (c *Client) drainCtxUntil(drain, ctx context.Context, dl time.Time) (context.Context, context.CancelFunc) {
	c.mu.Lock()
	if c.closed && c.closeBy.Before(dl) {
		dl = c.closeBy
	}
	c.mu.Unlock()
	switch cv := ctx.(type) {
	case callerValues:
		ctx = cv.values
	case *sendCtx:
		ctx = cv.values
	}
	tctx, cancel := context.WithDeadline(drain, dl)
	return callerValues{Context: tctx, values: ctx}, cancel
}

// ID is the Client's instance id, part of every owner id it makes ("" for a nil Client).
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.id
}

// usable returns an error wrapping ErrInvalid for a nil Client, or a zero one (not made by
// New or Dial).
func (c *Client) usable() error {
	switch {
	case c == nil:
		return invalid("nil Client: make one with New or Dial")
	case c.rc == nil || c.wd == nil:
		return invalid("zero Client: make one with New or Dial")
	}
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// newOwner returns a fresh owner id for a handle.
func (c *Client) newOwner() string {
	return "h:" + c.id + ":" + strconv.FormatUint(c.owners.Add(1), 10)
}

// newRequest returns a request id unique across processes and time; it holds no ':'.
func (c *Client) newRequest() string {
	var buf [64]byte // the id is 32 bytes, the counter at most 20: one allocation, the string
	b := append(buf[:0], c.id...)
	b = append(b, '.')
	b = strconv.AppendUint(b, c.reqs.Add(1), 10)
	return string(b)
}

// newFastRequest returns a fast grant's token field for owner, '~<owner> <seq>', and seq, a
// request id as newRequest's, in one allocation (fast.go).
func (c *Client) newFastRequest(owner string) (value, seq string) {
	var buf [128]byte
	b := append(buf[:0], '~')
	b = append(b, owner...)
	b = append(b, ' ')
	b = append(b, c.id...)
	b = append(b, '.')
	b = strconv.AppendUint(b, c.reqs.Add(1), 10)
	value = string(b)
	return value, value[len(owner)+2:]
}

// leaseArg is lease in milliseconds, as the scripts take it; the watchdog timeout's is made
// once.
func (c *Client) leaseArg(lease time.Duration) string {
	if lease == c.opts.watchdogTimeout {
		return c.wdLease
	}
	return strconv.FormatInt(lease.Milliseconds(), 10)
}

// exec runs a script, with its shebang flags while the server takes them.
func (c *Client) exec(ctx context.Context, s *lua.Script, keys, args []string) rueidis.RedisResult {
	flags := s.HasFlags() && c.flags.Load()
	res := s.Lua(flags).Exec(ctx, c.rc, keys, args)
	if flags && lua.IsShebangError(res.Error()) {
		c.flags.Store(false)
		res = s.Lua(false).Exec(ctx, c.rc, keys, args)
	}
	return res
}

// cleanupCtx is a context for work done on the caller's behalf after its ctx may have
// ended: it keeps ctx's values, drops its cancellation, and is bounded by the cleanup
// timeout and by the Client's life (Close cancels it, with cause ErrClosed). Work already
// under a cleanup context stays under it: nested steps share one cleanup timeout.
func (c *Client) cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.cleanupCtxUntil(ctx, time.Now().Add(c.opts.cleanupTimeout))
}

// ownCleanupCtx is cleanupCtx with a whole cleanup timeout of its own, even for work already
// under a cleanup context (whose values it keeps): for a step that must succeed after
// steps that may have spent that context's timeout waiting (a give-back after the replays
// that learnt what to give back).
func (c *Client) ownCleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if cv, ok := ctx.(callerValues); ok {
		ctx = cv.values // cleanupCtx would keep it whole; a sendCtx it unwraps itself
	}
	return c.cleanupCtx(ctx)
}

// cleanupCtxUntil is cleanupCtx ending at dl (a sendCtx's deadline: the steps that follow a
// first send share its cleanup timeout).
func (c *Client) cleanupCtxUntil(ctx context.Context, dl time.Time) (context.Context, context.CancelFunc) {
	switch cv := ctx.(type) {
	case callerValues:
		return cv, func() {}
	case *sendCtx:
		ctx = cv.values
	}
	tctx, cancel := context.WithDeadline(c.life, dl)
	return callerValues{Context: tctx, values: ctx}, cancel
}

// sendCtx is the context of a first send made on the caller's behalf (a release): the
// caller's values, and a deadline (the cleanup timeout, which bounds the send and keeps
// rueidis on its synchronous path for a lone request) that no caller's cancellation, nor
// Close, brings forward. Its Done channel is shared with every send whose deadline falls in
// the same few milliseconds (deadlines), so that the common send, answered at once, makes
// no timer of its own. A send that fails ambiguously goes on to replays under
// cleanupCtxUntil, within the same deadline, which Close does end.
type sendCtx struct {
	values context.Context
	dl     time.Time
	done   <-chan struct{}
}

// firstSendCtx returns the context for a first send on ctx's behalf, and its cancel: ctx
// itself when it is already a cleanup context, else a sendCtx ending within the cleanup
// timeout (a cleanup context of its own when that timeout is too short for shared
// deadlines, which come up to deadlineStep early).
func (c *Client) firstSendCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.firstSendCtxIn(ctx, time.Now(), new(sendCtx))
}

// firstSendCtxIn is firstSendCtx for a send made at sent, filling sc when it makes a
// sendCtx (a caller that keeps sc in memory of its own makes none).
func (c *Client) firstSendCtxIn(ctx context.Context, sent time.Time, sc *sendCtx) (context.Context, context.CancelFunc) {
	switch ctx.(type) {
	case callerValues, *sendCtx:
		return ctx, func() {}
	}
	end := sent.Add(c.opts.cleanupTimeout)
	if c.opts.cleanupTimeout < 4*deadlineStep || !end.Before(lastBucketed) {
		return c.cleanupCtxUntil(ctx, end)
	}
	dl, done := c.deadlines.at(end)
	*sc = sendCtx{values: ctx, dl: dl, done: done}
	return sc, func() {}
}

func (s *sendCtx) Deadline() (time.Time, bool) { return s.dl, true }
func (s *sendCtx) Done() <-chan struct{}       { return s.done }
func (s *sendCtx) Value(key any) any           { return s.values.Value(key) }
func (s *sendCtx) Err() error {
	select {
	case <-s.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// deadlineStep is the width of deadlines' buckets: a deadline is brought forward by less.
const deadlineStep = 8 * time.Millisecond

// lastBucketed bounds the deadlines that deadlines can bucket: they key buckets by
// UnixNano, which ends in 2262. A later deadline (a cleanup timeout of centuries) gets a
// context of its own.
var lastBucketed = time.Unix(0, math.MaxInt64-int64(deadlineStep))

// deadlines hands out channels closed at coarse deadlines: every deadline in one bucket of
// deadlineStep shares one channel and one timer, closed at the bucket's start (never after
// the deadline asked for).
type deadlines struct {
	mu     sync.Mutex
	m      map[int64]*deadlineBucket
	closed bool
}

type deadlineBucket struct {
	ch    chan struct{}
	timer *time.Timer
}

// at returns the deadline of t's bucket (at most t) and the channel closed then.
func (d *deadlines) at(t time.Time) (time.Time, <-chan struct{}) {
	k := t.UnixNano() / int64(deadlineStep)
	dl := time.Unix(0, k*int64(deadlineStep))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return dl, closedCh
	}
	if b := d.m[k]; b != nil {
		return dl, b.ch
	}
	if d.m == nil {
		d.m = make(map[int64]*deadlineBucket)
	}
	b := &deadlineBucket{ch: make(chan struct{})}
	b.timer = time.AfterFunc(time.Until(dl), func() {
		d.mu.Lock()
		if d.m[k] == b {
			delete(d.m, k)
		}
		d.mu.Unlock()
		close(b.ch)
	})
	d.m[k] = b
	return dl, b.ch
}

// close closes every channel handed out (their sends end) and stops their timers.
func (d *deadlines) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for k, b := range d.m {
		if b.timer.Stop() {
			close(b.ch)
		}
		delete(d.m, k)
	}
}

// callerValues is a context whose cancellation and deadline are its embedded context's and
// whose values are, beyond those, the caller's (for rueidis hooks and tracing).
type callerValues struct {
	context.Context
	values context.Context
}

func (v callerValues) Value(key any) any {
	// The embedded context first: it answers the context package's own keys, so that
	// contexts derived from this one are cancelled with it without a goroutine.
	if x := v.Context.Value(key); x != nil {
		return x
	}
	return v.values.Value(key)
}

// pubArg is channel as a script takes it: marked with the publish command (see pubMark).
func (c *Client) pubArg(channel string) string { return c.pubMark + channel }

// lockKeys are the keys of the lock called name, under the Client's prefix and pub/sub mode.
func (c *Client) lockKeys(name string) lockKeys {
	k := keysFor(c.opts.prefix, name)
	k.pub = c.pubArg(k.channel)
	return k
}

// renewer renews the Client's watchdog-mode holds.
type renewer struct{ c *Client }

// Renew sends one renew script per kind of lock (each kind has its own) and lease length
// (a script sets one TTL for all its keys) in the batch: on a single server one for all
// leases of that kind and length; on Cluster, one per kind, length and hash slot (a
// script's keys must share a slot), all in one pipeline, so that a round costs one round
// trip per node rather than one per slot. A slot's script that Redis cannot run while the
// slot migrates (TRYAGAIN: some of its keys moved, others not) is sent again as one script
// per lease, each of which the node that has its key serves (rueidis follows ASK).
//
// (RenewReport tells the observer of each round.)
func (r renewer) Renew(ctx context.Context, leases []*watchdog.Lease) []error {
	errs, _ := r.renew(ctx, leases)
	settleOrphans(leases, errs)
	return errs
}

// settleOrphans starts the give-back of the orphans of every hold whose renewal Redis has
// just confirmed (hold.settleOrphans): Redis answers again, so the give-backs that failed
// while it did not are tried anew, within one renewal period of its return.
func settleOrphans(leases []*watchdog.Lease, errs []error) {
	for i, l := range leases {
		if i < len(errs) && errs[i] == nil {
			l.Data.(*hold).settleOrphans()
		}
	}
}

// RenewReport is Renew that, when the Client has an observer, returns the RenewalRound
// report, which the watchdog calls once the round's results are applied: a slow hook never
// makes the watchdog drop a lease that Redis has just renewed.
func (r renewer) RenewReport(ctx context.Context, leases []*watchdog.Lease) ([]error, func()) {
	o := r.c.obs
	if o == nil {
		errs, _ := r.renew(ctx, leases)
		settleOrphans(leases, errs)
		return errs, nil
	}
	start := o.now()
	errs, scripts := r.renew(ctx, leases)
	settleOrphans(leases, errs)
	e := RenewalRoundInfo{Leases: len(leases), Scripts: scripts, Took: o.now() - start}
	for _, err := range errs {
		if err == nil {
			continue
		}
		e.Failures++
		if e.Err == nil {
			e.Err = err
		}
		if errors.Is(err, watchdog.ErrGone) {
			e.Lost++
		}
	}
	return errs, func() { o.renewalRound(e) }
}

// renew is Renew; it also returns how many renew scripts it sent.
func (r renewer) renew(ctx context.Context, leases []*watchdog.Lease) ([]error, int) {
	type group struct {
		v    *variant
		ttl  time.Duration
		slot uint16
	}
	cluster := r.c.rc.Mode() == rueidis.ClientModeCluster
	first := leases[0]
	if !cluster {
		same := true
		for _, l := range leases[1:] {
			if l.Data.(*hold).v.renew != first.Data.(*hold).v.renew || l.TTL != first.TTL {
				same = false
				break
			}
		}
		if same {
			v := first.Data.(*hold).v
			keys, args := r.keysArgs(v, leases)
			return r.parse(r.c.exec(ctx, v.renew, keys, args), len(leases)), 1
		}
	}
	at := make(map[group]int)
	var groups [][]int
	var vs []*variant
	for i, l := range leases {
		h := l.Data.(*hold)
		g := group{v: h.v, ttl: l.TTL}
		if cluster {
			g.slot = slot(h.keys.lock)
		}
		j, ok := at[g]
		if !ok {
			j = len(groups)
			at[g] = j
			groups, vs = append(groups, nil), append(vs, h.v)
		}
		groups[j] = append(groups[j], i)
	}
	errs := make([]error, len(leases))
	calls := make([]scriptCall, len(groups))
	batch := make([]*watchdog.Lease, 0, len(leases))
	for j, idx := range groups {
		batch = batch[:0]
		for _, i := range idx {
			batch = append(batch, leases[i])
		}
		keys, args := r.keysArgs(vs[j], batch)
		calls[j] = scriptCall{s: vs[j].renew, keys: keys, args: args}
	}
	var single []int
	for j, res := range r.c.execMulti(ctx, calls) {
		if len(groups[j]) > 1 && slotSplit(res.Error()) {
			single = append(single, groups[j]...)
			continue
		}
		for k, err := range r.parse(res, len(groups[j])) {
			errs[groups[j][k]] = err
		}
	}
	if len(single) > 0 {
		calls = calls[:0]
		for _, i := range single {
			v := leases[i].Data.(*hold).v
			keys, args := r.keysArgs(v, leases[i:i+1])
			calls = append(calls, scriptCall{s: v.renew, keys: keys, args: args})
		}
		for k, res := range r.c.execMulti(ctx, calls) {
			errs[single[k]] = r.parse(res, 1)[0]
		}
	}
	return errs, len(groups) + len(single)
}

// slotSplit reports whether err is Redis declining a multi-key script because its keys'
// slot is being migrated and the keys are split between two nodes (or a redirect rueidis
// did not follow): a script per key would be served.
func slotSplit(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	if _, moved := re.IsRedirect(); moved {
		return true
	}
	return re.IsTryAgain() || strings.HasPrefix(re.Error(), "CROSSSLOT")
}

// keysArgs are the renew script's keys and arguments for leases, all of variant v and of
// one TTL.
func (r renewer) keysArgs(v *variant, leases []*watchdog.Lease) ([]string, []string) {
	keys := make([]string, 0, len(leases))
	args := make([]string, 1, len(leases)+1)
	args[0] = strconv.FormatInt(leases[0].TTL.Milliseconds(), 10)
	for _, l := range leases {
		h := l.Data.(*hold)
		if v.renewKeys != nil {
			keys = append(keys, v.renewKeys(h.keys)...)
		} else {
			keys = append(keys, h.keys.lock)
		}
		args = append(args, h.owner)
	}
	// A renewal names its tenure (renew.lua): its token, or its fast form (fast.go) while
	// Redis holds it in that form. The owner's field alone does not tell this tenure from one
	// begun afresh since it was lost: by another Client for the same context owner id, or by
	// a send of the owner's own whose answer never came (a re-entry applied on a key that was
	// deleted, its reply and its replays' lost: TestGhostReentry_lossAfterDeleteWithRepliesLostIsTold;
	// once only context owners' tenures were named). The names go only when one of the leases
	// has one; otherwise the arguments are as before (an empty name names nothing).
	if v.renewKeys == nil { // renew.lua's locks (the others' scripts take no names)
		n, named := len(args), false
		for _, l := range leases {
			name := tenureName(v, l)
			named = named || name != ""
			args = append(args, name)
		}
		if !named {
			args = args[:n]
		}
	}
	return keys, args
}

// tenureName is how the renew script names the tenure of lease l (keysArgs): its fast form
// for a plain lock's held in that form, else its token ("" when l renews no current tenure).
func tenureName(v *variant, l *watchdog.Lease) string {
	h := l.Data.(*hold)
	if v.fast && !isContextOwner(h.owner) {
		if f := h.fastFormOf(l); f != "" {
			return f
		}
	}
	if t := h.tenureOf(l); t != 0 {
		return strconv.FormatInt(t, 10)
	}
	return ""
}

// parse turns the renew script's reply for n leases into one error per lease: nil when
// renewed, [watchdog.ErrGone] when the owner no longer holds it (or Redis refuses the
// renewal for want of rights), another error when the renewal may be tried again.
func (r renewer) parse(res rueidis.RedisResult, n int) []error {
	errs := make([]error, n)
	vals, err := res.AsIntSlice()
	if err == nil && len(vals) != n {
		err = errors.New("rlock: renew: malformed reply")
	}
	if re, ok := rueidis.IsRedisErr(err); ok && noPermission(re.Error()) {
		// Refused for want of rights, it would be refused again: the leases are as good as
		// gone, and their holders are told now rather than when they run out.
		err = errorf("%w: %w: %w", watchdog.ErrGone, ErrNoPermission, refusal(re))
	}
	for i := range errs {
		switch {
		case err != nil:
			errs[i] = err
		case vals[i] == 0:
			errs[i] = watchdog.ErrGone
		}
	}
	return errs
}

// sleep waits for d or ctx.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// execAcquire runs the acquire script; with replica acknowledgements on, a WAIT follows it on
// the same connection and acked is the number of replicas that acknowledged (else 0). On a
// Cluster, the WAIT is answered by the master that ran the script, redirections included
// (doAckedCluster). The reply is parsed into buf's memory when it fits.
func (c *Client) execAcquire(ctx context.Context, s *lua.Script, keys, args []string, buf []int64) (vals []int64, acked int64, err error) {
	if c.opts.ackReplicas == 0 {
		vals, err = intsInto(c.exec(ctx, s, keys, args), buf)
		return vals, 0, err
	}
	if c.rc.Mode() == rueidis.ClientModeCluster {
		res, acked := c.doAckedCluster(ctx, func() rueidis.Completed {
			return c.rc.B().Evalsha().Sha1(s.PlainSHA1()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		}, func() rueidis.Completed {
			return c.rc.B().Eval().Script(s.PlainSource()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
		})
		if vals, err = intsInto(res, buf); err != nil {
			return nil, 0, err
		}
		return vals, acked, nil
	}
	res := c.rc.DoMulti(ctx,
		c.rc.B().Evalsha().Sha1(s.PlainSHA1()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), c.waitCmd())
	if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
		res = c.rc.DoMulti(ctx,
			c.rc.B().Eval().Script(s.PlainSource()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), c.waitCmd())
	}
	if vals, err = res[0].AsIntSlice(); err != nil {
		return nil, 0, err
	}
	acked, _ = res[1].AsInt64()
	return vals, acked, nil
}

// intsInto is res.AsIntSlice, appended to buf (whose memory it reuses when it fits).
func intsInto(res rueidis.RedisResult, buf []int64) ([]int64, error) {
	arr, err := res.ToArray()
	if err != nil {
		return nil, err
	}
	vals := buf[:0]
	for i := range arr {
		n, err := arr[i].AsInt64()
		if err != nil {
			return nil, err
		}
		vals = append(vals, n)
	}
	return vals, nil
}

// ackAfterTouch waits for replica acknowledgements of a grant whose own reply was lost: it
// re-sets the lock's lease (a write, so that the WAIT behind it on the same connection
// covers everything written before, the grant included) and returns how many replicas
// acknowledged. On a Cluster, the WAIT is answered by the master that holds the lock, where
// the touch was applied (doAckedCluster).
func (c *Client) ackAfterTouch(ctx context.Context, key string, lease time.Duration) int64 {
	if c.rc.Mode() == rueidis.ClientModeCluster {
		_, acked := c.doAckedCluster(ctx, func() rueidis.Completed {
			return c.rc.B().Pexpire().Key(key).Milliseconds(lease.Milliseconds()).Build()
		}, nil)
		return acked
	}
	res := c.rc.DoMulti(ctx, c.rc.B().Pexpire().Key(key).Milliseconds(lease.Milliseconds()).Build(), c.waitCmd())
	acked, _ := res[1].AsInt64()
	return acked
}

// waitCmd is the WAIT for the replica acknowledgements WithReplicaAck asks for (a command
// is consumed by sending it, so each send builds its own).
func (c *Client) waitCmd() rueidis.Completed {
	return c.rc.B().Wait().Numreplicas(int64(c.opts.ackReplicas)).Timeout(c.opts.ackTimeout.Milliseconds()).Build()
}
