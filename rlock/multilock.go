package rlock

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/relock-go/relock/internal/backoff"
)

// Locker is a lock that a [MultiLock] can hold: [Mutex], [SpinMutex] and the other
// reentrant locks of this package satisfy it, whichever Client (and Redis deployment) they
// belong to. TryLock must follow [Mutex.TryLock]'s contract: wait 0 makes one attempt,
// (false, nil) means the lock is held by another, lease > 0 is a fixed lease and lease <= 0
// watchdog mode; Unlock must work on a ctx that has ended (a MultiLock passes ctx's values
// without its cancellation when it gives back what it took).
type Locker interface {
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
}

var (
	_ Locker = (*Mutex)(nil)
	_ Locker = (*SpinMutex)(nil)
	_ Locker = (*MultiLock)(nil)
)

// Timing of a MultiLock's rounds.
const (
	// multiMemberWait bounds the wait for each member but the first of a round, drawn at
	// random from its upper half: the MultiLock holds the earlier members meanwhile, so it
	// must not wait long (two MultiLocks that each hold what the other waits for block each
	// other until one's wait ends), and the jitter makes one of two such waits end first.
	multiMemberWait = 20 * time.Millisecond
	// multiBackoffMin and multiBackoffMax bound the pause between rounds, drawn at random
	// from the upper half of a step that doubles after every failed round.
	multiBackoffMin = 5 * time.Millisecond
	multiBackoffMax = 250 * time.Millisecond
	// multiLockChunk is how long a round's first member is waited for at a time when the
	// MultiLock's own wait has no bound (Lock): its TryLock needs a bound.
	multiLockChunk = time.Minute
)

// MultiLock holds several locks as one: all of them or none. Its members may have different
// names, belong to different Clients and live on different Redis servers, which is why it is
// made with the package-level [NewMultiLock] rather than by a Client ([Client.MultiLock] is
// the shorthand for the locks of one Client).
//
// # Acquisition
//
// Lock and TryLock take the members in rounds. A round takes its first member with all the
// wait that is left (nothing is held meanwhile, so that wait blocks nobody), then each other
// member with a short wait (10 to 20ms, or less if the wait ends sooner), holding what it took.
// If a member cannot be had in time, the round gives back everything it took, last first,
// pauses for a jittered backoff (5ms doubling up to 250ms), and starts the next round with the
// member that stopped it (waiting for it, through pub/sub, while holding nothing), then the
// others. So no MultiLock holds some members while waiting long for another: two MultiLocks
// that list shared members in different orders cannot deadlock, and the jitter lets one of
// them win. A failure (a member's error, ctx's end) gives back everything the round took
// before it returns: a MultiLock never leaves part of itself held. A give-back that finds the
// member's fixed lease ran out meanwhile (a short lease, TryLock's lease > 0) has nothing to
// give back and is no failure. A give-back that fails
// (Redis unreachable for the whole cleanup timeout, say) is joined to the error returned; a
// member of this package then stops being counted and renewed by its Client (a [RedLock]
// member, by the Clients of the instances whose give-back failed), as the grant of a caller
// that has gone does, and Redis lets its hold expire with its lease, or, when another call of
// the member's owner kept the member busy all that time (nothing was sent), is given back in
// the background once that call is done, unless its tenure ended meanwhile (another Locker's,
// a user's type that embeds a lock of this package included, is given back by its Unlock and
// left as that leaves it).
//
// The first round takes the members in the order of their Redis keys when every member has a
// Key method (every lock of this package has but a [RedLock], whose instances have a key each,
// and a nested MultiLock), members of equal keys (one name on different
// servers) in the given order; otherwise it takes them in the given order. Sorting makes
// MultiLocks that share members agree on the order whatever order they were given in, so
// under contention they queue on the first shared member instead of clashing (a clash costs
// one short wait and a new round). Redisson's RedissonMultiLock takes the members in the given
// order and restarts every round from the first.
//
// # Owners, leases and loss
//
// The members act for their own owners, as they would alone: a member handle is an owner,
// unless ctx carries one ([WithOwner]), which then holds every member of a Client. So
// goroutines that share a MultiLock share its holds, exactly as with a shared [Mutex]; give
// each goroutine its own context owner ([Client.WithNewOwner]) or its own MultiLock to make
// them exclude each other. The MultiLock is reentrant as far as its members are. With
// TryLock's lease > 0, each member's fixed lease starts when that member is granted, so the
// first members' leases end before the last's (Redisson instead re-sets every member's lease
// once all are held; a Locker offers no way to do that). Re-entering members the owner holds
// acts on each as a re-entry of that member alone (see [Mutex], Leases), also in a round that
// fails: a round's grant that re-entered a member held with a fixed lease extends that lease
// when it asked for a longer one, and turns the watchdog on for the rest of the member's
// tenure in watchdog mode (Lock, TryLock with lease <= 0), though the round gives its hold
// back: the member's earlier holds are then renewed until their Unlock, not left to their
// fixed lease. Loss is per member: watch each member's Done (for a [Mutex]).
//
// Members that are one lock in Redis are a mistake the MultiLock cannot always see: it refuses
// the same handle twice and two handles of one Client on one lock name, but two Clients on
// the same server, each with a handle on one name, are two owners of one lock: such a
// MultiLock can never hold both (TryLock fails when its wait ends; Lock waits until ctx ends).
//
// # Observation
//
// A MultiLock reports its own Lock, TryLock and Unlock (kind [KindMultiLock], named by its
// members' names joined with ",") to the [Observer] of the Client of its first member (in
// the order given) that has one; its members report their own acquisitions, releases and
// tenures to theirs. It reports no tenure of its own (no HoldEnd): its members' are its.
type MultiLock struct {
	locks []Locker
	order []int   // indexes into locks: the first round's order
	err   error   // invalid members: every method returns it
	obsc  *Client // the first member's Client that has an observer, nil when none
	name  string  // the members' names joined with ",", for events
}

// observed is implemented by the locks of this package: their Client when it has an
// observer (else nil), and their name.
type observed interface {
	observedBy() (*Client, string)
}

func (m *Mutex) observedBy() (*Client, string) {
	if m == nil || m.c == nil {
		return nil, ""
	}
	if m.c.obs == nil {
		return nil, m.name
	}
	return m.c, m.name
}

func (rw *RWMutex) observedBy() (*Client, string) { return rw.write().observedBy() }

func (l *ReadLocker) observedBy() (*Client, string) { return l.rwm().read().observedBy() }

func (ml *MultiLock) observedBy() (*Client, string) {
	if ml == nil {
		return nil, ""
	}
	return ml.obsc, ml.name
}

// observer is the observer the MultiLock reports to now: nil when none, or when its Client
// is closed (a call then tells nothing).
func (ml *MultiLock) observer() *observer {
	if c := ml.obsc; c != nil && !c.isClosed() {
		return c.obs
	}
	return nil
}

// NewMultiLock returns a MultiLock of locks (see [MultiLock] for the order it takes them
// in). It sends nothing to Redis. No member, a nil member, or the same lock twice (the same
// handle, or two handles of one Client on one lock name, both sides of an RWMutex, also when
// one of the two is a member of a nested MultiLock) makes a MultiLock whose every
// method returns an error wrapping [ErrInvalid], as does a nil or zero *MultiLock (not made
// by NewMultiLock or [Client.MultiLock]). Errors name a member by its index in locks.
func NewMultiLock(locks ...Locker) *MultiLock {
	ml := &MultiLock{locks: append([]Locker(nil), locks...)}
	if ml.err = validateMembers(ml.locks); ml.err != nil {
		return ml
	}
	names := make([]string, 0, len(locks))
	for _, l := range ml.locks {
		if ob, ok := l.(observed); ok {
			c, name := ob.observedBy()
			if ml.obsc == nil {
				ml.obsc = c
			}
			names = append(names, name)
		} else if n, ok := l.(interface{ Name() string }); ok {
			names = append(names, n.Name())
		} else {
			names = append(names, "?")
		}
	}
	ml.name = strings.Join(names, ",")
	ml.order = make([]int, len(locks))
	keys := make([]string, len(locks))
	sorted := true
	for i, l := range ml.locks {
		ml.order[i] = i
		if k, ok := l.(interface{ Key() string }); ok {
			keys[i] = k.Key()
		} else {
			sorted = false
		}
	}
	if sorted {
		sort.SliceStable(ml.order, func(a, b int) bool { return keys[ml.order[a]] < keys[ml.order[b]] })
	}
	return ml
}

// MultiLock returns a [MultiLock] of the reentrant locks ([Client.Mutex]) called names, each
// a handle of its own (an owner of its own). It sends nothing to Redis. No
// name, an empty name, a name given twice, or a nil or zero Client makes a MultiLock whose
// every method returns an error wrapping [ErrInvalid].
func (c *Client) MultiLock(names ...string) *MultiLock {
	if err := c.usable(); err != nil {
		return &MultiLock{err: err}
	}
	locks := make([]Locker, len(names))
	for i, name := range names {
		locks[i] = c.Mutex(name)
	}
	return NewMultiLock(locks...)
}

// multiMember returns the identity of the lock a Mutex-based member is: its Client and key
// (a Mutex and a SpinMutex of one name are one lock), or nil for a value not made by a
// Client. SpinMutex and the other lock kinds that embed *Mutex have it too.
func (m *Mutex) multiMember() any {
	if m == nil || m.c == nil {
		return nil // a zero value, not a handle
	}
	return struct {
		c   *Client
		key string
	}{m.c, m.keys.lock}
}

// An RWMutex's write side and its read side ([ReadLocker]) are one lock: a second handle of
// one Client on its name, or both sides of it, in one MultiLock are refused as two Mutex
// handles of one name are.
func (rw *RWMutex) multiMember() any { return rw.write().multiMember() }

func (l *ReadLocker) multiMember() any { return l.rwm().write().multiMember() }

// validateMembers checks a MultiLock's members.
func validateMembers(locks []Locker) error {
	if len(locks) == 0 {
		return invalid("multi-lock with no member")
	}
	seen := make(map[any]int, 2*len(locks))
	for i, l := range locks {
		if l == nil {
			return invalid("multi-lock member %d is nil", i)
		}
		if v := reflect.ValueOf(l); v.Kind() == reflect.Pointer && v.IsNil() {
			return invalid("multi-lock member %d is a nil %T", i, l)
		}
		ids, err := memberIDs(l, i)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if j, dup := seen[id]; dup {
				return invalid("multi-lock members %d and %d are the same lock (or hold one: a nested MultiLock's members count as its own)", j, i)
			}
			seen[id] = i
		}
	}
	return nil
}

// memberIDs returns the identities of member i, l: the value itself when hashable, the lock it
// is (multiMember), and, for a nested MultiLock (valid: its own members were checked), those
// of its members, so that a lock listed both in a nested MultiLock and beside it is refused as
// a lock listed twice is (both would be taken by one owner: a re-entry for a Mutex, an
// upgrade refused every round for a read side then the write side).
func memberIDs(l Locker, i int) ([]any, error) {
	var ids []any
	if hashable(l) {
		ids = append(ids, l)
	}
	if mm, ok := l.(interface{ multiMember() any }); ok {
		id := mm.multiMember()
		if id == nil {
			return nil, invalid("multi-lock member %d is a %T not made by a Client", i, l)
		}
		if m, ok := l.(interface{ Name() string }); ok && m.Name() == "" {
			return nil, invalid("multi-lock member %d has an empty name", i)
		}
		ids = append(ids, id)
	}
	if ml, ok := l.(*MultiLock); ok && ml.err == nil {
		for _, m := range ml.locks {
			sub, err := memberIDs(m, i)
			if err != nil {
				return nil, err
			}
			ids = append(ids, sub...)
		}
	}
	return ids, nil
}

// Lock blocks until every member is held (each in watchdog mode), taking them in rounds as
// described at [MultiLock]. It returns nil when all are held. Otherwise nothing it took is
// left held and it returns:
//  1. ctx's error, wrapped, when ctx ends first;
//  2. the first member error that is not contention (joined with any error from giving back
//     what the round took), for example [ErrLockLost], [ErrWrongType], [ErrClosed] or a Redis
//     error, each naming the member;
//  3. [ErrInvalid] for invalid members.
func (ml *MultiLock) Lock(ctx context.Context) error {
	_, err := ml.acquire(ctx, -1, 0)
	return err
}

// TryLock tries to hold every member within wait (shared by all rounds; wait 0 makes a
// single round of single attempts). lease > 0 takes each member with that fixed lease (see
// [MultiLock] on when each lease starts); lease <= 0 holds them in watchdog mode.
//
// It returns (true, nil) when all are held, (false, nil) when wait ran out first, and
// (false, err) for the failures listed at [MultiLock.Lock] (a ctx that ends before wait does
// is such a failure). In every case but (true, nil) nothing it took is left held. A negative
// wait is an error wrapping [ErrInvalid].
func (ml *MultiLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return ml.acquire(ctx, wait, lease)
}

// check returns the error of an invalid MultiLock or ctx.
func (ml *MultiLock) check(ctx context.Context) error {
	switch {
	case ml == nil:
		return invalid("nil multi-lock")
	case ml.err != nil:
		return ml.err
	case len(ml.order) == 0:
		return invalid("zero multi-lock: make one with NewMultiLock")
	case ctxError(ctx) != nil:
		return ctxError(ctx)
	}
	return nil
}

// acquire implements Lock (wait < 0: no bound) and TryLock.
func (ml *MultiLock) acquire(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if err := ml.check(ctx); err != nil {
		return false, err
	}
	if o := ml.observer(); o != nil {
		si := AcquireStartInfo{Kind: KindMultiLock, Name: ml.name, Wait: waitBound(wait)}
		if lease > 0 {
			si.Lease = lease
		}
		start := o.now()
		octx := o.acquireStart(ctx, si)
		tr := &acqTrace{}
		ok, err := ml.acquireAs(ctx, wait, lease, tr)
		o.done(ctx, octx, si, start, ok, err, tr)
		return ok, err
	}
	return ml.acquireAs(ctx, wait, lease, nil)
}

// acquireAs is acquire for a checked MultiLock; tr, when not nil, traces it for the
// observer: its attempts are the members' TryLock calls, and it waited when it took more
// than one round.
func (ml *MultiLock) acquireAs(ctx context.Context, wait, lease time.Duration, tr *acqTrace) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, errorf("multi-lock: %w", err)
	}
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	// left is the wait that remains: < 0 without bound, 0 when it ran out.
	left := func() time.Duration {
		if wait < 0 {
			return -1
		}
		if wait == 0 {
			return 0
		}
		return max(time.Until(deadline), 0)
	}
	order := append([]int(nil), ml.order...) // the members in this round's order
	pauses := backoff.New(multiBackoffMin, multiBackoffMax)
	var timer *time.Timer
	for {
		blocker, err := ml.round(ctx, order, left, lease, tr)
		if err != nil {
			return false, err
		}
		if blocker < 0 {
			return true, nil
		}
		rem := left()
		if rem == 0 {
			return false, nil
		}
		if tr != nil {
			tr.waited = true
		}
		// Pause, jittered, so that MultiLocks that stopped each other spread out.
		pause := pauses.Next()
		if rem > 0 {
			pause = min(pause, rem)
		}
		if timer == nil {
			timer = time.NewTimer(pause)
			defer timer.Stop()
		} else {
			timer.Reset(pause)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return false, errorf("multi-lock: %w", ctx.Err())
		}
		// The next round starts with the member that stopped this one.
		for i, m := range order {
			if m == blocker {
				copy(order[1:i+1], order[:i])
				order[0] = blocker
				break
			}
		}
	}
}

// round makes one pass over the members in order: the first with all the wait left, the
// others with a short one. It returns -1 when all are held; otherwise it has given back what
// it took and returns the member that could not be had in time, or an error.
func (ml *MultiLock) round(ctx context.Context, order []int, left func() time.Duration, lease time.Duration, tr *acqTrace) (int, error) {
	taken := 0
	for k, i := range order {
		rem := left()
		w := rem
		if k > 0 {
			if short := backoff.Jitter(multiMemberWait); rem < 0 || rem > short {
				w = short
			}
		}
		ok, err := ml.tryMember(ctx, i, w, lease, tr)
		if ok {
			taken++
			continue
		}
		if uerr := ml.giveBackRound(ctx, order[:taken]); uerr != nil {
			return -1, errors.Join(err, uerr)
		}
		if err != nil {
			return -1, err
		}
		return i, nil
	}
	return -1, nil
}

// tryMember takes member i within w (w < 0: no bound).
func (ml *MultiLock) tryMember(ctx context.Context, i int, w, lease time.Duration, tr *acqTrace) (bool, error) {
	l := ml.locks[i]
	for {
		chunk := w
		if w < 0 {
			chunk = multiLockChunk
		}
		if tr != nil {
			tr.attempts++
		}
		ok, err := l.TryLock(ctx, chunk, lease)
		switch {
		case err != nil:
			return false, errorf("multi-lock member %d: %w", i, err)
		case ok || w >= 0:
			return ok, nil
		}
	}
}

// giveBack unlocks the members in taken, last first, on ctx's values without its
// cancellation, and joins their errors.
func (ml *MultiLock) giveBack(ctx context.Context, taken []int) error {
	return ml.giveBackEach(ctx, taken, Locker.Unlock)
}

// giveBackEach gives back the members in taken with give, last first, on ctx's values
// without its cancellation, and joins their errors, each named by its member.
func (ml *MultiLock) giveBackEach(ctx context.Context, taken []int, give func(Locker, context.Context) error) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for k := len(taken) - 1; k >= 0; k-- {
		if err := give(ml.locks[taken[k]], ctx); err != nil {
			errs = append(errs, errorf("multi-lock member %d: %w", taken[k], err))
		}
	}
	return errors.Join(errs...)
}

// multiLocker is a member that can give back a hold a failed round took so that, if the
// give-back fails, nothing goes on holding it (Mutex.giveBackTaken, RedLock.giveBackTaken):
// the locks of this package.
type multiLocker interface {
	giveBackTaken(ctx context.Context) error
}

// ownLocker returns l as a multiLocker when l is a lock of this package, else nil. A
// user's type that embeds one of them has giveBackTaken promoted, but it is another Locker:
// its own Unlock gives it back (Locker's godoc), which giveBackTaken would bypass
// (TestMultiLock_roundGiveBackCallsForeignLockersUnlock).
func ownLocker(l Locker) multiLocker {
	switch l.(type) {
	case *Mutex, *SpinMutex, *FairMutex, *RWMutex, *ReadLocker, *MultiLock, *RedLock:
		return l.(multiLocker)
	}
	if f := ownLockerHook.Load(); f != nil {
		if m := (*f)(l); m != nil {
			return m
		}
	}
	return nil
}

// ownLockerHook, set by tests only (export_test.go), names the Mutex a test's recording
// wrapper embeds, to be given back as that Mutex is (the MultiLock hunt).
var ownLockerHook atomic.Pointer[func(Locker) *Mutex]

func (rw *RWMutex) giveBackTaken(ctx context.Context) error { return rw.write().giveBackTaken(ctx) }

func (l *ReadLocker) giveBackTaken(ctx context.Context) error {
	return l.rwm().read().giveBackTaken(ctx)
}

func (ml *MultiLock) giveBackTaken(ctx context.Context) error {
	if err := ml.check(ctx); err != nil {
		return err
	}
	// Observed as its Unlock is: its TryLock was (TestMultiLock_nestedGiveBackOfARoundIsObserved).
	return ml.release(ctx, ml.giveBackRound)
}

// giveBackRound is giveBack for what a failed round took, that the caller will not unlock: a
// member of this package whose give-back fails stops being counted and renewed by its Client
// (Mutex.giveBackTaken) and expires with its lease; another Locker is given back with Unlock.
func (ml *MultiLock) giveBackRound(ctx context.Context, taken []int) error {
	return ml.giveBackEach(ctx, taken, func(l Locker, ctx context.Context) error {
		var err error
		if g := ownLocker(l); g != nil {
			err = g.giveBackTaken(ctx)
		} else {
			err = l.Unlock(ctx)
		}
		// A member whose fixed lease ran out since the round took it holds nothing: its
		// give-back did not fail, and the round failed for contention alone (it used to end
		// the acquire with ErrLeaseExpired while its wait had time left:
		// TestMultiLock_roundsGiveBackOfAnExpiredFixedLeaseIsNoFailure).
		if errors.Is(err, ErrLeaseExpired) {
			return nil
		}
		return err
	})
}

// hashable reports whether v can be a map key: its type is comparable and no interface
// inside it holds an incomparable value (which would panic).
func hashable(v any) (ok bool) {
	if !reflect.TypeOf(v).Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_ = map[any]bool{v: true}
	return true
}

// Unlock gives back one hold of every member, in the reverse of the first round's order,
// even when some fail and even when ctx has ended (members get ctx's values without its
// cancellation). It returns nil when every member's Unlock did, or else the members' errors
// joined, each naming its member: for example [ErrNotHeld] (errors.Is sees it) for a member
// whose hold was lost or ran out.
func (ml *MultiLock) Unlock(ctx context.Context) error {
	if err := ml.check(ctx); err != nil {
		return err
	}
	return ml.release(ctx, ml.giveBack)
}

// release gives back one hold of every member with give, told to the observer.
func (ml *MultiLock) release(ctx context.Context, give func(ctx context.Context, taken []int) error) error {
	o := ml.observer()
	if o == nil {
		return give(ctx, ml.order)
	}
	si := ReleaseStartInfo{Kind: KindMultiLock, Name: ml.name}
	start := o.now()
	octx := o.releaseStart(ctx, si)
	err := give(ctx, ml.order)
	o.releaseDone(octx, ReleaseDoneInfo{ReleaseStartInfo: si, Err: err, Took: o.now() - start})
	return err
}
