package rlock

import (
	"context"
	"time"
)

// Observer receives what a Client's primitives do: acquisitions, releases, the ends of
// holds, the watchdog's renewal rounds, replays of requests whose reply was lost, and the
// state of the subscriptions waiters listen on. It is how metrics, traces and logs are fed
// (the relock OpenTelemetry module and [WithLogger] are Observers). Set one with
// [WithObserver].
//
// Every field is optional; a nil field costs nothing, and a Client without an Observer
// builds no event at all. Hooks are called synchronously on the goroutine that does the
// work (the caller of Lock or Unlock, the watchdog, the subscriber's goroutine), so they
// must be quick and must not block; they may be called concurrently from many goroutines.
// A hook must not call back into the Client's primitives (a Lock from a hook may deadlock
// with the work it observes). A panic in a hook is not recovered.
//
// The Start hooks return the context their Done hook receives: an Observer that opens a
// span in AcquireStart finds it again in AcquireDone. Returning ctx unchanged is fine (so is
// nil, taken as ctx). With several Observers, each Start hook receives the context the one
// before it returned, and every Done hook the last one. The returned context is not used
// for Redis requests.
//
// # Guarantees
//
//   - Every AcquireStart is followed by exactly one AcquireDone, every ReleaseStart by exactly
//     one ReleaseDone, on the caller's goroutine, when the call returns.
//   - HoldEnd is called exactly once per tenure of a lock that a call reported (an
//     AcquireDone of a lock or a [RedLock] with [OutcomeAcquired] and Reentered false begins
//     one; see "What each primitive reports"), whatever ends it:
//     tenures begun and ended balance. A grant that reached a caller who had gone is given
//     back (GiveBack, [GiveBackCanceled]) and its tenure, which no caller was told of, is not
//     reported. An Unlock that ends a tenure calls HoldEnd before its ReleaseDone. It is
//     called after the tenure's Done channel closed and its HoldContext was cancelled, and
//     without the Client's internal locks: it may ask the lock (Err, TTL, IsLocked).
//   - A hook called on the watchdog's goroutine (RenewalRound, and HoldEnd for a lease the
//     watchdog finds lost or run out) is called once that round's renewals are applied, so a
//     slow hook never costs the leases it reports on; it does delay the watchdog's next
//     renewals, and a hook that blocks for a large part of a lease can cost others: hand slow
//     work (a network push, a blocking log sink) to a goroutine of your own.
//   - A Client without an Observer builds no event, reads no clock for one and allocates
//     nothing for one (BenchmarkMutex_UncontendedObserver, bench/).
//   - Once [Client.Close] has returned, no hook is called, except the AcquireDone or
//     ReleaseDone of a call that was under way when Close began (it returns ErrClosed; a
//     [RedLock]'s call may still acquire the lock on its other Clients' instances: the
//     tenure it began then is told ended, HoldEnd with cause closed, right after that
//     AcquireDone). Close waits for the hooks being called (a call under way may replay a
//     request or give a grant back on its own goroutine), within its cleanup timeout. A
//     hook must not make its Client's first Close: Close waits for the watchdog's goroutine
//     and the Client's background work, on which hooks run, so such a Close may never return
//     (one made on a caller's goroutine waits the cleanup timeout); a Close made while
//     another is under way returns at once. A
//     call made after Close is refused without an event. Close itself calls HoldEnd (cause
//     closed) for every tenure it ends, before it returns.
//
// # What each primitive reports
//
// The locks ([Mutex], [FairMutex], [SpinMutex], both sides of [RWMutex]) report every hook.
// [Semaphore], [PermitSemaphore] and [CountDownLatch] report their acquisitions
// (Acquire, TryAcquire, Await, TryAwait), releases (Release, ReleaseIfExists, CountDown),
// replays and give-backs, and no HoldEnd: the Client keeps no tenure of theirs (a
// PermitSemaphore's permits expire in Redis unseen), and their acquisitions begin none.
// Their administration (TrySetPermits, TrySetPermitsTTL, AddPermits, DrainPermits and
// Delete of the semaphores, TrySetCount and Delete of the latch, a PermitSemaphore's
// Extend) has no Start or Done event: it is reported only when a reply was lost, by the
// Replay of its request (Op "set", "add", "drain", "delete", "extend"). A
// [MultiLock] reports its own calls and its members report theirs, tenures included (see
// [MultiLock]); its own acquisitions begin no tenure (Reentered is false, and no HoldEnd
// of kind multi_lock follows). A [RedLock] reports its Lock, LockLease, TryLock, Unlock and
// tenures to the Observer of the first of its Clients (in the order of their ids) that has
// one; its instances' holds are not reported on their own. Its tenure ends with its last
// Unlock, when a fixed lease runs out or fewer than a majority of the instances hold it
// (lost, or closed when their Clients' Close ended them), and, for that Observer, at the
// Close of the Client it belongs to (cause closed), even when the tenure goes on on the other
// instances: nothing more is told of it.
type Observer struct {
	// AcquireStart is called when a call that takes a lock or permits starts (Lock,
	// LockLease, TryLock, RLock, Acquire, TryAcquire, Await), after its arguments were
	// checked: a call refused for bad input (ErrInvalid) is not seen.
	AcquireStart func(ctx context.Context, e AcquireStartInfo) context.Context
	// AcquireDone is called once for every AcquireStart, when the call returns.
	AcquireDone func(ctx context.Context, e AcquireDoneInfo)
	// ReleaseStart is called when a call that gives back a hold or permits starts (Unlock,
	// RUnlock, Release, CountDown), after its arguments were checked.
	ReleaseStart func(ctx context.Context, e ReleaseStartInfo) context.Context
	// ReleaseDone is called once for every ReleaseStart, when the call returns.
	ReleaseDone func(ctx context.Context, e ReleaseDoneInfo)
	// HoldEnd is called when a tenure ends (the owner's last hold was given back, its fixed
	// lease ran out, it was lost, or the Client closed), once per tenure a call reported
	// (see Guarantees).
	HoldEnd func(e HoldEndInfo)
	// RenewalRound is called after each round of the Client's watchdog.
	RenewalRound func(e RenewalRoundInfo)
	// Replay is called when a request whose reply was lost was sent again, with what came
	// of it.
	Replay func(e ReplayInfo)
	// Subscription is called when a channel that waiters listen on stops being served
	// (its connection broke, its node went away, Redis refused the subscription) and when
	// it is served again.
	Subscription func(e SubscriptionInfo)
	// GiveBack is called when the Client gave back, on its own, holds or permits that no
	// caller keeps: a grant that reached a caller who had gone, a grant that came back too
	// late for its lease or with too few replica acknowledgements, holds Redis counted for
	// the owner that were nobody's (orphans), a failed MultiLock round's hold whose
	// give-back waited for the owner's other call on the lock (GiveBackCanceled).
	GiveBack func(e GiveBackInfo)
}

// Kind names a kind of primitive: in events (the kind attribute of metrics and spans), and
// in what [Client.Inspect] reads from Redis. Events always name the primitive that acted;
// Inspect reads the shape of keys, and Redis does not record which handle type made a key,
// so some kinds cannot be told apart there (see each constant): Inspect answers KindNone,
// KindMutex, KindFairMutex, KindRWMutex, KindSemaphore, KindCount or KindPermitSemaphore.
type Kind string

// The kinds of primitive.
const (
	// KindMutex: a [Mutex]. Inspect: a reentrant lock's hash, made by a Mutex, a
	// [SpinMutex] (the same keys), or a [FairMutex] that nobody is queued for (its queue is
	// the only trace of fairness).
	KindMutex Kind = "mutex"
	// KindFairMutex: a [FairMutex]. Inspect: a fair lock with a queue of waiters, or a free
	// one whose queue still holds places.
	KindFairMutex Kind = "fair_mutex"
	// KindSpinMutex: a [SpinMutex] (events only: Inspect reads it as KindMutex).
	KindSpinMutex Kind = "spin_mutex"
	// KindReadLock and KindWriteLock: an [RWMutex]'s read and write sides (events).
	KindReadLock  Kind = "read_lock"
	KindWriteLock Kind = "write_lock"
	// KindRWMutex: an [RWMutex] held in either mode, or a free one with waiting writers
	// (Inspect).
	KindRWMutex Kind = "rw_mutex"
	// KindSemaphore: a [Semaphore]. Inspect: a count of available permits recognised as a
	// semaphore's by its request log or by a count below 1 (a latch's count is always at
	// least 1).
	KindSemaphore Kind = "semaphore"
	// KindPermitSemaphore: a [PermitSemaphore]'s permits and leases.
	KindPermitSemaphore Kind = "permit_semaphore"
	// KindLatch: a [CountDownLatch] (events; Inspect reads a latch as KindCount).
	KindLatch Kind = "latch"
	// KindCount: a count that is a [Semaphore]'s available permits or a [CountDownLatch]'s
	// count (Inspect): both keep a bare integer at the same key, and nothing else in Redis
	// tells them apart once the semaphore's request log has expired.
	KindCount Kind = "semaphore_or_latch"
	// KindMultiLock and KindRedLock: a [MultiLock] and a [RedLock] (events).
	KindMultiLock Kind = "multi_lock"
	KindRedLock   Kind = "red_lock"
	// KindNone: nothing is held, counted or queued at the name (Inspect; its fence may
	// still record the last fencing token: [Info.LastToken]).
	KindNone Kind = "none"
)

// Outcome is how an acquisition ended.
type Outcome string

// The outcomes of an acquisition.
const (
	// OutcomeAcquired: the lock or the permits are the caller's (a re-entry included).
	OutcomeAcquired Outcome = "acquired"
	// OutcomeBusy: TryLock or TryAcquire ran out of its wait while others held it.
	OutcomeBusy Outcome = "busy"
	// OutcomeCanceled: the caller's context ended first.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeError: any other failure (see the event's Err).
	OutcomeError Outcome = "error"
)

// EndCause is why a tenure ended.
type EndCause string

// The causes of a tenure's end.
const (
	// EndUnlocked: the owner gave its last hold back.
	EndUnlocked EndCause = "unlock"
	// EndLeaseExpired: a fixed lease ran its course before Unlock.
	EndLeaseExpired EndCause = "lease_expired"
	// EndLost: the lock was lost while held (renewal failed or found another owner, the key
	// was deleted or forced): the owner was told with ErrLockLost.
	EndLost EndCause = "lost"
	// EndClosed: the Client closed while the tenure lasted.
	EndClosed EndCause = "closed"
)

// AcquireStartInfo describes an acquisition as it starts.
type AcquireStartInfo struct {
	Kind Kind
	// Name is the lock's name, as given to the Client (not the key); for a MultiLock, its
	// members' names joined with ",".
	Name string
	// Owner is the owner id the call acts for, as Redis knows it: "h:<Client ID>:<n>" for a
	// handle's own, "u:" and the id for a context owner ([WithOwner]). It is "" for the
	// semaphores, the latch and a MultiLock, which act for no single owner.
	Owner string
	// Wait bounds the call (TryLock's wait); negative: no bound (Lock).
	Wait time.Duration
	// Lease is the fixed lease asked for; 0: watchdog mode (or no lease: semaphores).
	Lease time.Duration
	// Permits is how many permits the call asks for (1 for a PermitSemaphore); 0 for locks
	// and the latch.
	Permits int
}

// AcquireDoneInfo describes how an acquisition ended.
type AcquireDoneInfo struct {
	AcquireStartInfo
	Outcome Outcome
	Err     error // nil unless Outcome is OutcomeCanceled or OutcomeError
	// Took is the time from AcquireStart to the return.
	Took time.Duration
	// Attempts counts the scripts the call sent to take the lock (replays excluded); a call
	// granted by a hand-off may count fewer than one per wake-up. For Await, the reads of
	// the count; for a MultiLock, its members' TryLock calls. Not counted (0) for a RedLock.
	Attempts int
	// Waited: the first attempt was refused (or the call queued behind waiters of its
	// Client without one), and the call waited for a release. For a MultiLock: it took more
	// than one round. Not known (false) for a RedLock.
	Waited bool
	// HandedOff: the grant came from a release that passed the lock to this caller (a
	// [Mutex]'s direct hand-off within a Client).
	HandedOff bool
	// Reentered: the owner already held the lock; the grant added a hold to its tenure
	// (no HoldEnd will follow for it). Always false for the semaphores, the latch and a
	// MultiLock.
	Reentered bool
	// Token is the fencing token of the tenure granted; 0 unless acquired, and for
	// primitives without tokens (read holds, semaphores, the latch, a MultiLock).
	Token int64
}

// ReleaseStartInfo describes a release as it starts.
type ReleaseStartInfo struct {
	Kind    Kind
	Name    string // as in AcquireStartInfo
	Owner   string // as in AcquireStartInfo
	Permits int    // how many permits the call gives back (1 for a CountDown); 0 for locks
}

// ReleaseDoneInfo describes how a release ended.
type ReleaseDoneInfo struct {
	ReleaseStartInfo
	Err  error // what the call returned
	Took time.Duration
	// Freed: the call gave back the owner's last hold (the tenure ended with EndUnlocked);
	// for a CountDown, the count reached zero and the latch opened. Always false for the
	// semaphores and a MultiLock (whose members tell their own).
	Freed bool
	// HandedOff: the release passed the lock on to a waiter of the same Client.
	HandedOff bool
}

// HoldEndInfo describes the end of a tenure.
type HoldEndInfo struct {
	Kind  Kind
	Name  string
	Owner string
	Token int64
	// Held is how long the tenure lasted on this Client's clock, from the grant's reply to
	// its end.
	Held  time.Duration
	Cause EndCause
	// Err is the tenure's cause as HoldContext's context.Cause reports it: ErrNotHeld for
	// an unlock, ErrLeaseExpired, an error wrapping ErrLockLost and its reason, ErrClosed.
	// EndUnlocked also covers a last hold whose give-back Redis refused (it expires there
	// with its lease, see [ErrNoPermission]), or that was taken by a caller who had gone.
	Err error
}

// RenewalRoundInfo describes one round of a Client's watchdog.
//
// A round is one batch the watchdog hands to the Client (up to its batch size); several may
// follow each other when many leases are due. A lease whose deadline passes before a round
// confirms it is lost without a round: its HoldEnd (cause lost) tells it.
type RenewalRoundInfo struct {
	Leases   int           // leases the round renewed or tried to
	Scripts  int           // renew scripts sent (a batch counts one; a fallback adds one per lease)
	Failures int           // leases whose renewal failed this round (lost, or to be retried)
	Lost     int           // leases the round found gone from Redis (their HoldEnd follows)
	Took     time.Duration // from the first send to the last reply
	Err      error         // the first failure's error, if any
}

// ReplayInfo describes a request sent again because its reply was lost.
type ReplayInfo struct {
	Kind  Kind
	Name  string
	Owner string
	// Op is what was replayed: "acquire" or "release" (a lock's, a semaphore's or a
	// permit's), or a semaphore's "set", "add", "drain", "delete" or "extend", or a latch's
	// "set", "count_down" or "delete". Renewals are not replayed: the next round renews.
	Op string
	// Sends is how many times the request went out, the first send included.
	Sends int
	// Err is nil when a replay was answered (the outcome is known), else why it stayed
	// unknown (it wraps ErrUnknownOutcome). An acquire whose caller gave up is reported so
	// (its context ended) and its resolution goes on in the background, reported by a
	// second Replay.
	Err error
}

// SubscriptionInfo describes a change in the service of a channel waiters listen on.
//
// Only channels with waiters are reported, each down once until it is up again; a channel
// whose last waiter left while it was down is reported no further, and nothing is reported
// as the Client closes.
type SubscriptionInfo struct {
	Channel string // the Redis channel (a lock's Key()+":released", ...)
	// Up: the channel is served again; false: it stopped being served, and its waiters were
	// woken to try again (they fall back to timers until it is back).
	Up  bool
	Err error // why it stopped (nil when Up)
}

// GiveBackReason is why the Client gave back a grant on its own.
type GiveBackReason string

// The reasons for a give-back.
const (
	// GiveBackCanceled: the grant reached a caller whose context had ended (an acquire
	// resolved by a replay, or a hand-off, that came as the caller gave up), a hold that a
	// failed [MultiLock] round took and could not give back within the cleanup timeout,
	// the owner's other call on the lock keeping it busy (given back once that call is
	// done, its caller told the round failed), or a [Semaphore] acquire that Close ended
	// while it waited for Redis's answer. For a
	// semaphore's acquire whose outcome could not be learned, Err wraps [ErrUnknownOutcome]:
	// the permits may have been taken, and were not given back.
	GiveBackCanceled GiveBackReason = "canceled"
	// GiveBackLate: the grant came back after its lease had run out on the Client's clock.
	GiveBackLate GiveBackReason = "late"
	// GiveBackNoReplicaAck: too few replicas acknowledged the grant ([WithReplicaAck]).
	GiveBackNoReplicaAck GiveBackReason = "no_replica_ack"
	// GiveBackLost: Redis granted afresh what the owner believed it held (its hold had been
	// lost unnoticed): the grant is given back and the loss reported.
	GiveBackLost GiveBackReason = "lost"
	// GiveBackOrphan: Redis counted holds of the owner that nobody keeps (their own
	// give-back had failed, or they outlived their local end by the drift allowance).
	GiveBackOrphan GiveBackReason = "orphan"
)

// GiveBackInfo describes a give-back the Client made on its own.
type GiveBackInfo struct {
	Kind  Kind
	Name  string
	Owner string // "" for semaphores
	// Holds is how many holds (or permits) were to be given back (0 for a
	// [Semaphore.DrainPermits] whose answer never came: how many it took is not known).
	Holds  int
	Reason GiveBackReason
	// Err is nil when Redis took them back; otherwise why not: the Client stopped counting
	// them, and Redis lets them expire with their lease (permits of a [Semaphore] do not
	// expire: see its Replays section).
	Err error
}

// WithObserver sets o to receive the Client's events. Given more than once, every Observer
// receives every event, in the order the options were given ([WithLogger] counts as one).
// New copies *o: later changes to it are not seen. A nil Observer is an error wrapping
// [ErrInvalid] from [New].
func WithObserver(o *Observer) Option {
	return optionFunc(func(opts *options) {
		if o == nil {
			opts.nilObserver = true
			return
		}
		opts.observers = append(opts.observers, o)
	})
}
