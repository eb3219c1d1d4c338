package rlock

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/watchdog"
)

// PermitSemaphore is a semaphore of expirable permits, like Redisson's
// RPermitExpirableSemaphore: a number of permits, each taken one at a time under a lease
// and given back by its id ([PermitSemaphore.Release]) or by the end of its lease. Get one
// with [Client.PermitSemaphore]. A handle is safe for concurrent use and holds no state of its
// own: two handles of one name are the same semaphore.
//
// # Leases
//
// Every permit has a lease (> 0; there is no unbounded permit and no watchdog): when it ends
// the permit is free again, without anyone calling Release, so the permits of a process that
// crashed come back within their lease. [PermitSemaphore.Extend] sets a new lease on a live
// permit (renew it before [Permit.Expires] to keep it). The lease is measured by the Redis
// server's clock (TIME), so a jump of that clock moves every lease end.
//
// A permit is identified by its id, made by the acquiring Client: anyone who knows the id
// may release or extend it, through any Client. Releasing or extending a permit that is not
// live (unknown, released, or whose lease ended) reports an error wrapping [ErrNotHeld]: a
// late release of an expired permit reports it (Redisson's tryRelease returns false).
//
// # Waiting
//
// A blocked Acquire sleeps until a Release publishes on the semaphore's channel (one waiter
// per Client is woken for each permit given back; AddPermits and TrySetPermits wake them
// all), or until the lease whose end makes room ends: an expiry publishes nothing, but each
// refused attempt learns from Redis when the next permit frees, and the waiter wakes then by
// itself. There is no polling, and no fairness between waiters.
//
// # Replays
//
// An acquire carries its permit id, made before the first send: a resend of an acquire
// whose reply was lost finds its live permit and is answered, not granted twice. A resend
// that grants or finds its permit granted, any resend sent once the caller has gone, and
// every later attempt's grant after a send whose reply was lost, also spend the id (for the
// lease, or a minute if longer): the first send, if it reaches Redis only after the permit
// was given back (or freed), grants nothing. An Acquire or TryAcquire that ends without a
// permit after a send whose reply was lost (its resend refused, or unanswered) spends the
// id before it returns (in the background, within the cleanup timeout, when Redis does not
// answer at once), giving back a permit that send granted first. Release,
// TrySetPermits and AddPermits carry request ids that Redis remembers for twice the cleanup
// timeout, like a [Semaphore]'s; an Extend's request id orders it after the Client's earlier
// Extends of the permit (see [PermitSemaphore.Extend]). An Acquire granted by a resend after its context ended
// releases the permit, in the background (within the cleanup timeout; Close ends it) when
// Redis does not answer that within a short grace; a permit whose acquire ends in [ErrUnknownOutcome]
// comes back at the end of its lease.
//
// [WithReplicaAck] does not apply to semaphores.
//
// # Keys
//
// The number of permits is the field "permits" of a hash at [PermitSemaphore.Key]
// ("{<prefix><name>}"; its field "spent" lists the permit ids spent by resends); the leases are a sorted set at "...:leases" (permit id -> lease end
// in server milliseconds; expired members are purged by every acquire and release, and the
// key expires with its last lease); the request log and the channel are named as for a
// [Semaphore] (the log also keeps, under "x/" + a permit id, the request id of the permit's
// last Extend). All share one hash slot. A Semaphore or PermitSemaphore used on the name of
// the other kind, or of a lock, finds its key of the wrong type ([ErrWrongType]); but a
// [Mutex] used on a PermitSemaphore's name sees a hash and takes it for a lock held by
// another: do not share names between kinds.
type PermitSemaphore struct {
	c    *Client
	name string
	keys semKeys
	err  error // an invalid name: every method returns it
}

// Permit is one permit taken from a [PermitSemaphore].
type Permit struct {
	// ID identifies the permit, for [PermitSemaphore.Release] and [PermitSemaphore.Extend]. It
	// is unique across Clients and time.
	ID string
	// Expires is when the permit's lease ends at the earliest, by the local clock: the moment
	// the acquire was first sent, plus the lease, minus a drift allowance (1% + 2ms); or, when
	// an attempt found the permit granted already (an earlier attempt's send reaching Redis
	// late), the moment of that attempt's send plus the lease left then, if that is later.
	// Past it the permit may be someone else's.
	Expires time.Time
}

// PermitSemaphore returns a handle on the semaphore of expirable permits called name. It
// sends nothing to Redis. An empty name, or a nil or zero Client, makes a handle whose every
// method returns an error wrapping [ErrInvalid]. So do a nil or zero *PermitSemaphore's (Name
// and Key return "").
func (c *Client) PermitSemaphore(name string) *PermitSemaphore {
	if err := c.usable(); err != nil {
		return &PermitSemaphore{name: name, err: err}
	}
	p := &PermitSemaphore{c: c, name: name, keys: semKeysFor(c.opts.prefix, name)}
	if name == "" {
		p.err = invalid("empty semaphore name")
	}
	return p
}

// Name is the semaphore's name as given to [Client.PermitSemaphore].
func (p *PermitSemaphore) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// Key is the Redis key of the hash that holds the semaphore's number of permits.
func (p *PermitSemaphore) Key() string {
	if p == nil {
		return ""
	}
	return p.keys.sem
}

func (p *PermitSemaphore) ready(ctx context.Context, op string, detached bool) error {
	if p == nil {
		return invalid("nil semaphore handle")
	}
	return semReady(ctx, p.c, p.err, p.name, op, detached)
}

// logged is the keys of the scripts that keep a request log.
func (k semKeys) logged() []string { return []string{k.sem, k.log, k.logx} }

// TrySetPermits sets the number of permits to n (n >= 0), only if the semaphore does not
// exist yet, and reports whether it did. Setting n > 0 wakes the waiters of an Acquire that
// began before the semaphore existed. A set whose reply was lost and that took effect reports
// true.
//
// Errors: [ErrInvalid] (bad name or n), [ErrWrongType] (the key holds something else, left
// untouched), [ErrClosed], ctx's error, a Redis error, or [ErrUnknownOutcome].
func (p *PermitSemaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	const op = "set permits of"
	if err := p.ready(ctx, op, false); err != nil {
		return false, err
	}
	if err := semCount(op, n, 0); err != nil {
		return false, err
	}
	args := []string{strconv.Itoa(n), p.c.newRequest(), p.c.semKeep(), p.c.pubArg(p.keys.channel)}
	got, _, err := p.c.semInt(ctx, KindPermitSemaphore, op, p.name, false, lua.PsemSet, p.keys.logged(), args)
	return got == 1, err
}

// AddPermits adds n to the number of permits, making the semaphore when it does not exist:
// n > 0 wakes every waiter; n < 0 takes permits away, even below the number held now (those
// stay held until released or expired, and no new one is granted until the number held is
// below the new number). n == 0 is an error wrapping [ErrInvalid].
func (p *PermitSemaphore) AddPermits(ctx context.Context, n int) error {
	const op = "add permits to"
	if err := p.ready(ctx, op, false); err != nil {
		return err
	}
	if n == 0 {
		return invalid("%s: 0 permits", op)
	}
	if err := semCount(op, n, -maxPermits); err != nil {
		return err
	}
	args := []string{strconv.Itoa(n), p.c.newRequest(), p.c.semKeep(), p.c.pubArg(p.keys.channel)}
	_, _, err := p.c.semInt(ctx, KindPermitSemaphore, op, p.name, false, lua.PsemAdd, p.keys.logged(), args)
	return err
}

// Acquire blocks until a permit is free and takes it for lease (at least 10ms). A semaphore
// that does not exist has no permits: Acquire waits for some to be made.
//
// Acquire returns the permit, or:
//  1. ctx's error, wrapped, when ctx ends first; no permit is left taken (a send whose
//     reply was lost grants nothing once its id is spent: see Replays at [PermitSemaphore]);
//  2. [ErrWrongType] when the key holds another kind of value (it is left untouched);
//  3. [ErrClosed] after [Client.Close]; [ErrInvalid] for a bad name or lease;
//  4. a Redis or connection error, wrapped, or [ErrUnknownOutcome] (see Replays at
//     [PermitSemaphore]).
func (p *PermitSemaphore) Acquire(ctx context.Context, lease time.Duration) (Permit, error) {
	permit, _, err := p.acquire(ctx, -1, lease)
	return permit, err
}

// TryAcquire is [PermitSemaphore.Acquire] bounded by wait: wait 0 makes exactly one attempt.
// It returns (permit, true, nil) when a permit is taken, (Permit{}, false, nil) when wait ran
// out first, and (Permit{}, false, err) for the failures listed at Acquire. A negative wait is
// an error wrapping [ErrInvalid]. After (Permit{}, false, nil) no permit is left taken
// either: when a send of the call's permit id got no reply (it may still reach Redis),
// TryAcquire spends the id before it returns, waiting for that at most 80ms past the wait
// (then the work goes on in the background, within the cleanup timeout; see Replays at
// [PermitSemaphore]).
func (p *PermitSemaphore) TryAcquire(ctx context.Context, wait, lease time.Duration) (Permit, bool, error) {
	if wait < 0 {
		return Permit{}, false, invalid("negative wait %v", wait)
	}
	return p.acquire(ctx, wait, lease)
}

func (p *PermitSemaphore) acquire(ctx context.Context, wait, lease time.Duration) (Permit, bool, error) {
	const op = "acquire"
	if err := p.ready(ctx, op, false); err != nil {
		return Permit{}, false, err
	}
	if err := checkLease("permit lease", lease); err != nil {
		return Permit{}, false, err
	}
	if o := p.c.obs; o != nil {
		si := AcquireStartInfo{Kind: KindPermitSemaphore, Name: p.name, Wait: waitBound(wait), Lease: lease, Permits: 1}
		start := o.now()
		octx := o.acquireStart(ctx, si)
		tr := &acqTrace{}
		permit, ok, err := p.acquireAs(ctx, wait, lease, tr)
		o.done(ctx, octx, si, start, ok, err, tr)
		return permit, ok, err
	}
	return p.acquireAs(ctx, wait, lease, nil)
}

// acquireAs is acquire with its arguments checked; tr, when not nil, traces it for the
// observer.
func (p *PermitSemaphore) acquireAs(ctx context.Context, wait, lease time.Duration, tr *acqTrace) (Permit, bool, error) {
	// One id for every attempt of this call: a failed attempt leaves nothing under it.
	permit := Permit{ID: p.c.newRequest()}
	var first time.Time // the first attempt's send
	// loose: a send of the id got no reply (it may still reach Redis, and grant once a
	// permit frees) and nothing has spent the id since; handed: an attempt left its request
	// to work that spends the id (the caller's ctx ended during it).
	var loose, handed bool
	spec := waitSpec{op: "acquire", name: p.name, channel: p.keys.channel}
	if tr != nil {
		spec.waited = &tr.waited
	}
	ok, err := p.c.waitLoop(ctx, wait, spec, attemptFunc(func(waiting bool) (bool, time.Duration, error) {
		if waiting && ctx.Err() != nil {
			// ctx ended while the wait woke for this attempt: nothing is sent past ctx's end
			// (as Mutex.attempt), which would only be handed over to the background, its id
			// spent and a permit it took given back. (The first attempt follows ready's check
			// of ctx.) A loose id is spent below, as when the wait sees ctx's end.
			return false, 0, errorf("acquire %q: %w", p.name, ctx.Err())
		}
		if tr != nil {
			tr.attempts++
		}
		sent := time.Now() // the lease is counted from the first send
		if first.IsZero() {
			first = sent
		}
		ok, ttl, replayed, h, err := p.attempt(ctx, permit.ID, lease, loose)
		loose, handed = loose || replayed, handed || h
		if ok {
			// Whichever send granted the permit, it reached Redis after the call's first
			// send. ttl > 0: an earlier send granted it (a resend's, or the late first send
			// of an earlier attempt, whose lease began before this attempt), and the lease
			// ends ttl after this attempt's send at the earliest.
			end := first.Add(lease)
			if ttl > 0 && sent.Add(min(lease, ttl)).After(end) {
				end = sent.Add(min(lease, ttl))
			}
			permit.Expires = end.Add(-watchdog.Drift(lease))
			return true, 0, err
		}
		return ok, ttl, err
	}))
	if !ok {
		if loose && !handed {
			p.spend(ctx, permit.ID, lease)
		}
		return Permit{}, false, err
	}
	return permit, true, nil
}

// spend spends the permit id of an acquire that ends without a permit after a send of the id
// whose reply was lost (a resend refused, or not answered; the caller left at ctx's end or
// its wait's): that send may still reach Redis, and would grant, once a permit frees, a
// permit nobody holds until its lease ends. Its spend ('!' and spend-only, psem_acquire.lua)
// grants nothing and makes any later send of the id grant nothing; a permit that such a send
// granted first is given back (GiveBackCanceled), within a cleanup timeout of its own. The
// work runs in the background (counted for Close, which ends it), the spend resent within the
// cleanup timeout while Redis does not answer;
// the caller waits for it at most returnGrace. An outcome still unknown at the cleanup
// timeout is reported as a give-back that failed with ErrUnknownOutcome: a permit the send
// grants comes back at the end of its lease.
func (p *PermitSemaphore) spend(ctx context.Context, id string, lease time.Duration) {
	if p.c.isClosed() {
		return // Close ends the Client's background work: the permit ends with its lease
	}
	done := make(chan struct{})
	p.c.background(func() {
		defer close(done)
		cctx, cancel := p.c.cleanupCtx(ctx)
		defer cancel()
		p.spendOn(cctx, id, lease)
	})
	t := time.NewTimer((&grace{ctx: ctx}).left()) // returnGrace, from the ctx's deadline if that ended it
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// spendOn is spend's work, on cctx (a cleanupCtx).
func (p *PermitSemaphore) spendOn(cctx context.Context, id string, lease time.Duration) {
	keys := []string{p.keys.sem, p.keys.leases}
	args := []string{spentGone + id, strconv.FormatInt(lease.Milliseconds(), 10), "1"}
	res := p.c.exec(cctx, lua.PsemAcquire, keys, args)
	err := res.Error()
	if re, isReply := rueidis.IsRedisErr(err); err != nil && !(isReply && answers(re)) {
		// No answer, or Redis declined to run it (BUSY, LOADING, ...): send it again.
		res, err = p.c.replay(cctx, nil, replaySite{}, lua.PsemAcquire, keys, args, err)
	}
	var vals []int64
	if err == nil {
		vals, err = res.AsIntSlice()
	}
	switch {
	case errors.Is(err, ErrUnknownOutcome):
		p.c.gaveBack(KindPermitSemaphore, p.name, "", 1, GiveBackCanceled, classify("acquire", p.name, err))
	case err == nil && len(vals) == 2 && vals[0] == 1:
		// A send of the id came first and granted the permit: its give-back has a cleanup
		// timeout of its own, not what the spend left of cctx's. (A spend answered late left
		// it a few milliseconds, and a Redis that answered it in good time, but not in those,
		// left the permit held for nobody until its lease ended:
		// TestPermitSemaphore_spendsGiveBackOfALostSendsGrantHasAWholeCleanupTimeout.)
		gctx, cancel := p.c.ownCleanupCtx(cctx)
		defer cancel()
		p.giveBackCanceled(gctx, id)
	}
}

// giveBackCanceled gives back, on ctx, the permit id that a send granted after its caller
// had gone, and tells the Observers (GiveBackCanceled).
func (p *PermitSemaphore) giveBackCanceled(ctx context.Context, id string) {
	err := p.ready(ctx, "release", true)
	if err == nil {
		err = p.release(ctx, id)
	}
	p.c.gaveBack(KindPermitSemaphore, p.name, "", 1, GiveBackCanceled, err)
}

// attempt makes one acquire request (resent until its outcome is known). It returns whether
// the permit was granted, or else how long until a lease end makes room (-1: unknown). A
// grant found made by an earlier send of the permit id (its lease may have begun before
// this attempt: an earlier attempt's first send can reach Redis late) returns the lease
// left then as the duration (> 0); a grant by the request itself returns 0. replayed says
// the first send's reply was lost (it may still reach Redis); handed, that the request was
// left to work that resolves it and spends the id (the caller's ctx ended during it). loose
// says an earlier send of the id got no reply: this attempt's first send is then marked as
// a resend's, so that a grant spends the id (a send of the id still on its way grants
// nothing once the permit is given back).
func (p *PermitSemaphore) attempt(ctx context.Context, id string, lease time.Duration, loose bool) (ok bool, ttl time.Duration, replayed, handed bool, err error) {
	keys := []string{p.keys.sem, p.keys.leases}
	args := []string{id, strconv.FormatInt(lease.Milliseconds(), 10)}
	if loose {
		args[0] = spentMark + id
	}
	// A resend spends the permit id once it grants (psem_acquire.lua), so that a first send
	// reaching Redis after it grants nothing again.
	site := replaySite{kind: KindPermitSemaphore, name: p.name, op: "acquire"}
	granted := func(res rueidis.RedisResult) bool {
		vals, err := res.AsIntSlice()
		return err == nil && len(vals) >= 1 && len(vals) <= 2 && vals[0] == 1
	}
	res, replayed, handed, err := p.c.semAcquire(ctx, site, false, lua.PsemAcquire, keys, args, 0, granted, func(gctx context.Context, res rueidis.RedisResult, err error) {
		if errors.Is(err, ErrUnknownOutcome) { // a permit it may have granted ends with its lease
			p.c.gaveBack(KindPermitSemaphore, p.name, "", 1, GiveBackCanceled, classify("acquire", p.name, err))
		} else if err == nil && granted(res) { // granted after the caller gave up: give it back on gctx
			p.giveBackCanceled(gctx, id)
		} else {
			// Refused after the caller left, or failed applying nothing (a refused dial, BUSY,
			// LOADING). A '+' refusal spends nothing, and a send of the
			// id whose reply was lost (this attempt's or an earlier one's) may still reach
			// Redis and grant: spend the id here, since acquireAs leaves a request handed
			// over to this work (a refused send of an id that is not loose, or a '!' one,
			// spends it for nothing, or again).
			p.spendOn(gctx, id, lease)
		}
	})
	var vals []int64
	if err == nil {
		vals, err = res.AsIntSlice()
	}
	if err != nil {
		return false, 0, replayed, handed, classify("acquire", p.name, err)
	}
	switch {
	case len(vals) == 1 && vals[0] == 1, len(vals) == 2 && vals[0] == 1 && vals[1] > 0:
		// Granted, and answered while the caller waited (a resend's grant that came as ctx
		// ended was handed over to be given back: semAcquire).
		if len(vals) == 2 {
			return true, time.Duration(vals[1]) * time.Millisecond, replayed, false, nil
		}
		return true, 0, replayed, false, nil
	case len(vals) == 2 && vals[0] == 0:
		if vals[1] < 0 {
			return false, -1, replayed, false, nil
		}
		return false, time.Duration(vals[1]) * time.Millisecond, replayed, false, nil
	}
	return false, 0, replayed, handed, errorf("acquire %q: malformed reply %v", p.name, vals)
}

// Release gives back the permit id and wakes a waiter. It works even when ctx has already
// ended: it uses ctx's values with its own timeout ([WithCleanupTimeout]). A lost reply is
// resolved by resending: the permit is given back once, and reported so.
//
// Release returns nil, or:
//  1. an error wrapping [ErrNotHeld] when id is not a live permit: unknown, already released,
//     or its lease ended (a late release of an expired permit reports it; the permit may be
//     someone else's by now, and that one is not touched);
//  2. [ErrInvalid] (bad name, empty id), [ErrWrongType], [ErrClosed], a Redis error, or
//     [ErrUnknownOutcome].
func (p *PermitSemaphore) Release(ctx context.Context, id string) error {
	const op = "release"
	if err := p.ready(ctx, op, true); err != nil {
		return err
	}
	if id == "" {
		return invalid("%s: empty permit id", op)
	}
	o := p.c.obs
	if o == nil {
		return p.release(ctx, id)
	}
	si := ReleaseStartInfo{Kind: KindPermitSemaphore, Name: p.name, Permits: 1}
	start := o.now()
	octx := o.releaseStart(ctx, si)
	err := p.release(ctx, id)
	o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start})
	return err
}

// release is Release with its arguments checked.
func (p *PermitSemaphore) release(ctx context.Context, id string) error {
	const op = "release"
	keys := []string{p.keys.sem, p.keys.leases, p.keys.log, p.keys.logx}
	args := []string{id, p.c.newRequest(), p.c.semKeep(), p.c.pubArg(p.keys.channel)}
	got, _, err := p.c.semInt(ctx, KindPermitSemaphore, op, p.name, true, lua.PsemRelease, keys, args)
	if err != nil {
		return err
	}
	if got != 1 {
		return errorf("release permit %q of %q: %w", id, p.name, ErrNotHeld)
	}
	return nil
}

// Extend sets the lease of the live permit id to end lease (at least 10ms) from now, by the
// server's clock: it may lengthen or shorten it. The permit's new local deadline is the
// moment Extend was called plus lease, minus the drift allowance of [Permit.Expires]. A
// resend of an Extend whose reply was lost sets the lease again from a later moment only
// when that lengthens it.
//
// Extends of one permit through one Client are ordered: a send of an earlier Extend that
// reaches Redis after a later one was applied (a lost reply's send, still on its way, or
// one of an Extend that ended in [ErrUnknownOutcome]) may lengthen the lease, never shorten
// it, so the deadline of the last Extend that returned nil holds. This holds while Redis
// remembers the later Extend, twice the cleanup timeout ([WithCleanupTimeout]) after it was
// applied. Extends of one permit through different Clients are not so ordered.
//
// Extend returns nil, or an error wrapping [ErrNotHeld] when id is not a live permit
// (unknown, released, or its lease ended: an expired permit cannot be revived), or
// [ErrInvalid], [ErrWrongType], [ErrClosed], ctx's error, a Redis error, or
// [ErrUnknownOutcome].
//
// An Extend that fails may still have set the new lease: a send whose reply was lost may
// have been applied before a resend answered. So after an Extend that would shorten the
// lease, count on no more than the new deadline, whatever it returns: [ErrNotHeld] may
// mean that the lease it set ran out before a resend reached Redis.
func (p *PermitSemaphore) Extend(ctx context.Context, id string, lease time.Duration) error {
	const op = "extend"
	if err := p.ready(ctx, op, false); err != nil {
		return err
	}
	if id == "" {
		return invalid("%s: empty permit id", op)
	}
	if err := checkLease("permit lease", lease); err != nil {
		return err
	}
	keys := []string{p.keys.sem, p.keys.leases, p.keys.log, p.keys.logx}
	args := []string{id, strconv.FormatInt(lease.Milliseconds(), 10), p.c.pubArg(p.keys.channel), p.c.newRequest(), p.c.semKeep()}
	got, _, err := p.c.semInt(ctx, KindPermitSemaphore, op, p.name, false, lua.PsemExtend, keys, args)
	if err != nil {
		return err
	}
	if got != 1 {
		return errorf("extend permit %q of %q: %w", id, p.name, ErrNotHeld)
	}
	return nil
}

// psemState is what psem_state.lua reports.
type psemState struct {
	permits, acquired int
	left              time.Duration // of the permit asked about; < 0 when it is not live
}

func (p *PermitSemaphore) state(ctx context.Context, op, id string) (psemState, error) {
	if err := p.ready(ctx, op, false); err != nil {
		return psemState{}, err
	}
	// The caller leaves at ctx's end even while rueidis does not (see leave).
	res, ok := leave(ctx, func() rueidis.RedisResult {
		return p.c.exec(ctx, lua.PsemState, []string{p.keys.sem, p.keys.leases}, []string{id})
	})
	if !ok {
		return psemState{}, errorf("%s %q: %w", op, p.name, ctx.Err())
	}
	vals, err := res.AsIntSlice()
	if err != nil {
		return psemState{}, classify(op, p.name, err)
	}
	if len(vals) != 4 {
		return psemState{}, errorf("%s %q: malformed reply %v", op, p.name, vals)
	}
	return psemState{permits: int(vals[1]), acquired: int(vals[2]),
		left: time.Duration(vals[3]) * time.Millisecond}, nil
}

// AvailablePermits is the number of permits free now: the number of permits less those held
// under a live lease (expired leases count as free). It is 0 when the semaphore does not
// exist, and may be below zero after AddPermits with a negative n. It is a snapshot. It (as
// AcquiredPermits, Permits and TTL) returns ctx's error, wrapped, when ctx ends first, even
// while Redis does not answer.
func (p *PermitSemaphore) AvailablePermits(ctx context.Context) (int, error) {
	st, err := p.state(ctx, "available permits of", "")
	return st.permits - st.acquired, err
}

// AcquiredPermits is the number of permits held now under a live lease. It is a snapshot.
func (p *PermitSemaphore) AcquiredPermits(ctx context.Context) (int, error) {
	st, err := p.state(ctx, "acquired permits of", "")
	return st.acquired, err
}

// Permits is the number of permits, free or held (0 when the semaphore does not exist).
func (p *PermitSemaphore) Permits(ctx context.Context) (int, error) {
	st, err := p.state(ctx, "permits of", "")
	return st.permits, err
}

// TTL is the time left of the lease of the permit id, by the server's clock, or an error
// wrapping [ErrNotHeld] when id is not a live permit.
func (p *PermitSemaphore) TTL(ctx context.Context, id string) (time.Duration, error) {
	const op = "ttl of permit of"
	if id == "" {
		return 0, invalid("%s: empty permit id", op)
	}
	st, err := p.state(ctx, op, id)
	if err != nil {
		return 0, err
	}
	if st.left < 0 {
		return 0, errorf("ttl of permit %q of %q: %w", id, p.name, ErrNotHeld)
	}
	return st.left, nil
}

// Delete removes the semaphore and every permit held from it, and reports whether it existed.
// Holders learn of it when their Release or Extend reports [ErrNotHeld]; waiters keep waiting
// (a semaphore that does not exist has no permits). A key of another type is left untouched
// (the error wraps [ErrWrongType]). When a lost reply was resolved by resending, Delete may
// report false for a semaphore its first send deleted.
func (p *PermitSemaphore) Delete(ctx context.Context) (bool, error) {
	const op = "delete"
	if err := p.ready(ctx, op, false); err != nil {
		return false, err
	}
	got, _, err := p.c.semInt(ctx, KindPermitSemaphore, op, p.name, false, lua.PsemDelete, []string{p.keys.sem, p.keys.leases}, nil)
	return got == 1, err
}
