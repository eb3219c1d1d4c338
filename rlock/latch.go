package rlock

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/pubsub"
)

// CountDownLatch is a handle on a count-down latch named in Redis: a count set once with
// [CountDownLatch.TrySetCount] and counted down by [CountDownLatch.CountDown], from any
// process; [CountDownLatch.Await] blocks until the count reaches zero. Get one with
// [Client.CountDownLatch]. A handle holds no state of its own: handles of one name, in any
// process, are the same latch, and a handle is safe for concurrent use.
//
// # Lifetime
//
// The latch exists from TrySetCount until its count reaches zero (or [CountDownLatch.Delete]):
// at zero it is deleted and every waiter, of every Client, is woken at once. A latch that does
// not exist counts as open: Await on it returns at once, so set the count before anyone
// awaits it (as with Java's CountDownLatch, whose count is given to its constructor). Once
// open, a latch may be set again and used anew.
//
// # Waiting
//
// Waiters do not poll: they are woken through Redis pub/sub when the count reaches zero,
// then read the count to make sure. A waiter also looks again when the latch's key would
// expire (if someone gave it an expiry) and, as a safety net against a lost message, once per
// watchdog timeout. A waiter woken by the latch opening that only looks after a new
// TrySetCount has set it again sees the new count and waits for that one.
//
// # Replays
//
// TrySetCount, CountDown and Delete each carry a request id. When a reply is lost (a timeout,
// a broken connection), the request is resent under the same id until Redis answers (within
// the cleanup timeout, [WithCleanupTimeout], and while ctx lives), and Redis answers a resent
// request without applying it again: a CountDown whose reply was lost counts down exactly
// once. A call whose ctx ends before Redis answered returns at once with an error wrapping
// ctx's error and [ErrUnknownOutcome]: it may still be applied, once.
//
// # Keys
//
// The count is a string at the same key a [Mutex] of that name would use ([CountDownLatch.Key]);
// the channel that announces the opening and the short-lived records of applied requests
// ("...:req:<id>", kept twice the cleanup timeout) share its hash tag. A Mutex and a latch
// of one name therefore cannot coexist: each reports [ErrWrongType] on the other's key.
// A [Semaphore] keeps its count in a string at that key too, so a latch and a semaphore of
// one name would read each other's numbers (as in Redisson): give each its own name.
//
// Unlike Redisson, the count is int64 and must be set to at least 1 (TrySetCount(0) is
// invalid: a latch at zero does not exist), and the channel is only published on opening
// and deletion, not on TrySetCount.
type CountDownLatch struct {
	c    *Client
	name string
	keys lockKeys
	err  error // an invalid name: every method returns it
}

// CountDownLatch returns a handle on the count-down latch called name. It sends nothing to
// Redis. An empty name, or a nil or zero Client, makes a handle whose every method returns an
// error wrapping [ErrInvalid]. So do a nil or zero *CountDownLatch's (Name and Key return "").
func (c *Client) CountDownLatch(name string) *CountDownLatch {
	if err := c.usable(); err != nil {
		return &CountDownLatch{name: name, err: err}
	}
	l := &CountDownLatch{c: c, name: name, keys: c.lockKeys(name)}
	if name == "" {
		l.err = invalid("empty latch name")
	}
	return l
}

// Name is the latch's name as given to [Client.CountDownLatch].
func (l *CountDownLatch) Name() string {
	if l == nil {
		return ""
	}
	return l.name
}

// Key is the Redis key of the latch's count.
func (l *CountDownLatch) Key() string {
	if l == nil {
		return ""
	}
	return l.keys.lock
}

// check returns the error every method returns before it sends anything: an invalid name,
// a closed Client, or a ctx that has already ended.
func (l *CountDownLatch) check(ctx context.Context, op string) error {
	switch {
	case l == nil:
		return invalid("nil latch handle")
	case l.err != nil:
		return l.err
	case l.c == nil:
		return invalid("zero latch handle: make one with a Client")
	case ctxError(ctx) != nil:
		return ctxError(ctx)
	}
	if l.c.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return errorf("%s %q: %w", op, l.name, err)
	}
	return nil
}

// run sends a mutating latch script under a fresh request id, with the record key of that
// request as KEYS[2], and resolves a lost reply by resending it under the same id until
// Redis answers (semRun: within the cleanup timeout, heeding ctx's end). args follow the
// script's own ARGV, the last being how long a record lasts, added here.
func (l *CountDownLatch) run(ctx context.Context, op string, s *lua.Script, args ...string) (int64, error) {
	keys := []string{l.keys.lock, l.keys.lock + ":req:" + l.c.newRequest()}
	args = append(args, l.c.semKeep())
	site := replaySite{kind: KindLatch, name: l.name, op: replayOp(op)}
	res, _, err := l.c.semRun(ctx, site, false, s, keys, args, -1)
	var n int64
	if err == nil {
		n, err = res.AsInt64()
	}
	if err != nil {
		return 0, classify(op, l.name, err)
	}
	return n, nil
}

// TrySetCount creates the latch with count n (n >= 1) if it does not exist, and reports
// whether it did; an existing latch keeps its count. A latch that reached zero no longer
// exists, so it can be set again.
//
// It returns (false, err) with err wrapping [ErrInvalid] for n < 1 or an invalid name,
// [ErrWrongType] when the key holds another kind of value (left untouched), [ErrClosed], ctx's
// error when ctx had already ended (nothing sent), or a Redis or connection error; a request
// whose reply was lost is resent under the same id, and an outcome that could not be learned
// within the cleanup timeout is [ErrUnknownOutcome].
func (l *CountDownLatch) TrySetCount(ctx context.Context, n int64) (bool, error) {
	if err := l.check(ctx, "set count of latch"); err != nil {
		return false, err
	}
	if n < 1 {
		return false, invalid("latch count %d is below 1", n)
	}
	r, err := l.run(ctx, "set count of latch", lua.LatchSet, strconv.FormatInt(n, 10))
	return r == 1, err
}

// CountDown counts the latch down by one. When the count reaches zero, the latch is deleted
// and every waiter of every Client is woken. On a latch that does not exist (never set, or
// already at zero) it does nothing and returns nil, as Redisson's does.
//
// CountDown is applied at most once per call, even when its reply is lost: the request is
// then resent under the same id until Redis answers, within [WithCleanupTimeout] and while
// ctx lives. Errors: [ErrWrongType], [ErrClosed], [ErrInvalid], ctx's error when ctx had
// already ended (nothing sent), [ErrUnknownOutcome] when the outcome could not be learned
// (wrapping ctx's error too when ctx ended first: the CountDown may still be applied, once),
// or a Redis or connection error.
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if err := l.check(ctx, "count down latch"); err != nil {
		return err
	}
	o := l.c.obs
	if o == nil {
		_, err := l.run(ctx, "count down latch", lua.LatchCountDown, l.keys.pub, pubsub.WakeAll)
		return err
	}
	si := ReleaseStartInfo{Kind: KindLatch, Name: l.name, Permits: 1}
	start := o.now()
	octx := o.releaseStart(ctx, si)
	n, err := l.run(ctx, "count down latch", lua.LatchCountDown, l.keys.pub, pubsub.WakeAll)
	o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start, Freed: err == nil && n == 0})
	return err
}

// Delete deletes the latch whatever its count and wakes every waiter (they return as if the
// count had reached zero). It reports whether there was a latch. Like CountDown it is
// resolved by resending when its reply is lost, and its errors are CountDown's.
func (l *CountDownLatch) Delete(ctx context.Context) (bool, error) {
	if err := l.check(ctx, "delete latch"); err != nil {
		return false, err
	}
	r, err := l.run(ctx, "delete latch", lua.LatchDelete, l.keys.pub, pubsub.WakeAll)
	return r == 1, err
}

// Count is the latch's current count: 0 when it does not exist (never set, reached zero, or
// deleted). Errors: [ErrWrongType] when the key holds another kind of value, [ErrClosed],
// [ErrInvalid], or a Redis or ctx error (ctx's as soon as ctx ends, even while Redis does not
// answer).
func (l *CountDownLatch) Count(ctx context.Context) (int64, error) {
	if err := l.check(ctx, "count of latch"); err != nil {
		return 0, err
	}
	// The caller leaves at ctx's end even while rueidis does not (see leave).
	type readRes struct {
		n   int64
		err error
	}
	r, ok := leave(ctx, func() readRes { n, _, err := l.read(ctx); return readRes{n, err} })
	if !ok {
		return 0, errorf("count of latch %q: %w", l.name, ctx.Err())
	}
	return r.n, r.err
}

// read returns the count (0 when the latch does not exist) and the key's remaining time
// to live (-1 when it has no expiry or does not exist), in one round trip.
func (l *CountDownLatch) read(ctx context.Context) (int64, time.Duration, error) {
	rc := l.c.rc
	res := rc.DoMulti(ctx, rc.B().Get().Key(l.keys.lock).Build(), rc.B().Pttl().Key(l.keys.lock).Build())
	s, err := res[0].ToString()
	if rueidis.IsRedisNil(err) {
		return 0, -1, nil
	}
	if err != nil {
		return 0, 0, classify("count of latch", l.name, err)
	}
	n, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil {
		return 0, 0, errorf("count of latch %q: %w (a string that is not a count)", l.name, ErrWrongType)
	}
	ttl := time.Duration(-1)
	if ms, err := res[1].AsInt64(); err == nil && ms >= 0 {
		ttl = time.Duration(ms) * time.Millisecond
	}
	return max(n, 0), ttl, nil
}

// Await blocks until the latch is open: its count reached zero, it was deleted, or it never
// existed (then Await returns at once). It returns nil once open, or:
//  1. ctx's error, wrapped, when ctx ends first;
//  2. [ErrWrongType] when the key holds another kind of value;
//  3. [ErrClosed] after [Client.Close]; [ErrInvalid] for an invalid name;
//  4. a Redis error, wrapped. While Redis cannot be reached, Await keeps trying with backoff
//     until ctx ends.
func (l *CountDownLatch) Await(ctx context.Context) error {
	_, err := l.await(ctx, -1)
	return err
}

// TryAwait is Await bounded by wait: it returns (true, nil) when the latch is open within
// wait, (false, nil) when wait ran out first, and (false, err) for Await's failures (a ctx
// that ends before wait does is such a failure; so is an outage of Redis that outlasts wait).
// wait 0 looks once; a negative wait is an error wrapping [ErrInvalid].
func (l *CountDownLatch) TryAwait(ctx context.Context, wait time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return l.await(ctx, wait)
}

// await implements Await (wait < 0: no bound) and TryAwait.
func (l *CountDownLatch) await(ctx context.Context, wait time.Duration) (bool, error) {
	if err := l.check(ctx, "await latch"); err != nil {
		return false, err
	}
	if o := l.c.obs; o != nil {
		si := AcquireStartInfo{Kind: KindLatch, Name: l.name, Wait: waitBound(wait)}
		start := o.now()
		octx := o.acquireStart(ctx, si)
		tr := &acqTrace{}
		ok, err := l.awaitAs(ctx, wait, tr)
		o.done(ctx, octx, si, start, ok, err, tr)
		return ok, err
	}
	return l.awaitAs(ctx, wait, nil)
}

// awaitAs is await with its arguments checked; tr, when not nil, traces it for the
// observer.
func (l *CountDownLatch) awaitAs(ctx context.Context, wait time.Duration, tr *acqTrace) (bool, error) {
	spec := waitSpec{op: "await latch", name: l.name, channel: l.keys.channel}
	if tr != nil {
		spec.waited = &tr.waited
	}
	type readRes struct {
		n   int64
		ttl time.Duration
		err error
	}
	return l.c.waitLoop(ctx, wait, spec, attemptFunc(func(bool) (bool, time.Duration, error) {
		if tr != nil {
			tr.attempts++
		}
		// The caller leaves at ctx's end even while rueidis does not (see leave).
		r, ok := leave(ctx, func() readRes { n, ttl, err := l.read(ctx); return readRes{n, ttl, err} })
		if !ok {
			return false, 0, errorf("await latch %q: %w", l.name, ctx.Err())
		}
		n, ttl, err := r.n, r.ttl, r.err
		if err != nil {
			return false, 0, err
		}
		return n == 0, ttl, nil
	}))
}
