package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/relock-go/relock/rlock"
	"github.com/relock-go/relock/watchdog"
)

// wdClock tells, from one Client's Observer, when its watchdog declared a lease lost well
// after that lease's end: the watchdog's goroutines were not run at the lease's renewal nor at
// its deadline. On a loaded machine the Go runtime runs a timer from the heap of the
// scheduler slot (P) it was set on, and an OS thread left unscheduled holds that slot's timers
// and goroutines back while the model's stall watchers, on the other slot, see no gap (the
// 600 s model run of session 25: Mutex seed 4615490555978934774, c2's renewal rounds 1247.7 ms
// and then 1778.0 ms with a 200 ms renewal period, the lease due at ~1446 ms lost, the owner's
// tenure taken by others at 1574 ms; the same mechanism as the late ctx Done of
// waitbound_test.go, 8e5046f).
//
// RenewalRoundInfo carries no due time, and a lease lost by expiry has no round at all (the
// watchdog drops it before any renewal goes out), so the due time is bounded from what the
// Observer does tell: the lease was last confirmed (granted, or renewed by a round) no later
// than the latest of the start of the Client's latest round that renewed something, the
// return of the owner's latest acquisition of the lock through the Client (a re-entry may
// register a new lease), and the tenure's start (HoldEndInfo.Held); its conservative end
// (watchdog: sent + TTL - drift) is then at most that moment + TTL - drift. A watchdog whose
// goroutines run on time declares an expiry at that end (its alarm is set to it once a
// renewal is in flight or was never scheduled), so a loss declared more than slack past the
// bound means the watchdog slept past the lease's renewal and its deadline: a disturbance of
// the machine, as a slow round (renewal-slow) is.
//
// What it does not excuse, so that the model still flags it: a loss declared at the lease's
// end (a renewal never scheduled, computed from a fixed lease, dropped from the schedule, or
// one on the wire past the deadline: the other faults and watchers explain the latter). Its
// blind spots: a watchdog late by less than slack past the deadline (late by a third of the
// lease plus up to slack for its renewal), and a renewal goroutine held back while the loop
// ran on time (its batch then finds the lease dropped and reports no round) are still
// flagged; a library that declared an expiry late would be excused (the stall-free runs, the
// watchdog package's tests and the hunts would still see it).
type wdClock struct {
	ttl time.Duration // the Client's watchdog timeout

	mu      sync.Mutex
	renewed time.Time            // start of the latest round that renewed at least one lease
	granted map[string]time.Time // lock name + owner -> return of its latest acquisition
}

func newWDClock(ttl time.Duration) *wdClock {
	return &wdClock{ttl: ttl, granted: map[string]time.Time{}}
}

// round records a renewal round reported at now.
func (w *wdClock) round(now time.Time, e rlock.RenewalRoundInfo) {
	if e.Failures >= e.Leases {
		return // it confirmed nothing
	}
	w.mu.Lock()
	if start := now.Add(-e.Took); start.After(w.renewed) {
		w.renewed = start // the watchdog's sent is earlier: a bound from above
	}
	w.mu.Unlock()
}

// acquired records an acquisition returned at now.
func (w *wdClock) acquired(now time.Time, e rlock.AcquireDoneInfo) {
	if e.Outcome != rlock.OutcomeAcquired {
		return
	}
	w.mu.Lock()
	w.granted[e.Name+"\x00"+e.Owner] = now
	w.mu.Unlock()
}

// late judges a tenure's end e, told at now: for a watchdog lease declared lost by expiry
// more than slack after its latest possible end, it returns from when the watchdog slept
// past the lease's renewal (its latest due time), by how much it declared the loss past that
// end, and true.
func (w *wdClock) late(now time.Time, e rlock.HoldEndInfo, slack time.Duration) (from time.Time, by time.Duration, ok bool) {
	if e.Cause != rlock.EndLost || !errors.Is(e.Err, watchdog.ErrExpired) {
		return time.Time{}, 0, false
	}
	w.mu.Lock()
	base := maxTime(w.renewed, w.granted[e.Name+"\x00"+e.Owner])
	w.mu.Unlock()
	base = maxTime(base, now.Add(-e.Held))
	end := base.Add(w.ttl - watchdog.Drift(w.ttl))
	by = now.Sub(end)
	if by <= slack {
		return time.Time{}, by, false
	}
	return base.Add(time.Duration(float64(w.ttl) * watchdog.DefaultRenewFraction)), by, true
}

// TestModelWDClock_lateWatchdogIsADisturbance holds a Client's watchdog goroutine back (a
// HoldEnd hook, which runs on it for a fixed lease that ran out, blocks) past a watchdog
// lease's renewal and deadline, as an OS thread left unscheduled does on a loaded machine:
// the lease is declared lost by expiry once the watchdog runs again, and wdClock judges it a
// late watchdog (the model then counts a disturbance, renewal-late, and excuses the loss).
func TestModelWDClock_lateWatchdogIsADisturbance(t *testing.T) {
	const ttl = 300 * time.Millisecond
	b := realBackend(t)
	wdc := newWDClock(ttl)
	blocked, release := make(chan struct{}), make(chan struct{})
	type verdict struct {
		e  rlock.HoldEndInfo
		by time.Duration
		ok bool
	}
	verdicts := make(chan verdict, 4)
	c := b.client(t, rlock.WithWatchdogTimeout(ttl), rlock.WithObserver(&rlock.Observer{
		RenewalRound: func(e rlock.RenewalRoundInfo) { wdc.round(time.Now(), e) },
		AcquireDone:  func(_ context.Context, e rlock.AcquireDoneInfo) { wdc.acquired(time.Now(), e) },
		HoldEnd: func(e rlock.HoldEndInfo) {
			if e.Cause == rlock.EndLeaseExpired {
				close(blocked)
				<-release // the watchdog's goroutine runs no collect meanwhile
				return
			}
			_, by, ok := wdc.late(time.Now(), e, stallThreshold)
			verdicts <- verdict{e, by, ok}
		},
	}))
	ctx := context.Background()
	mb := c.Mutex("wdlate-b")
	if err := mb.Lock(ctx); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	granted := time.Now()
	if err := c.Mutex("wdlate-a").LockLease(ctx, 20*time.Millisecond); err != nil {
		t.Fatalf("LockLease: %v", err)
	}
	select {
	case <-blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the fixed lease's end was never told")
	}
	// b's renewal was due 200 ms after its grant (the fixed lease ran out 20 ms after it,
	// before), its deadline came 5 ms before 300 ms: hold the watchdog well past both.
	time.Sleep(time.Until(granted.Add(ttl + 4*stallThreshold)))
	close(release)
	select {
	case v := <-verdicts:
		if v.e.Cause != rlock.EndLost || !v.ok || v.by <= stallThreshold {
			t.Fatalf("b's end %s (%v) judged late=%v by %v; want a loss by expiry judged late by more than %v", v.e.Cause, v.e.Err, v.ok, v.by, stallThreshold)
		}
		t.Logf("b lost by expiry %v past its lease's latest end: a late watchdog", v.by)
	case <-time.After(10 * time.Second):
		t.Fatal("b's loss was never told")
	}
}

// TestModelWDClock_onTimeExpiryIsNotExcused: a loss that the watchdog declares at the lease's
// end is not a late watchdog, whatever held the renewal back (here a slow round, which the
// model judges by its Took): the model still flags such a loss unless another fault explains
// it. So are ends that are no expiry of a watchdog lease.
func TestModelWDClock_onTimeExpiryIsNotExcused(t *testing.T) {
	const ttl = 300 * time.Millisecond
	end := ttl - watchdog.Drift(ttl)
	t0 := time.Now()
	lost := func(at time.Duration, held time.Duration) rlock.HoldEndInfo {
		return rlock.HoldEndInfo{Kind: rlock.KindMutex, Name: "x", Owner: "o", Held: held, Cause: rlock.EndLost,
			Err: fmt.Errorf("%w: %w", rlock.ErrLockLost, watchdog.ErrExpired)}
	}
	for _, tc := range []struct {
		name     string
		events   func(w *wdClock)
		at, held time.Duration
		e        func(at, held time.Duration) rlock.HoldEndInfo
		late     bool
	}{
		{name: "never renewed, declared at its end", events: func(w *wdClock) {}, at: end + 5*time.Millisecond, held: end + 5*time.Millisecond, e: lost},
		{name: "never renewed, declared late", events: func(w *wdClock) {}, at: end + 3*stallThreshold, held: end + 3*stallThreshold, e: lost, late: true},
		{name: "renewed once, the next round held back, declared at its end", events: func(w *wdClock) {
			w.round(t0.Add(201*time.Millisecond), rlock.RenewalRoundInfo{Leases: 1, Scripts: 1, Took: time.Millisecond})
		}, at: 200*time.Millisecond + end + 10*time.Millisecond, held: 200*time.Millisecond + end + 10*time.Millisecond, e: lost},
		{name: "renewed once, declared late", events: func(w *wdClock) {
			w.round(t0.Add(201*time.Millisecond), rlock.RenewalRoundInfo{Leases: 1, Scripts: 1, Took: time.Millisecond})
		}, at: 200*time.Millisecond + end + 2*stallThreshold, held: 200*time.Millisecond + end + 2*stallThreshold, e: lost, late: true},
		{name: "a failed round confirms nothing", events: func(w *wdClock) {
			w.round(t0.Add(201*time.Millisecond), rlock.RenewalRoundInfo{Leases: 1, Scripts: 1, Failures: 1, Took: time.Millisecond})
		}, at: end + 3*stallThreshold, held: end + 3*stallThreshold, e: lost, late: true},
		{name: "a later re-entry may have registered a new lease", events: func(w *wdClock) {
			w.acquired(t0.Add(250*time.Millisecond), rlock.AcquireDoneInfo{AcquireStartInfo: rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "x", Owner: "o"}, Outcome: rlock.OutcomeAcquired, Reentered: true})
		}, at: 250*time.Millisecond + end, held: 250*time.Millisecond + end + 10*time.Millisecond, e: lost},
		{name: "another owner's acquisition does not count", events: func(w *wdClock) {
			w.acquired(t0.Add(250*time.Millisecond), rlock.AcquireDoneInfo{AcquireStartInfo: rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "x", Owner: "other"}, Outcome: rlock.OutcomeAcquired})
		}, at: end + 3*stallThreshold, held: end + 3*stallThreshold, e: lost, late: true},
		{name: "a renewal found gone", at: end + 3*stallThreshold, held: end + 3*stallThreshold, events: func(w *wdClock) {},
			e: func(at, held time.Duration) rlock.HoldEndInfo {
				e := lost(at, held)
				e.Err = fmt.Errorf("%w: %w", rlock.ErrLockLost, watchdog.ErrGone)
				return e
			}},
		{name: "a fixed lease ran out", at: end + 3*stallThreshold, held: end + 3*stallThreshold, events: func(w *wdClock) {},
			e: func(at, held time.Duration) rlock.HoldEndInfo {
				return rlock.HoldEndInfo{Name: "x", Owner: "o", Held: held, Cause: rlock.EndLeaseExpired, Err: rlock.ErrLeaseExpired}
			}},
	} {
		w := newWDClock(ttl)
		tc.events(w)
		_, by, ok := w.late(t0.Add(tc.at), tc.e(tc.at, tc.held), stallThreshold)
		if ok != tc.late {
			t.Errorf("%s: judged late=%v (by %v), want %v", tc.name, ok, by, tc.late)
		}
	}
}
