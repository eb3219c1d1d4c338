package rlock

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// redVariant is the lock each instance of a [RedLock] holds: the plain reentrant lock
// (the same hash, scripts, replays and watchdog), without the direct hand-off, which would
// pass one instance's lock to a local waiter without a quorum.
var redVariant = &variant{
	kind: "red lock", acquire: lua.Acquire, release: lua.Release, renew: lua.Renew,
	force: lua.ForceRelease, forceMessage: "0", queue: true, forced: true, marks: true,
	clockToken: true, ownExpired: true,
}

// Timing of a RedLock.
const (
	// redMinClients is the fewest instances a RedLock takes: with two, a quorum is both.
	redMinClients = 3
	// redTimeoutMax and redTimeoutMin bound the default per-instance timeout, a tenth of
	// the lease (see WithInstanceTimeout).
	redTimeoutMax = 250 * time.Millisecond
	redTimeoutMin = 5 * time.Millisecond
	// redRetryMin and redRetryMax bound the random pause before a retry: drawn from the
	// upper half of a step that doubles after every round that split the instances (some
	// granted, too few) and starts again after a round that found the lock held.
	redRetryMin = 2 * time.Millisecond
	redRetryMax = 128 * time.Millisecond
)

// RedLock is a reentrant lock held on a majority of N independent Redis masters (the
// RedLock algorithm of redis.io's "Distributed locks with Redis"), with the [Mutex]'s
// surface: owners and re-entry, watchdog mode, fixed leases, loss notice, fencing tokens
// (it has no HoldCount or Key: [RedLock.Err] tells whether the caller's owner holds it).
// Make one with [NewRedLock]; each instance is an ordinary relock lock ([Mutex]'s scripts,
// replays and watchdog) of the same name with the same owner id on every server.
//
// # Acquisition
//
// An attempt takes the start time on the monotonic clock and asks every instance at once,
// each bounded by the per-instance timeout ([WithInstanceTimeout]). It is decided as soon as
// N/2+1 instances granted it: a slow minority costs a won attempt nothing. Once the answers
// show that a majority can no longer grant it (another owner holds it), the silent
// instances are waited for only as long again as the answers took (at least a quarter of
// the per-instance timeout), so that a minority that is down or paused does not cost a
// refused attempt the whole timeout. So are they when a majority answered without a
// majority granting it (contenders split the instances) and every silent instance is a
// server that let a request of an attempt run out its per-instance timeout within the last
// second (and has not answered since): otherwise a split attempt keeps its grants from the
// other contenders for the whole timeout while a minority is down, and theirs split in turn.
// A silent instance whose server answers is waited for up to the timeout: it may be healthy
// and far away, and its grant makes the attempt a win. The lock is
// held iff at least N/2+1 instances granted it and the validity, lease - elapsed - drift
// (the drift allowance is 1% of the lease + 2ms; the lease is the smallest of the Clients'
// watchdog timeouts in watchdog mode; elapsed runs to the majority's grant), is still
// positive.
// An instance whose grant arrives after that, within the per-instance timeout of the
// attempt's start, joins the hold when it comes, if the hold is still current (not
// released, lost or ended by Close, and the instance still holds it): it is then counted,
// renewed and given back like the others, and counts for [RedLock.TTL] and for the
// survival of the hold; otherwise, or when the attempt failed, it is given back. Otherwise
// the attempt gives back what it
// got on every instance that granted it; an instance that did not answer within the
// timeout is resolved by its Mutex machinery (its request is replayed until answered, within
// the Client's cleanup timeout, and a grant it turns out to have made is given back; a
// re-entry whose outcome stays unknown is given back, if Redis counts it, at the instance's
// next renewal that Redis confirms, so each instance counts the holds the RedLock counts
// there again within a renewal period of answering). A waiting caller then sleeps until a
// release is published on any instance (it subscribes to the lock's release channel on
// every instance, through each Client's shared
// subscription connection) or until the refusals' leases have run out on enough instances
// for a majority (when a majority refused: another owner holds it, and only a release on
// one of the refusing instances wakes the caller), and tries again after a random pause of
// a few milliseconds (longer, up to 128ms, after rounds that split the instances). It never
// polls otherwise. A closed Client counts as an instance that refuses: an acquire fails with
// [ErrClosed] only when fewer than a majority of the Clients are open.
//
// # Holding
//
// In watchdog mode each instance's Client renews its instance's lease. The RedLock is held
// while at least N/2+1 instances hold it: by each instance's conservative clock (sent +
// lease - drift, as for a Mutex), which is never earlier than the RedLock's own start +
// lease - drift. When fewer than a majority still hold it (renewals found it gone, or their
// leases ran out unconfirmed, as when a majority of servers is down or unreachable),
// [RedLock.Done] closes and [RedLock.HoldContext] is cancelled with cause [ErrLockLost];
// a fixed lease that runs out ends the hold with [ErrLeaseExpired]. Instances lost in a
// minority change nothing for the holder.
//
// # Owners
//
// The handle is an owner (the same id on every instance); a context owner ([WithOwner],
// [Client.WithNewOwner]) overrides it, so that RedLock handles of one name over the same
// Clients re-enter for it. A re-entry adds a hold on every instance that still holds the
// lock and needs a majority of them to succeed; it never waits.
//
// # What it adds to the guarantees, and assumes
//
// A RedLock survives the loss of a minority of its servers (crash, partition, failover to
// a replica that lacked the lock) without a second holder. It assumes what the algorithm
// does: clocks that drift by less than the allowance over a lease, pauses of the holder
// shorter than its validity (otherwise stop work on [RedLock.HoldContext] and fence with
// [RedLock.Token]), and servers that, after a crash, come back either with their data
// (appendfsync always) or not before a lease has passed. See the README's RedLock section.
//
// The instances' Clients must reach distinct, independent masters (no replication between
// them): NewRedLock refuses a Cluster or Sentinel client, and the first acquire over a set of
// Clients checks that no two reach the same server (see [NewRedLock]). Do not also lock the
// same name with a [Mutex]
// of one of the Clients: it would be a lock on one instance only.
//
// A nil or zero *RedLock, or one that NewRedLock refused, is no handle: its methods return
// an error wrapping [ErrInvalid] (Done a closed channel, HoldContext a cancelled context).
type RedLock struct {
	name       string
	insts      []*Mutex // one per Client, in the order of the Clients' ids; one owner id on all
	allIdx     []int    // 0 to len(insts)-1, read only (all)
	owner      string
	quorum     int
	timeout    time.Duration // per instance; unset: a tenth of the lease, within redTimeoutMin..Max
	timeoutSet bool          // WithInstanceTimeout was given (then timeout is checked, 0 included)
	nilOpt     int           // index+1 of the first nil RedLockOption; 0: none
	set        string        // the Clients' ids: with the name and the owner, names a hold
	err        error         // invalid: every method returns it

	bad      atomic.Pointer[error] // the duplicate-server check found two Clients on one server
	verified atomic.Bool           // the duplicate-server check is complete (verify)

	// For the tests (export_test.go): instance requests and give-backs not yet settled,
	// and what became of the grants that reached a round after its decision.
	inflight              atomic.Int64
	adopted, lateReturned atomic.Int64
}

// RedLockOption configures a [RedLock].
type RedLockOption func(*RedLock)

// WithInstanceTimeout bounds each instance's request of an acquire: an instance that has not
// answered within d counts as not granting (its request is resolved and undone in the
// background). An attempt waits less than d for the instances that have not answered when
// they can no longer change its outcome, or when they are servers found silent lately (see
// Acquisition at [RedLock]). It must be much smaller than the lease, since the validity is
// what is left of the lease after the slowest answer. By default it is a tenth of the
// lease, between 5ms and 250ms; only the absence of this option gives the default. A d below
// 1ms, 0 and negative values included, makes the RedLock invalid: every method returns an
// error wrapping [ErrInvalid] that names the timeout, and nothing is sent to Redis.
func WithInstanceTimeout(d time.Duration) RedLockOption {
	return func(r *RedLock) { r.timeout, r.timeoutSet = d, true }
}

// NewRedLock returns a handle on the lock called name over clients, one per independent
// Redis master. It sends nothing to Redis. The handle is invalid (every method returns an
// error wrapping [ErrInvalid] with the reason) when: there are fewer than 3 clients; a
// client is nil, zero, or given twice; a client is a Cluster or Sentinel client (its
// rueidis client's Mode()): RedLock wants standalone masters; the name is empty; an option
// is out of range, or nil (as [New] refuses a nil [Option]).
//
// Two Clients on the same server are found with two round trips, by the first acquire over
// a set of Clients (the outcome is kept for the set, by its Clients): each instance writes its
// Client's id under a probe key of its key prefix ("{<prefix>redlock-probe:<Client id>}:probe",
// expiring after 10s), then reads the other instances' probe keys, in parallel, each step
// bounded by the per-instance timeout: with commands and keys that [ACLRule] grants, and on
// miniredis too. When a Client's probe key is found through another Client, the acquire fails
// with ErrInvalid and so does every later call of a handle over that set. A server that does
// not answer leaves the check to the next acquire: while one stays silent (paused, or cut off
// without a refused connection) from the set's first acquire on, every acquire over the set
// waits the per-instance timeout for its probe before its round, which itself does not wait
// for a silent minority. Not compared: a pair whose write or read
// Redis refuses (two Clients with different key prefixes, each under its own ACL rule, cannot
// read each other's keys), and a closed Client (it never grants). Not found: two Clients on
// one server in different databases (rueidis's SelectDB): keys are per database, so each
// reads no probe of the other, and that server counts as two instances; give every Client
// its own server.
func NewRedLock(name string, clients []*Client, opts ...RedLockOption) *RedLock {
	r := &RedLock{name: name}
	for i, o := range opts {
		if o == nil {
			if r.nilOpt == 0 {
				r.nilOpt = i + 1
			}
			continue
		}
		o(r)
	}
	r.err = r.validate(clients)
	if r.err != nil {
		return r
	}
	cs := slices.Clone(clients)
	slices.SortFunc(cs, func(a, b *Client) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(cs))
	r.owner = cs[0].newOwner()
	for i, c := range cs {
		m := c.newMutex(name, redVariant)
		m.owner = r.owner
		r.insts = append(r.insts, m)
		ids[i] = c.id
	}
	r.set = strings.Join(ids, ",")
	r.quorum = len(cs)/2 + 1
	r.allIdx = r.all()
	return r
}

func (r *RedLock) validate(clients []*Client) error {
	switch {
	case r.name == "":
		return invalid("empty red lock name")
	case len(clients) < redMinClients:
		return invalid("red lock %q over %d clients: it needs at least %d independent masters", r.name, len(clients), redMinClients)
	case r.nilOpt != 0:
		return invalid("red lock %q: option %d is nil", r.name, r.nilOpt-1)
	case r.timeoutSet && r.timeout < time.Millisecond:
		return invalid("red lock %q: instance timeout %v is below 1ms", r.name, r.timeout)
	}
	seen := make(map[*Client]int, len(clients))
	for i, c := range clients {
		if err := c.usable(); err != nil {
			return errorf("red lock %q: client %d: %w", r.name, i, err)
		}
		if j, dup := seen[c]; dup {
			return invalid("red lock %q: clients %d and %d are the same Client", r.name, j, i)
		}
		seen[c] = i
		if mode := c.rc.Mode(); mode == rueidis.ClientModeCluster || mode == rueidis.ClientModeSentinel {
			return invalid("red lock %q: client %d is a %s client: a red lock wants independent standalone masters", r.name, i, mode)
		}
	}
	return nil
}

// Name is the lock's name ("" for a nil handle).
func (r *RedLock) Name() string {
	if r == nil {
		return ""
	}
	return r.name
}

// check returns the error of an invalid handle or ctx.
func (r *RedLock) check(ctx context.Context) error {
	switch {
	case r == nil:
		return invalid("nil red lock handle")
	case r.err != nil:
		return r.err
	case len(r.insts) == 0:
		return invalid("zero red lock handle: make one with NewRedLock")
	case ctxError(ctx) != nil:
		return ctxError(ctx)
	}
	if bad := r.bad.Load(); bad != nil {
		return *bad
	}
	return nil
}

// ownerOf returns the owner an operation with ctx acts for.
func (r *RedLock) ownerOf(ctx context.Context) (string, error) {
	if err := r.check(ctx); err != nil {
		return "", err
	}
	if id, ok := OwnerFrom(ctx); ok {
		if id == "" {
			return "", invalid("empty owner id in context")
		}
		return "u:" + id, nil
	}
	return r.owner, nil
}

// instanceTimeout is the per-instance bound for a lease.
func (r *RedLock) instanceTimeout(lease time.Duration) time.Duration {
	if r.timeout > 0 {
		return r.timeout
	}
	return min(max(lease/10, redTimeoutMin), redTimeoutMax)
}

// Lock blocks until the caller's owner holds the lock on a majority of the instances, then
// keeps it held in watchdog mode (each instance renewed by its Client) until Unlock. A
// re-entry by the owner adds a hold at once. Lock returns once a majority granted it; an
// instance that grants it later, within the per-instance timeout, joins the hold (see
// RedLock's Acquisition). Lock returns nil when the lock is held;
// otherwise nothing it took is left held (a grant whose reply came too late, and the give-back
// of a grant to an instance that did not answer it within the per-instance timeout, go on in
// the background, within the Clients' cleanup timeouts; a grant whose give-back fails expires
// with its lease), and it returns:
//  1. ctx's error, wrapped, when ctx ends first (within 100ms of its end, as a Mutex),
//     joined with the last round's failure when that round was not answered by a majority
//     in time (errors.Is finds ctx's error and the instances' errors, or [ErrLeaseExpired]
//     for a majority's grant that came too late);
//  2. [ErrLockLost] when the owner's earlier hold was lost and not yet unlocked;
//  3. [ErrInvalid] for an invalid handle or owner, or two Clients on one server;
//  4. an error that makes a majority impossible, wrapped: [ErrWrongType] or [ErrClosed] on
//     more than a minority of the instances. Instances that cannot be reached are ridden
//     out: Lock retries until ctx ends.
func (r *RedLock) Lock(ctx context.Context) error {
	_, err := r.acquireObserved(ctx, -1, 0)
	return err
}

// LockLease is Lock with a fixed lease, never renewed: the lock frees by itself when the
// lease ends. A lease below 10ms is an error wrapping [ErrInvalid]. When the lease runs
// out before Unlock, Done closes and the cause is [ErrLeaseExpired] (see [Mutex.LockLease]).
// Right after the owner's own last Unlock, an instance whose give-back has not run yet still
// holds the owner's earlier watchdog-mode hold: a fixed lease's grant there, which would be
// renewed with it, is given back and the round tried again after a short pause (a
// [RedLock.TryLock] with wait 0 and a lease then returns false with an error that says so).
func (r *RedLock) LockLease(ctx context.Context, lease time.Duration) error {
	if err := checkLease("lease", lease); err != nil {
		return err
	}
	_, err := r.acquireObserved(ctx, -1, lease)
	return err
}

// TryLock tries to take the lock on a majority within wait; wait 0 makes exactly one
// attempt (one parallel round over the instances). lease > 0 is a fixed lease, lease <= 0
// watchdog mode. It returns (true, nil) when held; (false, nil) when wait ran out with the
// lock held by another owner (or split between contenders); (false, err) for the failures
// listed at [RedLock.Lock], and when wait ran out while fewer than a majority of the
// instances answered (the error names how many did, and wraps their errors). A majority's
// grant that came after the validity ran out (the instances answered too slowly for the
// lease) is given back and tried again within wait; if wait ends that way, the error wraps
// [ErrLeaseExpired]. In every case but (true, nil) nothing it took is left held (some of it
// given back in the background, as at [RedLock.Lock]). A negative wait, or a fixed lease
// below 10ms, is an error wrapping [ErrInvalid].
func (r *RedLock) TryLock(ctx context.Context, wait, lease time.Duration) (bool, error) {
	if wait < 0 {
		return false, invalid("negative wait %v", wait)
	}
	return r.acquireObserved(ctx, wait, lease)
}

// ForceUnlock frees the lock on every instance, whoever holds it, and wakes a waiter on
// each. It reports whether any instance that answered had a lock to free. Each instance's
// request is bounded by the instance timeout (see [RedLock.IsLocked]): one that has not
// answered by then may or may not free the lock there later. It returns an error (the
// instances' errors joined; one that did not answer in time wraps [ErrUnknownOutcome]) when
// fewer than a majority answered; the former holder learns of the loss at its next
// renewals.
func (r *RedLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	oks := make([]bool, len(r.insts))
	res := r.eachWithin(ctx, "force unlock", func(ctx context.Context, i int, m *Mutex) (err error) {
		oks[i], err = m.ForceUnlock(ctx)
		return err
	})
	freed, answered := false, 0
	var errs []error
	for i, err := range res {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		answered++
		freed = freed || oks[i]
	}
	if answered < r.quorum {
		return freed, errorf("force unlock red lock %q: %d of %d instances answered: %w", r.name, answered, len(r.insts), errors.Join(errs...))
	}
	return freed, nil
}

// each runs f for every instance at once and waits.
func (r *RedLock) each(f func(i int, m *Mutex)) {
	var wg sync.WaitGroup
	for i, m := range r.insts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i, m)
		}()
	}
	wg.Wait()
}

// queryTimeout is the per-instance bound of IsLocked, TTL and ForceUnlock: the instance
// timeout of a watchdog-mode acquire ([WithInstanceTimeout], else a tenth of the smallest
// of the Clients' watchdog timeouts, within 5ms..250ms).
func (r *RedLock) queryTimeout() time.Duration {
	_, least := r.leases(0)
	return r.instanceTimeout(least)
}

// eachWithin runs f for every instance at once, each on ctx bounded by queryTimeout, waits,
// and returns each instance's error. An instance whose bound ran out (ctx alive, its
// deadline later than the bound) has the
// error that says so, wrapping ErrUnknownOutcome rather than context.DeadlineExceeded: the
// caller's deadline did not pass. what names the operation in that error.
func (r *RedLock) eachWithin(ctx context.Context, what string, f func(ctx context.Context, i int, m *Mutex) error) []error {
	tmo := r.queryTimeout()
	errs := make([]error, len(r.insts))
	r.each(func(i int, m *Mutex) {
		ictx, cancel := context.WithTimeout(ctx, tmo)
		defer cancel()
		// The bound is the instance timeout, not the caller's deadline (the request may
		// give up a little before the bound: ictx.Err() is not asked).
		ibound, _ := ictx.Deadline()
		cbound, has := ctx.Deadline()
		ours := !has || ibound.Before(cbound)
		err := f(ictx, i, m)
		if err != nil && ours && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = errorf("red lock %q: %s: instance %d: %w: no answer within the instance timeout (%v)", r.name, what, i, ErrUnknownOutcome, tmo)
		}
		errs[i] = err
	})
	return errs
}

// IsLocked reports whether a majority of the instances say that some owner holds the lock.
// When too few answer to tell (fewer than a majority say locked, and the silent ones could
// make one), it returns the instances' errors joined. Each instance's request is bounded by
// the instance timeout of a watchdog-mode acquire ([WithInstanceTimeout], else a tenth of
// the smallest of the Clients' watchdog timeouts, within 5ms..250ms), as are
// [RedLock.TTL]'s and [RedLock.ForceUnlock]'s: a silent minority (a server down or paused)
// costs the call that timeout, not ctx's whole life; an instance that did not answer in time
// counts as silent, its error wrapping [ErrUnknownOutcome].
func (r *RedLock) IsLocked(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	locked := make([]bool, len(r.insts))
	errs := r.eachWithin(ctx, "is locked", func(ctx context.Context, i int, m *Mutex) (err error) {
		locked[i], err = m.IsLocked(ctx)
		return err
	})
	yes, silent := 0, 0
	for i := range r.insts {
		switch {
		case errs[i] != nil:
			silent++
		case locked[i]:
			yes++
		}
	}
	switch {
	case yes >= r.quorum:
		return true, nil
	case yes+silent < r.quorum:
		return false, nil
	}
	return false, errorf("red lock %q: %d of %d instances say locked, %d did not answer: %w", r.name, yes, len(r.insts), silent, errors.Join(errs...))
}

// TTL is the validity left. When the caller's owner holds the lock, it is the time until
// fewer than a majority of the instances still surely hold it, by this process's
// conservative clock (each instance's lease as last confirmed, minus the drift allowance):
// it only grows with renewals. Otherwise it is the majority's view in Redis, whoever holds
// it: the time until fewer than a majority of the instances still have the lock's key
// (their remaining leases, the N/2+1-th longest), 0 when fewer than a majority have it; with
// too few answers to tell, the instances' errors joined. Each instance is asked within the
// instance timeout, as at [RedLock.IsLocked].
func (r *RedLock) TTL(ctx context.Context) (time.Duration, error) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	if rh := peekRed(r.key(owner)); rh != nil {
		if d, ok := rh.validity(r, owner); ok {
			return d, nil
		}
	}
	ttls := make([]time.Duration, len(r.insts))
	errs := r.eachWithin(ctx, "ttl", func(ctx context.Context, i int, m *Mutex) (err error) {
		ttls[i], err = m.TTL(ctx)
		return err
	})
	var got []time.Duration
	silent := 0
	for i := range r.insts {
		switch {
		case errs[i] != nil:
			silent++
		case ttls[i] != 0:
			if ttls[i] < 0 { // no expiry: not set by relock
				ttls[i] = time.Duration(1<<63 - 1)
			}
			got = append(got, ttls[i])
		}
	}
	if len(got) >= r.quorum {
		slices.SortFunc(got, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		return got[r.quorum-1], nil
	}
	if len(got)+silent < r.quorum {
		return 0, nil
	}
	return 0, errorf("red lock %q: ttl: %d of %d instances did not answer: %w", r.name, silent, len(r.insts), errors.Join(errs...))
}

// Token is the fencing token of the caller's owner's current hold: the largest of the
// tokens the instances of the granting majority gave, as known when the acquire was
// decided (a grant adopted later does not change it; re-entry keeps it; see [Mutex.Token]
// for an instance's token, the larger of its last token + 1 and its server's clock in
// microseconds).
//
// When it rises: any two majorities share an instance, whose token for the later grant is
// above its token for the earlier one. So a later fresh grant's token is above every token
// that instance gave before; it is above the earlier grant's token (the maximum, which may
// come from another instance) when the servers' clocks differ by less than the time between
// the two grants (tokens follow the servers' clocks). Keep the servers' clocks synchronized
// (NTP), and have the resource refuse any token lower than one it has seen. It returns
// [ErrNotHeld] (or the loss, or [ErrClosed] when fewer than a majority of the Clients are
// open) when the owner does not hold the lock.
func (r *RedLock) Token(ctx context.Context) (int64, error) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	token, err := r.held(peekRed(r.key(owner)), nil)
	if err != nil {
		return 0, errorf("token of red lock %q: %w", r.name, err)
	}
	return token, nil
}

// held returns the token of rh, the caller's owner's hold, or why it is not held: as
// whyLocked, but a missing hold or a count of 0 (an acquire still under way) as noHold says
// it (ErrClosed once fewer than a majority of the Clients are open, as Unlock says; before,
// a count of 0 said ErrNotHeld there). whileHeld, when not nil, runs under rh.mu when the
// hold is in force (HoldContext subscribes there). noHold is asked with rh.mu released: it
// takes the Clients' own mutexes.
func (r *RedLock) held(rh *redHold, whileHeld func()) (int64, error) {
	if rh == nil {
		return 0, r.noHold()
	}
	rh.mu.Lock()
	token, count, why := rh.token, rh.count, rh.whyLocked()
	if why == nil && whileHeld != nil {
		whileHeld()
	}
	rh.mu.Unlock()
	if count == 0 {
		return 0, r.noHold()
	}
	return token, why
}

// Err is nil while the caller's owner holds the lock on a majority; otherwise it says why
// not: an error wrapping [ErrLockLost] (lost, until every hold was unlocked),
// [ErrLeaseExpired] (a fixed lease ran its course), [ErrClosed] (a Client was closed under
// the hold), [ErrNotHeld], or [ErrInvalid].
func (r *RedLock) Err(ctx context.Context) error {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return err
	}
	_, err = r.held(peekRed(r.key(owner)), nil)
	return err
}

// noHold is why the caller's owner holds no hold that the RedLock knows of: ErrClosed when
// fewer than a majority of its Clients are open (a hold that Close ended is forgotten once
// no open Client counts any of it), as Unlock says; ErrNotHeld otherwise.
func (r *RedLock) noHold() error {
	open := 0
	for _, m := range r.insts {
		if !m.c.isClosed() {
			open++
		}
	}
	if open < r.quorum {
		return ErrClosed
	}
	return ErrNotHeld
}

// Done returns a channel closed when the caller's owner's current hold ends: released by
// its last Unlock, lost (fewer than a majority of the instances still hold it), run to the
// end of a fixed lease, or ended by a Client's Close. By the time it is closed, the hold's
// [RedLock.HoldContext]s are cancelled with the cause, also for a channel asked for while the
// end is being told. When the owner holds no hold (or the handle is invalid), the channel is
// already closed. [RedLock.Err] tells why.
func (r *RedLock) Done(ctx context.Context) <-chan struct{} {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return closedCh
	}
	rh := peekRed(r.key(owner))
	if rh == nil {
		return closedCh
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	switch {
	case rh.done != nil:
		// The current tenure's; or the last one's, closed once its HoldContexts are
		// cancelled (redHold.finishLocked).
		return rh.done
	case rh.count == 0 || rh.ended != nil:
		return closedCh
	}
	rh.done = make(chan struct{})
	return rh.done
}

// HoldContext returns a copy of ctx that is also cancelled when the caller's owner's current
// hold ends; [context.Cause] then tells why: an error wrapping [ErrLockLost] (a majority
// lost), [ErrLeaseExpired], [ErrNotHeld] (released by Unlock) or [ErrClosed]. When the owner
// holds no hold, it is already cancelled with the reason [RedLock.Err] gives; so it is for a
// nil ctx (on context.Background, with a cause wrapping [ErrInvalid]), even while the
// handle's owner holds the lock. Run the guarded work under it; call cancel when done.
func (r *RedLock) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	parent := ctx
	if parent == nil {
		parent = context.Background()
	}
	hctx, cancel := context.WithCancelCause(parent)
	f := func(cause error) { cancel(cause) }
	key := &f
	owner, err := r.ownerOf(ctx) // a nil ctx is the cause, ErrInvalid (as Mutex.HoldContext)
	var rh *redHold
	if err == nil {
		// Subscribed under the same lock that found the hold in force: its end cancels hctx.
		rh = peekRed(r.key(owner))
		_, err = r.held(rh, func() { rh.subs[key] = struct{}{} })
	}
	if err != nil {
		cancel(err)
		return hctx, func() { cancel(context.Canceled) }
	}
	return hctx, func() {
		rh.mu.Lock()
		delete(rh.subs, key)
		rh.mu.Unlock()
		cancel(context.Canceled)
	}
}
