package rlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// redHold is one owner's hold of a RedLock over one set of Clients, shared by the handles
// of that name and set (context owners).
//
// It lives in redHolds while an operation refers to it or it counts a hold, with one
// exception, as the Mutex's holds of a Client do: a hold that ended by a loss, a fixed
// lease's end or Clients' Close (ended set, count > 0) stays until the owner's Unlock has
// reported the end (and given back what the open Clients still count), or until one of its
// Clients is closed while no open Client counts an instance hold of it, whichever comes
// first (the Mutex's holds go with their Client's table at Close). After that, an Unlock
// finds no hold: ErrNotHeld, or ErrClosed when fewer than a majority of the Clients are
// open; so do Err, Token and HoldContext (noHold).
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
	// done is Done's channel: made on first need (at the latest by finishLocked), closed by
	// finishLocked, kept after the tenure ended until the next one begins.
	done chan struct{}
	// telling counts the ends being told (finishLocked, between its unlock of mu and the
	// close of done): the hold stays in redHolds meanwhile, so that Done, asked then, returns
	// done (still open) rather than an already closed channel for a hold it cannot find.
	telling int
	// told is closed once the last tenure's end (finishLocked) has been told whole, its
	// HoldEnd included; nil before any ended. The owner's last Unlock waits for it (reset):
	// the end may be told by an instance's give-back on its own goroutine.
	told    chan struct{}
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

// key names the caller's owner's hold of this lock over these Clients.
func (r *RedLock) key(owner string) string {
	return r.name + "\x00" + owner + "\x00" + r.set
}

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
	idle := rh.count == 0 && rh.telling == 0
	if !idle && rh.telling == 0 && rh.ended != nil {
		// Ended while it still counts holds, and a Client is closed (c.mu is not taken: see
		// instanceEnded's callers): reported by nobody now, its Clients going, unless an open
		// Client still counts instance holds of it, which only the owner's Unlock gives back
		// (and then reports the end). Dropped at the first Close, as first written, those
		// stayed renewed by their Client's watchdog, given back by nothing, and a lost one
		// refused the owner's acquires there for good (TestContractsRed_holdForgottenAtCloseIsGivenBack).
		closed, counted := false, false
		for i, c := range rh.cs {
			if c.life.Err() != nil {
				closed = true
			} else if rh.n[i] > 0 {
				counted = true
			}
		}
		idle = closed && !counted
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
// longer followed, or counts as many holds as the RedLock already (the owner's Unlock gave
// back the hold of the re-entry since: adopted, the instance kept one hold more than the
// RedLock, renewed until the last Unlock, TestRedLock_lateReentryGrantAfterItsUnlockIsGivenBack);
// the caller gives the grant back. rh.mu orders it with Unlock, the
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
	if rh.gen != gen || rh.count == 0 || rh.ended != nil || rh.releasing || rh.watched[i] != reentry || (!reentry && rh.n[i] != 0) ||
		(reentry && rh.n[i] >= rh.count) {
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
// closed first.) The channel is made here if nobody asked for it yet and stays rh.done
// (until the next tenure begins), so that Done asked meanwhile returns it, still open until
// the contexts are cancelled (Done once returned a closed channel as soon as rh.ended was
// set); HoldContext asked meanwhile sees rh.ended: a cancelled context. rh.mu must be held;
// it is released.
func (rh *redHold) finishLocked() {
	cause := rh.ended
	ro := rh.obs
	rh.obs = nil
	ro.take() // the observer's Close waits for its report (ended, below)
	if rh.done == nil {
		rh.done = make(chan struct{})
	}
	done := rh.done
	told := make(chan struct{})
	rh.told = told
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
	rh.telling++
	rh.mu.Unlock()
	for _, s := range stops {
		s()
	}
	for f := range subs {
		(*f)(cause)
	}
	close(done)
	rh.mu.Lock()
	rh.telling--
	rh.mu.Unlock()
	rh.drop() // kept in the table while the end was told
	ro.ended(cause)
	close(told)
}

// reset forgets the hold: the owner's last Unlock gave every instance back. It returns once
// the tenure's end has been told whole (HoldEnd included), by reset itself or by the
// instance's give-back that left fewer than a majority holding it (instanceEnded, on that
// give-back's goroutine, which the Unlock does not wait for once a majority has answered):
// an Unlock that ends a tenure calls HoldEnd before its ReleaseDone (Observer's godoc).
// Before, reset found the tenure ended by that give-back and returned while its end was
// still being told: ReleaseDone (Freed) came before the HoldEnd
// (TestRedLock_lastUnlockCallsHoldEndBeforeReleaseDoneWhenAnInstanceEndsTheTenure;
// TestObserver_redLockTenures under load).
func (rh *redHold) reset() {
	rh.mu.Lock()
	rh.gen++
	if rh.count > 0 && rh.ended == nil {
		rh.ended = ErrNotHeld
		rh.finishLocked()
		rh.mu.Lock()
	}
	told := rh.told
	// rh.done stays: the ended tenure's channel, closed by its finishLocked (which may still
	// be cancelling the tenure's contexts, when the tenure ended by a loss).
	rh.count, rh.token, rh.ended, rh.releasing = 0, 0, nil, false
	clear(rh.n)
	stops := rh.closing
	rh.closing = nil
	rh.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	if told != nil {
		<-told
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

// instHold returns the caller's owner's hold on instance m, or nil.
func (m *Mutex) instHold(owner string) *hold {
	return m.c.peek(m.keys, m.v, owner)
}
