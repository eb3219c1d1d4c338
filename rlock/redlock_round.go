package rlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// instResult is one instance's answer to one attempt.
type instResult struct {
	ok  bool
	ttl time.Duration // the holder's remaining lease when refused; -1 unknown
	err error
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

// roundState is what a round's instance goroutines report to it; mu guards it.
type roundState struct {
	mu       sync.Mutex
	res      []instResult // by instance
	answered []bool       // res holds the instance's answer
	decided  bool         // the round has returned: later answers are not read
	wake     chan struct{}
	late     *lateGrants
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
			st.res[i].err = &unanswered{name: r.name, i: i, tmo: tmo}
		}
	}
	return st.res
}

// unanswered is the error of instance i that had not answered when a round of the RedLock
// name was decided (its instance timeout tmo ran out, or a majority granted without it): it
// wraps ErrUnknownOutcome. Its text is made when read (errorf's): a won round, the common
// case, reads none (formatted at once, the instance left out cost fmt's work and four
// allocations on every won round).
type unanswered struct {
	name string
	i    int
	tmo  time.Duration
}

func (e *unanswered) Error() string {
	return errorf("red lock %q: instance %d: %w: no answer within the instance timeout (%v), or not needed", e.name, e.i, ErrUnknownOutcome, e.tmo).Error()
}

func (e *unanswered) Unwrap() error { return ErrUnknownOutcome }

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
