package rlock

import (
	"context"
	"strconv"
	"time"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/pubsub"
)

// FairMutex is a [Mutex] that serves its waiters first come, first served. Get one with
// [Client.FairMutex]. Everything said at [Mutex] about owners, reentrancy, leases, loss,
// replays and fencing tokens holds for it; only who gets the lock next differs.
//
// # Order
//
// Waiters are served in the order in which their first attempt reached Redis, across every
// Client and process: a blocking [Mutex.Lock] or a [Mutex.TryLock] with a wait whose first
// attempt finds the lock taken (or free but with waiters ahead) takes a place at the tail of a
// queue kept in Redis, and a free lock goes only to the head of that queue. A re-entry by the
// holder is not a wait: it succeeds at once. A single attempt (TryLock with wait 0) never
// takes a place and never passes a waiter: it succeeds only on a free lock that nobody
// waits for. Goroutines that share an owner share one place: when one of them gives up, the
// place goes, and the others take a new one at the tail on their next attempt.
//
// # Wake-ups
//
// A release wakes the queue's head alone, by name (the idea of ZooKeeper's sequential
// nodes, where each waiter watches only its predecessor): every Client listening on the
// lock's channel receives the message, but only the one whose waiter heads the queue wakes
// it, and the others wake nobody. The head also wakes by itself when the holder's lease
// runs out (an expiry publishes nothing). [Mutex.ForceUnlock] wakes every waiter; the head
// takes the lock and the others go back to sleep.
//
// # Leaving, and dead waiters
//
// A waiter that gives up (its ctx ends, its wait runs out, or an error ends its wait, its
// Client's Close included) removes its place at once, before Lock or TryLock returns, and
// wakes the next waiter if that one may take the lock now. (When its ctx has ended and Redis
// does not answer within 100ms, Lock returns and the place is removed in the background,
// within the cleanup timeout; failing that, it runs out as below. One that Close ended
// removes it within the cleanup timeout since Close began, see [Client.Close].) A waiter
// that cannot remove its place (its process died, or lost Redis) does not block the queue
// for long: every place lives for the waiter
// timeout ([WithWaiterTimeout], default [DefaultWaiterTimeout], 10s) after it was last
// refreshed, and waiters refresh theirs every third of it while they wait, so only a dead
// waiter's place runs out; the next attempt or release then drops it. The cost of this is
// one script per waiter per heartbeat (every 3.3s by default) while it waits. Redisson's
// fair lock instead keeps a dead waiter's place for its fairLockWaitTimeout, 5 minutes by
// default, which leaves queues stuck behind a crashed client for minutes; here a dead
// waiter delays the others by at most about the waiter timeout. A live waiter that is
// paused (or cut off from Redis) for longer than the waiter timeout loses its place and
// takes a new one at the tail on its next attempt.
//
// # Mixing kinds
//
// A FairMutex and a [Mutex] (or [SpinMutex]) of one name are the same lock and exclude each
// other, but a Mutex ignores the queue: it takes a free lock even while fair waiters wait,
// its releases wake one arbitrary waiter per Client rather than the head (which may then
// wait for its next heartbeat), and the fair releases wake no Mutex waiter. Use one kind
// per name.
//
// With [WithReplicaAck], a grant given back for want of acknowledgements costs the waiter
// its place: its next attempt queues it again at the tail.
//
// # Redis keys
//
// Beside the lock's hash (owner id -> hold count, as for Mutex), its fencing counter and
// its release channel, the queue is two sorted sets under the same hash tag: Key()+":queue"
// (owner -> arrival, in server microseconds) and Key()+":alive" (owner -> when its place
// expires, in server milliseconds). Both expire by themselves once every place has.
type FairMutex struct {
	*Mutex
}

// fairVariant is the first-come, first-served Mutex.
var fairVariant = &variant{
	kind: "fair lock", obs: KindFairMutex, acquire: lua.FairAcquire, release: lua.FairRelease, renew: lua.Renew,
	force: lua.ForceRelease, forceMessage: pubsub.WakeAll, tagged: true,
	acquireExtra: fairAcquireExtra, releaseExtra: fairReleaseExtra, leave: fairLeave,
}

// FairMutex returns a handle on the fair lock called name. It sends nothing to Redis. An
// empty name, or a nil or zero Client, makes a handle whose every method returns an error
// wrapping [ErrInvalid]. So do a nil or zero *FairMutex's (see [Mutex] on invalid handles).
func (c *Client) FairMutex(name string) *FairMutex {
	return &FairMutex{c.newMutex(name, fairVariant)}
}

// fairKeys are a fair lock's queue (owner -> arrival) and alive (owner -> end of its place)
// sorted sets.
func fairKeys(k lockKeys) (queue, alive string) {
	return k.lock + ":queue", k.lock + ":alive"
}

// fairHeartbeat is how often a queued waiter refreshes its place: a third of the waiter timeout.
func (c *Client) fairHeartbeat() time.Duration {
	return max(c.opts.waiterTimeout/3, time.Millisecond)
}

// fairMillis formats d in whole milliseconds for a script.
func fairMillis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// fairAcquireExtra: KEYS queue, alive; ARGV waiter timeout, queue flag, heartbeat, channel.
func fairAcquireExtra(m *Mutex, queue bool) (keys, args []string) {
	q, a := fairKeys(m.keys)
	flag := "0"
	if queue {
		flag = "1"
	}
	return []string{q, a}, []string{fairMillis(m.c.opts.waiterTimeout), flag, fairMillis(m.c.fairHeartbeat()), m.keys.pub}
}

// fairReleaseExtra: KEYS queue, alive.
func fairReleaseExtra(m *Mutex) (keys, args []string) {
	q, a := fairKeys(m.keys)
	return []string{q, a}, nil
}

// fairLeave removes owner's place from the queue when its wait gave up, Close ending it
// included. It makes one try, bounded by the cleanup timeout (withdraw): if that fails, the
// place runs out with the waiter timeout.
func fairLeave(ctx context.Context, m *Mutex, owner string) {
	m.c.withdraw(ctx, func(ctx context.Context) {
		q, a := fairKeys(m.keys)
		_ = m.c.exec(ctx, lua.FairLeave, []string{m.keys.lock, q, a},
			[]string{owner, m.keys.pub, fairMillis(m.c.fairHeartbeat())}).Error()
	})
}
