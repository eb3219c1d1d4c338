package rlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/pubsub"
)

// ErrUpgrade: an owner that holds read holds of an [RWMutex], and not its write hold, asked
// for the write hold. Waiting could never succeed (the write hold waits for every read hold
// to end, the owner's own included), so the request fails at once and changes nothing:
// release the read holds first, then take the write hold. The opposite way, a downgrade, is
// allowed (see [RWMutex]).
var ErrUpgrade = errors.New("rlock: cannot upgrade a read hold to the write hold")

// RWMutex is a handle on a reentrant read-write lock named in Redis: at any moment either
// one owner holds it for writing, or any number of owners hold it for reading. Get one with
// [Client.RWMutex]. [RWMutex.Lock], [RWMutex.TryLock] and [RWMutex.Unlock] take and give
// back the write hold; [RWMutex.RLock], [RWMutex.TryRLock] and [RWMutex.RUnlock] the read
// holds, also offered as a lock of their own by [RWMutex.RLocker].
//
// # Owners and reentrancy
//
// As for [Mutex]: the handle is an owner, a context owner ([WithOwner]) overrides it, and
// goroutines that share an owner share its holds. Each kind is reentrant on its own: an
// owner that holds the write hold (or read holds) gets another at once, and the kind is
// given back when Unlock (or RUnlock) has been called once per hold of it. The two kinds
// are counted apart ([RWMutex.WriteHoldCount], [RWMutex.ReadHoldCount]).
//
// # Downgrade, and no upgrade
//
// The write holder may also take read holds, at once, whoever waits. Giving back the write
// hold while still holding read holds leaves the lock held for reading by that owner (a
// downgrade): other readers may then come in, writers wait for those read holds to end. The
// opposite is refused: an owner that holds read holds and not the write hold gets
// [ErrUpgrade] at once from Lock and TryLock, rather than waiting for itself forever
// (Redisson's read-write lock lets such a call hang).
//
// # Writers first
//
// A writer that waits (Lock, or TryLock with a wait) claims a place among the waiting
// writers, in Redis, on its first refused attempt. While another owner's claim is live, an
// owner that holds no read hold is refused a read hold: new readers give way, the readers
// inside drain out, and the writer gets in, however steady the stream of readers. Owners
// that already hold read holds still re-enter (a reader that nests its read holds under one
// owner never deadlocks), and the write holder may always take read holds. When the write
// hold ends and no other writer waits, all waiting readers come in together. Between
// writers there is no order: whoever's attempt reaches Redis first once the lock is free
// gets it.
//
// Redisson's read-write lock instead lets readers in while a writer waits, which can starve
// writers. The price of writers first is the opposite risk: while writers keep coming (a
// new claim before the last claimant is served), readers that hold nothing keep waiting, so
// under a heavy write load readers wait longer than writers. ([sync.RWMutex] lets the
// readers that a write release wakes in before the next writer; relock does not know which
// readers wait.) As with sync.RWMutex, an owner that holds read holds must not wait for a
// read hold as another owner (another handle without a shared context owner) while a
// writer waits: that read waits for the writer, which waits for the first owner's read
// holds. Use one owner for nested reads.
//
// A claim lives for the waiter timeout ([WithWaiterTimeout], default
// [DefaultWaiterTimeout]) after its last refresh, and a waiting writer refreshes it every
// third of that, so a writer that died while waiting holds readers back for at most the
// waiter timeout. A writer that gives up (ctx, wait bound, error, its Client's Close)
// withdraws its claim before returning, and wakes the readers it held back (when its ctx has
// ended and Redis does not answer within 100ms, it returns and the claim is withdrawn in the
// background, or runs out with the waiter timeout; one that Close ended withdraws it within
// the cleanup timeout since Close began, see [Client.Close]). A single attempt (TryLock
// with wait 0) never claims. The cost is one script per waiting writer every third of the
// waiter timeout while readers keep it out.
//
// # Wake-ups
//
// Waiting readers and waiting writers listen on two channels. When the write hold ends and
// no writer's claim is live, every waiting reader is woken at once (while a claim is live,
// its writer goes first, and the readers are woken when the last claim is served or
// withdrawn). When the lock becomes free, one waiting writer per Client is woken, as for a
// Mutex (a woken writer that loses the race sleeps again until the next release or the
// winner's lease end). A waiter also wakes by itself when what keeps it out reaches the end
// of its lease, since an expiry publishes nothing; a reader kept out by a write hold checks
// again at least once per waiter timeout, in case the claim it would defer to has died.
//
// # Leases
//
// Every hold kind of every owner carries its own lease: the write hold one, and each
// owner's read holds one. They are kept as for [Mutex]: Lock and RLock, and TryLock and
// TryRLock with lease <= 0, hold in watchdog mode (lease = the watchdog timeout, renewed by
// the Client's watchdog while held); LockLease and RLockLease, and TryLock and TryRLock with
// lease > 0, hold for that fixed lease, never renewed; a re-entry never shortens the lease in
// force. A crashed reader's
// read holds therefore stop blocking writers when its own lease ends, whoever else still
// reads; a crashed writer's hold ends with its lease even while its own read holds live on.
// Every attempt first drops the holds whose lease has ended. The key's expiry in Redis is
// the longest lease in force, and shrinks back when a hold is given back.
//
// # Loss and fencing
//
// Loss is told per kind, as for Mutex: [RWMutex.Done], [RWMutex.Err] and
// [RWMutex.HoldContext] for the write hold, the same methods of [RWMutex.RLocker] for the
// read holds. [RWMutex.Token] is the write hold's fencing token, from the same counter as a
// Mutex's (it rises with every fresh write grant). Read holds carry no token: they exclude
// no one but writers, and a token could not tell two readers apart.
//
// # Mixing kinds, and Redis keys
//
// An RWMutex and a [Mutex] (or another kind of lock) must not share a name: the RWMutex's
// operations on another lock's hash fail with [ErrWrongType] and leave it untouched, and so
// do a Mutex's, [FairMutex]'s or [SpinMutex]'s acquires and ForceUnlock on a held RWMutex's
// hash (its IsLocked reports it held). The lock's hash (Key) holds a mode field ("write" or "read", which also marks the hash as a
// read-write lock), the write holder's id and fencing token, and per owner its write and
// read hold counts; Key()+":leases" is a sorted set of every hold's lease end,
// Key()+":writers" one of the waiting writers' claims. They share the hash tag of the
// fencing counter and of the two release channels (Key()+":released" for writers,
// Key()+":released:read" for readers), and expire by themselves.
//
// A nil or zero *RWMutex (not made by a Client), and its RLocker, are no handles: their
// methods return an error wrapping [ErrInvalid], as a [Mutex]'s do, rather than panic.
type RWMutex struct {
	w, r *Mutex // the write and read sides: one lock, one owner
	rl   ReadLocker
}

// ReadLocker is the read side of an [RWMutex] seen as a lock of its own, like the Locker
// that [sync.RWMutex.RLocker] returns: Lock, TryLock and Unlock take and give back read
// holds, and Done, Err and HoldContext tell of the read holds' loss. Get one with
// [RWMutex.RLocker]. It shares the RWMutex's owner: its holds are the RWMutex's read holds.
type ReadLocker struct {
	rw *RWMutex
}

// The two sides of a read-write lock. They share the lock's keys and scripts; holdSuffix
// keeps their holds apart in the Client's table of holds (and apart from a plain Mutex's).
// Neither is force-unlocked through Mutex.ForceUnlock: RWMutex.ForceUnlock runs RWForce.
var (
	rwWriteVariant = &variant{
		kind: "read-write lock", obs: KindWriteLock, acquire: lua.RWAcquire, release: lua.RWRelease, renew: lua.RWRenewWrite,
		forceMessage: pubsub.WakeAll, acquireExtra: rwAcquireExtra("w"), releaseExtra: rwReleaseExtra("w"),
		renewKeys: rwRenewKeys, holdSuffix: ":w", leave: rwLeave, acquireErr: upgradeErr,
	}
	rwReadVariant = &variant{
		kind: "read-write lock", obs: KindReadLock, acquire: lua.RWAcquire, release: lua.RWRelease, renew: lua.RWRenewRead,
		forceMessage: pubsub.WakeAll, acquireExtra: rwAcquireExtra("r"), releaseExtra: rwReleaseExtra("r"),
		renewKeys: rwRenewKeys, holdSuffix: ":r", sureWith: rwWriteVariant,
	}
)

// RWMutex returns a handle on the read-write lock called name. It sends nothing to Redis.
// An empty name, or a nil or zero Client, makes a handle whose every method returns an error
// wrapping [ErrInvalid].
func (c *Client) RWMutex(name string) *RWMutex {
	w := c.newMutex(name, rwWriteVariant)
	r := c.newMutex(name, rwReadVariant)
	r.owner = w.owner
	_, r.keys.channel = rwChannels(w.keys) // readers wait on a channel of their own
	if r.c != nil {
		r.keys.pub = r.c.pubArg(r.keys.channel)
	}
	rw := &RWMutex{w: w, r: r}
	rw.rl.rw = rw
	return rw
}

// rwKeys are a read-write lock's leases (hold field -> lease end) and writers (owner ->
// claim end) sorted sets.
func rwKeys(k lockKeys) (leases, writers string) {
	return k.lock + ":leases", k.lock + ":writers"
}

// rwChannels are the channels that waiting writers and waiting readers listen on. A release
// wakes readers all at once, writers one per Client (see rw_release.lua).
func rwChannels(k lockKeys) (writers, readers string) {
	return k.lock + ":released", k.lock + ":released:read"
}

// rwAcquireExtra: KEYS leases, writers; ARGV kind, waiter timeout in ms, claim ("1" for a
// writer that may wait).
func rwAcquireExtra(kind string) func(m *Mutex, queue bool) (keys, args []string) {
	return func(m *Mutex, queue bool) (keys, args []string) {
		leases, writers := rwKeys(m.keys)
		claim := "0"
		if kind == "w" && queue {
			claim = "1"
		}
		return []string{leases, writers}, []string{kind, strconv.FormatInt(m.c.opts.waiterTimeout.Milliseconds(), 10), claim}
	}
}

// rwReleaseExtra: KEYS leases, writers, fence (read only to tell a plain lock's fast-form
// ghost, rw_release.lua); ARGV kind, writers' channel, readers' channel.
func rwReleaseExtra(kind string) func(m *Mutex) (keys, args []string) {
	return func(m *Mutex) (keys, args []string) {
		leases, writers := rwKeys(m.keys)
		wch, rch := rwChannels(m.keys)
		return []string{leases, writers, m.keys.fence}, []string{kind, m.c.pubArg(wch), m.c.pubArg(rch)}
	}
}

// rwRenewKeys: each lease is renewed with the lock and its leases.
func rwRenewKeys(k lockKeys) []string {
	leases, _ := rwKeys(k)
	return []string{k.lock, leases}
}

// rwLeave withdraws owner's writer claim when its wait gave up, Close ending it included.
// It makes one try, bounded by the cleanup timeout (withdraw): if that fails, the claim runs
// out with the waiter timeout.
func rwLeave(ctx context.Context, m *Mutex, owner string) {
	m.c.withdraw(ctx, func(ctx context.Context) {
		_, writers := rwKeys(m.keys)
		_, rch := rwChannels(m.keys)
		_ = m.c.exec(ctx, lua.RWLeave, []string{writers}, []string{owner, m.c.pubArg(rch)}).Error()
	})
}

// Name is the lock's name as given to [Client.RWMutex].
func (rw *RWMutex) Name() string { return rw.write().Name() }

// Key is the Redis key of the lock's hash (see [RWMutex] for its fields and the keys beside
// it).
func (rw *RWMutex) Key() string { return rw.write().Key() }

// Lock blocks until the caller's owner holds the write hold, then keeps it (watchdog mode)
// until Unlock. If the owner already holds it, Lock adds a hold and returns at once. While
// it waits, its claim holds new readers back (see [RWMutex]).
//
// Lock returns nil when the write hold is held. Otherwise it returns:
//  1. [ErrUpgrade] at once when the owner holds read holds and not the write hold (a read
//     acquire of the owner's whose caller left before its reply came, and whose grant is
//     being given back in the background, is waited for first, within ctx: it is no hold);
//  2. ctx's error, wrapped, when ctx ends first; nothing is left held or claimed (once
//     the work left to the background, as at [Mutex.Lock], is done);
//  3. the other errors listed at [Mutex.Lock] ([ErrLockLost], [ErrWrongType], [ErrClosed],
//     [ErrInvalid], a Redis or connection error, [ErrUnknownOutcome]).
func (rw *RWMutex) Lock(ctx context.Context) error {
	_, err := rw.acquireWrite(ctx, -1, 0)
	return err
}

// LockLease blocks until the caller's owner holds the write hold, like [RWMutex.Lock], and
// holds it for the fixed lease, never renewed, as [Mutex.LockLease] does. A lease below 10ms
// is an error wrapping [ErrInvalid]; otherwise it returns nil or the errors listed at
// [RWMutex.Lock].
func (rw *RWMutex) LockLease(ctx context.Context, lease time.Duration) error {
	if err := checkLease("lease", lease); err != nil {
		return err
	}
	_, err := rw.acquireWrite(ctx, -1, lease)
	return err
}

// TryLock tries to take the write hold within wait. wait 0 makes exactly one attempt and
// claims nothing. lease > 0 holds it for that fixed lease, never renewed; lease <= 0 holds
// it in watchdog mode, like Lock.
//
// TryLock returns (true, nil) when the write hold is held, (false, nil) when wait ran out
// with the lock held by others (or by a read grant of the owner's still being given back in
// the background, see [RWMutex.Lock]: wait bounds the wait for it too; and by the turn of
// another call of the owner's, as at [Mutex.TryLock]), and (false, err) for the failures
// listed at [RWMutex.Lock].
// A negative wait is an error wrapping [ErrInvalid].
func (rw *RWMutex) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return rw.acquireWrite(ctx, wait, lease) // a single attempt (wait 0) leaves nothing to withdraw
}

// acquireWrite takes the write hold for Lock, LockLease and TryLock. An owner that holds no
// read hold through this Client, but whose read acquire is still being resolved in the
// background (its caller left before the reply came: the grant, if any, is being given
// back), first waits for that work, within ctx and wait (wait < 0: no bound), which the
// wait's attempts then have less of: until it is done, Redis may count a read hold of the
// owner's that nobody keeps, and the write acquire would be refused as an upgrade
// (ErrUpgrade) to an owner that was told it holds no read hold. If the work is still going
// on when the bound ends, such a refusal reports the lock as not acquired (false, nil).
func (rw *RWMutex) acquireWrite(ctx context.Context, wait, lease time.Duration) (bool, error) {
	r := rw.read()
	settling := false
	if owner, err := r.ownerOf(ctx); err == nil {
		if h := r.instHold(owner); h != nil && h.holds() == 0 {
			sctx, cancel := ctx, context.CancelFunc(func() {})
			start := time.Now()
			if wait >= 0 {
				sctx, cancel = context.WithTimeout(ctx, wait)
			}
			settling = h.lockOp(sctx) != nil
			cancel()
			if !settling {
				h.unlockOp()
			}
			if wait > 0 {
				wait = max(0, wait-time.Since(start))
			}
		}
	}
	ok, err := rw.write().acquire(ctx, wait, lease)
	if err = rw.upgradeErr(err); settling && errors.Is(err, ErrUpgrade) {
		return false, nil
	}
	return ok, err
}

// upgradeErr turns the acquire script's UPGRADE refusal into ErrUpgrade.
func (rw *RWMutex) upgradeErr(err error) error { return upgradeErr(rw.write().Name(), err) }

// upgradeErr turns the acquire script's UPGRADE refusal into ErrUpgrade (the write side's
// variant.acquireErr; RWMutex.upgradeErr then finds nothing left to turn).
func upgradeErr(name string, err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) && strings.HasPrefix(re.Error(), "UPGRADE") {
		return errorf("lock %q: %w", name, ErrUpgrade)
	}
	return err
}

// Unlock gives back one write hold of the caller's owner. When it gives back the last one,
// every waiter is woken; if the owner still holds read holds, the lock stays held for
// reading (a downgrade). Unlock works even when ctx is already cancelled, and returns the
// errors listed at [Mutex.Unlock] ([ErrNotHeld] when the owner holds no write hold).
func (rw *RWMutex) Unlock(ctx context.Context) error {
	return rw.write().Unlock(ctx)
}

// RLock blocks until the caller's owner holds a read hold, then keeps it (watchdog mode)
// until RUnlock. It gets one at once when the owner already holds read holds or the write
// hold; otherwise it waits while another owner holds the write hold or a writer waits (see
// [RWMutex]).
//
// RLock returns nil when the read hold is held, or else the errors listed at [Mutex.Lock].
func (rw *RWMutex) RLock(ctx context.Context) error {
	_, err := rw.read().acquire(ctx, -1, 0)
	return err
}

// RLockLease blocks until the caller's owner holds a read hold, like [RWMutex.RLock], and
// holds it for the fixed lease, never renewed, as [Mutex.LockLease] does. A lease below 10ms
// is an error wrapping [ErrInvalid]; otherwise it returns nil or the errors listed at
// [Mutex.Lock].
func (rw *RWMutex) RLockLease(ctx context.Context, lease time.Duration) error {
	if err := checkLease("lease", lease); err != nil {
		return err
	}
	_, err := rw.read().acquire(ctx, -1, lease)
	return err
}

// TryRLock tries to take a read hold within wait. wait 0 makes exactly one attempt. lease
// > 0 holds it for that fixed lease, never renewed; lease <= 0 holds it in watchdog mode,
// like RLock. An owner that holds a read hold or the write hold through this Client is sure
// to be granted: like a re-entry at [Mutex.TryLock], it waits for its turn behind the
// owner's other calls within ctx only.
//
// TryRLock returns (true, nil) when the read hold is held, (false, nil) when wait ran out
// with the lock written or a writer waiting (or behind the turn of another call of the
// owner's, as at [Mutex.TryLock]), and (false, err) for the failures listed at
// [Mutex.Lock]. A negative wait is an error wrapping [ErrInvalid].
func (rw *RWMutex) TryRLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return rw.read().acquire(ctx, wait, lease)
}

// RUnlock gives back one read hold of the caller's owner. When the lock becomes free, every
// waiter is woken. RUnlock works even when ctx is already cancelled, and returns the errors
// listed at [Mutex.Unlock] ([ErrNotHeld] when the owner holds no read hold).
func (rw *RWMutex) RUnlock(ctx context.Context) error {
	return rw.read().Unlock(ctx)
}

// RLocker returns the read side of the lock as a lock of its own (see [ReadLocker]). It
// sends nothing to Redis. The read side of a nil or zero RWMutex is as invalid as it is.
func (rw *RWMutex) RLocker() *ReadLocker {
	if rw == nil {
		return &ReadLocker{}
	}
	return &rw.rl
}

// write and read are the two sides, nil for a nil handle.
func (rw *RWMutex) write() *Mutex {
	if rw == nil {
		return nil
	}
	return rw.w
}

func (rw *RWMutex) read() *Mutex {
	if rw == nil {
		return nil
	}
	return rw.r
}

// rwm is the RWMutex of the read side, nil for a nil handle.
func (l *ReadLocker) rwm() *RWMutex {
	if l == nil {
		return nil
	}
	return l.rw
}

// Token is the fencing token of the caller's owner's current write hold (see [Mutex.Token]).
// It returns an error wrapping [ErrNotHeld] when the owner holds no write hold through this
// Client; read holds have none.
func (rw *RWMutex) Token(ctx context.Context) (int64, error) {
	return rw.write().Token(ctx)
}

// Done returns a channel that is closed when the caller's owner's current write hold ends:
// released by its last Unlock, lost, or ended by [Client.Close]. It is already closed when
// the owner holds no write hold through this Client. See [Mutex.Done]; for the read holds,
// see [ReadLocker.Done].
func (rw *RWMutex) Done(ctx context.Context) <-chan struct{} { return rw.write().Done(ctx) }

// Err is nil while the caller's owner holds the write hold through this Client; otherwise it
// says why not, as [Mutex.Err] does. For the read holds, see [ReadLocker.Err].
func (rw *RWMutex) Err(ctx context.Context) error { return rw.write().Err(ctx) }

// HoldContext returns a copy of ctx that is also cancelled when the caller's owner's current
// write hold ends, as [Mutex.HoldContext] does. For the read holds, see
// [ReadLocker.HoldContext]. Call cancel when done with it.
func (rw *RWMutex) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return rw.write().HoldContext(ctx)
}

// rwState is what the state script reports, counting only holds whose lease is live.
type rwState struct {
	write                          bool
	readers, ownerWrite, ownerRead int
}

// state reads the lock's live holds, and owner's counts (owner "" for none).
func (rw *RWMutex) state(ctx context.Context, owner string) (rwState, error) {
	m := rw.write()
	if err := m.check(ctx); err != nil {
		return rwState{}, err
	}
	if m.c.isClosed() {
		return rwState{}, ErrClosed
	}
	leases, _ := rwKeys(m.keys)
	vals, err := m.c.exec(ctx, lua.RWState, []string{m.keys.lock, leases, m.keys.fence}, []string{owner}).AsIntSlice()
	if err != nil {
		return rwState{}, classify("state of", m.name, err)
	}
	if len(vals) != 4 {
		return rwState{}, errorf("state of %q: malformed reply %v", m.name, vals)
	}
	return rwState{write: vals[0] == 1, readers: int(vals[1]), ownerWrite: int(vals[2]), ownerRead: int(vals[3])}, nil
}

// IsLocked reports whether any owner holds the lock, for writing or reading.
func (rw *RWMutex) IsLocked(ctx context.Context) (bool, error) {
	s, err := rw.state(ctx, "")
	return s.write || s.readers > 0, err
}

// IsWriteLocked reports whether an owner holds the write hold.
func (rw *RWMutex) IsWriteLocked(ctx context.Context) (bool, error) {
	s, err := rw.state(ctx, "")
	return s.write, err
}

// IsReadLocked reports whether any owner holds a read hold. It is false while the lock is
// only written, and true once the writer also takes a read hold.
func (rw *RWMutex) IsReadLocked(ctx context.Context) (bool, error) {
	s, err := rw.state(ctx, "")
	return s.readers > 0, err
}

// WriteHoldCount is the number of write holds the caller's owner has, as Redis sees it (0
// when it holds none, or its lease has ended).
func (rw *RWMutex) WriteHoldCount(ctx context.Context) (int, error) {
	owner, err := rw.write().ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	s, err := rw.state(ctx, owner)
	return s.ownerWrite, err
}

// ReadHoldCount is the number of read holds the caller's owner has, as Redis sees it (0
// when it holds none, or their lease has ended).
func (rw *RWMutex) ReadHoldCount(ctx context.Context) (int, error) {
	owner, err := rw.write().ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	s, err := rw.state(ctx, owner)
	return s.ownerRead, err
}

// ForceUnlock frees the lock whoever holds it, in either mode: the write hold and every read
// hold go, and every waiter is woken (waiting writers keep their claims). It reports whether
// there was a lock to free. Former holders learn of the loss at their next renewal (fixed
// leases: at their Unlock, which returns [ErrNotHeld]). A key of another type, or another
// kind of lock, is left untouched: the error wraps [ErrWrongType]. Redisson instead splits
// it: its write lock's forceUnlock leaves a read-locked lock alone and vice versa; an
// operator freeing a stuck lock wants it free.
func (rw *RWMutex) ForceUnlock(ctx context.Context) (bool, error) {
	return rw.force(ctx, nil)
}

// force frees the lock, with ARGV seen appended to the force script's (ARGV[3...] of
// rw_force.lua: the write token and hold fields seen; none frees whoever holds it). A lock
// held otherwise than seen is left alone: the error wraps ErrConflict.
func (rw *RWMutex) force(ctx context.Context, seen []string) (bool, error) {
	m := rw.write()
	if err := m.check(ctx); err != nil {
		return false, err
	}
	if m.c.isClosed() {
		return false, ErrClosed
	}
	leases, _ := rwKeys(m.keys)
	wch, rch := rwChannels(m.keys)
	args := append([]string{m.c.pubArg(wch), m.c.pubArg(rch)}, seen...)
	n, err := m.c.exec(ctx, lua.RWForce, []string{m.keys.lock, leases, m.keys.fence}, args).AsInt64()
	if err != nil {
		return false, classify("force unlock", m.name, err)
	}
	if n == -1 {
		return false, errorf("force unlock %q: %w: nothing freed", m.name, ErrConflict)
	}
	return n == 1, nil
}

// Name is the read-write lock's name: [RWMutex.Name].
func (l *ReadLocker) Name() string { return l.rwm().Name() }

// Key is the Redis key of the read-write lock's hash: [RWMutex.Key]. A [MultiLock] orders its
// members by it.
func (l *ReadLocker) Key() string { return l.rwm().Key() }

// Lock blocks until the caller's owner holds a read hold: [RWMutex.RLock].
func (l *ReadLocker) Lock(ctx context.Context) error { return l.rwm().RLock(ctx) }

// LockLease blocks until the caller's owner holds a read hold, for a fixed lease:
// [RWMutex.RLockLease].
func (l *ReadLocker) LockLease(ctx context.Context, lease time.Duration) error {
	return l.rwm().RLockLease(ctx, lease)
}

// TryLock tries to take a read hold within wait: [RWMutex.TryRLock].
func (l *ReadLocker) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	return l.rwm().TryRLock(ctx, wait, lease)
}

// Unlock gives back one read hold: [RWMutex.RUnlock].
func (l *ReadLocker) Unlock(ctx context.Context) error { return l.rwm().RUnlock(ctx) }

// HoldCount is the number of read holds the caller's owner has: [RWMutex.ReadHoldCount].
func (l *ReadLocker) HoldCount(ctx context.Context) (int, error) { return l.rwm().ReadHoldCount(ctx) }

// IsLocked reports whether any owner holds a read hold: [RWMutex.IsReadLocked].
func (l *ReadLocker) IsLocked(ctx context.Context) (bool, error) { return l.rwm().IsReadLocked(ctx) }

// Done returns a channel that is closed when the caller's owner's current read holds end:
// released by the last RUnlock, lost, or ended by [Client.Close]. It is already closed
// when the owner holds no read hold through this Client. See [Mutex.Done].
func (l *ReadLocker) Done(ctx context.Context) <-chan struct{} { return l.rwm().read().Done(ctx) }

// Err is nil while the caller's owner holds read holds through this Client; otherwise it
// says why not, as [Mutex.Err] does.
func (l *ReadLocker) Err(ctx context.Context) error { return l.rwm().read().Err(ctx) }

// HoldContext returns a copy of ctx that is also cancelled when the caller's owner's
// current read holds end, as [Mutex.HoldContext] does. Call cancel when done with it.
func (l *ReadLocker) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return l.rwm().read().HoldContext(ctx)
}

var (
	_ Locker = (*RWMutex)(nil)
	_ Locker = (*ReadLocker)(nil)
)
