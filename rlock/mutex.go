package rlock

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/fastform"
	"github.com/relock-go/relock/lua"
)

// Mutex is a handle on a reentrant lock named in Redis. Get one with [Client.Mutex].
//
// # Owners and reentrancy
//
// The handle is an owner: while it holds the lock, Lock and TryLock on it succeed at once and
// add a hold; the lock is free again when Unlock has given back every hold. A context
// carrying an owner ([WithOwner]) overrides the handle's own, so that the handles of one
// name used down a call chain re-enter. Goroutines that use one handle (or one context
// owner) share its holds: the handle is safe for concurrent use, but it is not a lock
// between those goroutines. Ownership never depends on the goroutine.
//
// # Leases
//
// A hold always has a lease in Redis, so the lock of a crashed process frees by itself.
// [Mutex.Lock], and [Mutex.TryLock] with lease <= 0, hold in watchdog mode: the lease is the
// watchdog timeout and the Client's watchdog renews it while the lock is held.
// [Mutex.LockLease], and TryLock with lease > 0, hold for that fixed lease, never renewed. A re-entry never shortens the lease
// in force: a re-entry with a longer fixed lease extends it; a re-entry in watchdog mode
// turns the watchdog on for the rest of the tenure. Both hold once Redis granted the
// re-entry, also when the call then fails and gives its own hold back (its ctx ended as the
// grant came back, a [MultiLock] round that failed): the earlier holds then last to the
// extended lease, or are renewed until their Unlock.
//
// # Loss
//
// The holder learns at once when its hold ends other than by its own Unlock: [Mutex.Done]
// closes and the context from [Mutex.HoldContext] is cancelled with cause [ErrLockLost]
// when a renewal finds the lock gone or taken, or when the lease runs out (by the
// holder's own conservative clock) before a renewal was confirmed, even while Redis is
// unreachable. A lost lock is never silently taken again: Lock and TryLock by the same owner
// fail with ErrLockLost until Unlock has been called once for every hold taken.
//
// # Fairness
//
// Waiters of one Client queue in arrival order. When the last hold is given back while a
// waiter of the same Client is parked, the release script passes the lock straight to it (a
// fresh grant with its own token and lease; no publish, no acquire of its own); otherwise
// the release wakes one waiter per Client through Redis pub/sub. A Lock call that finds
// others of its Client already waiting queues behind them rather than barging in. A lock
// passes on within a Client at most 8 times in a row; the next release frees it and
// publishes, so that waiters of other Clients get a turn. Between Clients there is no order:
// whoever's request reaches Redis first wins, so shares between busy Clients are uneven,
// the more so the faster each Client cycles (Jain 0.42-0.65 and a longest wait of 0.12-0.73 s
// over 16 goroutines on 4 Clients in BenchmarkMutex_HotKey on a 2-core machine, at 15,000-
// 20,000 acquisitions/s; 1.000 on one Client). Use [Client.FairMutex] for arrival order across
// processes. TryLock with wait 0 never queues: it makes one attempt.
//
// # Invalid handles
//
// A Mutex is made by a Client. A nil or zero *Mutex, or one made by a nil or zero Client, is
// no handle: its methods return an error wrapping [ErrInvalid] (Done a closed channel,
// HoldContext a context cancelled with that cause, Name and Key "") rather than panic.
type Mutex struct {
	c     *Client
	name  string
	keys  lockKeys
	owner string
	v     *variant
	err   error // an invalid name: every method returns it
	spare *hold // the hold this handle's own owner used last (Client.ref); guarded by c.mu
	// fastUntil is until when (unix nanoseconds) this handle's fresh acquires go as fast
	// grants: the fence counter's life after its last uncontended grant (fast.go).
	fastUntil atomic.Int64
}

// Mutex returns a handle on the lock called name. It sends nothing to Redis. An empty name,
// or a nil or zero Client, makes a handle whose every method returns an error wrapping
// [ErrInvalid].
func (c *Client) Mutex(name string) *Mutex {
	return c.newMutex(name, mutexVariant)
}

// newMutex returns a handle on the lock called name of variant v.
func (c *Client) newMutex(name string, v *variant) *Mutex {
	if err := c.usable(); err != nil {
		return &Mutex{name: name, v: v, err: err}
	}
	m := &Mutex{c: c, name: name, keys: c.lockKeys(name), owner: c.newOwner(), v: v}
	if name == "" {
		m.err = invalid("empty %s name", v.kind)
	}
	return m
}

// Name is the lock's name as given to [Client.Mutex] ("" for a nil handle).
func (m *Mutex) Name() string {
	if m == nil {
		return ""
	}
	return m.name
}

// Key is the Redis key of the lock's hash (owner id -> hold count). Its fencing counter and
// release channel share its hash tag. It is "" for a nil or zero handle, or one of a nil or
// zero Client.
func (m *Mutex) Key() string {
	if m == nil {
		return ""
	}
	return m.keys.lock
}

// check returns the error of an invalid handle or ctx: a nil or zero handle (not made by a
// Client), an invalid name or Client, or a nil ctx (or one WithOwner made from a nil
// parent: ctxError). Every method of a handle checks it
// before anything else, so that none of them panics.
func (m *Mutex) check(ctx context.Context) error {
	switch {
	case m == nil:
		return invalid("nil lock handle")
	case m.err != nil:
		return m.err
	case m.c == nil || m.v == nil:
		return invalid("zero lock handle: make one with a Client")
	case ctxError(ctx) != nil:
		return ctxError(ctx)
	}
	return nil
}

// ownerOf returns the owner an operation with ctx acts for.
func (m *Mutex) ownerOf(ctx context.Context) (string, error) {
	if err := m.check(ctx); err != nil {
		return "", err
	}
	if id, ok := OwnerFrom(ctx); ok {
		if id == "" {
			return "", invalid("empty owner id in context")
		}
		return "u:" + id, nil
	}
	return m.owner, nil
}

// Lock blocks until the lock is held by the caller's owner, then keeps it held (watchdog
// mode) until Unlock. If the owner already holds it through this Client, Lock adds a hold
// at once: a re-entry never waits behind other waiters (only, within ctx, for the owner's
// other call on the lock through this Client, if one is under way: the owner's calls on a
// lock take turns).
//
// Lock never outlives ctx by more than 100ms, even while Redis does not answer. Work left
// to do when ctx ends (resolving an acquire whose reply was lost, giving back a grant that
// reached a caller that had gone) goes on in the background, within the cleanup timeout
// ([WithCleanupTimeout]); [Client.Close] ends it and waits for it. To keep that bound while
// Redis does not answer, an acquire whose ctx can end is sent from a goroutine of its own; one
// whose ctx cannot end (context.Background, [context.WithoutCancel]) is sent on the caller's
// goroutine, which saves a hand-over between goroutines per attempt (BenchmarkMutex_Uncontended
// against BenchmarkMutex_UncontendedBackground in bench/).
//
// Lock returns nil when the lock is held. Otherwise it returns:
//  1. ctx's error, wrapped, when ctx ends first; nothing is left held or queued in Redis
//     once the background work above is done (if Redis stays unreachable, a hold it may
//     have granted is never renewed and expires with its lease; a re-entry's, into a hold the
//     owner keeps, rides with that hold, renewed with it, until it is given back: see
//     [Mutex.HoldCount]);
//  2. [ErrLockLost] when the owner's earlier hold was lost and not yet unlocked; an error
//     wrapping [ErrLeaseExpired] for a re-entry whose grant came back after the hold it
//     re-entered ran to the end of its fixed lease (the grant is given back: the caller holds
//     nothing more, and unlocks only what it held before);
//  3. [ErrWrongType] when the key holds another kind of value;
//  4. [ErrClosed] after [Client.Close]; [ErrInvalid] for an invalid name or owner;
//  5. a Redis or connection error, wrapped; an acquire whose reply was lost is resolved
//     first (and undone if the caller is gone), or reported as [ErrUnknownOutcome].
func (m *Mutex) Lock(ctx context.Context) error {
	_, err := m.acquire(ctx, -1, 0)
	return err
}

// LockLease blocks until the lock is held by the caller's owner, like [Mutex.Lock], and holds
// it for the fixed lease, never renewed (Redisson's lock(leaseTime)): the lock frees by itself
// when the lease ends, whether or not Unlock was called. The lease is counted from the moment
// the request that got the lock was sent. A lease below 10ms (the drift allowance, 1% + 2ms,
// would leave nothing of it), 0 and negative leases included, is an error wrapping
// [ErrInvalid]; use Lock for watchdog mode.
//
// When the lease ends before Unlock, the hold is over: [Mutex.Done] closes, the context from
// [Mutex.HoldContext] is cancelled with cause [ErrLeaseExpired], and [Mutex.Err] and Unlock
// return an error wrapping ErrLeaseExpired (and so [ErrNotHeld]); unlike a loss, it does not
// refuse the owner's next Lock. A re-entry never shortens the lease in force (see
// [Mutex]). A grant that comes back after its lease ran out on the holder's clock (Redis
// answered too slowly) is given back and tried again until ctx ends.
//
// LockLease returns nil when the lock is held, or else the errors listed at [Mutex.Lock].
func (m *Mutex) LockLease(ctx context.Context, lease time.Duration) error {
	if err := checkLease("lease", lease); err != nil {
		return err
	}
	_, err := m.acquire(ctx, -1, lease)
	return err
}

// TryLock tries to take the lock within wait. wait 0 makes exactly one attempt. lease > 0
// holds the lock for that fixed lease, never renewed; lease <= 0 holds it in watchdog mode,
// like Lock.
//
// TryLock returns (true, nil) when the lock is held, (false, nil) when wait ran out with the
// lock held by another owner, and (false, err) for the failures listed at [Mutex.Lock] (a
// ctx that ends before wait does is such a failure). A negative wait, or a fixed lease
// below 10ms (the drift allowance, 1% + 2ms, would leave nothing of it), is an error
// wrapping [ErrInvalid]. A grant that comes back after its fixed lease ran out on the
// holder's clock (Redis answered too slowly) is given back and tried again within wait; if
// wait ends that way, the error wraps [ErrLeaseExpired].
//
// wait bounds when attempts begin, not when the call returns: a request in flight as it ends
// is seen to its outcome while ctx lives (its replays, when replies are lost, for up to the
// cleanup timeout; a hand-off to the caller that a release of this Client began, for up to
// two: the release's, then the hand-off's replay). Only ctx bounds the call as Lock's. An
// attempt that must wait for its turn behind another call of the owner on the lock (the
// goroutines sharing a handle or a context owner take turns, with the work their calls left
// to the background) waits within wait too: when wait runs out first, nothing is sent and
// TryLock returns (false, nil); a re-entry waits for its turn within ctx only, and is
// granted.
func (m *Mutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return m.acquire(ctx, wait, lease)
}

// minLease is the shortest fixed lease: below it the drift allowance (1% + 2ms) leaves too
// little of the lease for a request's round trip, and every grant would come back already
// over on the holder's clock.
const minLease = 10 * time.Millisecond

// checkLease validates a fixed lease.
func checkLease(what string, lease time.Duration) error {
	if lease < minLease {
		return invalid("%s %v is below %v (the drift allowance, 1%% + 2ms, would leave nothing of it)", what, lease, minLease)
	}
	return nil
}

// Unlock gives back one hold of the caller's owner; the lock is free when every hold is
// given back, and then one waiter is woken. Unlock works even when ctx is already cancelled:
// it uses ctx's values with its own timeout ([WithCleanupTimeout]). When it returns, the
// watchdog no longer renews a lock that it freed.
//
// Unlock returns nil on success, or:
//  1. [ErrNotHeld] when the owner holds no hold: never locked, already unlocked, expired or
//     taken by another (the loss cause is joined when the owner was told of a loss; after a
//     fixed lease ran its course, the error wraps [ErrLeaseExpired], even when Redis still
//     had the hold for the drift allowance and Unlock gave it back there). One exception: a
//     handle's uncontended acquire whose request reached Redis only after the Client had
//     resolved it as refused, and after the lock was freed, leaves a hold nobody has (free
//     to every other owner and reader) until the lease it asked for ends; an Unlock of that
//     handle meanwhile gives it back and returns nil;
//  2. [ErrWrongType], [ErrClosed], [ErrInvalid], or a Redis error, wrapped. A give-back that
//     Redis cannot serve yet (unreachable, loading, a Cluster slot being migrated or a
//     master failing over: nothing was applied) is sent again with backoff, and its error
//     is returned only when the cleanup timeout ends first;
//  3. [ErrUnknownOutcome] when the give-back was sent and no answer came within the cleanup
//     timeout: Redis may or may not have applied it. The Client counts the hold as given
//     back all the same (do not call Unlock again for it): when the owner holds others, Redis
//     gives it back with them once it answers again (at the first renewal it confirms), never
//     one of the owner's own, for an owner of this Client's handles; for a context owner,
//     whose holds other Clients may count too, it rides with the owner's holds and expires
//     with its lease once nobody renews them; a last hold Redis still has is no longer
//     renewed and expires with its lease ([Mutex.HoldCount] counts it meanwhile);
//  4. an error wrapping [context.DeadlineExceeded] when another call of the same owner on
//     this lock through this Client (another goroutine sharing the handle or the owner, or
//     work such a call left to the background) kept the lock's operations busy for the whole
//     cleanup timeout: nothing was sent, and the hold is still counted (call Unlock again).
//
// An Unlock that waits for another call of the same owner on this lock (one handle or owner
// used by several goroutines) waits at most the cleanup timeout for its turn (case 4), and its
// give-back then has a whole cleanup timeout of its own. It gives back a hold of the owner's
// tenure in force when Unlock was called: if that tenure ends meanwhile (a fixed lease runs out) and the running call begins
// another, Unlock gives nothing back and returns as in case 1, ErrLeaseExpired after a fixed
// lease; the new tenure's holds stay with the caller that took them.
//
// Unlock gives back a hold of whatever Redis counts for the owner: an owner that took no hold
// through this Client but has one in Redis (left by an acquire whose outcome stayed unknown,
// or, for a context owner ([WithOwner]), taken through another Client) gives it back, and
// Unlock returns nil. One exception: while a context owner's last tenure through this Client
// ran to the end of its fixed lease and was not unlocked, an Unlock through this Client (any
// handle of the name) is taken as that tenure's: it returns [ErrLeaseExpired] and gives back
// only holds Redis counts of this Client's, never one another Client took since (it cannot
// tell a late Unlock of the ended lease from one meant for that hold); as many Unlocks as the
// ended tenure had holds do so, and the next gives back as above. The Client remembers its
// latest 4096 such tenures.
func (m *Mutex) Unlock(ctx context.Context) error {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return err
	}
	return m.unlockObserved(ctx, owner, nil)
}

// unlockObserved is Unlock for owner, told to the observer; failed is unlock's.
func (m *Mutex) unlockObserved(ctx context.Context, owner string, failed func(h *hold, err error)) error {
	if o := m.c.obs; o != nil && m.v.obs != "" {
		if m.c.isClosed() {
			return ErrClosed
		}
		si := ReleaseStartInfo{Kind: m.v.obs, Name: m.name, Owner: owner}
		start := o.now()
		octx := o.releaseStart(ctx, si)
		rt := &relTrace{}
		err := m.unlock(ctx, owner, rt, failed, nil)
		o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start,
			Freed: rt.freed && err == nil, HandedOff: rt.handedOff && err == nil})
		return err
	}
	return m.unlock(ctx, owner, nil, failed, nil)
}

// giveBackTaken is Unlock for a hold that a [MultiLock]'s failed round took (multiLocker):
// the MultiLock's caller, told that nothing it took is left held, will not unlock it, so a
// give-back that fails must not leave the hold counted and renewed. When it fails other than
// with ErrNotHeld (Redis unreachable for the whole cleanup timeout, say), this Client stops
// counting and renewing the hold (hold.abandon), as it does for the grant of a caller that
// has gone (giveBackOne), and Redis lets it expire within its lease. When nothing was sent
// because another call of the owner on the lock kept it busy for the whole cleanup timeout
// (Unlock's case 4), the give-back goes on in the background once that call is done
// (giveBackAfter). (Before, the hold stayed counted and renewed for as long as the Client
// lived: TestMultiLock_failedGiveBackOfARoundLeavesNothingHeld,
// TestMultiLock_giveBackBusyBehindOwnersOtherCall.)
func (m *Mutex) giveBackTaken(ctx context.Context) error {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return err
	}
	var t0 *tenure // the tenure the hold is one of
	h0 := m.c.peek(m.keys, m.v, owner)
	if h0 != nil {
		t0, _ = h0.snapshot()
	}
	ran := false
	err = m.unlockObserved(ctx, owner, func(h *hold, err error) {
		ran = true
		h.abandonFailed(err, abandonOne) // under h.op
	})
	if err != nil && !ran && t0 != nil && errors.Is(err, context.DeadlineExceeded) {
		m.giveBackAfter(ctx, h0, t0)
	}
	return err
}

// giveBackAfter gives back, in the background, one hold of h's tenure t0 once the owner's
// other call on the lock lets go of it (h.op), unless t0 has ended by then (the hold ended
// with it) or h left the Client's table (a later hold of the owner is another's): as a
// release would, failing which the hold is abandoned (giveBackOne). Close cuts the wait
// short: the hold then expires with its lease, as every hold does at Close.
func (m *Mutex) giveBackAfter(ctx context.Context, h *hold, t0 *tenure) {
	if m.c.isClosed() || !m.c.rerefIfListed(h) {
		return
	}
	values := context.WithoutCancel(ctx)
	m.c.background(func() {
		defer m.c.unref(h)
		if err := h.lockOp(m.c.life); err != nil {
			return
		}
		defer h.unlockOp()
		if now, _ := h.snapshot(); now != t0 {
			return
		}
		cctx, cancel := m.c.cleanupCtx(values)
		defer cancel()
		m.gaveBack(h, GiveBackCanceled, m.giveBackOne(cctx, h))
	})
}

// ForceUnlock frees the lock whoever holds it and wakes a waiter. It reports whether there
// was a lock to free. The former holder learns of the loss at its next renewal. A key of
// another type is left untouched: the error wraps [ErrWrongType].
func (m *Mutex) ForceUnlock(ctx context.Context) (bool, error) {
	return m.force(ctx, nil)
}

// force frees the lock, with ARGV seen appended to the force script's (ARGV[4...] of
// force_release.lua: the token and owners seen; none frees whoever holds it). A lock held
// otherwise than seen is left alone: the error wraps ErrConflict.
func (m *Mutex) force(ctx context.Context, seen []string) (bool, error) {
	if err := m.check(ctx); err != nil {
		return false, err
	}
	if m.c.isClosed() {
		return false, ErrClosed
	}
	if seen != nil && m.v.force != lua.ForceRelease {
		return false, invalid("force unlock %q: this kind cannot be freed as seen", m.name) // no such kind today
	}
	keys, args := []string{m.keys.lock}, []string{m.keys.pub, m.v.forceMessage}
	if m.v.spin {
		args[0] = ""
	}
	if m.v.force == lua.ForceRelease {
		// A holder replaying a release of what this takes asks the record, for as long as
		// it may: until its lease would have run out, and its cleanup timeout after. (Any
		// kind that frees with this script may take a plain lock's holds: the fair lock
		// shares its hash.)
		// The fence tells a fast form's ghost (a free lock) from a held one.
		keep := max(forcedKeep, 2*m.c.opts.cleanupTimeout)
		keys = append(keys, m.keys.forced, m.keys.fence)
		args = append(args, strconv.FormatInt(keep.Milliseconds(), 10))
	}
	args = append(args, seen...)
	n, err := m.c.exec(ctx, m.v.force, keys, args).AsInt64()
	if err != nil {
		return false, classify("force unlock", m.name, err)
	}
	if n == -1 {
		return false, errorf("force unlock %q: %w: nothing freed", m.name, ErrConflict)
	}
	return n == 1, nil
}

// forcedKeep is the least time a forced record outlives the lease it ended (force_release.lua):
// more than any holder's cleanup timeout that is not set far above the default.
const forcedKeep = time.Minute

// IsLocked reports whether any owner holds the lock.
func (m *Mutex) IsLocked(ctx context.Context) (bool, error) {
	t, err := m.keyType(ctx)
	return t == "hash", err
}

// keyType is "hash" while the lock is held, "none" while it is free: no key, or a fast
// form's ghost (see readLock).
func (m *Mutex) keyType(ctx context.Context) (string, error) {
	if err := m.check(ctx); err != nil {
		return "", err
	}
	if m.c.isClosed() {
		return "", ErrClosed
	}
	fields, _, err := m.readLock(ctx, false, "type of")
	if err != nil || len(fields) == 0 {
		return "none", err
	}
	return "hash", nil
}

// readLock reads the lock's hash (HGETALL; with its PTTL in the same round trip when pttl)
// for IsLocked, TTL, HoldCount and keyType (op names the read in its errors) as the readers
// take it: no fields when the key is absent or holds a fast form's ghost, a fast form whose
// sequence number the fence records as spent (docs/DESIGN.md section 5: a free lock). Only a fast form costs more: GET of the fence and TIME, in one round trip. A
// key of another type (TYPE, GET and PTTL read then, in one round trip) is an error wrapping
// ErrWrongType that names the type, but for a fast form written as a string (the fast
// grant's SET: "~<owner> <seq>"), read as its hash form, the hash {token: value}.
func (m *Mutex) readLock(ctx context.Context, pttl bool, op string) (map[string]string, int64, error) {
	rc := m.c.rc
	var fields map[string]string
	var err error
	ms := int64(-2)
	for try := 0; ; try++ {
		if pttl {
			res := rc.DoMulti(ctx, rc.B().Hgetall().Key(m.keys.lock).Build(), rc.B().Pttl().Key(m.keys.lock).Build())
			if fields, err = res[0].AsStrMap(); err == nil {
				if ms, err = res[1].AsInt64(); err != nil {
					return nil, 0, classify("ttl of", m.name, err)
				}
			}
		} else {
			fields, err = rc.Do(ctx, rc.B().Hgetall().Key(m.keys.lock).Build()).AsStrMap()
		}
		if !wrongType(err) {
			break
		}
		var again bool
		fields, ms, again, err = m.readString(ctx, pttl, try)
		if err != nil {
			return nil, 0, err
		}
		if !again {
			break
		}
	}
	if err != nil {
		return nil, 0, classify(op, m.name, err)
	}
	if _, seq, ok := fastform.Holder(fields); ok {
		spent, err := m.fastSpent(ctx, seq)
		if err != nil {
			return nil, 0, err
		}
		if spent {
			return nil, -2, nil
		}
	}
	return fields, ms, nil
}

// readString reads the lock key after a hash read of it answered WRONGTYPE: TYPE, GET and
// (when pttl) PTTL, in one round trip. A fast form written as a string (the fast grant's SET
// lock "~<owner> <seq>" NX PX <lease>; fastform.FromString) is returned as the fields of its
// hash form, with its PTTL; no fields when the key has gone meanwhile. again is true when
// the key is a hash by now (a script made the string its hash form, or the lock was freed and
// taken again, between the reads), for the caller to read it again: at most twice (try is
// the number of reads again so far), then the hash is taken as another type. Another type,
// a string that is not a fast form among them, is an error wrapping ErrWrongType that names
// it.
func (m *Mutex) readString(ctx context.Context, pttl bool, try int) (fields map[string]string, ms int64, again bool, err error) {
	rc := m.c.rc
	cmds := rueidis.Commands{rc.B().Type().Key(m.keys.lock).Build(), rc.B().Get().Key(m.keys.lock).Build()}
	if pttl {
		cmds = append(cmds, rc.B().Pttl().Key(m.keys.lock).Build())
	}
	res := rc.DoMulti(ctx, cmds...)
	t, err := res[0].ToString()
	if err != nil {
		return nil, 0, false, classify("type of", m.name, err)
	}
	switch t {
	case "none":
		return nil, -2, false, nil
	case "hash":
		if try < 2 {
			return nil, 0, true, nil
		}
	case "string":
		v, err := res[1].ToString()
		if err != nil && !rueidis.IsRedisNil(err) && !wrongType(err) {
			return nil, 0, false, classify("type of", m.name, err)
		}
		if fields, ok := fastform.FromString(v); ok {
			ms = -2
			if pttl {
				if ms, err = res[2].AsInt64(); err != nil {
					return nil, 0, false, classify("ttl of", m.name, err)
				}
			}
			return fields, ms, false, nil
		}
	}
	return nil, 0, false, errorf("lock %q: %w (a %s)", m.name, ErrWrongType, t)
}

// fastSpent reports whether the lock's fence records seq (a fast form's) as spent now: the
// fast form is a ghost (GET of the fence and TIME, in one round trip). A fence of another
// type records nothing, as for the scripts (lib_fence.lua's fenceSpent).
func (m *Mutex) fastSpent(ctx context.Context, seq string) (bool, error) {
	rc := m.c.rc
	res := rc.DoMulti(ctx, rc.B().Get().Key(m.keys.fence).Build(), rc.B().Time().Build())
	fence, err := res[0].ToString()
	if err != nil && !rueidis.IsRedisNil(err) && !wrongType(err) {
		return false, classify("fence of", m.name, err)
	}
	now, err := serverTime(res[1])
	if err != nil {
		return false, classify("fence of", m.name, err)
	}
	return fastform.Spent(fence, seq, now.UnixMilli()), nil
}

// HoldCount is the number of holds the caller's owner has on the lock, as Redis sees it (0
// when it holds none). It is the number of holds the owner took and has not given back, but
// for holds that Redis may count and no caller has: a re-entry granted to a caller that had
// gone (its ctx ended while the reply was on the way) whose give-back then failed, a hold
// from an acquire whose outcome stayed unknown (its caller had gone, or was told
// [ErrUnknownOutcome]; only the Observer's Replay event tells the former), and a hold that an
// Unlock told [ErrUnknownOutcome] may not have given back. While the owner holds the lock
// through this Client, such a hold is given back at the first renewal Redis confirms after
// it arose (within one renewal period of Redis answering again), or, under a fixed lease, at
// the owner's next grant or last Unlock through this Client or the lease's end; when the
// owner holds nothing else through this Client, at its next grant through it, or when its
// lease ends, nobody renewing it. Each such give-back takes only what Redis counts beyond the
// holds the owner has through this Client, so a hold that was never granted costs nothing.
// For a context owner ([WithOwner]) that other Clients share, HoldCount counts their holds
// too.
func (m *Mutex) HoldCount(ctx context.Context) (int, error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	if m.c.isClosed() {
		return 0, ErrClosed
	}
	// The owner's count field; else a fast form of the owner's (docs/DESIGN.md section 5)
	// is one hold (readLock reads a ghost as a free lock).
	fields, _, err := m.readLock(ctx, false, "hold count of")
	if err != nil {
		return 0, err
	}
	if s, ok := fields[owner]; ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, classify("hold count of", m.name, err)
		}
		return int(n), nil
	}
	if o, _, ok := fastform.Holder(fields); ok && o == owner {
		return 1, nil
	}
	return 0, nil
}

// TTL is the lock's remaining lease in Redis, whoever holds it: 0 when it is not locked,
// -1ms when the key has no expiry (it was not set by relock).
func (m *Mutex) TTL(ctx context.Context) (time.Duration, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	if m.c.isClosed() {
		return 0, ErrClosed
	}
	fields, ms, err := m.readLock(ctx, true, "type of")
	if err != nil {
		return 0, err
	}
	switch {
	case len(fields) == 0 || ms == -2:
		return 0, nil
	case ms == -1:
		return -time.Millisecond, nil
	}
	return time.Duration(ms) * time.Millisecond, nil
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// tenure returns the caller's owner's current tenure on this Client, or else why there is
// none, as Mutex.Err says it: ErrClosed once the Client is closed, ErrNotHeld, the loss that
// ended the last one while the owner still counts holds, or ErrLeaseExpired when the last
// one ran to the end of its fixed lease. (Asked of the hold table alone, it told ErrNotHeld
// after Close, and HoldContext's cause said so while Err said ErrClosed:
// TestContracts_holdContextAfterCloseHasErrsCause.)
func (m *Mutex) tenure(ctx context.Context) (*tenure, error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return nil, err
	}
	var t *tenure
	err = ErrNotHeld
	if h := m.c.peekFor(m, owner); h != nil {
		t, err = h.why()
	}
	if t == nil && m.c.isClosed() {
		return nil, ErrClosed
	}
	return t, err
}

// Done returns a channel that is closed when the caller's owner's current hold on the lock
// ends: released by its last Unlock, lost (see [Mutex]), run to the end of its fixed lease,
// or ended by [Client.Close]. When the owner holds no hold through this Client (or the
// handle is invalid), the channel is already closed. [Mutex.Err] tells why it closed
// ([ErrLeaseExpired] for a fixed lease that ran its course). Nothing else closes it.
func (m *Mutex) Done(ctx context.Context) <-chan struct{} {
	t, _ := m.tenure(ctx)
	if t == nil {
		return closedCh
	}
	return t.doneCh()
}

// Err is nil while the caller's owner holds the lock through this Client; otherwise it says
// why not:
//   - an error wrapping [ErrLockLost]: lost, until every hold has been unlocked;
//   - [ErrLeaseExpired], which wraps [ErrNotHeld]: the last hold was taken with a fixed lease
//     ([Mutex.LockLease], [Mutex.TryLock] with lease > 0) and the lease ran its course, until
//     the owner locks again or calls Unlock. For a handle's own owner only that handle
//     reports it (another handle is another owner); for a context owner ([WithOwner]) every
//     handle of the name on this Client does, for the Client's latest 4096 context owners'
//     such leases still not unlocked (an older one is forgotten);
//   - [ErrNotHeld]: never held, or released;
//   - [ErrClosed], or [ErrInvalid] for an invalid handle or owner.
func (m *Mutex) Err(ctx context.Context) error {
	if _, err := m.ownerOf(ctx); err != nil {
		return err
	}
	if m.c.isClosed() {
		return ErrClosed
	}
	_, err := m.tenure(ctx)
	return err
}

// Token is the fencing token of the caller's owner's current hold: a number that strictly
// rises with every fresh grant of this lock name (re-entry keeps it). The name's counter of
// tokens is set from the Redis server's clock in microseconds (to the larger of that and the
// last token + 1) and then counts up by one per fresh grant for a second ([lua.CounterTTL]),
// when it expires; so a token is the server's clock at its grant to within a second, and does
// not rise by exactly one. The counter can also be lost with a restart without persistence or
// a failover to a replica that lacked it: tokens keep rising across all of these as long as
// the server's clock reads later than it did at the name's last grant (it was not set back).
// (A fair lock's, a read-write lock's and a RedLock's tokens follow the clock at every grant;
// their counter lives a day, [lua.FenceTTL].) Pass it to the resource you protect and have it
// refuse any token lower than one it has seen: that is what keeps a paused or partitioned
// former holder from doing harm. It returns [ErrNotHeld] when the owner holds no hold through
// this Client ([ErrClosed] once the Client is closed), or the reason [Mutex.Err] gives.
func (m *Mutex) Token(ctx context.Context) (int64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	t, err := m.tenure(ctx)
	if err != nil {
		return 0, errorf("token of %q: %w", m.name, err)
	}
	return t.token, nil
}

// HoldContext returns a copy of ctx that is also cancelled when the caller's owner's current
// hold ends; [context.Cause] then tells why: an error wrapping [ErrLockLost], [ErrNotHeld]
// (released by Unlock), [ErrLeaseExpired] (a fixed lease ran its course; it wraps
// ErrNotHeld, so test for it first) or [ErrClosed]. It is cancelled before the call that ended the hold
// returns (an Unlock that found the lock gone has set the cause [ErrLockLost] by the time it
// returns ErrNotHeld), so calling cancel right after never hides the cause. Run the guarded work under it to stop as soon as
// the lock is lost. When the owner holds no hold, the context is already cancelled, with
// the reason [Mutex.Err] gives as cause; so it is for a nil ctx (on context.Background,
// with a cause wrapping [ErrInvalid]), even while the handle's owner holds the lock. Call
// cancel when done with it.
func (m *Mutex) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	parent := ctx
	if parent == nil {
		parent = context.Background()
	}
	hctx, cancel := context.WithCancelCause(parent)
	// Asked with ctx itself: a nil ctx is the cause, ErrInvalid, also while the handle's
	// owner holds the lock (asked with Background, it was a live context of the hold).
	t, err := m.tenure(ctx)
	switch {
	case err != nil:
		cancel(err)
	default:
		stop := t.subscribe(func(cause error) { cancel(cause) })
		return hctx, func() { stop(); cancel(context.Canceled) }
	}
	return hctx, func() { cancel(context.Canceled) }
}
