package rlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relock-go/relock/watchdog"
)

type holdKey struct{ lock, owner string }

// tableKey names a lock in the Client's tables (holds, hand-off candidates): its key, and the
// variant's suffix where two variants share the key (a read-write lock's two sides).
func tableKey(keys lockKeys, v *variant) string { return keys.lock + v.holdSuffix }

// hold is this Client's view of one owner's holds on one lock. It lives in Client.holds
// while an operation on it is running or it holds at least one hold.
//
// Its states, and the functions of this file that are its only transitions (docs/DESIGN.md
// section 4 draws them):
//   - Idle (cur nil, count 0; expired after a fixed lease ran its course): granted begins a
//     tenure -> Held.
//   - Held (cur set, count >= 1, orphans >= 0): granted re-enters (count++); released gives
//     one back (-> Idle at count 0); abandon lets one go (an orphan while others remain, else
//     -> Idle); abandonAll -> Idle; end (Client.Close) ends the tenure; onLost -> Idle (a fixed lease's end: expired) or
//     -> Lost (a renewal found the hold gone, or its deadline passed unconfirmed), as granted
//     does when Redis grants afresh what the Client counts held.
//   - Lost (cur nil, lost set, count > 0): every acquire is refused; released and abandon
//     count the holds down -> Idle at 0.
type hold struct {
	c     *Client
	keys  lockKeys
	v     *variant
	name  string // the lock's name, for events
	owner string
	refs  int // operations in progress; guarded by c.mu

	// op serializes this owner's scripts on this lock and the recording of their replies, so
	// that the Client records them in the order Redis applied them (request ids stay exact,
	// counts match). It is a one-slot semaphore rather than a sync.Mutex so that a wait for
	// it ends with the caller's ctx, and so that it can be handed over: a release that passes
	// the lock to a parked waiter takes the waiter's op and the waiter gives it back once it
	// has recorded the grant; an acquire left to finish in the background keeps it until it
	// has.
	op chan struct{}

	mu    sync.Mutex // guards the fields below
	count int        // holds taken through this Client and not given back
	lost  error      // non-nil: the tenure was lost while count > 0; Lock refuses until count is 0
	cur   *tenure    // the current tenure, nil when not held
	// expired: the last tenure ran to the end of its fixed lease. Err and Unlock report
	// ErrLeaseExpired until the owner's next grant through this Client, or until as many
	// releases through it as that tenure had holds (endedHolds): each such Unlock is of one of
	// them, and is conditional on what Redis counts of this Client's (release's keep), so that
	// none takes a hold of another Client's. The hold may leave the table meanwhile: the
	// Client keeps a context owner's (Client.ended, whichever handle asks next), and a
	// handle keeps its own owner's (Mutex.spare, which no other owner's hold takes).
	expired bool
	// endedHolds: while expired, the holds of the ended tenure that no release through this
	// Client has been reported for yet (at least 1).
	endedHolds int
	// orphans are holds that Redis may count for the owner within the current tenure and
	// that are nobody's: holds whose give-back failed or got no answer (abandon). They ride
	// with the tenure and are given back, never beyond this Client's own count in Redis, at
	// its next confirmed renewal (settleOrphans), its next grant or its last hold.
	orphans int
	// handoff is the sequence number under which a release of this Client passes the lock to
	// a waiter of this owner (the successor's number, release.lua): the release that claimed
	// the waiter writes it before it sends, the waiter reads it once the claim's outcome is
	// ready (candidate.ready); both under h.op, which the claim took for the waiter. A
	// hand-off whose outcome stays unknown is an acquire sent under it (Mutex.handedOff).
	handoff string
	// endEv is the HoldEnd event of a tenure endLocked ended (when ending), told by unlockMu
	// once h.mu is unlocked (only with an observer). A value, not a pointer: no allocation.
	endEv  HoldEndInfo
	ending bool
}

// tenure is one continuous possession of a lock, from a fresh grant to the release of the
// last hold, a loss, or Close.
type tenure struct {
	smu   sync.Mutex
	done  chan struct{}             // made on first need (doneCh), closed when the tenure ends
	subs  map[*func(error)]struct{} // HoldContext cancels, called as the tenure ends
	ended error                     // why it ended; nil while it lasts
	told  bool                      // the cancels of subs have run: Done may show the end
	token int64
	// fast: the fast form of the grant that began the tenure ('~<owner> <seq>', fast.go),
	// while Redis holds the lock in it: a re-entry sends the token to convert it, the last
	// release goes by fast_release.lua, and the renewals and release replays name it. ""
	// otherwise.
	// Written under h.op and h.mu; read under either.
	fast  string
	lease *watchdog.Lease
	first watchdog.Lease // the fresh grant's lease: lease points here until a re-entry extends it
	// relSC is memory for the send context of one give-back of the tenure (sendRelease), taken
	// at most once (relSCTaken): a context rueidis derived from it may still read it after
	// the answer, so it is never written again.
	relSC      sendCtx
	relSCTaken atomic.Bool
	renew      bool
	// streak: the direct hand-offs in a row that led to the tenure (handoff.go), 0 for one
	// that began otherwise. Written under h.op and h.mu; read under either.
	streak int
	// releasing: the give-back of the tenure's last hold is in flight (Mutex.release). A
	// renewal that finds the hold gone meanwhile may have met that very give-back: the loss
	// waits (deferred) for the give-back's answer, which ends the tenure either way.
	releasing bool
	deferred  error     // the renewal's loss, told only if the give-back fails (releaseFailed)
	end       time.Time // conservative end of the lease as last granted (fixed leases)
	// start is when the grant's reply came, on the observation clock (observer.now); set
	// only when the Client has an observer, for HoldEnd's Held. -1: a tenure no caller was
	// told of (hideTenure), whose end is not reported.
	start time.Duration
}

// lockOp takes h.op, waiting at most until ctx ends.
func (h *hold) lockOp(ctx context.Context) error {
	select {
	case h.op <- struct{}{}:
		return nil
	default:
	}
	select {
	case h.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// errWaitOver: an acquire's attempt did not begin, the wait bound having run out while it
// waited for h.op (lockOpUntil). Nothing was sent; the wait ends as at its bound.
var errWaitOver = errors.New("rlock: the wait bound ran out before the attempt's turn")

// lockOpUntil is lockOp that also gives up at until (zero: no bound), with errWaitOver. A
// free h.op is taken even past until: the last attempt at the bound still goes out.
func (h *hold) lockOpUntil(ctx context.Context, until time.Time) error {
	select {
	case h.op <- struct{}{}:
		return nil
	default:
	}
	if until.IsZero() {
		return h.lockOp(ctx)
	}
	d := time.Until(until)
	if d <= 0 {
		return errWaitOver
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case h.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errWaitOver
	}
}

// tryLockOp takes h.op if it is free.
func (h *hold) tryLockOp() bool {
	select {
	case h.op <- struct{}{}:
		return true
	default:
		return false
	}
}

// unlockOp gives h.op back.
func (h *hold) unlockOp() { <-h.op }

// key is h's key in the Client's table of holds.
func (h *hold) key() holdKey { return holdKey{tableKey(h.keys, h.v), h.owner} }

// ref returns the hold of m's lock for owner, creating it, and counts an operation on it.
// A hold that m's own owner used before and that left the table while idle is put back
// rather than made anew (Mutex.spare): an idle hold that left the table is in the state of
// one that stayed, so whatever still points at it (a late watchdog callback) sees the same
// thing.
func (c *Client) ref(m *Mutex, owner string) (*hold, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	k := holdKey{tableKey(m.keys, m.v), owner}
	h := c.holds[k]
	if h == nil {
		if e := c.takeEndedLocked(k); e != nil && e.v == m.v {
			h = e
		} else if e != nil {
			// Another kind of the same name (Mutex, FairMutex and SpinMutex share k): a hold
			// of m's own variant (its scripts, its events) that knows how the last tenure
			// ended.
			e.mu.Lock()
			ended := e.endedHolds
			e.expired, e.endedHolds = false, 0 // moved: a handle that keeps e (spare) forgets it
			e.mu.Unlock()
			h = &hold{c: c, keys: m.keys, v: m.v, name: m.name, owner: owner, op: make(chan struct{}, 1),
				expired: true, endedHolds: ended}
		} else if sp := m.spare; sp != nil && sp.owner == owner && sp.refs == 0 {
			h = sp
		} else {
			h = &hold{c: c, keys: m.keys, v: m.v, name: m.name, owner: owner, op: make(chan struct{}, 1)}
		}
		c.holds[k] = h
	}
	if owner == m.owner {
		// The handle's own owner only: the spare is all that remembers how its last tenure
		// ended once the hold left the table (forgetLocked keeps context owners' in
		// Client.ended), so a call for a context owner through the same handle must not
		// take its place (TestLifetimes_ownOwnersLeaseEndOutlivesTheHandlesSpare).
		m.spare = h
	}
	h.refs++
	return h, nil
}

// reref counts one more operation on h, which the caller already counts one on (work that
// goes on in the background after the caller returned).
func (c *Client) reref(h *hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs++
}

// rerefIfListed counts one more operation on h if h is still the table's entry for its
// owner and lock, and reports whether it did. Work that must be ordered with the owner's
// other calls through this Client (h.op) uses it when it holds no reference of its own: an
// h already dropped from the table is not the one the owner's next call takes.
func (c *Client) rerefIfListed(h *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[h.key()] != h {
		return false
	}
	h.refs++
	return true
}

// peek returns the hold of (keys, owner) if there is one, without counting.
func (c *Client) peek(keys lockKeys, v *variant, owner string) *hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[holdKey{tableKey(keys, v), owner}]
}

// peekFor is peek for m's lock, falling back to the hold m used last when it is owner's and
// has left the table: it still knows how its last tenure ended (hold.expired).
func (c *Client) peekFor(m *Mutex, owner string) *hold {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := holdKey{tableKey(m.keys, m.v), owner}
	if h := c.holds[k]; h != nil {
		return h
	}
	if e := c.ended[k]; e != nil {
		return e.Value.(*hold)
	}
	if sp := m.spare; sp != nil && sp.owner == owner {
		return sp
	}
	return nil
}

// unref ends an operation on h and forgets h once nothing refers to it.
func (c *Client) unref(h *hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.refs--
	c.forgetLocked(h)
}

// forget drops h from the table if no operation refers to it and it holds nothing: a hold
// that ended by itself (a fixed lease that ran out) leaves the table without waiting for
// the owner's next call.
func (c *Client) forget(h *hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(h)
}

func (c *Client) forgetLocked(h *hold) {
	if h.refs > 0 {
		return
	}
	h.mu.Lock()
	idle, expired := h.count == 0 && h.cur == nil, h.expired
	h.mu.Unlock()
	k := h.key()
	if idle && c.holds[k] == h {
		delete(c.holds, k)
		// A context owner's only: a handle's own owner has no other handle to ask for it,
		// and the handle keeps it (Mutex.spare).
		if expired && isContextOwner(h.owner) {
			c.keepEndedLocked(k, h)
		}
	}
}

// endedCap bounds Client.ended: a program that lets context owners' fixed leases run out on
// many names and never Unlocks them keeps at most this many ended holds. An older one is
// forgotten, by every handle: its Unlock is told of no ended lease and gives back as an
// Unlock through a Client that took no hold does.
const endedCap = 4096

// keepEndedLocked records h, which left the table after its tenure ran to the end of its
// fixed lease, under k (Client.ended). c.mu must be held.
func (c *Client) keepEndedLocked(k holdKey, h *hold) {
	if e := c.ended[k]; e != nil {
		c.endedOrder.Remove(e)
	}
	c.ended[k] = c.endedOrder.PushBack(h)
	if c.endedOrder.Len() > endedCap {
		oe := c.endedOrder.Front()
		old := oe.Value.(*hold)
		delete(c.ended, old.key())
		c.endedOrder.Remove(oe)
		// Forgotten: a handle that still keeps it (Mutex.spare) must not report, or make
		// conditional, an end that the owner's later tenures through other handles of this
		// Client have long superseded.
		old.mu.Lock()
		old.expired, old.endedHolds = false, 0
		old.mu.Unlock()
	}
}

// takeEndedLocked removes and returns the ended hold recorded under k, or nil: it goes back
// into the table. c.mu must be held.
func (c *Client) takeEndedLocked(k holdKey) *hold {
	e := c.ended[k]
	if e == nil {
		return nil
	}
	delete(c.ended, k)
	c.endedOrder.Remove(e)
	return e.Value.(*hold)
}

// granted records a hold granted by a request sent at sent, with the lease it asked for;
// holds is the owner's hold count in Redis after the grant, mine the part of it that this
// Client's operations took and did not give back (for a handle's owner, holds; for a context
// owner, which several Clients may share, Redis counts each Client's apart: lib_seq.lua). A
// fresh grant (holds 1), or a grant into a tenure whose token is not the one this Client
// records (another Client took the lock afresh for the same context owner), while this
// Client still counts holds of the owner means the earlier tenure was lost unnoticed:
// granted then ends it as lost and returns an error wrapping ErrLockLost, recording nothing.
// So it does, whatever Redis counts, while an earlier loss still blocks re-entry (h.lost).
//
// Redis may also count more holds of this Client than it knows of (mine > count + 1): holds
// the Client stopped counting while Redis still had them (a fixed lease's holds in the
// moment between their local end, which comes early by the drift allowance, and their end
// in Redis; holds whose give-back failed or got no answer; an acquire whose outcome stayed
// unknown), which the grant has now joined to a live tenure. granted records its own hold
// and returns how many of the Client's holds Redis counts beyond it (extra), to be given
// back; holds of the same owner id taken through another Client are not among them. fresh
// reports that the grant began a tenure (else it re-entered one).
func (h *hold) granted(within *tenure, token, holds, mine int64, sent time.Time, lease time.Duration, renew bool) (fresh bool, extra int64, err error) {
	h.mu.Lock()
	defer h.unlockMu()
	if h.lost != nil {
		// The owner's tenure was reported lost after the acquire checked (attempt looks at
		// h.lost before it sends, but a loss ends a tenure without h.op: the watchdog's
		// onLost). Redis may still count the lost holds and so grant a re-entry (holds > 1);
		// recording it would start a new tenure over the lost holds, and the end of its
		// lease would then wipe their count and the loss with it. The grant is refused like
		// any acquire after a loss, and given back (grant) with the lost holds Redis still
		// counts of this Client's: the re-entry may have extended their lease there (to a
		// long fixed lease, or the watchdog's), and they are nobody's
		// (TestRefusedGrant_reentryAfterLossLeavesNoHold).
		return false, 0, h.lost
	}
	if within != nil && h.cur != within && token == within.token && errors.Is(within.endedBy(), ErrClosed) {
		// The tenure it re-entered was ended by Close meanwhile (Close ends every tenure
		// with ErrClosed, hold.end): the call ends with ErrClosed, as a fresh grant that
		// comes back after Close does (watchdog.ErrClosed, below), and the grant is left to
		// expire with its lease, as Close leaves every hold (a give-back would be refused:
		// the Client's life has ended). Taken for a fixed lease's end, it returned
		// errReentryEnded ("its fixed lease ran out", in watchdog mode too) and its futile
		// give-back was told to the Observer after Close returned
		// (TestCloseHunt_reentryInFlightAtClose).
		return false, 0, ErrClosed
	}
	if within != nil && h.cur != within && token == within.token {
		// The acquire re-entered a tenure (within) that ended here before its grant came
		// back, its fixed lease having run its course (a loss sets h.lost, above; a release
		// waits for h.op, which the acquire holds), and Redis, where that tenure lives on (the
		// drift moment, or another Client's renewals of a context owner's tenure), counted it
		// as a re-entry of it: recorded, it would start a tenure here over the one this
		// Client let go, and the caller, who counts the ended tenure's holds too, would
		// unlock one more than the Client counts. Through a Client that counts none, a
		// context owner's Unlock gives back a hold of the owner's whatever Client took it,
		// and took another Client's. It is refused, recording nothing, and given back
		// (grant). (A grant that began a tenure afresh, its token another, is that of a
		// call of its own: two goroutines sharing a handle, each unlocking its own hold.)
		// Redis counts the ended tenure's holds of this Client's with the re-entry's, and the
		// re-entry may have extended their lease (acquire.lua never shortens it): grant
		// gives back every hold Redis counts of this Client's (the Client counts none: the
		// tenure ended here, and h.op kept any other grant out), as for every refusal.
		return false, 0, errReentryEnded
	}
	if h.count > 0 && (holds == 1 || h.cur != nil && token != h.cur.token) {
		// A fresh grant, or a re-entry of another tenure (a context owner's, which another
		// Client took afresh for the same owner id after this one's was lost: its token
		// tells it), while this Client counts holds of the owner.
		cause := errorf("%w: it was gone from Redis when the owner re-entered", ErrLockLost)
		if h.cur != nil {
			h.stopLease()
			h.endLocked(cause)
		} else if h.lost == nil {
			h.lost = cause
		}
		return false, 0, cause
	}
	extra = max(0, mine-int64(h.count)-1)
	// The extra holds are given back (Mutex.grant): the tenure's orphans among them.
	h.orphans -= int(min(extra, int64(h.orphans)))
	t := h.cur
	fresh = t == nil
	if fresh {
		t = &tenure{token: token}
		h.expired, h.endedHolds = false, 0
	}
	end := sent.Add(lease - watchdog.Drift(lease))
	if !fresh && (t.renew || (!renew && !end.After(t.end))) {
		h.count++
		return false, extra, nil // the lease in force already covers this hold
	}
	// A fresh tenure, or a re-entry that extends a fixed lease or turns the watchdog on.
	var l *watchdog.Lease
	if fresh {
		l = &t.first // one allocation for the tenure and its first lease
		*l = watchdog.Lease{TTL: lease, Renew: renew, Data: h}
	} else {
		l = &watchdog.Lease{TTL: lease, Renew: renew, Data: h}
	}
	l.OnLost = leaseLost // no closure per lease: the lease's Data is h
	if err := h.c.wd.Add(l, sent); err != nil {
		if !fresh {
			// The re-entry's own lease ran out before its reply came back: the lease in
			// force still covers the hold.
			h.count++
			return false, extra, nil
		}
		// The grant came back after its lease had run out on this clock (Redis stalled),
		// or the Client is closing: it is of no use and not recorded.
		t.finish(ErrNotHeld)
		if errors.Is(err, watchdog.ErrClosed) {
			return false, 0, err
		}
		return false, 0, errorf("%w: %w", errLateGrant, err)
	}
	if t.lease != nil {
		h.c.wd.Remove(t.lease)
	}
	t.renew, t.end, t.lease = renew, end, l
	if fresh && h.c.obs != nil {
		t.start = h.c.obs.now()
	}
	h.cur = t
	h.count++
	return fresh, extra, nil
}

// errReentryEnded: a re-entry's grant came back after the tenure it re-entered ran to the end
// of its fixed lease; the caller gives it back. It wraps ErrLeaseExpired.
var errReentryEnded = errorf("%w: the tenure it re-entered ran to the end of its fixed lease before the grant came back", ErrLeaseExpired)

// errLateGrant: a grant arrived too late to be used; the caller gives it back. It wraps
// ErrLeaseExpired: the lease asked for had run out (on this Client's conservative clock)
// by the time the grant was known.
var errLateGrant = errorf("%w: the grant arrived after its lease had run out", ErrLeaseExpired)

// leaseLost is the OnLost of every hold's lease (its Data is the hold).
func leaseLost(l *watchdog.Lease, cause error) { l.Data.(*hold).onLost(l, cause) }

// onLost runs on a watchdog goroutine when lease l was lost.
func (h *hold) onLost(l *watchdog.Lease, cause error) {
	h.mu.Lock()
	if h.cur == nil || h.cur.lease != l {
		h.unlockMu()
		return
	}
	h.cur.lease = nil
	if h.cur.releasing && errors.Is(cause, watchdog.ErrGone) {
		// Redis no longer has the hold, and the give-back of its last hold is in flight: the
		// renewal may have reached Redis after the give-back freed it. The give-back's answer
		// tells (released ends the tenure, as lost if Redis had nothing to give back).
		h.cur.deferred = cause
		h.unlockMu()
		return
	}
	if !h.cur.renew && errors.Is(cause, watchdog.ErrExpired) {
		// A fixed lease ran its course: the holds are over, nothing was lost. Redis may keep
		// them a little longer (the drift allowance): a grant in that moment finds them among
		// the Client's own in Redis and gives them back (granted's extra).
		// Redis may count the tenure's orphans too (holds whose give-back got no answer:
		// abandon), which no renewal of a fixed tenure gave back (settleOrphans) and which
		// endLocked forgets: the give-back at the end asks for them with the holds.
		n, orphans := h.count, h.orphans
		h.count = 0
		h.expired, h.endedHolds = true, max(n, 1)
		h.endLocked(ErrLeaseExpired)
		h.unlockMu()
		if n+orphans > 0 && isContextOwner(h.owner) && !h.v.ownExpired {
			h.giveBackExpired(n + orphans)
		}
		h.c.forget(h)
		return
	}
	h.endLocked(errorf("%w: %w", ErrLockLost, cause))
	h.unlockMu()
}

// giveBackExpired gives back, in the background, what Redis still counts for this Client of
// n holds of a context owner whose fixed lease has just run its course here (the tenure's
// holds and its orphans). Other Clients
// of the owner may keep the tenure in Redis (their holds' renewals keep the key), and this
// Client's holds with it: re-entered into a tenure another Client renews, or joined by a
// renewed re-entry of another Client after the grant, they stayed counted, and after the
// other Clients' last Unlock the lock stayed held, by nobody, for up to their lease
// (TestSharedOwner_fixedLeaseReentryEndsInRedisToo,
// TestSharedOwner_fixedLeaseTenureJoinedByARenewedReentryEndsInRedisToo). This Client cannot
// tell (the other Client's re-entry may come after its last word from Redis), so it asks at
// every such end; where the key ended with the lease, as it does where no other Client
// shares the tenure, the release finds nothing and writes nothing. Each give-back is
// conditional (the release script's keep: the holds this Client counts when it runs, under
// h.op), so it never takes a hold that the owner took since, through this Client or another.
//
// h stays in the table until it is done, so that the owner's next call through this Client
// waits for it (h.op). It sends nothing when the owner's grant or last Unlock of the ended
// holds through this Client came first (h.expired no longer set: the Unlocks gave back what
// Redis counts of this Client's, keep 0; the grant, what Redis counts beyond its own, extra;
// after an Unlock of some of them it still sends, conditional as they were), when the Client is
// closed (Close would cut the send short: the other Clients' renewals end with them), or
// when h left the table already (a call of the owner's that ended in this moment let it go:
// its next grant or Unlock here gives back what Redis counts, as above).
func (h *hold) giveBackExpired(n int) {
	if h.c.isClosed() || !h.c.rerefIfListed(h) {
		return
	}
	h.c.background(func() {
		defer h.c.unref(h)
		wctx, cancel := h.c.cleanupCtx(context.Background())
		defer cancel()
		if err := h.lockOp(wctx); err != nil {
			return
		}
		defer h.unlockOp()
		h.mu.Lock()
		keep, settled := h.count, !h.expired
		h.mu.Unlock()
		if settled || h.c.isClosed() {
			return
		}
		// Its requests are not reported as such (a copy of the variant without obs): a Close
		// that cuts one short, as one does at once after Done in a program that lets a lease
		// run out and shuts down (a third of such runs), was told as a request of unknown
		// outcome, at Warn, though nothing is amiss: the holds expire with their lease, as
		// every hold does at Close (TestGiveBackExpired_closeDuringSendLogsNoWarning). Any
		// other failure is told as a give-back of orphans that failed.
		v := *h.v
		v.obs = ""
		m := &Mutex{c: h.c, name: h.name, keys: h.keys, v: &v}
		// The give-back has a cleanup timeout of its own, as an Unlock's after its turn.
		given, err := m.giveBackOrphans(context.Background(), h.owner, keep, int64(n))
		if err != nil && !errors.Is(err, ErrClosed) && h.v.obs != "" {
			h.c.gaveBack(h.v.obs, h.name, h.owner, int(max(given, 1)), GiveBackOrphan, err)
		}
	})
}

// abandon ends this Client's part in one hold whose give-back failed or got no answer
// (ErrUnknownOutcome): Redis may still count it, or may have applied the give-back. When the
// owner holds others through a live tenure, the hold becomes an orphan of that tenure: it is
// renewed with it and given back at its next confirmed renewal (settleOrphans), its next
// grant or its last hold, never beyond the holds Redis counts for this Client (so an orphan
// whose give-back was applied after all costs nothing, and, for a context owner, another
// Client's hold is never taken), and the owner is told nothing (its lock is not lost).
// Otherwise the tenure, if any, ends (cause ErrNotHeld: the caller that took the hold has
// gone), nothing of this Client's renews the hold any more (another Client's renewals of a
// context owner's tenure do: Mutex.Unlock), and Redis lets it expire within its lease, unless
// the owner's next grant through this Client finds it first (granted's extra) and gives it
// back.
func (h *hold) abandon() {
	h.mu.Lock()
	if h.cur != nil && h.count > 1 {
		h.count--
		h.orphans++
		h.unlockMu()
		return
	}
	if h.count > 0 {
		h.count--
	}
	if h.count == 0 {
		h.lost = nil // every hold is accounted for: the loss no longer blocks (as in released)
	}
	if h.cur != nil {
		h.stopLease()
		h.endLocked(ErrNotHeld)
	}
	h.unlockMu()
}

// unknownAcquire records an acquire of h's owner whose outcome stayed unknown (its replies
// lost within the cleanup timeout: the caller was told ErrUnknownOutcome, or had gone): Redis
// may count a hold of the owner that no caller has. While a tenure of the owner lives here,
// Redis counts that hold in the tenure's field, so it is one of the tenure's orphans, as a
// hold whose give-back failed is (abandon): given back at the next confirmed renewal
// (settleOrphans), the next grant or the last hold, never beyond what Redis counts of this
// Client's beyond the owner's own holds, so that a hold that was never granted costs nothing.
// Without a live tenure the hold, if granted, is nobody's to renew: it ends with its lease,
// unless the owner's next grant finds it first (granted's extra). Before, such a re-entry was
// renewed with the tenure, and HoldCount said one more than the owner held until its last
// Unlock (TestMutex_unknownReentryIsGivenBackAtTheNextRenewal).
func (h *hold) unknownAcquire() {
	h.mu.Lock()
	if h.cur != nil && h.count > 0 {
		h.orphans++
	}
	h.mu.Unlock()
}

// unsettled records n holds that a give-back of tenure t's orphans at a grant did not take
// (it failed, or got no answer: Redis may still count them) as t's orphans again, while t is
// current: given back at its next confirmed renewal (settleOrphans), its next grant or its
// last hold, never beyond what Redis counts of this Client's beyond the owner's own holds.
// Once t has ended, nothing renews them, and Redis lets them expire within their lease.
func (h *hold) unsettled(t *tenure, n int64) {
	h.mu.Lock()
	if t != nil && h.cur == t && n > 0 {
		h.orphans += int(n)
	}
	h.mu.Unlock()
}

// tenureOf returns the fencing token of the tenure whose lease l is, or 0 when l is no
// longer the lease of the tenure in force (it ended, or a re-entry replaced the lease: the
// watchdog drops l soon).
func (h *hold) tenureOf(l *watchdog.Lease) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil || h.cur.lease != l {
		return 0
	}
	return h.cur.token
}

// fastFormOf is the fast form ('~<owner> <seq>', section 5) of the tenure that lease l renews
// while Redis holds it in that form, else "": the renewal names it, so that only that grant's
// form counts as held (renew.lua), not a ghost of another of the owner's transactions.
func (h *hold) fastFormOf(l *watchdog.Lease) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil || h.cur.lease != l {
		return ""
	}
	return h.cur.fast
}

// settleOrphans gives back, in the background, the orphans of h's current tenure (holds
// whose give-back failed or got no answer: see abandon) once Redis answers again, as the
// watchdog learns when it confirms the tenure's renewal. Each give-back is conditional in
// Redis (the release script's keep, Mutex.giveBackOrphans): it takes a hold only while Redis
// counts more of this Client's holds of the owner than the owner's own here (h.count), so an
// orphan whose give-back was applied after all (its replies lost) costs the owner nothing,
// and a context owner's holds taken through other Clients are never taken. So an orphan is
// counted in Redis beyond the holds the owner took for at most one renewal period after
// Redis answers again (unless the owner's operations on the lock keep h.op busy at every
// renewal: their grants and last release give back what Redis counts beyond them), or until
// a fixed lease's end. A RedLock's instance holds are settled so too: the RedLock never
// counts an orphan (it uncounts a hold before its give-back, and counts no grant that reached
// it too late or not at all), so the holds it counts on the instance are the Client's count,
// which the give-back keeps. (They were kept to the instance's last hold until issue 23's
// TestRedLock_lateReentryGrantCounted: Redis counted one more than the RedLock, renewed.) It
// runs on the watchdog's goroutine and never waits: a busy h.op leaves the orphans to the
// next renewal.
func (h *hold) settleOrphans() {
	h.mu.Lock()
	n := h.orphans
	h.mu.Unlock()
	if n == 0 || !h.tryLockOp() {
		return
	}
	h.c.reref(h)
	h.c.background(func() {
		defer h.c.unref(h)
		defer h.unlockOp()
		h.mu.Lock()
		t, keep, most := h.cur, h.count, h.orphans
		h.mu.Unlock()
		if t == nil || keep <= 0 || most <= 0 {
			return
		}
		m := &Mutex{c: h.c, name: h.name, keys: h.keys, v: h.v}
		_, err := m.giveBackOrphans(context.Background(), h.owner, keep, int64(most))
		if err == nil {
			// Whatever Redis still counts beyond keep is not this tenure's orphans (the
			// give-backs took all they could of them): the count is the owner's own again.
			h.mu.Lock()
			if h.cur == t {
				h.orphans = 0
			}
			h.mu.Unlock()
		}
		if o := h.c.obs; o != nil && h.v.obs != "" {
			h.c.gaveBack(h.v.obs, h.name, h.owner, most, GiveBackOrphan, err)
		}
	})
}

// abandonAll ends this Client's part in every hold of h's owner: holds whose give-back
// failed, or that nothing will give back, because the one that took them no longer counts
// them (a RedLock's instance holds after a failed round, or after an Unlock whose give-back
// failed: the RedLock forgets them). Nothing renews them any more and Redis lets them expire
// within their lease, unless the owner's next grant through this Client finds them first
// (granted's extra) and gives them back; the tenure, if any, ends (cause ErrNotHeld).
func (h *hold) abandonAll() {
	h.mu.Lock()
	h.count = 0
	h.lost = nil
	if h.cur != nil {
		h.stopLease()
		h.endLocked(ErrNotHeld)
	}
	h.unlockMu()
}

// released records that Redis reports remaining holds for the owner after a release (0 when
// the lock was freed, -1 when the owner held none). When this Client's last hold is given
// back while Redis still counts holds of the owner, the tenure ends all the same, so that
// the watchdog stops renewing them, and released returns how many Redis still counts
// (extra): the caller gives back those that are this Client's (its orphans, and holds it let
// go of), never another Client's (Mutex.giveBackOrphans with keep 0).
//
// When Redis holds none of the owner's (-1) while this Client still counts other holds of a
// tenure (current, in watchdog mode or within its fixed lease's conservative end, or ended
// lost), the lock was lost under them: the tenure ends lost (if it had not) and the other
// holds stay counted, lost, so that the owner's Lock keeps failing
// with ErrLockLost and Err says so until an Unlock for every hold taken (Mutex's Loss).
// Before, the first Unlock forgot them all, and the next Lock took the lock afresh under the
// nested caller (TestContracts_forcedLossAcrossKinds).
func (h *hold) released(remaining int64) (extra int64) {
	h.mu.Lock()
	defer h.unlockMu()
	if h.count > 0 {
		h.count--
	}
	// A fixed lease past its conservative end may have run out in Redis: -1 is then its
	// expiry, not a loss (TestReview21_unlockAfterFixedLeaseEndWithLateWatchdogIsNotALoss).
	cur := h.cur != nil && (h.cur.renew || time.Now().Before(h.cur.end))
	lostUnder := remaining < 0 && h.count > 0 && (cur || h.lost != nil)
	if remaining <= 0 && !lostUnder {
		h.count = 0
	}
	if lostUnder && h.cur != nil {
		h.stopLease()
		h.endLocked(errorf("%w: Redis no longer had it at unlock", ErrLockLost)) // sets h.lost
	}
	if h.count == 0 {
		h.lost = nil
		if h.expired && h.endedHolds > 1 {
			// An Unlock of one of the ended tenure's holds: the next Unlock through this
			// Client is of another of them, and stays conditional as this one was (keep 0),
			// or it would go unconditionally and could take a hold of the owner's that
			// another Client took (the first Unlock, or the give-back at the lease's end,
			// gave back what Redis counted of this Client's).
			h.endedHolds--
		} else {
			h.expired, h.endedHolds = false, 0
		}
		if h.cur != nil {
			cause := ErrNotHeld
			if remaining < 0 {
				cause = errorf("%w: Redis no longer had it at unlock", ErrLockLost)
			}
			if remaining > 0 {
				extra = remaining
			}
			h.stopLease()
			h.endLocked(cause)
		}
	}
	return extra
}

// beginRelease marks tenure t, if still current, as having the give-back of its last hold in
// flight (see tenure.releasing). h.op must be held; the give-back's end is told by released
// or releaseFailed.
func (h *hold) beginRelease(t *tenure) {
	h.mu.Lock()
	if h.cur == t {
		t.releasing = true
	}
	h.mu.Unlock()
}

// releaseFailed tells that the give-back of tenure t's last hold got no answer: the tenure
// goes on, and a loss a renewal found meanwhile (deferred) ends it now.
func (h *hold) releaseFailed(t *tenure) {
	h.mu.Lock()
	defer h.unlockMu()
	t.releasing = false
	if h.cur == t && t.deferred != nil {
		h.endLocked(errorf("%w: %w", ErrLockLost, t.deferred))
	}
}

// hideTenure marks h's current tenure as one that no caller was told of: a fresh grant
// that reached a caller who had gone, about to be given back. Its end is not reported
// (HoldEnd), so that the observer's tenures begun (AcquireDone acquired, not re-entered) and
// ended balance; the give-back is reported instead (GiveBack canceled). Only with an
// observer; h.op must be held (no other grant of the owner runs meanwhile).
func (h *hold) hideTenure() {
	if h.c.obs == nil {
		return
	}
	h.mu.Lock()
	if h.cur != nil {
		h.cur.start = -1
	}
	h.mu.Unlock()
}

// end ends the current tenure, if any, with cause.
func (h *hold) end(cause error) {
	h.mu.Lock()
	defer h.unlockMu()
	if h.cur != nil {
		h.stopLease()
		h.endLocked(cause)
	}
}

func (h *hold) stopLease() {
	if h.cur.lease != nil {
		h.c.wd.Remove(h.cur.lease)
		h.cur.lease = nil
	}
}

// endLocked ends the current tenure with cause. h.mu must be held, and unlocked with
// unlockMu. It is the one place where a recorded tenure ends, so the observer's HoldEnd is
// told of it, once per tenure, after the tenure's Done and HoldContext have been told: by
// unlockMu, once h.mu is unlocked.
func (h *hold) endLocked(cause error) {
	t := h.cur
	h.cur = nil
	h.orphans = 0
	if h.count > 0 && errors.Is(cause, ErrLockLost) {
		h.lost = cause
	}
	t.finish(cause)
	if o := h.c.obs; o != nil && h.v.obs != "" && t.start >= 0 {
		h.endEv = HoldEndInfo{Kind: h.v.obs, Name: h.name, Owner: h.owner, Token: t.token,
			Held: o.now() - t.start, Cause: endCause(cause), Err: cause}
		h.ending = true
	}
}

// unlockMu unlocks h.mu, then tells the observer's HoldEnd of the tenure that endLocked
// ended meanwhile: the hook runs without the Client's locks, so it may ask the lock (Err,
// TTL, IsLocked...) without deadlocking. Every function that may call endLocked unlocks
// h.mu with it.
func (h *hold) unlockMu() {
	if !h.ending {
		h.mu.Unlock()
		return
	}
	e := h.endEv
	h.endEv, h.ending = HoldEndInfo{}, false
	h.mu.Unlock()
	h.c.obs.holdEnd(e)
}

// finish cancels every context HoldContext derived from the tenure, with cause, and then
// closes its done channel: a caller that learns of the end, by a closed Done or a returned
// Unlock, finds the cause already set, whatever it does next. (Done was once closed first:
// a caller woken by it could read a HoldContext not yet cancelled.)
func (t *tenure) finish(cause error) {
	t.smu.Lock()
	if t.ended != nil {
		t.smu.Unlock()
		return // already ended: the first cause stands
	}
	t.ended = cause // from now on subscribe cancels a new HoldContext at once
	subs := t.subs
	t.subs = nil
	t.smu.Unlock()
	for f := range subs {
		(*f)(cause)
	}
	t.smu.Lock()
	t.told = true // doneCh makes no channel from now on
	done := t.done
	t.smu.Unlock()
	if done != nil {
		close(done)
	}
}

// endedBy returns why the tenure ended, nil while it lasts.
func (t *tenure) endedBy() error {
	t.smu.Lock()
	defer t.smu.Unlock()
	return t.ended
}

// endedErr is what an Unlock reports for a hold whose tenure ended with cause before the
// Unlock could give it back: ErrLeaseExpired when its fixed lease ran out, else ErrNotHeld,
// joined to the loss when it was lost.
func endedErr(cause error) error {
	switch {
	case errors.Is(cause, ErrLeaseExpired):
		return ErrLeaseExpired
	case errors.Is(cause, ErrLockLost):
		return errorf("%w (%w)", ErrNotHeld, cause)
	}
	return ErrNotHeld
}

// doneCh returns a channel closed when the tenure ends (already closed if it has). It is
// made on first need: a tenure nobody watches costs no channel.
func (t *tenure) doneCh() <-chan struct{} {
	t.smu.Lock()
	defer t.smu.Unlock()
	if t.told {
		return closedCh
	}
	if t.done == nil {
		t.done = make(chan struct{})
	}
	return t.done
}

// subscribe arranges for f to be called with the cause when the tenure ends (at once if it
// has ended) and returns a function that cancels the arrangement.
func (t *tenure) subscribe(f func(error)) (stop func()) {
	t.smu.Lock()
	if t.ended != nil {
		cause := t.ended
		t.smu.Unlock()
		f(cause)
		return func() {}
	}
	if t.subs == nil {
		t.subs = make(map[*func(error)]struct{})
	}
	key := &f
	t.subs[key] = struct{}{}
	t.smu.Unlock()
	return func() {
		t.smu.Lock()
		delete(t.subs, key)
		t.smu.Unlock()
	}
}

// deadline is the conservative end of tenure t's lease as last confirmed (zero once the
// lease was lost or ended). While the hold is valid it only moves later.
func (h *hold) deadline(t *tenure) time.Time {
	h.mu.Lock()
	l := t.lease
	h.mu.Unlock()
	if l == nil {
		return time.Time{}
	}
	d, _ := h.c.wd.Deadline(l)
	return d
}

// renewed reports whether the owner holds the lock through this Client in a tenure that the
// watchdog renews.
func (h *hold) renewed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur != nil && h.cur.renew
}

// holds is the number of holds this Client counts for the owner.
func (h *hold) holds() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count
}

// snapshot returns the current tenure and the loss that blocks re-entry, if any.
func (h *hold) snapshot() (*tenure, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.lost
}

// why returns the current tenure, or else why there is none: the loss that blocks re-entry,
// ErrLeaseExpired after a fixed lease ran its course, or ErrNotHeld.
func (h *hold) why() (*tenure, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.cur != nil:
		return h.cur, nil
	case h.lost != nil:
		return nil, h.lost
	case h.expired:
		return nil, ErrLeaseExpired
	}
	return nil, ErrNotHeld
}
