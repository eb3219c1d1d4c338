package rlock

import (
	"context"

	"github.com/relock-go/relock/lua"
)

// variant is what tells apart the kinds of reentrant lock that share Mutex's machinery
// (holds, tenures, leases, the watchdog, the wait loop, replays): their scripts and the
// extra keys and arguments those take, and how their waiters wait. Every acquire script
// takes KEYS {lock, fence, extra...} and ARGV {lease_ms, owner, request, extra...} and
// answers {1, token, holds} or {0, pttl}; every release script takes KEYS {lock, the
// request's release record (lockKeys.releaseRecord), extra...} and ARGV {owner, request,
// channel, remember_ms, extra...} and answers the owner's remaining holds (0 freed, -1
// none), except that with forced set it takes KEYS {lock, the lock's forced record, ...}
// and ARGV {owner, request, channel, "" or (on a replay) the tenure's token, ...} and may
// answer -2 on a replay (release.lua); every renew script takes KEYS with len(renewKeys)
// keys per lease and ARGV {lease_ms, owner...} and answers 1 or 0 per lease; every force
// script takes KEYS {lock} and ARGV {channel, message}, or with forced KEYS {lock, forced
// record} and ARGV {channel, message, keep_ms}.
type variant struct {
	kind string // "lock", "fair lock", ...: for messages
	// obs is the kind in events (Observer); "" for a RedLock's instances, which are not
	// reported on their own (the RedLock is).
	obs                            Kind
	acquire, release, renew, force *lua.Script
	forceMessage                   string // what the force script publishes
	// acquireExtra and releaseExtra return the keys and arguments the variant's scripts take
	// after the common ones; queue says whether a failed acquire joins a wait queue.
	acquireExtra func(m *Mutex, queue bool) (keys, args []string)
	releaseExtra func(m *Mutex) (keys, args []string)
	// renewKeys returns the keys the renew script takes for one lease; nil: {lock}.
	renewKeys func(k lockKeys) []string
	// holdSuffix tells apart, in the Client's table of holds, two variants that share a
	// lock key (the read and write sides of a read-write lock).
	holdSuffix string
	queue      bool // waiters of one Client queue FIFO (waitSpec.queue)
	spin       bool // waiters poll with backoff; releases publish nothing
	tagged     bool // waiters watch with their owner id as tag (woken by name)
	// handoff: a final release may pass the lock to a parked waiter of the same Client in
	// its own script (handoff.go); the release script takes a successor (release.lua).
	handoff bool
	// marks: the acquire script takes ARGV[4], by which the attempts of a wait mark the lock
	// so that its release publishes (acquire.lua); releases publish only then.
	marks bool
	// ownExpired: a context owner's holds whose fixed lease ran its course (and the tenure's
	// orphans) are not given back in the background at that end (hold.giveBackExpired): a
	// RedLock's instances, whose ended holds the RedLock's Unlock gives back itself. (Named
	// ownOrphans until issue 23: it also kept a RedLock instance's orphans from
	// hold.settleOrphans, to the instance's last hold; they are settled now as a Mutex's are.)
	ownExpired bool
	// clockToken: a fresh grant's token follows the server's clock exactly (acquire.lua's
	// ARGV[5] 'c'), not the fence's counter: a RedLock compares its instances' tokens,
	// given by several servers.
	clockToken bool
	// forced: the release script keeps no record per request; a replay asks the lock's
	// forced record instead, which the force script writes (release.lua).
	forced bool
	// fast: a handle owner's fresh acquire may go as a fast grant, a transaction that writes
	// the lock's fast form, and its release by fast_release.lua (fast.go).
	fast bool
	// acquireErr, when set, turns an acquire's error into the one the call returns (the
	// write side's UPGRADE refusal into ErrUpgrade).
	acquireErr func(name string, err error) error
	// sureWith, when set, is the variant of the same lock whose hold by the owner through
	// this Client makes an acquire of this one sure to be granted, as a re-entry is (the
	// write side for the read side: a writer's read hold). Such an acquire waits for its
	// turn (h.op) within ctx only, not within a TryLock's wait.
	sureWith *variant
	// leave, when set, runs when a wait gives up after attempts that may have registered
	// the waiter in Redis (a fair queue slot).
	leave func(ctx context.Context, m *Mutex, owner string)
}

// mutexVariant is the plain reentrant lock.
var mutexVariant = &variant{
	kind: "lock", obs: KindMutex, acquire: lua.Acquire, release: lua.Release, renew: lua.Renew,
	force: lua.ForceRelease, forceMessage: "0", queue: true, handoff: true, forced: true,
	marks: true, fast: true,
}
