package rlock

import (
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/relock-go/relock/internal/backoff"
	"github.com/relock-go/relock/pubsub"
	"github.com/relock-go/relock/watchdog"
)

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
		r.giveBackAll(ctx, rh, true)
	}
	return r.fresh(ctx, rh, owner, wait, leases, least, renew)
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
		if ro := rh.next; ro != nil {
			// The re-entry's token for its AcquireDone, read here, under the owner's turn
			// (read after the call, the owner's other goroutine could end the tenure in
			// between, and the event said 0).
			ro.token = rh.token
			rh.next = nil
		}
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

// withinRenewed reports whether instance i's Client holds the lock for owner in a tenure its
// watchdog renews: a fixed lease's grant there re-entered that tenure (see fresh).
func (r *RedLock) withinRenewed(i int, owner string) bool {
	h := r.insts[i].instHold(owner)
	return h != nil && h.renewed()
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
	var markRoom [5]pubsub.Mark // room for up to five instances' marks, allocated with fresh
	// consumed: a wake-up of the instance's watcher was taken and not yet used up (made with
	// watchers).
	var consumed []bool
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
	// last is the last round's passing failure (instances that did not answer, a majority's
	// grant too late for its lease), nil once a round's majority answered in time: a wait that
	// ends at ctx's end returns ctx's error joined with it, as Mutex's wait loop does.
	var last error
	ended := func(err error) error {
		if last == nil {
			return err
		}
		return errors.Join(err, last)
	}
	step := redRetryMin
	waiting := false
	var timer *time.Timer
	for {
		if watchers == nil && wait != 0 {
			marks = markRoom[:0]
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
		joined := 0
		if !renew {
			// A fixed lease's grant that re-entered a tenure of the owner's that the
			// instance's Client renews, one the RedLock does not count (a give-back of the
			// owner's last Unlock that has not taken its turn there yet), would be renewed
			// with that tenure for as long as it lasts: followed, it kept the RedLock's
			// majority live past its lease, for ever once the give-back ran (Done never
			// closed: TestRedLock_fixedLeaseEndsWhenGrantsJoinedRenewedInstanceTenures). It
			// is given back, and counts as a passing failure of the instance: the next round
			// comes after a short pause.
			var kept, renewed []int
			for _, i := range got {
				if r.withinRenewed(i, owner) {
					renewed = append(renewed, i)
				} else {
					kept = append(kept, i)
				}
			}
			if len(renewed) > 0 {
				r.giveBackRound(ctx, renewed, abandonOne, tmo)
				got, joined = kept, len(renewed)
				errs = append(errs, errorf("red lock %q: %d instances granted it within a tenure of the owner's that their Clients renew (an earlier hold still being given back there): a fixed lease cannot end there", r.name, len(renewed)))
			}
		}
		if len(got) >= r.quorum && validity > 0 {
			if gen, ok := rh.begin(r, owner, got); ok {
				lg.settle(func(i int) bool {
					// A late grant within a renewed tenure is given back, as above.
					if !renew && r.withinRenewed(i, owner) {
						return false
					}
					return rh.adopt(r, owner, gen, i, false)
				})
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
			return false, ended(errorf("red lock %q: %w", r.name, err))
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
		case joined > 0 && len(got)+late+joined >= r.quorum:
			passing = errors.Join(errs...)
		}
		last = passing
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
			consumed = make([]bool, n)
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
					return false, ended(err)
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
		pause := backoff.Jitter(step)
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
			return false, ended(err)
		}
		// The random pause after a wake-up spreads out contenders woken by one release
		// and lets the releaser's other instances answer.
		timer.Reset(pause)
		select {
		case <-timer.C:
		case <-ctx.Done():
			pass()
			return false, ended(errorf("red lock %q: %w", r.name, ctx.Err()))
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

// all is every instance's index, 0 to N-1 (shared: read only).
func (r *RedLock) all() []int {
	if len(r.allIdx) == len(r.insts) {
		return r.allIdx
	}
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
