package rlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// maxPermits bounds every permit count passed to a semaphore: Redis scripts count in
// floating point, exact up to 2^53.
const maxPermits = 1 << 50

// Semaphore is a counting semaphore named in Redis, like Redisson's RSemaphore: a number of
// permits that callers take ([Semaphore.Acquire]) and give back ([Semaphore.Release]), from
// any number of processes. Get one with [Client.Semaphore]. A handle is safe for concurrent
// use and holds no state of its own: two handles of one name are the same semaphore.
//
// # Permits are not owned
//
// A permit is a count, not a hold. Any caller, through any Client, may release permits it
// never acquired, and Release may raise the count beyond the number [Semaphore.TrySetPermits]
// set (as in Redisson and java.util.concurrent.Semaphore). Nothing expires: the permits of a
// process that crashes while holding them are never given back, and the semaphore stays short
// of them until someone calls Release or AddPermits. When that matters, use a
// [PermitSemaphore], whose permits carry a lease and come back when it ends.
//
// # Waiting
//
// Acquire(n) takes n permits at once or none: it never holds part of the count while it waits
// for the rest. A blocked Acquire sleeps until a Release, a positive AddPermits or a
// TrySetPermits publishes on the semaphore's channel; that wakes every waiter (of every
// Client), each of which tries again; there is no polling. There is no fairness: waiters are
// not served in arrival order, and a caller waiting for many permits can be overtaken, for as
// long as that goes on, by callers taking fewer.
//
// # Counts
//
// Acquire, TryAcquire, Release and ReleaseIfExists take n >= 1: a count of zero or less is
// an error wrapping [ErrInvalid] (Redisson treats tryAcquire(0) as a success and release(0) as
// a no-op; here a zero count is taken for the bug it usually is). Counts are bounded by 2^50.
//
// # Replays
//
// Every request that changes the count carries a request id, and Redis remembers the ids it
// applied for twice the cleanup timeout ([WithCleanupTimeout]). A request whose reply was lost
// (a timeout, a broken connection) is sent again under the same id until Redis answers, and a
// resend is answered without being applied twice: a lost reply never takes or gives back
// permits twice. An Acquire whose permits were granted by a resend after its context ended
// gives them back, in the background (see below) when Redis does not answer that at once. A resend that is refused (too few permits) is remembered
// as refused, so that the first send, should it reach Redis after the resend (rueidis spreads
// a client's commands over several connections, and a reply lost to a timeout says nothing
// of the request), takes nothing either (a best effort: a server that refuses writes, one
// out of memory say, keeps no such record, and a first send that reaches it later and finds
// permits takes them unknown to anyone); an Acquire that still waits tries again under a new
// id. When
// the outcome cannot be learned within the cleanup
// timeout the error wraps [ErrUnknownOutcome]: the request may have been applied, and here,
// unlike a lock's hold, permits it took do not come back by themselves.
//
// An Acquire whose context ends while Redis has not answered returns at once (within a short
// grace) and leaves the request to the background, which learns its outcome (resending it
// under its id) and gives back permits it took, to the semaphore if it still exists (one
// deleted, or whose TTL ran out, meanwhile is not made anew). [Client.Close] does not cut that short: it
// waits for it, at most the cleanup timeout, since a send still on the wire may be applied
// after Close and permits do not expire; an Acquire still waiting for its first send's
// answer when Close comes returns ErrClosed, and its request is resolved the same way. When
// Redis does not tell within that time (it is
// unreachable, or paused), the outcome stays unknown and permits the request takes are lost
// until someone releases them; the Client's Observers are told (a GiveBack event,
// [GiveBackCanceled], whose Err wraps ErrUnknownOutcome). Permits are lost too, untold, when
// the first send reaches Redis more than twice the cleanup timeout after its resend was
// refused (a server paused that long): the record of the refusal has expired by then.
//
// [WithReplicaAck] does not apply to semaphores.
//
// # Keys
//
// The count is a string at [Semaphore.Key] ("{<prefix><name>}", the key a [Mutex] of the same
// name would use: do not give a lock and a semaphore one name); the request log is a hash at
// "...:log" with a sorted set "...:logx" (each expires twice the cleanup timeout after the last
// change); wake-ups go to the channel "...:released". All share one hash slot.
type Semaphore struct {
	c    *Client
	name string
	keys semKeys
	err  error // an invalid name: every method returns it
}

// semKeys are the Redis keys and channel of one semaphore name (either kind). All share one
// hash tag.
type semKeys struct {
	sem     string // the count (Semaphore) or the hash of permits (PermitSemaphore)
	log     string // request log: request id -> answer
	logx    string // request log: request id -> when the record may go (server ms)
	leases  string // PermitSemaphore: permit id -> lease end (server ms)
	channel string
}

func semKeysFor(prefix, name string) semKeys {
	k := keysFor(prefix, name)
	return semKeys{sem: k.lock, log: k.lock + ":log", logx: k.lock + ":logx", leases: k.lock + ":leases", channel: k.channel}
}

// Semaphore returns a handle on the counting semaphore called name. It sends nothing to
// Redis. An empty name, or a nil or zero Client, makes a handle whose every method returns
// an error wrapping [ErrInvalid]. So do a nil or zero *Semaphore's (Name and Key return "").
func (c *Client) Semaphore(name string) *Semaphore {
	if err := c.usable(); err != nil {
		return &Semaphore{name: name, err: err}
	}
	s := &Semaphore{c: c, name: name, keys: semKeysFor(c.opts.prefix, name)}
	if name == "" {
		s.err = invalid("empty semaphore name")
	}
	return s
}

// Name is the semaphore's name as given to [Client.Semaphore].
func (s *Semaphore) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Key is the Redis key that holds the semaphore's count of available permits.
func (s *Semaphore) Key() string {
	if s == nil {
		return ""
	}
	return s.keys.sem
}

// semCount checks a permit count n of an operation: at least lowest, at most maxPermits in
// size.
func semCount(op string, n, lowest int) error {
	switch {
	case n < lowest:
		return invalid("%s: %d permits (at least %d)", op, n, lowest)
	case n > maxPermits || n < -maxPermits:
		return invalid("%s: %d permits (at most %d)", op, n, maxPermits)
	}
	return nil
}

// ready checks what every operation needs: a valid handle, an open Client, and (unless
// detached: giving permits back works after ctx ended) a live ctx.
func (s *Semaphore) ready(ctx context.Context, op string, detached bool) error {
	if s == nil {
		return invalid("nil semaphore handle")
	}
	return semReady(ctx, s.c, s.err, s.name, op, detached)
}

func semReady(ctx context.Context, c *Client, herr error, name, op string, detached bool) error {
	switch {
	case herr != nil:
		return herr
	case c == nil:
		return invalid("zero semaphore handle: make one with a Client")
	case ctxError(ctx) != nil:
		return ctxError(ctx)
	case c.isClosed():
		return ErrClosed
	case !detached && ctx.Err() != nil:
		return errorf("%s %q: %w", op, name, ctx.Err())
	}
	return nil
}

// semKeep is how long the scripts remember an applied request: twice the cleanup timeout, since
// a request's first send and its resends are each bounded by it (see semRun).
func (c *Client) semKeep() string {
	return strconv.FormatInt(2*c.opts.cleanupTimeout.Milliseconds(), 10)
}

// semRun runs a script of the semaphores or the latch that changes state. The first send is
// bounded by the cleanup timeout as well as ctx; when its reply is lost, the script is sent
// again with the same ids until Redis answers, within the cleanup timeout ([Client.replay]),
// and no longer than ctx lives. The scripts remember the requests they applied for twice the
// cleanup timeout, so every resend is answered truly. A ctx that can end is heeded at once
// (README guarantee 6): rueidis sends a lone request with a deadline on the sending goroutine
// and heeds only that deadline, so the sends go from a goroutine of their own (aside), and
// a caller whose ctx ends first gets an error wrapping ErrUnknownOutcome and ctx's error (the
// request was sent and may still be applied); its sends end by themselves, within the first
// send's cleanup timeout. On a paused Redis the writes outlived a cancelled ctx by up to two
// cleanup timeouts (TestSemaphores_writes_heedCancelOnPausedRedis).
//
// detached sends even the first request on a context that ignores ctx's end (giving permits
// back), and bounds it with its resends by one cleanup timeout in all. replayed reports
// whether the answer came from a resend. mark, when >= 0, is the index in args of an id that
// the resends mark as a replay's (resendArgsAt: a permit acquire spends its permit id; with
// spentGone once ctx has ended).
//
// site names the request for the observer's Replay event.
func (c *Client) semRun(ctx context.Context, site replaySite, detached bool, s *lua.Script, keys, args []string, mark int) (res rueidis.RedisResult, replayed bool, err error) {
	if detached || ctx.Done() == nil {
		return c.semSend(ctx, site, detached, s, keys, args, mark)
	}
	// As aside, but the sends are work of the Client's (background): Close ends them (their
	// contexts end with its life) and waits for them, so that no Replay event comes after
	// Close returned (TestSemaphores_writesLeftToTheBackgroundTellNothingAfterClose).
	ch := make(chan semResult, 1)
	c.background(func() {
		res, replayed, err := c.semSend(ctx, site, false, s, keys, args, mark)
		ch <- semResult{res, replayed, err}
	})
	select {
	case r := <-ch:
		return r.res, r.replayed, r.err
	case <-ctx.Done():
	}
	select { // an answer that is there already is taken
	case r := <-ch:
		return r.res, r.replayed, r.err
	default:
		return rueidis.RedisResult{}, false, errorf("%w: %w", ErrUnknownOutcome, ctx.Err())
	}
}

// semResult is what semSend returns, as one value.
type semResult struct {
	res      rueidis.RedisResult
	replayed bool
	err      error
}

// semSend is semRun on the caller's goroutine.
func (c *Client) semSend(ctx context.Context, site replaySite, detached bool, s *lua.Script, keys, args []string, mark int) (res rueidis.RedisResult, replayed bool, err error) {
	var sctx context.Context
	var cancel context.CancelFunc
	var dl time.Time // a detached request's one cleanup timeout, its resends' too
	if detached {
		dl = time.Now().Add(c.opts.cleanupTimeout)
		sctx, cancel = c.cleanupCtxUntil(ctx, dl)
	} else {
		// Bounded by the cleanup timeout, ctx's end and Close (rueidis may heed only the
		// deadline: the caller need not wait for it, semRun).
		dl := time.Now().Add(c.opts.cleanupTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		sctx, cancel = c.cleanupCtxUntil(ctx, dl)
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
	}
	if detached {
		// A give-back that Redis could not serve applied nothing: it goes again, within
		// the cleanup timeout.
		res = c.execServed(sctx, s, keys, args)
	} else {
		res = c.exec(sctx, s, keys, args)
	}
	cancel()
	if err = res.Error(); err == nil || definitive(err) {
		return res, false, err
	}
	// A detached request (a give-back, which works on a cancelled ctx) is bounded by one
	// cleanup timeout in all, its resends within what its first send left: Release took two
	// on a paused Redis (TestSemaphores_release_boundedByOneCleanupTimeoutOnPausedRedis).
	// Others resend within a cleanup timeout of their own, and end with ctx: nobody waits
	// for their answer then.
	var cctx context.Context
	if detached {
		cctx, cancel = c.cleanupCtxUntil(ctx, dl)
	} else {
		cctx, cancel = c.cleanupCtx(ctx)
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
	}
	defer cancel()
	if mark >= 0 {
		if ctx.Err() != nil {
			args = goneArgs(args, mark)
		} else {
			args = resendArgsAt(args, mark)
		}
	}
	res, err = c.replay(cctx, ctx, site, s, keys, args, err)
	return res, true, err
}

// semInt runs a semaphore script (see semRun) that answers an integer.
func (c *Client) semInt(ctx context.Context, kind Kind, op, name string, detached bool, s *lua.Script, keys, args []string) (n int64, replayed bool, err error) {
	return c.semIntMarked(ctx, kind, op, name, detached, s, keys, args, -1)
}

// semIntMarked is semInt whose resends mark args[mark] (see semRun; -1: none).
func (c *Client) semIntMarked(ctx context.Context, kind Kind, op, name string, detached bool, s *lua.Script, keys, args []string, mark int) (n int64, replayed bool, err error) {
	res, replayed, err := c.semRun(ctx, replaySite{kind: kind, name: name, op: replayOp(op)}, detached, s, keys, args, mark)
	if err == nil {
		n, err = res.AsInt64()
	}
	if err != nil {
		return 0, replayed, classify(op, name, err)
	}
	return n, replayed, nil
}

// TrySetPermits sets the number of available permits to n (n >= 0), only if the semaphore
// does not exist yet, and reports whether it did. Setting n > 0 wakes the waiters of an
// Acquire that began before the semaphore existed (it had no permits). A request whose reply
// was lost is resolved by resending it: a set that took effect reports true.
//
// Errors: [ErrInvalid] (bad name or n), [ErrWrongType] (the key holds something else, left
// untouched), [ErrClosed], ctx's error, a Redis error, or [ErrUnknownOutcome].
func (s *Semaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	return s.trySet(ctx, n, 0)
}

// TrySetPermitsTTL is [Semaphore.TrySetPermits] for a semaphore that lives for ttl (at
// least 1ms): then it vanishes, whatever its count, as if deleted. Acquire, Release,
// AddPermits and DrainPermits keep the time to live; a Release after it vanished makes a new
// semaphore without one.
func (s *Semaphore) TrySetPermitsTTL(ctx context.Context, n int, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, invalid("semaphore time to live %v is below 1ms", ttl)
	}
	return s.trySet(ctx, n, ttl)
}

func (s *Semaphore) trySet(ctx context.Context, n int, ttl time.Duration) (bool, error) {
	const op = "set permits of"
	if err := s.ready(ctx, op, false); err != nil {
		return false, err
	}
	if err := semCount(op, n, 0); err != nil {
		return false, err
	}
	args := []string{strconv.Itoa(n), s.c.newRequest(), s.c.semKeep(), s.c.pubArg(s.keys.channel), strconv.FormatInt(ttl.Milliseconds(), 10)}
	got, _, err := s.c.semInt(ctx, KindSemaphore, op, s.name, false, lua.SemSet, s.keys.counted(), args)
	return got == 1, err
}

// counted is the keys of a Semaphore's scripts: the count and the request log.
func (k semKeys) counted() []string { return []string{k.sem, k.log, k.logx} }

// Acquire blocks until n permits (n >= 1) are available and takes them, all at once. It never
// holds part of n while it waits. A semaphore that does not exist has no permits: Acquire
// waits for one to be made (TrySetPermits, Release, AddPermits).
//
// Acquire returns nil when the n permits are taken. Otherwise it returns:
//  1. ctx's error, wrapped, when ctx ends first; no permit is left taken (a request Redis
//     had not answered yet is resolved in the background, even across [Client.Close], and
//     what it took given back: see Replays at [Semaphore] for when that cannot be learned);
//  2. [ErrWrongType] when the key holds another kind of value (it is left untouched);
//  3. [ErrClosed] after [Client.Close]; [ErrInvalid] for a bad name or n;
//  4. a Redis or connection error, wrapped, or [ErrUnknownOutcome] (see Replays at
//     [Semaphore]).
func (s *Semaphore) Acquire(ctx context.Context, n int) error {
	_, err := s.acquire(ctx, n, -1)
	return err
}

// TryAcquire is [Semaphore.Acquire] bounded by wait: wait 0 makes exactly one attempt. It
// returns (true, nil) when the n permits are taken, (false, nil) when no attempt took them
// before wait ran out (with wait 0: the one attempt found fewer than n), no permit being left
// taken, and (false, err) for the failures listed at Acquire (a ctx that ends before wait
// does is such a failure). A negative wait is an error wrapping [ErrInvalid].
//
// wait bounds when attempts begin, not when the call returns: an attempt in flight as wait
// ends is seen to its outcome while ctx lives (its resends, when replies are lost, for up to
// the cleanup timeout). Only ctx bounds the call as Acquire's.
func (s *Semaphore) TryAcquire(ctx context.Context, n int, wait time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return s.acquire(ctx, n, wait)
}

// acquire implements Acquire (wait < 0: no bound) and TryAcquire.
func (s *Semaphore) acquire(ctx context.Context, n int, wait time.Duration) (bool, error) {
	const op = "acquire"
	if err := s.ready(ctx, op, false); err != nil {
		return false, err
	}
	if err := semCount(op, n, 1); err != nil {
		return false, err
	}
	if o := s.c.obs; o != nil {
		si := AcquireStartInfo{Kind: KindSemaphore, Name: s.name, Wait: waitBound(wait), Permits: n}
		start := o.now()
		octx := o.acquireStart(ctx, si)
		tr := &acqTrace{}
		ok, err := s.acquireAs(ctx, n, wait, tr)
		o.done(ctx, octx, si, start, ok, err, tr)
		return ok, err
	}
	return s.acquireAs(ctx, n, wait, nil)
}

// acquireAs is acquire with its arguments checked; tr, when not nil, traces it for the
// observer.
func (s *Semaphore) acquireAs(ctx context.Context, n int, wait time.Duration, tr *acqTrace) (bool, error) {
	spec := waitSpec{op: "acquire", name: s.name, channel: s.keys.channel}
	if tr != nil {
		spec.waited = &tr.waited
	}
	return s.c.waitLoop(ctx, wait, spec, attemptFunc(func(waiting bool) (bool, time.Duration, error) {
		if waiting && ctx.Err() != nil {
			// ctx ended while the wait woke for this attempt: nothing is sent past ctx's end
			// (as Mutex.attempt), which would only be handed over to the background and
			// what it took given back. (The first attempt follows ready's check of ctx.)
			return false, 0, errorf("acquire %q: %w", s.name, ctx.Err())
		}
		if tr != nil {
			tr.attempts++
		}
		return s.attempt(ctx, n)
	}))
}

// attempt makes one acquire request (resent until its outcome is known). A refusal says
// nothing of when permits come back: only a release, which publishes, brings them.
func (s *Semaphore) attempt(ctx context.Context, n int) (bool, time.Duration, error) {
	args := []string{strconv.Itoa(n), s.c.newRequest(), s.c.semKeep()}
	site := replaySite{kind: KindSemaphore, name: s.name, op: "acquire"}
	// A resend marks the request id ('+', or spentGone once the caller has gone): a refusal is
	// then remembered too, so that the first send, if it reaches Redis last, takes nothing.
	granted := func(res rueidis.RedisResult) bool { got, err := res.AsInt64(); return err == nil && got != 0 }
	res, _, _, err := s.c.semAcquire(ctx, site, true, lua.SemAcquire, s.keys.counted(), args, 1, granted, func(gctx context.Context, res rueidis.RedisResult, err error) {
		if errors.Is(err, ErrUnknownOutcome) { // permits it may have taken are lost
			s.c.gaveBack(KindSemaphore, s.name, "", n, GiveBackCanceled, classify("acquire", s.name, err))
		} else if err == nil && granted(res) { // granted after the caller gave up: give it back on gctx
			// Only to a semaphore that still exists: one deleted (or whose TTL ran out) since
			// is not made anew, without a TTL, by permits nobody holds.
			_, err := s.add(gctx, "release", n, true, true)
			s.c.gaveBack(KindSemaphore, s.name, "", n, GiveBackCanceled, err)
		}
	})
	var got int64
	if err == nil {
		got, err = res.AsInt64()
	}
	switch {
	case err != nil:
		return false, 0, classify("acquire", s.name, err)
	case got == 0:
		return false, -1, nil
	}
	// Granted, and answered while the caller waited (a resend's grant that came as ctx
	// ended was handed over to be given back: semAcquire).
	return true, 0, nil
}

// Release gives back n permits (n >= 1), adding them to the count, and wakes every waiter.
// The count may rise above the number TrySetPermits set; a semaphore that does not exist is
// made with n permits. Release works even when ctx has already ended: it uses ctx's values
// with its own timeout ([WithCleanupTimeout]), so that permits are not lost to a cancelled
// request. A lost reply is resolved by resending: the permits are added once.
//
// Errors: [ErrInvalid], [ErrWrongType] (left untouched), [ErrClosed], a Redis error, or
// [ErrUnknownOutcome].
func (s *Semaphore) Release(ctx context.Context, n int) error {
	const op = "release"
	if err := s.ready(ctx, op, true); err != nil {
		return err
	}
	if err := semCount(op, n, 1); err != nil {
		return err
	}
	_, err := s.release(ctx, n, false)
	return err
}

// release is Release (ifExists: ReleaseIfExists) with its arguments checked, told to the
// observer.
func (s *Semaphore) release(ctx context.Context, n int, ifExists bool) (bool, error) {
	o := s.c.obs
	if o == nil {
		return s.add(ctx, "release", n, ifExists, true)
	}
	si := ReleaseStartInfo{Kind: KindSemaphore, Name: s.name, Permits: n}
	start := o.now()
	octx := o.releaseStart(ctx, si)
	ok, err := s.add(ctx, "release", n, ifExists, true)
	o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start})
	return ok, err
}

// ReleaseIfExists is [Semaphore.Release] for a semaphore that exists: it reports false, and
// changes nothing, when there is none (never set, deleted, or gone at the end of its time to
// live).
func (s *Semaphore) ReleaseIfExists(ctx context.Context, n int) (bool, error) {
	const op = "release"
	if err := s.ready(ctx, op, true); err != nil {
		return false, err
	}
	if err := semCount(op, n, 1); err != nil {
		return false, err
	}
	return s.release(ctx, n, true)
}

// AddPermits adds n to the count of available permits: n > 0 is a Release of n (and wakes
// every waiter); n < 0 takes permits away without waiting, and may drive the count below zero
// (then Acquire waits until releases bring it back above). n == 0 is an error wrapping
// [ErrInvalid]. A semaphore that does not exist is made with n permits.
func (s *Semaphore) AddPermits(ctx context.Context, n int) error {
	const op = "add permits to"
	if err := s.ready(ctx, op, false); err != nil {
		return err
	}
	if n == 0 {
		return invalid("%s: 0 permits", op)
	}
	if err := semCount(op, n, -maxPermits); err != nil {
		return err
	}
	_, err := s.add(ctx, op, n, false, false)
	return err
}

// add runs sem_release: it adds n permits (n < 0 takes them away), only to an existing
// semaphore when ifExists; it reports whether it did.
func (s *Semaphore) add(ctx context.Context, op string, n int, ifExists, detached bool) (bool, error) {
	only := "0"
	if ifExists {
		only = "1"
	}
	args := []string{strconv.Itoa(n), s.c.newRequest(), s.c.semKeep(), s.c.pubArg(s.keys.channel), only}
	got, _, err := s.c.semInt(ctx, KindSemaphore, op, s.name, detached, lua.SemRelease, s.keys.counted(), args)
	return got == 1, err
}

// DrainPermits takes every available permit and returns how many it took (0 when none are
// available), exactly, whatever the count (Releases of up to 2^50 each can take it past 2^53,
// where a Lua number is not exact, up to 2^63-1): it leaves 0, and on an error nothing is
// taken, or what was taken is given back as below. A count below zero is left as it is and 0 returned (Redisson sets it to zero,
// which adds permits). A lost reply is resolved by resending: the answer is the number the
// first send took. When ctx ends before Redis answers, DrainPermits returns ctx's error,
// wrapped, at once, and the permits it took are given back in the background, as an
// Acquire's are (see Replays at [Semaphore] for when that cannot be learned).
func (s *Semaphore) DrainPermits(ctx context.Context) (int, error) {
	const op = "drain"
	if err := s.ready(ctx, op, false); err != nil {
		return 0, err
	}
	// Like an acquire's, a drain whose caller left before its answer is resolved in the
	// background, and the permits it took are given back (semAcquire).
	site := replaySite{kind: KindSemaphore, name: s.name, op: replayOp(op)}
	taken := func(res rueidis.RedisResult) int64 {
		if got, err := res.AsInt64(); err == nil && got > 0 {
			return got
		}
		return 0
	}
	// A resend marks the request id ('+', or spentGone once the caller has gone): an answer
	// of 0 is then remembered too, so that the first send, if it reaches Redis last, drains
	// nothing once permits are back.
	res, _, _, err := s.c.semAcquire(ctx, site, true, lua.SemDrain, s.keys.counted(), []string{s.c.newRequest(), s.c.semKeep()}, 0,
		func(res rueidis.RedisResult) bool { return taken(res) > 0 },
		func(gctx context.Context, res rueidis.RedisResult, err error) {
			if errors.Is(err, ErrUnknownOutcome) { // permits it may have taken are lost
				s.c.gaveBack(KindSemaphore, s.name, "", 0, GiveBackCanceled, classify(op, s.name, err))
			} else if n := taken(res); err == nil && n > 0 { // drained after the caller gave up: give them back
				_, err := s.add(gctx, "release", int(n), true, true) // to a semaphore that exists, as an acquire's
				s.c.gaveBack(KindSemaphore, s.name, "", int(n), GiveBackCanceled, err)
			}
		})
	var got int64
	if err == nil {
		got, err = res.AsInt64()
	}
	if err != nil {
		return 0, classify(op, s.name, err)
	}
	return int(got), nil
}

// AvailablePermits is the number of permits available now: 0 when the semaphore does not
// exist, and possibly below zero after AddPermits with a negative n. It is a snapshot: by the
// time it returns, others may have changed the count. It returns ctx's error, wrapped, when
// ctx ends first, even while Redis does not answer.
func (s *Semaphore) AvailablePermits(ctx context.Context) (int, error) {
	const op = "available permits of"
	if err := s.ready(ctx, op, false); err != nil {
		return 0, err
	}
	// The caller leaves at ctx's end even while rueidis does not (see leave).
	res, ok := leave(ctx, func() rueidis.RedisResult { return s.c.rc.Do(ctx, s.c.rc.B().Get().Key(s.keys.sem).Build()) })
	if !ok {
		return 0, errorf("%s %q: %w", op, s.name, ctx.Err())
	}
	v, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, classify(op, s.name, err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, errorf("%s %q: %w (a string that is not a count)", op, s.name, ErrWrongType)
	}
	return int(n), nil
}

// Delete removes the semaphore, whatever its count, and reports whether it existed. Waiters
// keep waiting: a semaphore that does not exist has no permits. A key of another type is left
// untouched (the error wraps [ErrWrongType]). When a lost reply was resolved by resending,
// Delete may report false for a semaphore its first send deleted.
func (s *Semaphore) Delete(ctx context.Context) (bool, error) {
	const op = "delete"
	if err := s.ready(ctx, op, false); err != nil {
		return false, err
	}
	got, _, err := s.c.semInt(ctx, KindSemaphore, op, s.name, false, lua.SemDelete, []string{s.keys.sem}, nil)
	return got == 1, err
}

// semAcquire runs a semaphore's acquire script (see semRun) for a caller that leaves at
// ctx's end (README guarantee 6): the first send and its resends go on without the caller,
// and when the caller has gone with the outcome unknown, the request is resolved in the
// background. left is then called with the outcome (leftFunc): the answer (err nil: if it
// granted, left gives it back on gctx, with ctx's values), an error wrapping
// ErrUnknownOutcome when Redis did not tell in time (left reports it), or an error that
// applied nothing (a PermitSemaphore's left spends its id all the same). The
// caller gets ctx's error, and handed is true: the work it left resolves the request (a
// resend spends the id at args[mark], goneArgs). A ctx that cannot end runs semRun.
// resent reports whether the first send's reply was lost (the send may still reach
// Redis): the answer, if any, is a resend's. A resend's answer that granted (granted says
// which answers do) and came as ctx ended is handed over too, to left, which gives it back:
// the caller gets ctx's error, handed true. (A first send's grant that came as ctx ended is
// the caller's, as an answer that came first.)
//
// lasting says the permits never expire (a Semaphore's): the request is then counted for
// Close (lateBegin) until its outcome is known, and Close waits for that work, at most the
// cleanup timeout (drainCtxUntil), rather than ending it, since a send still on the wire
// may be applied after Close; a caller still waiting for its first send's answer, or
// resending it, when Close comes hands it over too, and gets ErrClosed. Otherwise (a PermitSemaphore's, which expire
// with their lease) Close ends that work, as it ends a lock's.
func (c *Client) semAcquire(ctx context.Context, site replaySite, lasting bool, s *lua.Script, keys, args []string, mark int, granted func(rueidis.RedisResult) bool, left leftFunc) (res rueidis.RedisResult, resent, handed bool, err error) {
	if ctx.Done() == nil {
		res, resent, err = c.semRun(ctx, site, false, s, keys, args, mark)
		return res, resent, false, err
	}
	counted := lasting && c.lateBegin()
	if counted {
		defer func() {
			if !handed {
				c.late.Done()
			}
		}()
	}
	f := c.send(ctx, time.Now(), false, s, keys, args, "", "", nil)
	if counted && !f.awaitOpen(ctx) || !counted && !f.await(ctx) {
		keys, args = f.keys, f.args // the send's copies: the caller's may be reused
		// ctx ended, or (counted only) Close came: the caller gets ctx's error, or ErrClosed,
		// and the work the request is handed over to resolves it.
		err := leftErr(ctx)
		handed = true
		c.handOff(ctx, lasting, counted, func(drain context.Context) {
			var res rueidis.RedisResult
			var err error
			if f.wait() {
				res, err = f.res, f.err
			} else {
				// Close came first: the send may still be applied. A resend tells what
				// it did, or spends its id (goneArgs); without lasting, the Client's
				// ended life makes it give up at once.
				err = errorf("%w: the first send was unanswered", ErrClosed)
			}
			if err != nil && !definitive(err) {
				dctx, cancel := c.leftCtx(drain, ctx, lasting, time.Now().Add(c.opts.cleanupTimeout))
				defer cancel()
				res, err = c.replay(dctx, nil, site, s, keys, goneArgs(args, mark), err)
			}
			c.resolvedLeft(drain, ctx, lasting, res, err, left)
		})
		return rueidis.RedisResult{}, false, true, err
	}
	res, err = f.res, f.err
	if err == nil || definitive(err) {
		return res, false, false, err
	}
	// Resend while the caller waits; when it leaves first, go on in the background. The
	// resends go from a goroutine of their own, as the first send does and as a Mutex's
	// replays do (Mutex.replayFor): rueidis sends a lone request with a deadline (the cleanup
	// timeout) on the sending goroutine and heeds only that deadline, not the cancel at
	// ctx's end (see inflight). On a paused Redis, Acquire and TryAcquire outlived a
	// cancelled ctx by the cleanup timeout (TestSemaphores_Acquire_resendOnPausedRedisHeedsCancel).
	first := err
	cctx, cancel := c.cleanupCtx(ctx)
	wctx, wcancel := context.WithCancel(cctx)
	stop := context.AfterFunc(ctx, wcancel)
	var closing <-chan struct{} // a counted request's caller also leaves at Close (awaitOpen)
	if counted {
		closing = c.life.Done()
	}
	// pending: the resends, still under way when the caller left.
	r, pending := aside(ctx, closing, func() replayed {
		res, err := c.replay(wctx, nil, site, s, keys, resendArgsAt(args, mark), first)
		return replayed{res, err}
	})
	res, err = r.res, r.err
	stop()
	wcancel()
	var known *replayed // a resend's grant that came as the caller left
	if pending == nil {
		_, isReply := rueidis.IsRedisErr(err)
		// Close cut the resends of a counted request short (the Client's life ended cctx):
		// the caller gets ErrClosed and the request is handed over, as when Close comes
		// during the first send, to work Close waits for.
		closed := counted && err != nil && !isReply && c.isClosed()
		// A grant that came as ctx ended is given back by the work it is handed over to,
		// not on the caller's goroutine: a give-back that met an unanswered Redis held the
		// caller for up to twice the cleanup timeout
		// (TestSemaphores_Acquire_resendGrantAtCancelGivesBackInBackground).
		if err == nil && ctx.Err() != nil && granted(res) {
			known = &replayed{res: res}
		} else if !closed && (err == nil || isReply || ctx.Err() == nil || cctx.Err() != nil || errors.Is(err, ErrClosed)) {
			cancel()
			return res, true, false, err
		}
	}
	dl, _ := cctx.Deadline()
	cancel()
	handed = true
	c.handOff(ctx, lasting, counted, func(drain context.Context) {
		if known != nil {
			c.resolvedLeft(drain, ctx, lasting, known.res, nil, left)
			return
		}
		if pending != nil {
			// The caller left while the resends were under way: wait for their end (an
			// answer, or an outcome still unknown once ctx's end cut them short), or for
			// Close (rueidis may heed only the send's deadline).
			var r replayed
			select {
			case r = <-pending:
			case <-c.life.Done():
				r.err = errorf("%w: the resend was unanswered", ErrClosed)
			}
			if _, isReply := rueidis.IsRedisErr(r.err); r.err == nil || isReply {
				c.resolvedLeft(drain, ctx, lasting, r.res, r.err, left)
				return
			}
		}
		dctx, cancel := c.leftCtx(drain, ctx, lasting, dl) // the same cleanup timeout
		defer cancel()
		res, err := c.replay(dctx, nil, site, s, keys, goneArgs(args, mark), first)
		c.resolvedLeft(drain, ctx, lasting, res, err, left)
	})
	return rueidis.RedisResult{}, true, true, leftErr(ctx)
}

// leftErr is what semAcquire's caller gets when it leaves its request to handOff: ctx's
// error, or ErrClosed when Close made it leave.
func leftErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// leftCtx is the context of work (handOff's) that resolves an acquire whose caller (of ctx)
// has gone, ending at dl: drainCtxUntil's under drain when its permits are lasting, else a
// cleanupCtx (Close ends it).
func (c *Client) leftCtx(drain, ctx context.Context, lasting bool, dl time.Time) (context.Context, context.CancelFunc) {
	if lasting {
		return c.drainCtxUntil(drain, ctx, dl)
	}
	return c.cleanupCtxUntil(ctx, dl)
}

// leftFunc takes the outcome of an acquire whose caller has gone (see semAcquire), with a
// context to act on (gctx: leftCtx's, with ctx's values): the answer (err nil), an error
// wrapping ErrUnknownOutcome (Redis did not tell in time), or another error: the request's
// last send failed applying nothing (a refused dial, an error reply such as BUSY or
// LOADING), though an earlier send of a PermitSemaphore's id may still be on its way.
type leftFunc func(gctx context.Context, res rueidis.RedisResult, err error)

// resolvedLeft hands the outcome of an acquire whose caller (of ctx) has gone to left. Every
// outcome goes to left, which decides: before, a send that failed applying nothing was
// dropped here, and a PermitSemaphore's id, loose since an earlier send's reply was lost,
// was spent by nobody (TestReview17_permitHandedSendRefusedDialLeavesIdUnspent).
func (c *Client) resolvedLeft(drain, ctx context.Context, lasting bool, res rueidis.RedisResult, err error, left leftFunc) {
	gctx, cancel := c.leftCtx(drain, ctx, lasting, time.Now().Add(c.opts.cleanupTimeout))
	defer cancel()
	left(gctx, res, err)
}

// goneArgs returns args as a resend sent after its caller has gone carries them: the id at
// args[mark] marked spentGone. The call makes no later attempt under this id, so the resend
// spends it even if refused (its first send, abandoned in rueidis's queue, may still reach
// Redis once a permit is free). args is left as it is.
func goneArgs(args []string, mark int) []string {
	if mark < 0 {
		return args
	}
	r := append([]string(nil), args...)
	r[mark] = spentGone + strings.TrimPrefix(args[mark], spentMark)
	return r
}

// resendArgsAt is replayArgsAt for an id that its first send may have marked already (a
// permit acquire's later attempt, after a send of the id whose reply was lost, marks its
// first send as a resend): the id is marked once. args is left as it is.
func resendArgsAt(args []string, mark int) []string {
	if mark < 0 {
		return args
	}
	r := append([]string(nil), args...)
	r[mark] = spentMark + strings.TrimPrefix(args[mark], spentMark)
	return r
}

// handOff runs work, done on behalf of a caller that leaves, in the background and waits for
// it for what is left of the caller's grace (returnGrace) once ctx has ended: the common
// case resolves before the caller returns. A caller whose ctx has not ended leaves because
// of Close, and does not wait. counted says the work is counted for Close already
// (lateBegin; it ends the count), with c.drain for drain; otherwise a lasting request's work
// runs at once, with the Client's ended life for drain (Close no longer waits), and other
// work is background (Close ends it; drain nil).
func (c *Client) handOff(ctx context.Context, lasting, counted bool, work func(drain context.Context)) {
	done := make(chan struct{})
	run := func(drain context.Context) {
		defer close(done)
		work(drain)
	}
	switch {
	case counted:
		go func() {
			defer c.late.Done()
			run(c.drain)
		}()
	case lasting:
		run(c.life)
	default:
		c.background(func() { run(nil) })
	}
	if ctx.Err() != nil {
		(&grace{ctx: ctx}).wait(ctx, done)
	}
}
