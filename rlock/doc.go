// Package rlock provides distributed locks on Redis in the spirit of Java's Redisson:
// reentrant locks that keep their own lease alive while held, wake waiters through pub/sub
// instead of polling, tell the holder at once when the lock is lost, and hand out fencing
// tokens.
//
//	c, err := rlock.New(rueidisClient)          // one per process; Close it when done
//	m := c.Mutex("invoice:42")                  // a handle; the handle is an owner
//	if err := m.Lock(ctx); err != nil { ... }   // blocks; the watchdog keeps it held
//	// ... the work ...
//	err = m.Unlock(ctx)                         // wraps ErrNotHeld if the lock was lost meanwhile
//
// or, with the work cancelled when the lock is lost, the loss reported, and the hold always
// given back:
//
//	err := rlock.Do(ctx, m, func(ctx context.Context) error { ... })
//
// # The family
//
// Besides [Mutex], a Client makes the rest of Redisson's coordination primitives, each with
// context on every call, the same owners, leases, loss notices and replay-safe scripts:
//
//   - [Client.FairMutex]: a reentrant lock that serves waiters of every process in their order
//     of arrival at Redis; a release wakes only the head of the queue.
//   - [Client.RWMutex]: many readers or one writer, each side reentrant, with per-reader
//     leases and a write preference that keeps writers from starving.
//   - [Client.SpinMutex]: the reentrant lock with waiters that poll (jittered backoff) instead
//     of using pub/sub.
//   - [Client.Semaphore]: counted permits, not owned; [Client.PermitSemaphore]: permits with
//     ids and leases, which come back by themselves when a holder dies.
//   - [Client.CountDownLatch]: wait until a count reaches zero.
//   - [NewMultiLock] and [Client.MultiLock]: several locks, even on several Redis servers,
//     taken all or nothing.
//   - [NewRedLock]: one lock held on a majority of N independent Redis masters (the RedLock
//     algorithm), reentrant and watchdog-renewed, so that no single server's failover can
//     let a second holder in.
//
// One name is one primitive: the kinds share key names, so a Semaphore and a Mutex called
// "x" collide: a lock of another kind at the key is reported as [ErrWrongType] where the
// types differ, and where both are hashes a Mutex's, FairMutex's or SpinMutex's acquire
// tells an [RWMutex]'s or a [PermitSemaphore]'s hash by its fields, with ErrWrongType too.
//
// # Guarantees
//
//  1. Exclusion: at most one owner holds a name, as seen by one Redis primary that keeps its
//     writes.
//  2. Validity: a holder's view of its lease is conservative: it ends at the moment the
//     acquire or the last renewal was sent, plus the lease, minus a drift allowance (1% + 2ms),
//     on the local monotonic clock.
//  3. Loss notice: [Mutex.Done] closes and [Mutex.HoldContext] is cancelled with cause
//     [ErrLockLost] by that moment if no renewal was confirmed, even while Redis is
//     unreachable, or as soon as a renewal finds the lock gone or taken. A lost lock is never
//     silently taken again.
//  4. Fencing: [Mutex.Token] strictly rises with every fresh grant of a name, from the same
//     script as the grant.
//  5. Ownership: Unlock and renewal touch only the caller's own holds.
//  6. Idempotency: every script is safe to run twice. Each request carries an id; a request
//     whose reply was lost (a timeout, a broken connection) is replayed under the same id until
//     Redis answers, and Redis answers a replay without applying it again. So a hold is never
//     counted twice and never released twice, and an acquire whose outcome was unknown is
//     resolved before Lock returns (and undone if the caller gave up meanwhile). A replayed
//     acquire spends its id: its first send, which may reach Redis after the replay (rueidis
//     spreads a client's commands over several connections), grants nothing.
//  7. Liveness: a crashed holder's lock frees within its lease (the watchdog timeout, 30s by
//     default). A waiter never waits past its context and never sleeps on a lost message longer
//     than the holder's remaining lease.
//
// # What no Redis lock can promise
//
// It is NOT safe to assume that holding the lock means nobody else does, in these cases:
//
//   - A paused process (GC, SIGSTOP, an overloaded host) can outlive its lease and act after
//     another has the lock. The loss notice fires when it runs again, but work already under
//     way does not stop by itself: check [Mutex.HoldContext] and pass the fencing token to the
//     resource, and have the resource refuse tokens lower than one it has seen.
//   - A jump of the Redis server's clock can expire a lease early.
//   - Redis replication is asynchronous: after a failover, the new primary may not have the
//     lock. Restarting Redis without appendfsync always loses locks too. Fencing tokens still
//     rise across both (they follow the server's clock, see [Mutex.Token]) unless a server's
//     clock runs backwards.
//
// # Keys
//
// A lock called name lives in Redis as a hash at "{<prefix><name>}" (owner id -> hold count,
// beside the holder's fencing token, the sequence number of each owner's operation last
// applied, and a mark "w" once a waiter was refused during the tenure), with a fencing
// counter at "...:fence" (the last token, then for a minute or the lease after a replayed
// acquire its spent sequence number) and a release channel "...:released", all in one hash
// slot. A release publishes only when the lock is marked: an uncontended Lock+Unlock costs
// Redis seven calls when the handle locked the name uncontended within the last second (a
// transaction and one script), else eight, two of them the scripts, or ten on a name nobody
// locked within the last second (docs/DESIGN.md, "Lock protocol v2" and section 16). A
// ForceUnlock leaves a short-lived record at "...:forced" (the owners it took the lock from,
// with the fencing token of their tenure) so that an Unlock whose reply was lost, and which is
// replayed, tells a hold it gave back from one the force took: a replay that finds the hold
// gone and no force counts as given back only if it was sent before the hold's lease ran out
// on the holder's conservative clock (the lease cannot have run out in Redis before), and as
// not held ([ErrNotHeld]) after. The fair lock and the read-write lock keep a short-lived
// record per final release instead ("...:rel:<request id>", twice the cleanup timeout). A name that carries its own hash tag
// ("{user42}:cart") keeps that slot. Owner ids start with "h:" (a handle's) or "u:" (a
// context owner's, [WithOwner]) and the hash's other fields never do, so no owner id, whatever
// its text, can be taken for another field. The fencing counter expires a second after it was
// set from the server's clock (lua.CounterTTL; a fair or read-write lock's 24 hours after the
// name's last fresh grant, lua.FenceTTL): tokens keep rising without it, since they follow
// the server's clock ([Mutex.Token]).
//
// # Direct hand-off
//
// Within a Client, a [Mutex] whose last hold is given back while another owner of the same
// Client waits for it passes it to that waiter in the release script itself (a fresh grant,
// with its own token and lease): the waiter holds the lock when Unlock returns, without an
// acquire of its own. A lock passes on this way at most 8 times in a row; the next release
// frees it and wakes the waiters of other Clients.
//
// # Goroutines
//
// A Client keeps at most four goroutines of its own, started when needed: the watchdog
// scheduler, one renewal goroutine while renewals are on the wire, and the subscriber of the
// shared pub/sub connection with a watcher of that connection (rueidis runs its own for the
// connections it opens); [WithClientInfo] adds one, started by New, that keeps the Client's
// record. No goroutine lives per lock held or per waiter. Calls use short-lived ones: a
// call bound to return at its context's end (README guarantee 6: acquires, waits, the
// semaphores' and the latch's calls) sends its request, when that context can end, from a
// goroutine that ends with the request; work that goes on after its caller returned
// (resolving an outcome its caller did not wait for, giving back a grant nobody keeps) runs
// on one; a [RedLock] asks its instances from workers that exit after a second without
// work. [Client.Close] stops them and waits for them, except for a request already on the
// wire, which ends with its own context (at most the cleanup timeout).
//
// # Inspecting
//
// [Client.Inspect] tells who holds a name, how often, since when and until when, who waits
// and how many Clients listen, whatever the kind; [Client.List] walks the names with SCAN.
// Both only read (no script, no lock), under [InspectACLRule]'s rights. Clients made
// [WithClientInfo] describe themselves, so that Inspect names the program, host and pid
// behind an owner id. The relock command (cmd/relock) does the same from a shell, and can
// force a lock free.
//
// # Observing
//
// [WithObserver] gives a Client an [Observer]: hooks told of every acquisition and release,
// of the end of every tenure (with its cause: unlock, lease expired, lost, closed), of the
// watchdog's rounds, of replays, give-backs and subscription changes; see Observer for what
// each primitive reports and the guarantees (every Start has its Done, tenures begun and
// ended balance, nothing after Close). [WithLogger] is an Observer that logs to an
// [slog.Logger]. A Client without an Observer pays nothing for them.
package rlock
