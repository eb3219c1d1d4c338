package rlock

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/pubsub"
	"github.com/relock-go/relock/watchdog"
)

// redVariant is the lock each instance of a [RedLock] holds: the plain reentrant lock
// (the same hash, scripts, replays and watchdog), without the direct hand-off, which would
// pass one instance's lock to a local waiter without a quorum.
var redVariant = &variant{
	kind: "red lock", acquire: lua.Acquire, release: lua.Release, renew: lua.Renew,
	force: lua.ForceRelease, forceMessage: "0", queue: true, forced: true, marks: true,
	clockToken: true,
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
// surface: owners and re-entry, watchdog mode, fixed leases, loss notice, fencing tokens.
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
// the Client's cleanup timeout, and a grant it turns out to have made is given back). A
// waiting caller then sleeps until a release is published on any instance (it subscribes
// to the lock's release channel on every instance, through each Client's shared
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
	name    string
	insts   []*Mutex // one per Client, in the order of the Clients' ids; one owner id on all
	owner   string
	quorum  int
	timeout time.Duration // per instance; 0: a tenth of the lease, within redTimeoutMin..Max
	set     string        // the Clients' ids: with the name and the owner, names a hold
	err     error         // invalid: every method returns it

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
// lease, between 5ms and 250ms. A d below 1ms makes the RedLock invalid ([ErrInvalid]).
func WithInstanceTimeout(d time.Duration) RedLockOption {
	return func(r *RedLock) { r.timeout = d }
}

// NewRedLock returns a handle on the lock called name over clients, one per independent
// Redis master. It sends nothing to Redis. The handle is invalid (every method returns an
// error wrapping [ErrInvalid] with the reason) when: there are fewer than 3 clients; a
// client is nil, zero, or given twice; a client is a Cluster or Sentinel client (its
// rueidis client's Mode()): RedLock wants standalone masters; the name is empty; an option
// is out of range.
//
// Two Clients on the same server are found with two round trips, by the first acquire over
// a set of Clients (the outcome is kept for the set, by its Clients): each instance writes its
// Client's id under a probe key of its key prefix ("{<prefix>redlock-probe:<Client id>}:probe",
// expiring after 10s), then reads the other instances' probe keys, in parallel, each step
// bounded by the per-instance timeout: with commands and keys that [ACLRule] grants, and on
// miniredis too. When a Client's probe key is found through another Client, the acquire fails
// with ErrInvalid and so does every later call of a handle over that set. A server that does
// not answer leaves the check to the next acquire. Not compared: a pair whose write or read
// Redis refuses (two Clients with different key prefixes, each under its own ACL rule, cannot
// read each other's keys).
func NewRedLock(name string, clients []*Client, opts ...RedLockOption) *RedLock {
	r := &RedLock{name: name}
	for _, o := range opts {
		if o != nil {
			o(r)
		}
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
	return r
}

func (r *RedLock) validate(clients []*Client) error {
	switch {
	case r.name == "":
		return invalid("empty red lock name")
	case len(clients) < redMinClients:
		return invalid("red lock %q over %d clients: it needs at least %d independent masters", r.name, len(clients), redMinClients)
	case r.timeout != 0 && r.timeout < time.Millisecond:
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
	case ctx == nil:
		return invalid("nil context")
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
//  1. ctx's error, wrapped, when ctx ends first (within 100ms of its end, as a Mutex);
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

// instResult is one instance's answer to one attempt.
type instResult struct {
	ok  bool
	ttl time.Duration // the holder's remaining lease when refused; -1 unknown
	err error
}

// attemptOnce makes one acquire request for the caller's owner, as one attempt of a
// Mutex's wait: queue marks the lock when refused (so that its release publishes), waiting
// says the caller already watches the release channel (see Mutex.attempt).
func (m *Mutex) attemptOnce(ctx context.Context, lease time.Duration, renew, queue, waiting bool) instResult {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return instResult{err: err}
	}
	h, err := m.c.ref(m, owner)
	if err != nil {
		return instResult{err: err}
	}
	defer m.c.unref(h)
	a := &acquisition{m: m, ctx: ctx, h: h, lease: lease, renew: renew, queue: queue}
	a.buf.direct = true // the round leaves this attempt at ctx's end (RedLock.round)
	ok, ttl, err := a.attempt(waiting)
	return instResult{ok: ok, ttl: ttl, err: err}
}

// instHold returns the caller's owner's hold on instance m, or nil.
func (m *Mutex) instHold(owner string) *hold {
	return m.c.peek(m.keys, m.v, owner)
}

// leases returns each instance's lease for lease (<= 0: its Client's watchdog timeout) and
// the smallest.
func (r *RedLock) leases(lease time.Duration) ([]time.Duration, time.Duration) {
	ls := make([]time.Duration, len(r.insts))
	least := time.Duration(0)
	for i, m := range r.insts {
		ls[i] = lease
		if lease <= 0 {
			ls[i] = m.c.opts.watchdogTimeout
		}
		if i == 0 || ls[i] < least {
			least = ls[i]
		}
	}
	return ls, least
}

// round asks the instances idx at once, bounded by tmo, and returns once a majority of the
// instances granted, or every instance answered, or tmo ran out, or the round is lost or
// split and the rest had a little longer: once fewer than a majority can still grant
// (refusals and errors beyond n-quorum) and the silent instances cannot change whether a
// majority answered, or once a majority answered without a majority granting while every
// silent instance's server is known to be silent (redSilent: a round ran out tmo on it
// lately; markSilent), the rest are waited for as long again as the round took so far, and
// at least a quarter of tmo (within tmo from the start): an instance that answers about
// when the others do is counted (its grant is given back with the others', or makes a split
// round a win), a silent one (down, paused) is not waited for up to tmo, while the round's
// grants refuse every other contender. A round that a majority granted is decided at once:
// it costs the majority's latency, not the slowest instance's.
//
// The instances that had not answered at the decision count as not answered
// (ErrUnknownOutcome) in the result, and their grants are settled by the returned
// lateGrants, which the caller must settle exactly once: adopted into the hold the round
// began or re-entered (their requests go on, within tmo from the start, after a round that
// a majority granted, whatever becomes of ctx), or given back by the instance's goroutine
// (giveBackLate). A round decided otherwise cancels the requests still out: each
// instance's Mutex machinery resolves its request in the background (replayed until
// answered, within the cleanup timeout) and gives back a grant it turns out to have made;
// as does a request still out when tmo ends.
func (r *RedLock) round(ctx context.Context, idx []int, leases []time.Duration, renew, queue, waiting bool, tmo time.Duration) ([]instResult, *lateGrants) {
	start := time.Now()
	// One bound for the round's requests: ctx's end cancels them only until a majority
	// granted (unlink), so that a late grant can still join the hold.
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), start.Add(tmo))
	unlink := context.AfterFunc(ctx, cancel)
	st := &roundState{res: make([]instResult, len(r.insts)), answered: make([]bool, len(r.insts)), wake: make(chan struct{}, 1),
		late: &lateGrants{settled: make(chan struct{}), cancel: cancel, out: len(idx)}}
	for _, i := range idx {
		m := r.insts[i]
		r.inflight.Add(1)
		m.c.spare(func() {
			defer r.inflight.Add(-1)
			x := m.attemptOnce(rctx, leases[i], renew, queue, waiting)
			if _, reply := rueidis.IsRedisErr(x.err); x.ok || x.err == nil || reply || errors.Is(x.err, errLateGrant) {
				m.c.redSilent.Store(0) // the server answers
			}
			st.mu.Lock()
			if st.decided {
				st.mu.Unlock()
				if x.ok {
					r.settleLate(ctx, st.late, i)
				}
				st.late.done()
				return
			}
			st.res[i], st.answered[i] = x, true
			st.mu.Unlock()
			st.late.done()
			select {
			case st.wake <- struct{}{}:
			default:
			}
		})
	}
	var straggle *time.Timer
	var straggled <-chan time.Time
	won := false
	defer func() {
		unlink()
		if !won {
			cancel()
		}
		if straggle != nil {
			straggle.Stop()
		}
	}()
	for {
		st.mu.Lock()
		granted, no, heard, asked := 0, 0, 0, 0
		for _, i := range idx {
			switch x := st.res[i]; {
			case !st.answered[i]:
				asked++
			case x.ok:
				granted++
				heard++
			case x.err == nil || errors.Is(x.err, errLateGrant): // refused, or granted too late
				heard++
				no++
			default:
				no++
			}
		}
		if granted >= r.quorum {
			won = true
			return r.decide(ctx, st, idx, tmo), st.late
		}
		// Lost (fewer than a majority can still grant, and whether a majority answered is
		// settled): the silent instances cannot change the outcome. Split (a majority
		// answered, too few granted): only the silent instances can still make it a win,
		// and when every one of them is a server that lately let a request's instance
		// timeout run out (redSilent), they are not waited for either: a round that waits
		// for a down or paused minority holds its grants all that time, refusing every
		// other contender, whose rounds then split in turn. A silent instance whose server
		// answered its last request is waited for up to the timeout: it may be healthy and
		// far away, and its grant makes the round a win.
		lost := len(idx)-no < r.quorum && (heard >= r.quorum || heard+asked < r.quorum)
		split := heard >= r.quorum && r.silentGone(idx, st.answered)
		if asked == 0 || (straggle != nil && straggled == nil) {
			r.markSilent(ctx, st, idx, start, tmo)
			return r.decide(ctx, st, idx, tmo), st.late
		}
		st.mu.Unlock()
		if (lost || split) && straggle == nil {
			took := time.Since(start)
			straggle = time.NewTimer(min(max(took, tmo/4), tmo-took))
			straggled = straggle.C
		}
		select {
		case <-st.wake:
		case <-straggled:
			straggled = nil // the rest are not waited for any more
		case <-ctx.Done():
			st.mu.Lock()
			return r.decide(ctx, st, idx, tmo), st.late
		case <-rctx.Done():
			st.mu.Lock()
			r.markSilent(ctx, st, idx, start, tmo)
			return r.decide(ctx, st, idx, tmo), st.late
		}
	}
}

// redSilentFor is how long a server whose request in a RedLock round got no answer within
// the instance timeout is not waited for in a split round (see round), unless it answers
// meanwhile: a server that is down or paused costs a round the whole timeout about once in
// that time.
const redSilentFor = time.Second

// markSilent notes the servers of the instances that have not answered a round that ran
// its whole instance timeout tmo from start (not ended by ctx) as silent for redSilentFor.
// st.mu must be held.
func (r *RedLock) markSilent(ctx context.Context, st *roundState, idx []int, start time.Time, tmo time.Duration) {
	if ctx.Err() != nil || time.Since(start) < tmo {
		return
	}
	until := time.Now().Add(redSilentFor).UnixNano()
	for _, i := range idx {
		if !st.answered[i] {
			r.insts[i].c.redSilent.Store(until)
		}
	}
}

// silentGone reports whether every instance of idx that has not answered (answered, guarded
// by the round's mu) is a server that lately let a request's instance timeout run out.
func (r *RedLock) silentGone(idx []int, answered []bool) bool {
	now := time.Now().UnixNano()
	for _, i := range idx {
		if !answered[i] && r.insts[i].c.redSilent.Load() <= now {
			return false
		}
	}
	return true
}

// roundState is what a round's instance goroutines report to it; mu guards it.
type roundState struct {
	mu       sync.Mutex
	res      []instResult // by instance
	answered []bool       // res holds the instance's answer
	decided  bool         // the round has returned: later answers are not read
	wake     chan struct{}
	late     *lateGrants
}

// lateGrants settles the grants whose reply reached a round after it was decided: the
// instance's goroutine waits until the round's caller settles the round (settle), then
// adopts its grant into the hold (adopt) or gives it back (giveBackLate).
type lateGrants struct {
	settled chan struct{}    // closed by settle
	adopt   func(i int) bool // set before settled closes; nil: give every late grant back

	mu     sync.Mutex
	out    int                // instance requests not yet answered
	cancel context.CancelFunc // ends the round's requests' context: called by the last one
}

// settle tells the late grants of the round what becomes of them: adopt(i) adds instance
// i's grant to the hold and reports true, or reports false (the hold is no longer current),
// and the grant is given back; a nil adopt gives every late grant back. The round's caller
// calls it exactly once, at once after the round (a late grant's goroutine waits for it).
func (l *lateGrants) settle(adopt func(i int) bool) {
	l.adopt = adopt
	close(l.settled)
}

// settleLate settles instance i's grant that reached the round of l after its decision.
func (r *RedLock) settleLate(ctx context.Context, l *lateGrants, i int) {
	<-l.settled
	if l.adopt != nil && l.adopt(i) {
		r.adopted.Add(1)
		return
	}
	r.insts[i].giveBackLate(ctx)
	r.lateReturned.Add(1)
}

// done counts one of the round's requests answered; the last one releases the round's
// context (a round that a majority granted leaves it to its requests).
func (l *lateGrants) done() {
	l.mu.Lock()
	l.out--
	last := l.out == 0
	l.mu.Unlock()
	if last {
		l.cancel()
	}
}

// decide ends the round: later answers are not read. It returns the results, the instances
// that had not answered marked as such. st.mu must be held; decide releases it.
func (r *RedLock) decide(ctx context.Context, st *roundState, idx []int, tmo time.Duration) []instResult {
	st.decided = true
	defer st.mu.Unlock()
	for _, i := range idx {
		if st.answered[i] {
			continue
		}
		if ctx.Err() != nil {
			st.res[i].err = errorf("red lock %q: instance %d: %w", r.name, i, ctx.Err())
		} else {
			// The round's bound or its decision, not the caller's deadline: say so, without
			// wrapping context.DeadlineExceeded.
			st.res[i].err = errorf("red lock %q: instance %d: %w: no answer within the instance timeout (%v), or not needed", r.name, i, ErrUnknownOutcome, tmo)
		}
	}
	return st.res
}

// giveBackLate gives back a grant whose reply reached a RedLock round after the round was
// decided without it, on ctx's values (the owner) without its cancellation, within the
// Client's cleanup timeout. A give-back that fails leaves the hold to expire with its
// lease: this Client stops counting and renewing it (hold.abandon).
func (m *Mutex) giveBackLate(ctx context.Context) {
	_, _ = m.giveBackInst(context.WithoutCancel(ctx), abandonOne)
}

// giveBackInst gives back one hold of the caller's owner on instance m, as Unlock does (the
// instances report no events), and returns Unlock's error, and whether this Client still
// counts a hold of the owner there that the give-back found lost (ErrNotHeld: a hold Redis
// may still count, to give back next). When the give-back failed (other
// than with ErrNotHeld: then there is nothing to abandon), this Client stops counting and
// renewing the hold as fail says (abandonFailed) before the owner's next call on the
// instance runs: the hold abandoned is the one the give-back was for. Were it abandoned
// after the give-back let the instance go, an acquire of the owner granted in between (the
// RedLock's next round, right after an Unlock that returned at a majority) would lose its
// new tenure to the abandon, unrenewed while the RedLock counts it. A give-back that never
// ran, because another call of the owner on the instance kept it busy for the whole cleanup
// timeout, abandons the hold all the same once it gives up (nothing else will give it back).
func (m *Mutex) giveBackInst(ctx context.Context, fail giveBackFail) (more bool, err error) {
	owner, err := m.ownerOf(ctx)
	if err != nil {
		return false, err
	}
	ran := false
	err = m.unlock(ctx, owner, nil, func(h *hold, err error) {
		ran = true
		if f := giveBackFailedHook.Load(); f != nil {
			(*f)(m.name)
		}
		h.abandonFailed(err, fail)
		// Decided under h.op: a hold lost here still counted means its loss is recorded
		// (which refuses the owner's acquires), so no new grant can come in before the next
		// give-back.
		more = errors.Is(err, ErrNotHeld) && h.holds() > 0
	})
	if err != nil && !ran {
		if h := m.instHold(owner); h != nil {
			h.abandonFailed(err, fail)
		}
	}
	return more, err
}

// giveBackFailedHook, set by tests only (export_test.go), is called with the lock's name by
// a RedLock's give-back of an instance hold that failed, before the hold is abandoned.
var giveBackFailedHook atomic.Pointer[func(name string)]

// abandonFailed stops this Client counting and renewing one of h's holds, an instance hold
// of a RedLock, when err says its give-back failed (nil or ErrNotHeld: nothing to abandon):
// one hold (abandonOne, hold.abandon) or all of them (abandonAll, hold.abandonAll). A
// give-back refused for want of rights (ErrNoPermission) abandoned its hold already
// (Mutex.unlock), and one of an owner this Client counts no hold of has none to abandon:
// abandonOne abandons no other. The give-back holds h.op, unless it never ran
// (giveBackInst).
func (h *hold) abandonFailed(err error, fail giveBackFail) {
	switch {
	case err == nil || errors.Is(err, ErrNotHeld):
	case fail == abandonOne:
		if !errors.Is(err, ErrNoPermission) && h.holds() > 0 {
			h.abandon(err)
		}
	default:
		h.abandonAll()
	}
}

func (r *RedLock) all() []int {
	idx := make([]int, len(r.insts))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// hard reports whether err, an instance's failed attempt, is no passing trouble: the
// instance will refuse again (a key of another type, a closed Client, a refused right).
// An instance's ErrLockLost is passing: the give-back of a lost hold is still under way.
func hard(err error) bool {
	return errors.Is(err, ErrWrongType) || errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalid) ||
		errors.Is(err, ErrNoPermission)
}

// acquire implements Lock (wait < 0: no bound) and TryLock; ro, when not nil, reports the
// tenure the call may begin (redlock_observe.go).
func (r *RedLock) acquire(ctx context.Context, wait, lease time.Duration, ro *redObs) (bool, error) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return false, err
	}
	renew := lease <= 0
	if !renew {
		if err := checkLease("lease", lease); err != nil {
			return false, err
		}
	}
	if err := ctx.Err(); err != nil {
		return false, errorf("red lock %q: %w", r.name, err)
	}
	leases, least := r.leases(lease)
	if err := r.verify(ctx, r.instanceTimeout(least)); err != nil {
		return false, err
	}
	rh := r.refHold(owner)
	defer unrefRed(rh)
	if err := rh.lockOp(ctx); err != nil {
		return false, errorf("red lock %q: %w", r.name, err)
	}
	defer rh.unlockOp()
	rh.mu.Lock()
	count, ended := rh.count, rh.ended
	rh.next = ro
	rh.mu.Unlock()
	if count > 0 {
		switch {
		case ended == nil:
			return r.reenter(ctx, rh, owner, leases, renew, r.instanceTimeout(least))
		case !errors.Is(ended, ErrLeaseExpired):
			return false, errorf("red lock %q: %w", r.name, ended)
		}
		// The last hold's fixed lease ran its course: give back what the instances still
		// count, and start afresh.
		r.giveBackAll(ctx, rh)
	}
	return r.fresh(ctx, rh, owner, wait, leases, least, renew)
}

// reenter adds a hold on every instance that still holds the lock; a majority must grant it.
// An instance whose grant comes after the majority's is adopted (redHold.adopt) while the
// tenure lasts, and given back otherwise.
func (r *RedLock) reenter(ctx context.Context, rh *redHold, owner string, leases []time.Duration, renew bool, tmo time.Duration) (bool, error) {
	rh.mu.Lock()
	var idx []int
	for i, w := range rh.watched {
		if w {
			idx = append(idx, i)
		}
	}
	rh.mu.Unlock()
	res, late := r.round(ctx, idx, leases, renew, false, false, tmo)
	var got []int
	var errs []error
	for _, i := range idx {
		if res[i].ok {
			got = append(got, i)
		} else if res[i].err != nil {
			errs = append(errs, res[i].err)
		}
	}
	if len(got) >= r.quorum {
		rh.mu.Lock()
		rh.count++
		for _, i := range got {
			rh.n[i]++
		}
		gen := rh.gen
		rh.mu.Unlock()
		late.settle(func(i int) bool { return rh.adopt(r, owner, gen, i, true) })
		return true, nil
	}
	late.settle(nil)
	r.giveBackRound(ctx, got, abandonOne, tmo)
	if err := ctx.Err(); err != nil {
		return false, errorf("red lock %q: %w", r.name, err)
	}
	if len(errs) == 0 { // the others refused it: they no longer hold the owner's lock
		return false, errorf("red lock %q: re-entry granted by %d of %d instances, %d needed: the others refused it", r.name, len(got), len(r.insts), r.quorum)
	}
	return false, errorf("red lock %q: re-entry granted by %d of %d instances, %d needed: %w", r.name, len(got), len(r.insts), r.quorum, errors.Join(errs...))
}

// fresh runs the rounds of a fresh acquire.
//
// A waiting caller (wait != 0) takes each instance's release-channel Mark before its first
// round and, when that round fails, registers a watcher on every instance whose Client is
// open and tries again at once unless every watcher is live since its mark (a release may
// have been published between the refusal and the Watch, as Mutex.waitLoop does). Later
// rounds run with the watchers registered, so no release is missed. A closed instance
// counts as any other failed instance: the acquire fails with ErrClosed only when fewer
// than a majority of the instances are usable.
func (r *RedLock) fresh(ctx context.Context, rh *redHold, owner string, wait time.Duration, leases []time.Duration, least time.Duration, renew bool) (bool, error) {
	var deadline time.Time
	if wait > 0 {
		deadline = time.Now().Add(wait)
	}
	tmo := r.instanceTimeout(least)
	all := r.all()
	n := len(r.insts)
	var watchers []*pubsub.Waiter // nil until the first wait; nil for an instance whose Client is closed
	var marks []pubsub.Mark
	consumed := make([]bool, n) // a wake-up of the instance's watcher was taken and not yet used up
	// pass hands on the wake-ups taken and not used for a successful round (a caller that
	// leaves on an error, ctx's end or the wait's end), so that another waiter of the same
	// Client is not left asleep.
	pass := func() {
		for i, w := range watchers {
			if w != nil && consumed[i] {
				w.Pass()
			}
			consumed[i] = false
		}
	}
	defer func() {
		for _, w := range watchers {
			if w != nil {
				w.Close()
			}
		}
	}()
	closedErr := func() error { return errorf("red lock %q: %w", r.name, ErrClosed) }
	step := redRetryMin
	waiting := false
	var timer *time.Timer
	for {
		if watchers == nil && wait != 0 {
			marks = marks[:0]
			for _, m := range r.insts {
				marks = append(marks, m.c.sub.Mark(m.keys.channel))
			}
		}
		for i, w := range watchers { // wake-ups so far are answered by this round
			if w == nil {
				continue
			}
			select {
			case <-w.C():
				consumed[i] = true
			default:
			}
		}
		start := time.Now()
		res, lg := r.round(ctx, all, leases, renew, wait != 0, waiting, tmo)
		validity := least - time.Since(start) - watchdog.Drift(least)
		var got, refusedIdx []int
		var refusedTTL []time.Duration
		var errs, hardErrs []error
		answered, late := 0, 0
		pttl := time.Duration(-1)
		for i, x := range res {
			switch {
			case x.ok:
				got = append(got, i)
				answered++
			case x.err == nil:
				answered++
				refusedIdx = append(refusedIdx, i)
				refusedTTL = append(refusedTTL, x.ttl)
				if x.ttl >= 0 && (pttl < 0 || x.ttl < pttl) {
					pttl = x.ttl
				}
			case hard(x.err):
				hardErrs = append(hardErrs, x.err)
			case errors.Is(x.err, errLateGrant):
				// Granted too late for its lease, and given back.
				answered++
				late++
				errs = append(errs, x.err)
			default:
				errs = append(errs, x.err)
			}
		}
		if len(got) >= r.quorum && validity > 0 {
			if gen, ok := rh.begin(r, owner, got); ok {
				lg.settle(func(i int) bool { return rh.adopt(r, owner, gen, i, false) })
				return true, nil
			}
		}
		lg.settle(nil)
		if f := roundGiveBackHook.Load(); f != nil && len(got) > 0 {
			cs := make([]*Client, len(got))
			for k, i := range got {
				cs[k] = r.insts[i].c
			}
			(*f)(r.name, cs)
		}
		r.giveBackRound(ctx, got, abandonAll, tmo)
		if err := ctx.Err(); err != nil {
			pass()
			return false, errorf("red lock %q: %w", r.name, err)
		}
		if n-len(hardErrs) < r.quorum {
			pass()
			return false, errorf("red lock %q: a majority cannot grant it: %w", r.name, errors.Join(hardErrs...))
		}
		var passing error
		switch {
		case answered < r.quorum:
			passing = errorf("red lock %q: %d of %d instances answered, %d needed: %w", r.name, answered, n, r.quorum, errors.Join(append(errs, hardErrs...)...))
		case len(got)+late >= r.quorum:
			passing = errorf("red lock %q: %w: a majority granted it after %v of a %v lease", r.name, errLateGrant, time.Since(start), least)
		}
		if wait == 0 {
			return false, passing
		}
		clear(consumed) // used by this round
		left := time.Duration(-1)
		if !deadline.IsZero() {
			if left = time.Until(deadline); left <= 0 {
				return false, passing
			}
		}
		waiting = true
		if watchers == nil {
			watchers = make([]*pubsub.Waiter, n)
			usable := 0
			for i, m := range r.insts {
				if w, err := m.c.sub.Watch(m.keys.channel); err == nil {
					watchers[i] = w
					usable++
				}
			}
			if usable < r.quorum {
				return false, closedErr()
			}
			// A release published between this round's refusals and the Watch reached no
			// watcher: try again unless every channel is live since its mark. A channel
			// not yet subscribed wakes its watcher when Redis confirms it: wait for that
			// (within one instance timeout) and try once, rather than once per channel.
			retry, pending := false, false
			for i, w := range watchers {
				switch {
				case w == nil:
				case !r.insts[i].c.sub.Live(r.insts[i].keys.channel):
					retry, pending = true, true
				case !w.Live(marks[i]):
					retry = true
				}
			}
			if pending {
				if timer == nil {
					timer = time.NewTimer(time.Hour)
					defer timer.Stop()
				}
				bound := tmo
				if left > 0 {
					bound = min(bound, left)
				}
				if err := r.confirm(ctx, timer, watchers, consumed, bound); err != nil {
					pass()
					return false, err
				}
			}
			if retry {
				continue
			}
		}
		// Sleep until a release, or the end of the leases that refused (an expiry publishes
		// nothing), or an outage's backoff; then a random pause.
		held := len(refusedIdx) >= r.quorum // another owner holds it on a majority
		if held || (len(got) == 0 && passing == nil) {
			step = redRetryMin
		} else {
			step = min(2*step, redRetryMax)
		}
		pause := step/2 + rand.N(step/2+1)
		sleepFor := pttl
		var listen []int // the instances whose release wakes the caller; nil: all
		switch {
		case held:
			// Free on a majority once all but n-quorum refusals have run out: sleep until
			// then or a release on an instance that refused. A release on an instance that
			// granted (the caller's own give-back) changes nothing and wakes nothing.
			slices.SortFunc(refusedTTL, func(a, b time.Duration) int {
				if a < 0 {
					a = time.Duration(1<<63 - 1)
				}
				if b < 0 {
					b = time.Duration(1<<63 - 1)
				}
				return cmp.Compare(a, b)
			})
			sleepFor = refusedTTL[len(refusedTTL)-(n-r.quorum)-1]
			listen = refusedIdx
			if sleepFor < 0 {
				sleepFor = least
			}
		case passing != nil || len(got) > 0:
			sleepFor = pause
		case pttl < 0:
			sleepFor = least
		}
		sleepFor = max(sleepFor, time.Millisecond)
		if left > 0 {
			sleepFor = min(sleepFor, left)
			pause = min(pause, left)
		}
		if timer == nil {
			timer = time.NewTimer(sleepFor)
			defer timer.Stop()
		} else {
			timer.Reset(sleepFor)
		}
		if err := r.sleep(ctx, timer, watchers, listen, consumed); err != nil {
			return false, err
		}
		// The random pause after a wake-up spreads out contenders woken by one release
		// and lets the releaser's other instances answer.
		timer.Reset(pause)
		select {
		case <-timer.C:
		case <-ctx.Done():
			pass()
			return false, errorf("red lock %q: %w", r.name, ctx.Err())
		}
		closed := 0
		for _, m := range r.insts {
			if m.c.isClosed() {
				closed++
			}
		}
		if n-closed < r.quorum {
			pass()
			return false, closedErr()
		}
	}
}

// roundGiveBackHook, set by tests only (export_test.go), is called with the lock's name and
// the Clients of the instances whose grants a failed round of a fresh acquire is about to
// give back.
var roundGiveBackHook atomic.Pointer[func(name string, granted []*Client)]

// confirm waits, at most d, until the channel of every watcher is subscribed (each
// confirmation wakes its watcher), noting the wake-ups it takes in consumed.
func (r *RedLock) confirm(ctx context.Context, timer *time.Timer, ws []*pubsub.Waiter, consumed []bool, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		live := true
		for i, w := range ws {
			if w != nil && !r.insts[i].c.sub.Live(r.insts[i].keys.channel) {
				live = false
				break
			}
		}
		left := time.Until(end)
		if live || left <= 0 {
			return nil
		}
		timer.Reset(left)
		if err := r.sleep(ctx, timer, ws, nil, consumed); err != nil {
			return err
		}
	}
}

// sleep waits for a wake-up on the watchers of the instances listen (nil: every
// instance), the timer, or ctx's end. A wake-up it takes is noted in consumed.
func (r *RedLock) sleep(ctx context.Context, timer *time.Timer, ws []*pubsub.Waiter, listen []int, consumed []bool) error {
	cs := make([]<-chan struct{}, 5) // a nil channel never fires
	ch := func(i int) <-chan struct{} {
		if ws[i] == nil {
			return nil
		}
		return ws[i].C()
	}
	idx := listen
	if idx == nil {
		idx = make([]int, len(ws))
		for i := range idx {
			idx[i] = i
		}
	}
	if len(idx) <= len(cs) {
		// A few watchers: a select over them costs less than reflect.Select.
		at := [5]int{-1, -1, -1, -1, -1}
		for k, i := range idx {
			cs[k], at[k] = ch(i), i
		}
		woken := -1
		select {
		case <-cs[0]:
			woken = at[0]
		case <-cs[1]:
			woken = at[1]
		case <-cs[2]:
			woken = at[2]
		case <-cs[3]:
			woken = at[3]
		case <-cs[4]:
			woken = at[4]
		case <-timer.C:
		case <-ctx.Done():
			return errorf("red lock %q: %w", r.name, ctx.Err())
		}
		if woken >= 0 {
			consumed[woken] = true
		}
		return nil
	}
	cases := make([]reflect.SelectCase, 0, len(idx)+2)
	for _, i := range idx {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch(i))})
	}
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	chosen, _, _ := reflect.Select(cases)
	switch {
	case chosen == len(cases)-1:
		return errorf("red lock %q: %w", r.name, ctx.Err())
	case chosen < len(idx):
		consumed[idx[chosen]] = true
	}
	return nil
}

// giveBack's failure modes: what becomes of an instance hold whose give-back failed.
type giveBackFail int

const (
	// abandonOne: nothing counts it (a failed re-entry round, an Unlock that is not the
	// owner's last): it becomes an orphan of the instance's tenure (hold.abandon), given
	// back with its last hold.
	abandonOne giveBackFail = iota
	// abandonAll: nothing counts any hold of the owner on the instance (a failed fresh
	// round, the last Unlock): they are no longer renewed and expire (hold.abandonAll).
	abandonAll
)

// giveBack gives back one hold on each instance in idx (times[i] holds when times is
// given, see giveBackAll), in parallel, on ctx's values without its cancellation. It
// returns as soon as a majority of the instances gave their holds back, or every instance
// answered, or, once a majority answered, one per-instance timeout more has passed, or,
// when caller (an acquire's ctx; nil for Unlock) ends, returnGrace more; the rest go on in
// the background, each within its Client's cleanup timeout and ended by its Close (counted
// for it), and a give-back that fails there is treated as fail says. It returns each
// instance's error (nil: given back), and which answered in time.
func (r *RedLock) giveBack(ctx, caller context.Context, idx []int, times []int, fail giveBackFail) ([]error, []bool) {
	errs := make([]error, len(r.insts))
	answered := make([]bool, len(r.insts))
	if len(idx) == 0 {
		return errs, answered
	}
	ctx = context.WithoutCancel(ctx)
	type done struct {
		i   int
		err error
	}
	ch := make(chan done, len(idx)) // never blocks a sender: the rest go on after the return
	for _, i := range idx {
		n := 1
		if times != nil {
			n = times[i]
		}
		m := r.insts[i]
		r.inflight.Add(1)
		m.c.spare(func() {
			defer r.inflight.Add(-1)
			var err error
			for k := 0; k < n; k++ {
				more, e := m.giveBackInst(ctx, fail)
				if err == nil {
					err = e
				}
				// One that fails is not given back: let it expire. The give-back of a hold
				// lost on this Client reports the loss (ErrNotHeld) and gives back one hold
				// that Redis may still count (a renewal that reached it late): the next go
				// on while this Client counts any (more, decided under the hold's operation
				// lock: read after it, the owner's next grant there could be counted and
				// given back), else its lost count would stay and refuse the owner's next
				// acquires on the instance.
				if e != nil && !more {
					break
				}
			}
			ch <- done{i, err}
		})
	}
	var grace, callerGrace <-chan time.Time
	var gone <-chan struct{}
	if caller != nil {
		gone = caller.Done()
	}
	ok := 0
	for k := 0; k < len(idx); k++ {
		if grace == nil && k >= r.quorum {
			t := time.NewTimer(r.instanceTimeout(redTimeoutMax * 10))
			defer t.Stop()
			grace = t.C
		}
		select {
		case d := <-ch:
			errs[d.i], answered[d.i] = d.err, true
			if d.err == nil {
				if ok++; ok >= r.quorum {
					return errs, answered
				}
			}
		case <-grace:
			return errs, answered
		case <-gone:
			// The caller has gone: wait what a Mutex would, then leave the rest to the
			// background.
			gone = nil
			t := time.NewTimer(returnGrace)
			defer t.Stop()
			callerGrace = t.C
			k--
		case <-callerGrace:
			return errs, answered
		}
	}
	return errs, answered
}

// giveBackRound gives back the grants of a round that failed (instances got), as giveBack
// does, waiting for their answers at most one per-instance timeout tmo (then returnGrace
// more, as when the caller's ctx ends): an instance that granted and then went down or
// silent does not answer its give-back until it comes back or its Client's cleanup timeout
// ends, and the caller's next round need not wait for it (its attempt on that instance
// waits for the give-back, as any request of the owner there does).
func (r *RedLock) giveBackRound(ctx context.Context, got []int, fail giveBackFail, tmo time.Duration) {
	bound, cancel := context.WithTimeout(ctx, tmo)
	defer cancel()
	r.giveBack(ctx, bound, got, nil, fail)
}

// giveBackAll gives back every hold rh counts on every instance and forgets them (the
// owner's last Unlock, or a fresh start after a fixed lease ran out). It returns the
// instances it gave back (the counts taken under rh.mu, after which no late grant is
// adopted), and giveBack's results.
func (r *RedLock) giveBackAll(ctx context.Context, rh *redHold) ([]int, []error, []bool) {
	rh.mu.Lock()
	times := slices.Clone(rh.n)
	rh.releasing = true // a late grant is not adopted now: it would not be given back
	rh.mu.Unlock()
	var idx []int
	for i, n := range times {
		if n > 0 {
			idx = append(idx, i)
		}
	}
	errs, answered := r.giveBack(ctx, nil, idx, times, abandonAll)
	rh.reset()
	return idx, errs, answered
}

// Unlock gives back one hold of the caller's owner; when it gives back the last, the lock
// is released on every instance (in parallel) and one waiter of each instance is woken.
// It works on a ctx that has ended (it uses ctx's values, bounded by each Client's cleanup
// timeout) and returns as soon as a majority of the instances gave the hold back, or every
// instance answered, or a majority answered and one per-instance timeout more has passed.
// The other instances' give-backs go on in the background, each within its Client's
// cleanup timeout (a Client's Close ends them). One of the last hold that fails there is
// abandoned: that instance's hold is no longer renewed and expires with its lease. One of
// another hold that fails stays with the instance's other holds: renewed with them, and
// given back with the last. A grant that reaches an acquire's round after the owner's last
// Unlock began is given back, not adopted. An Unlock whose give-backs went out has given
// the hold back whatever it returns (cases 1 and 2 below): do not call Unlock again for it.
//
// Unlock of the last hold returns nil when the owner held the lock and a majority of the
// instances gave it back (instances lost in a minority, and those still answering, are not
// an error: the lock is free on a majority, so another owner can take it); Unlock of
// another hold returns nil when the instances that counted more than one hold (or a
// majority of them) gave one back or answered that they lost the lock (a minority's loss
// leaves the lock held on a majority); otherwise:
//  1. [ErrNotHeld] when the owner holds no hold (joined with the loss when the lock was
//     lost; an error wrapping [ErrLeaseExpired] after a fixed lease ran its course), or
//     when the give-backs showed it lost: enough instances answered, too few gave it back
//     ("given back by k of N");
//  2. the instances' errors, joined, when fewer than a majority answered (a give-back
//     whose outcome is unknown, [ErrUnknownOutcome], is no answer);
//  3. [ErrClosed] when a Client's Close ended the hold, or the owner holds none and fewer
//     than a majority of the Clients are open;
//  4. [ErrInvalid] for an invalid handle or owner.
//
// The end of a hold that was lost, ran to the end of its fixed lease or was ended by Close
// is reported by the owner's next Unlock (as case 1 or 3), until one of the Clients is
// closed: the RedLock then forgets the hold (as a Client forgets its Mutex holds at Close),
// and Unlock reports ErrClosed, or ErrNotHeld while a majority of the Clients are open.
func (r *RedLock) Unlock(ctx context.Context) (err error) {
	if done := r.observeUnlock(ctx); done != nil {
		defer func() { done(err) }()
	}
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return err
	}
	rh := r.refHold(owner)
	defer unrefRed(rh)
	// The cleanup bound of an open Client: a closed one's has ended.
	c := r.insts[0].c
	for _, m := range r.insts {
		if !m.c.isClosed() {
			c = m.c
			break
		}
	}
	cctx, cancel := c.cleanupCtx(ctx)
	defer cancel()
	if err := rh.lockOp(cctx); err != nil {
		return errorf("unlock red lock %q: %w", r.name, context.Cause(cctx))
	}
	defer rh.unlockOp()
	rh.mu.Lock()
	count, ended := rh.count, rh.ended
	rh.mu.Unlock()
	if count == 0 {
		open := 0
		for _, c := range rh.cs {
			if !c.isClosed() {
				open++
			}
		}
		if open < r.quorum {
			return errorf("unlock red lock %q: %w", r.name, ErrClosed)
		}
		return errorf("unlock red lock %q: %w", r.name, ErrNotHeld)
	}
	var errs []error
	var answered []bool
	var idx []int
	if count > 1 {
		rh.mu.Lock()
		// One hold back on every instance that counts more than one: each keeps one until
		// the last Unlock. (An instance may count fewer than count: it missed a re-entry,
		// or its late grant of one is still to be adopted.) Each is uncounted now, before
		// its give-back is answered: the give-back of a slow instance goes on after the
		// return, and the owner's next Unlock, counting it still, would give it back again,
		// releasing that instance's last hold while the owner holds the lock (and the last
		// Unlock would find one hold too few: ErrNotHeld). A give-back that fails leaves the
		// hold to the instance's tenure as an orphan (abandonOne): renewed with it and given
		// back with its last hold.
		for i, n := range rh.n {
			if n > 1 {
				idx = append(idx, i)
				rh.n[i]--
			}
		}
		rh.mu.Unlock()
		errs, answered = r.giveBack(ctx, nil, idx, nil, abandonOne)
		rh.mu.Lock()
		rh.count--
		if ended == nil {
			// A loss of the majority that the give-backs found (ErrNotHeld there, counted
			// as given back below) is reported now, as a Mutex's Unlock does.
			ended = rh.ended
		}
		rh.mu.Unlock()
	} else {
		// The instances are those giveBackAll took: one adopted since the count above is
		// given back too, and counted.
		idx, errs, answered = r.giveBackAll(ctx, rh)
	}
	switch {
	case ended != nil && errors.Is(ended, ErrLeaseExpired):
		return errorf("unlock red lock %q: %w", r.name, ErrLeaseExpired)
	case ended != nil && errors.Is(ended, ErrClosed):
		return errorf("unlock red lock %q: %w", r.name, ErrClosed)
	case ended != nil:
		return errorf("unlock red lock %q: %w (%w)", r.name, ErrNotHeld, ended)
	}
	// The last hold: a majority must give it back. Another: the instances that counted more
	// than one, or a majority of them; one whose hold was lost there (ErrNotHeld) has
	// nothing of the owner's left to give back: instances lost in a minority are not an
	// error (a lost majority ended the hold, reported above or by the next call).
	need := r.quorum
	if count > 1 {
		need = min(need, len(idx))
	}
	ok, heard := 0, 0
	var failed []error
	for _, i := range idx {
		switch {
		case !answered[i]:
			failed = append(failed, errorf("instance %d: no answer yet", i))
			continue
		case errors.Is(errs[i], ErrUnknownOutcome):
			// Not an answer: the give-back may or may not have been applied.
			failed = append(failed, errs[i])
			continue
		}
		heard++
		if errs[i] == nil || (count > 1 && errors.Is(errs[i], ErrNotHeld)) {
			ok++
		} else {
			failed = append(failed, errs[i])
		}
	}
	switch {
	case ok >= need:
		return nil
	case heard >= need:
		return errorf("unlock red lock %q: %w: given back by %d of %d instances (%w)", r.name, ErrNotHeld, ok, len(r.insts), errors.Join(failed...))
	}
	return errorf("unlock red lock %q: %d of %d instances answered: %w", r.name, heard, len(r.insts), errors.Join(failed...))
}

// ForceUnlock frees the lock on every instance, whoever holds it, and wakes a waiter on
// each. It reports whether any instance had a lock to free. It returns an error (the
// instances' errors joined) when fewer than a majority answered; the former holder learns
// of the loss at its next renewals.
func (r *RedLock) ForceUnlock(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	type out struct {
		ok  bool
		err error
	}
	res := make([]out, len(r.insts))
	r.each(func(i int, m *Mutex) {
		ok, err := m.ForceUnlock(ctx)
		res[i] = out{ok, err}
	})
	freed, answered := false, 0
	var errs []error
	for _, x := range res {
		if x.err != nil {
			errs = append(errs, x.err)
			continue
		}
		answered++
		freed = freed || x.ok
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

// IsLocked reports whether a majority of the instances say that some owner holds the lock.
// When too few answer to tell (fewer than a majority say locked, and the silent ones could
// make one), it returns the instances' errors joined.
func (r *RedLock) IsLocked(ctx context.Context) (bool, error) {
	if err := r.check(ctx); err != nil {
		return false, err
	}
	locked := make([]bool, len(r.insts))
	errs := make([]error, len(r.insts))
	r.each(func(i int, m *Mutex) { locked[i], errs[i] = m.IsLocked(ctx) })
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
// too few answers to tell, the instances' errors joined.
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
	errs := make([]error, len(r.insts))
	r.each(func(i int, m *Mutex) { ttls[i], errs[i] = m.TTL(ctx) })
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
// [ErrNotHeld] (or the loss) when the owner does not hold the lock.
func (r *RedLock) Token(ctx context.Context) (int64, error) {
	owner, err := r.ownerOf(ctx)
	if err != nil {
		return 0, err
	}
	rh := peekRed(r.key(owner))
	if rh == nil {
		return 0, errorf("token of red lock %q: %w", r.name, ErrNotHeld)
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if err := rh.whyLocked(); err != nil {
		return 0, errorf("token of red lock %q: %w", r.name, err)
	}
	return rh.token, nil
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
	rh := peekRed(r.key(owner))
	if rh == nil {
		return ErrNotHeld
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	return rh.whyLocked()
}

// Done returns a channel closed when the caller's owner's current hold ends: released by
// its last Unlock, lost (fewer than a majority of the instances still hold it), run to the
// end of a fixed lease, or ended by a Client's Close. When the owner holds no hold (or the
// handle is invalid), the channel is already closed. [RedLock.Err] tells why.
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
	if rh.count == 0 || rh.ended != nil {
		return closedCh
	}
	if rh.done == nil {
		rh.done = make(chan struct{})
	}
	return rh.done
}

// HoldContext returns a copy of ctx that is also cancelled when the caller's owner's current
// hold ends; [context.Cause] then tells why: an error wrapping [ErrLockLost] (a majority
// lost), [ErrLeaseExpired], [ErrNotHeld] (released by Unlock) or [ErrClosed]. When the owner
// holds no hold, it is already cancelled with the reason [RedLock.Err] gives. Run the
// guarded work under it; call cancel when done.
func (r *RedLock) HoldContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	hctx, cancel := context.WithCancelCause(ctx)
	owner, err := r.ownerOf(ctx)
	var rh *redHold
	if err == nil {
		if rh = peekRed(r.key(owner)); rh == nil {
			err = ErrNotHeld
		}
	}
	if err != nil {
		cancel(err)
		return hctx, func() { cancel(context.Canceled) }
	}
	rh.mu.Lock()
	if why := rh.whyLocked(); why != nil {
		rh.mu.Unlock()
		cancel(why)
		return hctx, func() { cancel(context.Canceled) }
	}
	f := func(cause error) { cancel(cause) }
	key := &f
	rh.subs[key] = struct{}{}
	rh.mu.Unlock()
	return hctx, func() {
		rh.mu.Lock()
		delete(rh.subs, key)
		rh.mu.Unlock()
		cancel(context.Canceled)
	}
}

// key names the caller's owner's hold of this lock over these Clients.
func (r *RedLock) key(owner string) string {
	return r.name + "\x00" + owner + "\x00" + r.set
}

// redProbeTTL is how long the probe key of the duplicate-server check lives.
const redProbeTTL = 10 * time.Second

// probeKey is the key of c's probe (RedLock.verify), under c's key prefix: its ACL rule
// grants it. No lock of any kind uses the suffix ":probe".
func (c *Client) probeKey() string {
	return keysFor(c.opts.prefix, "redlock-probe:"+c.id).lock + ":probe"
}

// verify checks, once for every set of Clients (the result is kept by the set's first
// Client), that no two of the Clients reach the same server, with commands ACLRule grants:
// each instance writes its Client's id under a probe key of its own (SET PX redProbeTTL,
// its key prefix), then each reads the other instances' probe keys (GET); a key found on
// another instance's server means that both Clients reach one server (or servers that
// replicate each other), and the handle is invalid. Each step is bounded by tmo; a server
// that does not answer leaves the check incomplete, and the next acquire runs it again. A
// pair that cannot be compared is not: an instance whose write is refused, a read refused
// (an ACL user of one prefix cannot read another prefix's key: two Clients with different
// key prefixes under ACL rules are not compared).
func (r *RedLock) verify(ctx context.Context, tmo time.Duration) error {
	if r.verified.Load() {
		return nil
	}
	first := r.insts[0].c
	if v, ok := first.redChecked.Load(r.set); ok {
		r.verified.Store(true)
		if err, _ := v.(error); err != nil {
			r.bad.CompareAndSwap(nil, &err)
			return err
		}
		return nil
	}
	n := len(r.insts)
	const (
		unknown = iota // no answer: the check is incomplete
		wrote
		refused // a reply that refuses: not compared
	)
	state := make([]int, n)
	r.each(func(i int, m *Mutex) {
		c := m.c
		ictx, cancel := context.WithTimeout(ctx, tmo)
		defer cancel()
		err := c.rc.Do(ictx, c.rc.B().Set().Key(c.probeKey()).Value(c.id).PxMilliseconds(redProbeTTL.Milliseconds()).Build()).Error()
		switch _, isReply := rueidis.IsRedisErr(err); {
		case err == nil:
			state[i] = wrote
		case isReply:
			state[i] = refused
		}
	})
	complete := !slices.Contains(state, unknown)
	var found [][2]int // pairs (writer, reader) on one server
	var mu sync.Mutex
	r.each(func(j int, m *Mutex) {
		if state[j] == unknown {
			return
		}
		c := m.c
		var who []int
		var cmds rueidis.Commands
		for i, o := range r.insts {
			if i != j && state[i] == wrote {
				who = append(who, i)
				cmds = append(cmds, c.rc.B().Get().Key(o.c.probeKey()).Build())
			}
		}
		if len(cmds) == 0 {
			return
		}
		ictx, cancel := context.WithTimeout(ctx, tmo)
		defer cancel()
		for k, res := range c.rc.DoMulti(ictx, cmds...) {
			v, err := res.ToString()
			_, isReply := rueidis.IsRedisErr(err)
			switch {
			case err == nil && v == r.insts[who[k]].c.id:
				mu.Lock()
				found = append(found, [2]int{who[k], j})
				mu.Unlock()
			case err == nil, rueidis.IsRedisNil(err), isReply:
				// another value, none, or refused: not the same server, or not compared
			default:
				mu.Lock()
				complete = false // no answer: asked again by the next acquire
				mu.Unlock()
			}
		}
	})
	if len(found) > 0 {
		slices.SortFunc(found, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
		i, j := found[0][0], found[0][1]
		err := invalid("red lock %q: two of its Clients (%d and %d, by Client id) reach the same server (Client %d's probe key was found through Client %d): a red lock wants independent masters", r.name, min(i, j), max(i, j), i, j)
		first.redChecked.Store(r.set, err)
		r.bad.CompareAndSwap(nil, &err)
		return *r.bad.Load()
	}
	if complete {
		first.redChecked.Store(r.set, nil)
		r.verified.Store(true)
	}
	return nil
}

// redHold is one owner's hold of a RedLock over one set of Clients, shared by the handles
// of that name and set (context owners).
//
// It lives in redHolds while an operation refers to it or it counts a hold, with one
// exception, as the Mutex's holds of a Client do: a hold that ended by a loss, a fixed
// lease's end or Clients' Close (ended set, count > 0) stays until the owner's Unlock has
// reported the end, or until one of its Clients is closed, whichever comes first (the
// Mutex's holds go with their Client's table at Close). After that, an Unlock finds no hold:
// ErrNotHeld, or ErrClosed when fewer than a majority of the Clients are open.
type redHold struct {
	key  string
	cs   []*Client // the instances' Clients, in the RedLock's order
	refs int       // guarded by redHolds.mu
	op   chan struct{}

	mu      sync.Mutex
	count   int    // the owner's RedLock holds
	n       []int  // holds taken on each instance and not given back
	watched []bool // the instance's tenure is followed and has not ended
	stops   []func()
	live    int   // instances watched
	gen     int   // tenure number: callbacks of an earlier tenure are ignored
	token   int64 // the largest of the granting majority's tokens
	ended   error // why the current tenure ended; nil while it lasts (or when none)
	done    chan struct{}
	subs    map[*func(error)]struct{}
	quorum  int
	closing []func() bool // stop the Close watches of an ended hold (see watchClose)
	next    *redObs       // the report of the tenure the acquire under way may begin
	obs     *redObs       // the report of the current tenure, until its HoldEnd; nil: none
	// releasing: the owner's last Unlock has taken the counts to give back, and no late
	// grant is adopted any more (see adopt)
	releasing bool
}

var redHolds = struct {
	mu sync.Mutex
	m  map[string]*redHold
}{m: make(map[string]*redHold)}

// refHold returns the hold of owner on r, creating it, and counts an operation on it.
func (r *RedLock) refHold(owner string) *redHold {
	key := r.key(owner)
	redHolds.mu.Lock()
	defer redHolds.mu.Unlock()
	rh := redHolds.m[key]
	if rh == nil {
		n := len(r.insts)
		cs := make([]*Client, n)
		for i, m := range r.insts {
			cs[i] = m.c
		}
		rh = &redHold{key: key, cs: cs, op: make(chan struct{}, 1), n: make([]int, n), watched: make([]bool, n),
			stops: make([]func(), n), subs: make(map[*func(error)]struct{})}
		redHolds.m[key] = rh
	}
	rh.refs++
	return rh
}

func peekRed(key string) *redHold {
	redHolds.mu.Lock()
	defer redHolds.mu.Unlock()
	return redHolds.m[key]
}

func unrefRed(rh *redHold) {
	redHolds.mu.Lock()
	defer redHolds.mu.Unlock()
	rh.refs--
	rh.dropLocked()
}

// drop removes rh from redHolds when nothing keeps it there (see redHold).
func (rh *redHold) drop() {
	redHolds.mu.Lock()
	defer redHolds.mu.Unlock()
	rh.dropLocked()
}

// dropLocked is drop with redHolds.mu held.
func (rh *redHold) dropLocked() {
	if rh.refs > 0 || redHolds.m[rh.key] != rh {
		return
	}
	rh.mu.Lock()
	idle := rh.count == 0
	if !idle && rh.ended != nil {
		for _, c := range rh.cs {
			if c.life.Err() != nil { // closed (c.mu is not taken: see instanceEnded's callers)
				idle = true // reported by nobody now: its Clients are going
				break
			}
		}
	}
	var stops []func() bool
	if idle {
		stops, rh.closing = rh.closing, nil
	}
	rh.mu.Unlock()
	if idle {
		delete(redHolds.m, rh.key)
		for _, stop := range stops {
			stop()
		}
	}
}

// watchClose makes the Close of any of rh's Clients drop rh, which ended while it still
// counts holds (kept for the owner's Unlock to report the end). rh.mu must be held.
func (rh *redHold) watchClose() {
	if rh.closing != nil {
		return
	}
	for _, c := range rh.cs {
		rh.closing = append(rh.closing, context.AfterFunc(c.life, rh.drop))
	}
}

func (rh *redHold) lockOp(ctx context.Context) error {
	select {
	case rh.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (rh *redHold) unlockOp() { <-rh.op }

// whyLocked is nil while the hold lasts, else why there is none. rh.mu must be held.
func (rh *redHold) whyLocked() error {
	switch {
	case rh.count == 0:
		return ErrNotHeld
	case rh.ended != nil:
		return rh.ended
	}
	return nil
}

// begin starts a tenure granted by the instances got: it follows each instance's tenure
// and ends when fewer than a majority are left. It returns the tenure's number, and reports
// false (and starts nothing) when the instances' tenures ended before it could follow a
// majority of them.
func (rh *redHold) begin(r *RedLock, owner string, got []int) (int, bool) {
	tenures := make([]*tenure, len(r.insts))
	var token int64
	for _, i := range got {
		if h := r.insts[i].instHold(owner); h != nil {
			if t, _ := h.snapshot(); t != nil {
				tenures[i] = t
				token = max(token, t.token)
			}
		}
	}
	rh.mu.Lock()
	rh.gen++
	gen := rh.gen
	rh.count, rh.token, rh.ended, rh.done, rh.quorum = 1, token, nil, nil, r.quorum
	rh.live, rh.releasing = 0, false
	for _, i := range got {
		rh.n[i] = 1
		if tenures[i] != nil {
			rh.watched[i] = true
			rh.live++
		}
	}
	rh.mu.Unlock()
	for i, t := range tenures {
		if t != nil {
			rh.follow(gen, i, t)
		}
	}
	rh.mu.Lock()
	ok := rh.gen == gen && rh.ended == nil && rh.live >= rh.quorum
	ro := rh.observeLocked(ok, token)
	rh.mu.Unlock()
	ro.watchClose(rh)
	if !ok {
		// Lost before it began (or fewer than a majority of the grants could be
		// followed): the caller gives the instances back.
		rh.reset()
	}
	return gen, ok
}

// adopt adds instance i's grant, whose reply reached the round of tenure gen after the
// round was decided, to the hold: counted (n), followed (its tenure's end counts as an
// instance lost), renewed by its Client's watchdog as the others are, and given back by
// the owner's Unlock. reentry says the grant is a re-entry's: the instance is followed
// already. It reports false, and changes nothing, when the hold is no longer current: the
// tenure ended (lost, run out, closed) or is being given back by the owner's last Unlock,
// another tenure began, the instance's own hold ended, or (re-entry) the instance is no
// longer followed; the caller gives the grant back. rh.mu orders it with Unlock, the
// instances' ends and Close: an instance adopted before the last Unlock's snapshot of the
// counts is given back by that Unlock, one after it is refused.
func (rh *redHold) adopt(r *RedLock, owner string, gen, i int, reentry bool) bool {
	h := r.insts[i].instHold(owner)
	if h == nil {
		return false
	}
	t, _ := h.snapshot()
	if t == nil {
		return false
	}
	rh.mu.Lock()
	if rh.gen != gen || rh.count == 0 || rh.ended != nil || rh.releasing || rh.watched[i] != reentry || (!reentry && rh.n[i] != 0) {
		rh.mu.Unlock()
		return false
	}
	rh.n[i]++
	if reentry {
		rh.mu.Unlock()
		return true
	}
	rh.watched[i] = true
	rh.live++
	rh.mu.Unlock()
	rh.follow(gen, i, t)
	return true
}

// follow subscribes to the end of instance i's tenure t for tenure gen of the hold (its end
// counts as an instance lost), and keeps the subscription's stop while the instance is
// still followed in that tenure, else stops it at once. rh.mu must not be held.
func (rh *redHold) follow(gen, i int, t *tenure) {
	stop := t.subscribe(func(cause error) { rh.instanceEnded(gen, i, cause) })
	rh.mu.Lock()
	if rh.gen == gen && rh.watched[i] {
		rh.stops[i] = stop
		rh.mu.Unlock()
	} else {
		rh.mu.Unlock()
		stop()
	}
}

// instanceEnded records the end of instance i's tenure (gen's).
func (rh *redHold) instanceEnded(gen, i int, cause error) {
	rh.mu.Lock()
	if gen != rh.gen || !rh.watched[i] {
		rh.mu.Unlock()
		return
	}
	rh.watched[i] = false
	rh.stops[i] = nil
	rh.live--
	if rh.live >= rh.quorum || rh.ended != nil {
		rh.mu.Unlock()
		return
	}
	released := false
	switch {
	case errors.Is(cause, ErrLeaseExpired), errors.Is(cause, ErrClosed):
	case errors.Is(cause, ErrLockLost):
		cause = errorf("%w: fewer than a majority of the instances hold it (%w)", ErrLockLost, cause)
	case errors.Is(cause, ErrNotHeld):
		released = true // by the owner's Unlock, which resets rh
	default:
		cause = errorf("%w: fewer than a majority of the instances hold it (%w)", ErrLockLost, cause)
	}
	rh.ended = cause
	if released {
		rh.finishLocked()
		return
	}
	rh.watchClose()
	rh.finishLocked()
	rh.drop() // a Client already closed: nobody will report the end
}

// finishLocked stops following the instances, cancels the tenure's contexts with rh.ended
// and then closes its channel, as a Mutex's tenure does (tenure.finish): a caller that
// learns of the end by a closed Done finds its HoldContext already cancelled. (Done was once
// closed first.) Done and HoldContext asked meanwhile see rh.ended: a closed channel, a
// cancelled context. rh.mu must be held; it is released.
func (rh *redHold) finishLocked() {
	cause := rh.ended
	ro := rh.obs
	rh.obs = nil
	done := rh.done
	rh.done = nil
	subs := rh.subs
	rh.subs = make(map[*func(error)]struct{})
	var stops []func()
	for i, s := range rh.stops {
		if s != nil {
			stops = append(stops, s)
			rh.stops[i] = nil
		}
		rh.watched[i] = false
	}
	rh.live = 0
	rh.mu.Unlock()
	for _, s := range stops {
		s()
	}
	for f := range subs {
		(*f)(cause)
	}
	if done != nil {
		close(done)
	}
	ro.ended(cause)
}

// reset forgets the hold: the owner's last Unlock gave every instance back.
func (rh *redHold) reset() {
	rh.mu.Lock()
	rh.gen++
	if rh.count > 0 && rh.ended == nil {
		rh.ended = ErrNotHeld
		rh.finishLocked()
		rh.mu.Lock()
	}
	rh.count, rh.token, rh.ended, rh.done, rh.releasing = 0, 0, nil, nil, false
	clear(rh.n)
	stops := rh.closing
	rh.closing = nil
	rh.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// validity is the time until fewer than a majority of the instances surely hold the
// owner's lock, by each instance's conservative deadline; ok false when not held.
func (rh *redHold) validity(r *RedLock, owner string) (time.Duration, bool) {
	rh.mu.Lock()
	watched := slices.Clone(rh.watched)
	held := rh.count > 0 && rh.ended == nil
	rh.mu.Unlock()
	if !held {
		return 0, false
	}
	var ends []time.Time
	for i, w := range watched {
		if !w {
			continue
		}
		if h := r.insts[i].instHold(owner); h != nil {
			if t, _ := h.snapshot(); t != nil {
				if d := h.deadline(t); !d.IsZero() {
					ends = append(ends, d)
				}
			}
		}
	}
	if len(ends) < r.quorum {
		return 0, true
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return b.Compare(a) })
	return max(time.Until(ends[r.quorum-1]), 0), true
}
