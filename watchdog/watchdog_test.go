package watchdog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// Timing of a 1 s lease under the defaults, in exact (fake) time.
const (
	ttl1s     = time.Second
	renewAt1s = 666666666 * time.Nanosecond // 1 s * 2/3, truncated
	life1s    = 988 * time.Millisecond      // 1 s - Drift(1 s) = 1 s - (10 ms + 2 ms)
	retry1s   = 101 * time.Millisecond      // min(DefaultRetryInterval, 1 s/10 + 1 ms)
)

// ---------------------------------------------------------------------------------------------
// Fakes and helpers.

// renewCall is one recorded Renewer.Renew call.
type renewCall struct {
	at       time.Time // when the call started
	leases   []*Lease  // a copy of the batch
	deadline time.Time // the context's deadline
	hasDL    bool
}

func (c renewCall) has(l *Lease) bool { return slices.Contains(c.leases, l) }

// fakeRenewer records every call and answers through fn (all nil when fn is nil).
type fakeRenewer struct {
	mu    sync.Mutex
	calls []renewCall
	fn    func(ctx context.Context, leases []*Lease) []error
}

func (f *fakeRenewer) Renew(ctx context.Context, leases []*Lease) []error {
	dl, ok := ctx.Deadline()
	f.mu.Lock()
	f.calls = append(f.calls, renewCall{at: time.Now(), leases: slices.Clone(leases), deadline: dl, hasDL: ok})
	fn := f.fn
	f.mu.Unlock()
	if fn == nil {
		return make([]error, len(leases))
	}
	return fn(ctx, leases)
}

func (f *fakeRenewer) set(fn func(ctx context.Context, leases []*Lease) []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
}

func (f *fakeRenewer) Calls() []renewCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// callsWith is the calls whose batch held l.
func (f *fakeRenewer) callsWith(l *Lease) []renewCall {
	var out []renewCall
	for _, c := range f.Calls() {
		if c.has(l) {
			out = append(out, c)
		}
	}
	return out
}

// all answers every lease of a batch with err.
func all(err error) func(context.Context, []*Lease) []error {
	return func(_ context.Context, leases []*Lease) []error {
		errs := make([]error, len(leases))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
}

// lostEvent is one OnLost call.
type lostEvent struct {
	at    time.Time
	l     *Lease
	cause error
}

// lostLog records OnLost calls.
type lostLog struct {
	mu     sync.Mutex
	events []lostEvent
}

// lease returns a lease whose OnLost is recorded in g, under the lease OnLost is given (of
// finds the lease's events by it: OnLost must be given the lease it was set on).
func (g *lostLog) lease(ttl time.Duration, renew bool) *Lease {
	l := &Lease{TTL: ttl, Renew: renew}
	l.OnLost = func(got *Lease, cause error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.events = append(g.events, lostEvent{at: time.Now(), l: got, cause: cause})
	}
	return l
}

func (g *lostLog) Events() []lostEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.events)
}

func (g *lostLog) of(l *Lease) []lostEvent {
	var out []lostEvent
	for _, e := range g.Events() {
		if e.l == l {
			out = append(out, e)
		}
	}
	return out
}

// newWD returns a Watchdog closed when the test ends.
func newWD(t *testing.T, r Renewer, opts ...Option) *Watchdog {
	t.Helper()
	w, err := New(r, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

func mustAdd(t *testing.T, w *Watchdog, l *Lease, sent time.Time) {
	t.Helper()
	if err := w.Add(l, sent); err != nil {
		t.Fatalf("Add: %v", err)
	}
}

// sleepUntil advances the bubble's clock to at and lets every goroutine settle.
func sleepUntil(at time.Time) {
	time.Sleep(time.Until(at))
	synctest.Wait()
}

func wantDeadline(t *testing.T, w *Watchdog, l *Lease, want time.Time, registered bool) {
	t.Helper()
	got, ok := w.Deadline(l)
	if ok != registered {
		t.Fatalf("Deadline registered = %v, want %v", ok, registered)
	}
	if registered && !got.Equal(want) {
		t.Fatalf("Deadline = %v, want %v (off by %v)", got, want, got.Sub(want))
	}
}

func wantCallTimes(t *testing.T, calls []renewCall, start time.Time, want ...time.Duration) {
	t.Helper()
	got := make([]time.Duration, len(calls))
	for i, c := range calls {
		got[i] = c.at.Sub(start)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("renewals at %v, want %v", got, want)
	}
}

// ---------------------------------------------------------------------------------------------
// Construction and arguments.

func TestDrift(t *testing.T) {
	for _, c := range []struct{ lease, want time.Duration }{
		{time.Second, 12 * time.Millisecond},
		{30 * time.Second, 302 * time.Millisecond},
		{100 * time.Millisecond, 3 * time.Millisecond},
		{0, 2 * time.Millisecond},
	} {
		if got := Drift(c.lease); got != c.want {
			t.Errorf("Drift(%v) = %v, want %v", c.lease, got, c.want)
		}
	}
}

func TestNewValidation(t *testing.T) {
	r := &fakeRenewer{}
	bad := []struct {
		name string
		r    Renewer
		opts []Option
	}{
		{"nil renewer", nil, nil},
		{"typed nil renewer", (*fakeRenewer)(nil), nil}, // documented below: accepted
		{"fraction 0", r, []Option{WithRenewFraction(0)}},
		{"fraction 1", r, []Option{WithRenewFraction(1)}},
		{"fraction negative", r, []Option{WithRenewFraction(-0.5)}},
		{"fraction above 1", r, []Option{WithRenewFraction(1.5)}},
		{"fraction NaN", r, []Option{WithRenewFraction(math.NaN())}},
		{"fraction +Inf", r, []Option{WithRenewFraction(math.Inf(1))}},
		// Below MinRenewFraction a renewal may go out as soon as the last one is confirmed
		// (accepted before: 1e-300 renewed back to back).
		{"fraction tiny", r, []Option{WithRenewFraction(1e-300)}},
		{"fraction just below the floor", r, []Option{WithRenewFraction(math.Nextafter(MinRenewFraction, 0))}},
		{"nil option", r, []Option{nil}}, // panicked before
		{"retry 0", r, []Option{WithRetryInterval(0)}},
		{"retry negative", r, []Option{WithRetryInterval(-time.Second)}},
		{"batch 0", r, []Option{WithBatchSize(0)}},
		{"batch negative", r, []Option{WithBatchSize(-1)}},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			w, err := New(c.r, c.opts...)
			if c.name == "typed nil renewer" {
				// A typed nil is a non-nil interface: New cannot tell it from a valid value.
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				w.Close()
				return
			}
			if err == nil {
				w.Close()
				t.Fatal("New succeeded, want an error")
			}
			if w != nil {
				t.Fatalf("New returned a Watchdog (%p) with error %v", w, err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("New: %v, want an error wrapping ErrInvalid", err)
			}
		})
	}
	t.Run("fraction at the floor", func(t *testing.T) {
		w, err := New(r, WithRenewFraction(MinRenewFraction))
		if err != nil {
			t.Fatalf("New with the smallest fraction accepted: %v", err)
		}
		w.Close()
	})

	t.Run("defaults", func(t *testing.T) {
		w, err := New(r)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if w.fraction != DefaultRenewFraction || w.retry != DefaultRetryInterval || w.batch != DefaultBatchSize {
			t.Fatalf("defaults = %v %v %v", w.fraction, w.retry, w.batch)
		}
		if w.started {
			t.Fatal("New started the loop before any Add")
		}
	})
	t.Run("options", func(t *testing.T) {
		w, err := New(r, WithRenewFraction(0.25), WithRetryInterval(time.Millisecond), WithBatchSize(1))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if w.fraction != 0.25 || w.retry != time.Millisecond || w.batch != 1 {
			t.Fatalf("options = %v %v %v", w.fraction, w.retry, w.batch)
		}
	})
}

func TestAddValidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		w := newWD(t, &fakeRenewer{})
		now := time.Now()

		for _, d := range []time.Duration{0, -time.Second} {
			if err := w.Add(lost.lease(d, true), now); err == nil || errors.Is(err, ErrExpired) {
				t.Fatalf("Add(TTL %v) = %v, want a TTL error", d, err)
			}
		}
		// A nil OnLost would panic on the watchdog goroutine at the loss: refused up front.
		if err := w.Add(&Lease{TTL: ttl1s, Renew: true}, now); err == nil {
			t.Fatal("Add of a lease without OnLost succeeded")
		}
		if err := w.Add(&Lease{TTL: ttl1s}, now.Add(-time.Hour)); err == nil || errors.Is(err, ErrExpired) {
			t.Fatalf("Add of an expired lease without OnLost = %v, want the OnLost error", err)
		}
		if w.started || w.Len() != 0 {
			t.Fatal("a rejected Add registered something or started the loop")
		}

		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, now)
		if err := w.Add(l, now); err == nil {
			t.Fatal("second Add of a registered lease succeeded")
		}
		if w.Len() != 1 {
			t.Fatalf("Len = %d, want 1", w.Len())
		}
		w2 := newWD(t, &fakeRenewer{})
		if err := w2.Add(l, now); err == nil {
			t.Fatal("Add of a lease registered with another Watchdog succeeded")
		}
		if w2.Len() != 0 {
			t.Fatal("other Watchdog registered the lease")
		}
		wantDeadline(t, w, l, now.Add(life1s), true)
	})
}

func TestAddExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		now := time.Now()

		for _, age := range []time.Duration{life1s, life1s + time.Nanosecond, time.Hour} {
			l := lost.lease(ttl1s, true)
			if err := w.Add(l, now.Add(-age)); !errors.Is(err, ErrExpired) {
				t.Fatalf("Add(sent %v ago) = %v, want ErrExpired", age, err)
			}
			wantDeadline(t, w, l, time.Time{}, false)
			if w.Remove(l) {
				t.Fatal("Remove of a lease Add refused returned true")
			}
		}
		// A lease too short to outlast its own drift allowance is expired at once.
		if err := w.Add(lost.lease(2*time.Millisecond, false), now); !errors.Is(err, ErrExpired) {
			t.Fatalf("Add(TTL 2ms) = %v, want ErrExpired", err)
		}
		if w.Len() != 0 || w.started {
			t.Fatal("expired leases were registered")
		}

		// One nanosecond of life left: registered, renewed at once (its renewal time has
		// passed), lost at its deadline since the renewal cannot beat it.
		r.set(func(ctx context.Context, leases []*Lease) []error {
			<-ctx.Done()
			return all(ctx.Err())(ctx, leases)
		})
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, now.Add(-life1s+time.Nanosecond))
		synctest.Wait()
		calls := r.Calls()
		if len(calls) != 1 || !calls[0].at.Equal(now) || !calls[0].deadline.Equal(now.Add(time.Nanosecond)) {
			t.Fatalf("calls = %+v, want one at once with a 1ns deadline", calls)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		ev := lost.of(l)
		if len(ev) != 1 || !errors.Is(ev[0].cause, ErrExpired) || !ev[0].at.Equal(now.Add(time.Nanosecond)) {
			t.Fatalf("lost = %+v, want ErrExpired at +1ns", ev)
		}
		if len(lost.Events()) != 1 {
			t.Fatalf("OnLost ran for a lease Add refused: %+v", lost.Events())
		}
	})
}

// ---------------------------------------------------------------------------------------------
// Renewal schedule.

func TestRenewsAtFraction(t *testing.T) {
	cases := []struct {
		name     string
		opts     []Option
		fraction float64
		ttl      time.Duration
		nominal  time.Duration // first renewal, up to float rounding (1 ns)
	}{
		{"default 2/3", nil, DefaultRenewFraction, ttl1s, renewAt1s},
		{"default 2/3 of 30s", nil, DefaultRenewFraction, 30 * time.Second, 20 * time.Second},
		{"half", []Option{WithRenewFraction(0.5)}, 0.5, 3 * time.Second, 1500 * time.Millisecond},
		{"0.9", []Option{WithRenewFraction(0.9)}, 0.9, 3 * time.Second, 2700 * time.Millisecond},
		{"0.1", []Option{WithRenewFraction(0.1)}, 0.1, 3 * time.Second, 300 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				first := time.Duration(float64(c.ttl) * c.fraction)
				if d := first - c.nominal; d < -time.Nanosecond || d > time.Nanosecond {
					t.Fatalf("renewal at %v, want %v", first, c.nominal)
				}
				var lost lostLog
				r := &fakeRenewer{}
				w := newWD(t, r, c.opts...)
				start := time.Now()
				l := lost.lease(c.ttl, true)
				mustAdd(t, w, l, start)

				sleepUntil(start.Add(first - time.Nanosecond))
				if n := len(r.Calls()); n != 0 {
					t.Fatalf("%d renewals before %v", n, first)
				}
				sleepUntil(start.Add(first))
				wantCallTimes(t, r.Calls(), start, first)
				// Renewed by a request sent at first.
				wantDeadline(t, w, l, start.Add(first+c.ttl-Drift(c.ttl)), true)
				sleepUntil(start.Add(2*first - time.Nanosecond))
				wantCallTimes(t, r.Calls(), start, first)
				sleepUntil(start.Add(2 * first))
				wantCallTimes(t, r.Calls(), start, first, 2*first)
				if ev := lost.Events(); len(ev) != 0 {
					t.Fatalf("lost: %+v", ev)
				}
			})
		})
	}
}

func TestRenewFractionPastDeadline(t *testing.T) {
	// With fraction 0.999, a 1 s lease would be renewed at 999 ms, after its deadline
	// (988 ms): the watchdog does not renew it and reports it lost at the deadline.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r, WithRenewFraction(0.999))
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		sleepUntil(start.Add(2 * time.Second))
		if n := len(r.Calls()); n != 0 {
			t.Fatalf("%d renewals", n)
		}
		ev := lost.of(l)
		if len(ev) != 1 || !errors.Is(ev[0].cause, ErrExpired) || !ev[0].at.Equal(start.Add(life1s)) {
			t.Fatalf("lost = %+v, want ErrExpired at %v", ev, life1s)
		}
	})
}

func TestKeepsLeaseAliveFarPastTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)

		sleepUntil(start.Add(10 * time.Second))
		calls := r.Calls()
		want := make([]time.Duration, 15) // 15 * 666.666666 ms = 9.99999999 s
		for i := range want {
			want[i] = time.Duration(i+1) * renewAt1s
		}
		wantCallTimes(t, calls, start, want...)
		for i, c := range calls {
			if len(c.leases) != 1 || c.leases[0] != l {
				t.Fatalf("call %d leases = %v", i, c.leases)
			}
			// The context ends at the lease's deadline as it stood when the renewal was sent.
			prev := start
			if i > 0 {
				prev = calls[i-1].at
			}
			if !c.hasDL || !c.deadline.Equal(prev.Add(life1s)) {
				t.Fatalf("call %d ctx deadline = %v (%v), want %v", i, c.deadline, c.hasDL, prev.Add(life1s))
			}
		}
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost: %+v", ev)
		}
		wantDeadline(t, w, l, calls[14].at.Add(life1s), true)
		if w.Len() != 1 {
			t.Fatalf("Len = %d", w.Len())
		}
	})
}

func TestAddWithOldSentRenewsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		sent := start.Add(-800 * time.Millisecond) // renewal was due at -133 ms
		mustAdd(t, w, l, sent)
		synctest.Wait()
		wantCallTimes(t, r.Calls(), start, 0)
		wantDeadline(t, w, l, start.Add(life1s), true)
		if c := r.Calls()[0]; !c.deadline.Equal(sent.Add(life1s)) {
			t.Fatalf("ctx deadline = %v, want %v", c.deadline, sent.Add(life1s))
		}
	})
}

func TestEarlierLeaseWakesScheduler(t *testing.T) {
	// The loop sleeps until the first lease's renewal (6.67 s); adding a lease due earlier
	// must wake it.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		long := lost.lease(10*time.Second, true)
		mustAdd(t, w, long, start)
		sleepUntil(start.Add(100 * time.Millisecond))
		short := lost.lease(ttl1s, true)
		mustAdd(t, w, short, time.Now())
		sleepUntil(start.Add(100*time.Millisecond + renewAt1s))
		calls := r.Calls()
		if len(calls) != 1 || !calls[0].has(short) || calls[0].at.Sub(start) != 100*time.Millisecond+renewAt1s {
			t.Fatalf("calls = %+v, want the short lease renewed at 766.67ms", calls)
		}
		// A fixed lease with an earlier deadline wakes it too.
		fixed := lost.lease(100*time.Millisecond, false)
		at := time.Now()
		mustAdd(t, w, fixed, at)
		sleepUntil(at.Add(time.Second))
		ev := lost.of(fixed)
		if len(ev) != 1 || !ev[0].at.Equal(at.Add(97*time.Millisecond)) {
			t.Fatalf("fixed lost = %+v, want at +97ms", ev)
		}
	})
}

func TestValidityCountedFromSend(t *testing.T) {
	// The Renewer takes 300 ms to confirm: the new deadline counts from the send.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		r.set(func(ctx context.Context, leases []*Lease) []error {
			time.Sleep(300 * time.Millisecond)
			return make([]error, len(leases))
		})
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)

		sleepUntil(start.Add(renewAt1s + 299*time.Millisecond))
		wantDeadline(t, w, l, start.Add(life1s), true) // not confirmed yet
		sleepUntil(start.Add(renewAt1s + 300*time.Millisecond))
		wantDeadline(t, w, l, start.Add(renewAt1s+life1s), true)

		// The next renewal is 2/3 of the lease after the previous send, not its reply.
		sleepUntil(start.Add(2*renewAt1s + 300*time.Millisecond))
		wantCallTimes(t, r.Calls(), start, renewAt1s, 2*renewAt1s)
		wantDeadline(t, w, l, start.Add(2*renewAt1s+life1s), true)
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost: %+v", ev)
		}
	})
}

func TestReplyAfterDeadlineDoesNotResurrect(t *testing.T) {
	// A renewal confirmed only after the deadline (the Renewer ignores its context) is too
	// late: the lease was lost at its deadline and stays lost.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		release := make(chan struct{})
		r := &fakeRenewer{}
		r.set(func(_ context.Context, leases []*Lease) []error {
			<-release
			return make([]error, len(leases))
		})
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		sleepUntil(start.Add(life1s - time.Nanosecond))
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost early: %+v", ev)
		}
		sleepUntil(start.Add(life1s))
		ev := lost.of(l)
		if len(ev) != 1 || !errors.Is(ev[0].cause, ErrExpired) || !ev[0].at.Equal(start.Add(life1s)) {
			t.Fatalf("lost = %+v, want ErrExpired at the deadline", ev)
		}
		wantDeadline(t, w, l, time.Time{}, false)

		sleepUntil(start.Add(5 * time.Second))
		close(release)
		synctest.Wait()
		wantDeadline(t, w, l, time.Time{}, false)
		if w.Len() != 0 || len(lost.Events()) != 1 {
			t.Fatalf("Len = %d, lost = %+v", w.Len(), lost.Events())
		}
		sleepUntil(start.Add(10 * time.Second))
		if n := len(r.Calls()); n != 1 {
			t.Fatalf("%d renewals, want 1", n)
		}
	})
}

// ---------------------------------------------------------------------------------------------
// Many leases, one goroutine.

func TestBatchesOfManyLeases(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  []Option
		batch int
		n     int
	}{
		{"default batch", nil, DefaultBatchSize, 10000},
		{"batch 100", []Option{WithBatchSize(100)}, 100, 10000},
		{"batch 1", []Option{WithBatchSize(1)}, 1, 1000},
		{"batch above count", []Option{WithBatchSize(20000)}, 20000, 10000},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := c.n
				var lost lostLog
				r := &fakeRenewer{}
				w := newWD(t, r, c.opts...)
				start := time.Now()
				leases := make([]*Lease, n)
				for i := range leases {
					leases[i] = lost.lease(ttl1s, true)
					mustAdd(t, w, leases[i], start)
				}
				if w.Len() != n {
					t.Fatalf("Len = %d", w.Len())
				}
				wantBatches := (n + c.batch - 1) / c.batch
				for round := 1; round <= 3; round++ {
					before := len(r.Calls())
					sleepUntil(start.Add(time.Duration(round) * renewAt1s))
					calls := r.Calls()[before:]
					if len(calls) != wantBatches {
						t.Fatalf("round %d: %d calls, want %d", round, len(calls), wantBatches)
					}
					seen := make(map[*Lease]bool, n)
					for _, call := range calls {
						if len(call.leases) == 0 || len(call.leases) > c.batch {
							t.Fatalf("round %d: batch of %d, limit %d", round, len(call.leases), c.batch)
						}
						if call.at.Sub(start) != time.Duration(round)*renewAt1s {
							t.Fatalf("round %d: call at %v", round, call.at.Sub(start))
						}
						for _, l := range call.leases {
							if seen[l] {
								t.Fatalf("round %d: lease renewed twice", round)
							}
							seen[l] = true
						}
					}
					if len(seen) != n {
						t.Fatalf("round %d: %d leases renewed, want %d", round, len(seen), n)
					}
				}
				if ev := lost.Events(); len(ev) != 0 {
					t.Fatalf("%d lost", len(ev))
				}
			})
		})
	}
}

func TestOneGoroutineWhateverTheLeaseCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10000
		var lost lostLog
		gate := make(chan struct{})
		r := &fakeRenewer{}
		r.set(func(_ context.Context, leases []*Lease) []error {
			<-gate
			return make([]error, len(leases))
		})
		w := newWD(t, r)
		synctest.Wait()
		wantWatchdogGoroutines(t, "after New", 0, 0)
		start := time.Now()
		mustAdd(t, w, lost.lease(ttl1s, true), start)
		synctest.Wait()
		wantWatchdogGoroutines(t, "with 1 lease", 1, 0)
		one := runtime.NumGoroutine()
		for range n - 1 {
			mustAdd(t, w, lost.lease(ttl1s, true), start)
		}
		synctest.Wait()
		wantWatchdogGoroutines(t, "with 10000 leases", 1, 0)
		// The process-wide count too (with slack for goroutines outside the bubble).
		if g := runtime.NumGoroutine(); g > one+2 {
			t.Fatalf("NumGoroutine grew from %d with 1 lease to %d with %d", one, g, n)
		}

		// While a round of renewals is on the wire: one renewal goroutine, whatever the
		// number of batches, and one call in flight.
		sleepUntil(start.Add(renewAt1s))
		wantWatchdogGoroutines(t, "during renewal", 1, 1)
		if got := len(r.Calls()); got != 1 {
			t.Fatalf("%d renewal calls in flight, want 1", got)
		}
		close(gate)
		synctest.Wait()
		wantWatchdogGoroutines(t, "after renewal", 1, 0)
		w.Close()
		synctest.Wait()
		wantWatchdogGoroutines(t, "after Close", 0, 0)
	})
}

// watchdogGoroutines counts the goroutines running the scheduler loop and renewal calls.
func watchdogGoroutines() (loops, renewals int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "watchdog.(*Watchdog).loop("):
			loops++
		case strings.Contains(g, "watchdog.(*Watchdog).renewPending("):
			renewals++
		}
	}
	return loops, renewals
}

func wantWatchdogGoroutines(t *testing.T, when string, loops, renewals int) {
	t.Helper()
	if l, r := watchdogGoroutines(); l != loops || r != renewals {
		t.Fatalf("%s: %d loop and %d renewal goroutines, want %d and %d", when, l, r, loops, renewals)
	}
}

func TestCtxDeadlineIsEarliestOfBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		a := lost.lease(3*time.Second, true) // renew at 2 s, deadline 3 s - 32 ms
		mustAdd(t, w, a, start)
		sleepUntil(start.Add(time.Second))
		b := lost.lease(1500*time.Millisecond, true) // renew at 1 s + 1 s, deadline 1 s + 1.5 s - 17 ms
		mustAdd(t, w, b, time.Now())
		sleepUntil(start.Add(2 * time.Second))
		calls := r.Calls()
		if len(calls) != 1 || len(calls[0].leases) != 2 {
			t.Fatalf("calls = %+v, want one batch of both leases", calls)
		}
		if want := start.Add(2500*time.Millisecond - 17*time.Millisecond); !calls[0].deadline.Equal(want) {
			t.Fatalf("ctx deadline = %v, want %v", calls[0].deadline.Sub(start), want.Sub(start))
		}
	})
}

// ---------------------------------------------------------------------------------------------
// Remove.

func TestRemoveStopsRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		other := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		mustAdd(t, w, other, start)

		sleepUntil(start.Add(3*renewAt1s + time.Millisecond))
		if n := len(r.callsWith(l)); n != 3 {
			t.Fatalf("%d renewals before Remove, want 3", n)
		}
		if !w.Remove(l) {
			t.Fatal("Remove = false for a registered lease")
		}
		removedAt := time.Now()
		if w.Remove(l) {
			t.Fatal("second Remove = true")
		}
		wantDeadline(t, w, l, time.Time{}, false)
		if w.Len() != 1 {
			t.Fatalf("Len = %d, want 1", w.Len())
		}
		sleepUntil(start.Add(20 * time.Second))
		for _, c := range r.callsWith(l) {
			if !c.at.Before(removedAt) {
				t.Fatalf("renewal of a removed lease started at %v, Remove returned at %v", c.at.Sub(start), removedAt.Sub(start))
			}
		}
		if ev := lost.of(l); len(ev) != 0 {
			t.Fatalf("OnLost after Remove: %+v", ev)
		}
		if n := len(r.callsWith(other)); n != 30 { // 20 s / 666.67 ms
			t.Fatalf("other lease renewed %d times, want 30", n)
		}
	})
}

func TestRemoveExactlyWhenDue(t *testing.T) {
	// Remove at the very instant of the renewal, from the goroutine that sleeps until then:
	// either the renewal was started first, or it is never started.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		var removed atomic.Bool
		var violation atomic.Bool
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		r.set(func(_ context.Context, leases []*Lease) []error {
			if removed.Load() && slices.Contains(leases, l) {
				violation.Store(true)
			}
			return make([]error, len(leases))
		})
		mustAdd(t, w, l, start)
		time.Sleep(renewAt1s)
		if !w.Remove(l) {
			t.Fatal("Remove = false")
		}
		removed.Store(true)
		sleepUntil(start.Add(5 * time.Second))
		if n := len(r.callsWith(l)); n > 1 {
			t.Fatalf("%d renewals after a Remove at the due time", n)
		}
		if violation.Load() {
			t.Log("renewal taken for sending just before Remove entered the Renewer after it")
		}
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost: %+v", ev)
		}
	})
}

func TestRemoveBetweenCollectAndSend(t *testing.T) {
	// Lease f (fixed) expires at the instant lease r is due for renewal. f's OnLost removes r:
	// it runs on the scheduler after r was picked for renewal but before the renewal was sent.
	// Remove returned true, so r's renewal must not be sent.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		f := lost.lease(ttl1s, false) // deadline at 988 ms
		rl := lost.lease(ttl1s, true) // added at 321.33 ms: renewal due at 988 ms
		var removeResult atomic.Int32
		f.OnLost = func(*Lease, error) {
			if w.Remove(rl) {
				removeResult.Store(1)
			} else {
				removeResult.Store(2)
			}
		}
		mustAdd(t, w, f, start)
		sleepUntil(start.Add(life1s - renewAt1s))
		mustAdd(t, w, rl, time.Now())

		sleepUntil(start.Add(5 * time.Second))
		if removeResult.Load() != 1 {
			t.Fatalf("Remove in OnLost: result %d, want true", removeResult.Load())
		}
		if calls := r.callsWith(rl); len(calls) != 0 {
			t.Fatalf("removed lease sent for renewal %d times (first at %v)", len(calls), calls[0].at.Sub(start))
		}
		if ev := lost.of(rl); len(ev) != 0 {
			t.Fatalf("OnLost of removed lease: %+v", ev)
		}
	})
}

func TestRemoveOfLeaseLostInSameRound(t *testing.T) {
	// Two fixed leases expire together; the first's OnLost removes the second. The second is
	// already lost, so Remove reports false and its OnLost runs (as documented).
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		w := newWD(t, &fakeRenewer{})
		start := time.Now()
		a, b := lost.lease(ttl1s, false), lost.lease(ttl1s, false)
		var results []bool
		var mu sync.Mutex
		onA, onB := a.OnLost, b.OnLost
		a.OnLost = func(l *Lease, c error) {
			mu.Lock()
			results = append(results, w.Remove(b))
			mu.Unlock()
			onA(l, c)
		}
		b.OnLost = func(l *Lease, c error) {
			mu.Lock()
			results = append(results, w.Remove(a))
			mu.Unlock()
			onB(l, c)
		}
		mustAdd(t, w, a, start)
		mustAdd(t, w, b, start)
		sleepUntil(start.Add(2 * time.Second))
		if !slices.Equal(results, []bool{false, false}) {
			t.Fatalf("Remove results = %v", results)
		}
		if len(lost.of(a)) != 1 || len(lost.of(b)) != 1 {
			t.Fatalf("lost = %+v", lost.Events())
		}
	})
}

func TestRemoveWhileRenewalInFlight(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply error
	}{
		{"reply ok", nil},
		{"reply gone", ErrGone},
		{"reply transient", errors.New("timeout")},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var lost lostLog
				release := make(chan struct{})
				r := &fakeRenewer{}
				r.set(func(_ context.Context, leases []*Lease) []error {
					<-release
					return all(c.reply)(context.Background(), leases)
				})
				w := newWD(t, r)
				start := time.Now()
				l := lost.lease(ttl1s, true)
				mustAdd(t, w, l, start)
				sleepUntil(start.Add(renewAt1s + 100*time.Millisecond))
				if n := len(r.Calls()); n != 1 {
					t.Fatalf("%d calls, want 1 in flight", n)
				}
				if !w.Remove(l) {
					t.Fatal("Remove = false during a renewal")
				}
				close(release)
				synctest.Wait()
				wantDeadline(t, w, l, time.Time{}, false)
				if w.Len() != 0 {
					t.Fatalf("Len = %d", w.Len())
				}
				sleepUntil(start.Add(10 * time.Second))
				if n := len(r.Calls()); n != 1 {
					t.Fatalf("%d calls, want 1", n)
				}
				if ev := lost.Events(); len(ev) != 0 {
					t.Fatalf("OnLost after Remove: %+v", ev)
				}
			})
		})
	}
}

func TestReAddIgnoresStaleReply(t *testing.T) {
	// A lease removed while its renewal is in flight and added again (a fresh grant) must not
	// be affected by the old renewal's reply.
	for _, c := range []struct {
		name  string
		reply error
	}{
		{"stale gone", ErrGone},
		{"stale ok", nil},
		{"stale transient", errors.New("timeout")},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var lost lostLog
				release := make(chan struct{})
				var first atomic.Bool
				first.Store(true)
				r := &fakeRenewer{}
				r.set(func(_ context.Context, leases []*Lease) []error {
					if first.CompareAndSwap(true, false) {
						<-release
						return all(c.reply)(context.Background(), leases)
					}
					return make([]error, len(leases))
				})
				w := newWD(t, r)
				start := time.Now()
				l := lost.lease(ttl1s, true)
				mustAdd(t, w, l, start)
				sleepUntil(start.Add(700 * time.Millisecond)) // first renewal in flight
				if !w.Remove(l) {
					t.Fatal("Remove = false")
				}
				regrant := time.Now()
				mustAdd(t, w, l, regrant)
				close(release)
				synctest.Wait()
				if ev := lost.Events(); len(ev) != 0 {
					t.Fatalf("stale reply of the old registration lost the new one: %+v", ev)
				}
				wantDeadline(t, w, l, regrant.Add(life1s), true)

				// The new registration renews on its own schedule: 2/3 after the re-grant.
				sleepUntil(regrant.Add(renewAt1s))
				wantCallTimes(t, r.Calls(), start, renewAt1s, 700*time.Millisecond+renewAt1s)
				wantDeadline(t, w, l, regrant.Add(renewAt1s+life1s), true)
				sleepUntil(start.Add(5 * time.Second))
				if ev := lost.Events(); len(ev) != 0 {
					t.Fatalf("lost: %+v", ev)
				}
			})
		})
	}
}

func TestReAddAfterRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		sleepUntil(start.Add(100 * time.Millisecond))
		if !w.Remove(l) {
			t.Fatal("Remove = false")
		}
		sleepUntil(start.Add(2 * time.Second))
		if n := len(r.Calls()); n != 0 {
			t.Fatalf("%d renewals of a removed lease", n)
		}
		mustAdd(t, w, l, time.Now())
		sleepUntil(start.Add(2*time.Second + renewAt1s))
		wantCallTimes(t, r.Calls(), start, 2*time.Second+renewAt1s)
	})
}

// ---------------------------------------------------------------------------------------------
// Loss.

func TestGoneIsLostOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		gone := fmt.Errorf("renew script said 0: %w", ErrGone)
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		a, b, c := lost.lease(ttl1s, true), lost.lease(ttl1s, true), lost.lease(ttl1s, true)
		r.set(func(_ context.Context, leases []*Lease) []error {
			errs := make([]error, len(leases))
			for i, l := range leases {
				if l == b {
					errs[i] = gone
				}
			}
			return errs
		})
		for _, l := range []*Lease{a, b, c} {
			mustAdd(t, w, l, start)
		}
		sleepUntil(start.Add(renewAt1s))
		calls := r.Calls()
		if len(calls) != 1 || len(calls[0].leases) != 3 {
			t.Fatalf("calls = %+v, want one batch of 3", calls)
		}
		ev := lost.Events()
		if len(ev) != 1 || ev[0].l != b || ev[0].cause != gone || !errors.Is(ev[0].cause, ErrGone) {
			t.Fatalf("lost = %+v, want b with the Renewer's error", ev)
		}
		if !ev[0].at.Equal(start.Add(renewAt1s)) {
			t.Fatalf("lost at %v, want at once", ev[0].at.Sub(start))
		}
		wantDeadline(t, w, b, time.Time{}, false)
		if w.Len() != 2 {
			t.Fatalf("Len = %d, want 2", w.Len())
		}
		if w.Remove(b) {
			t.Fatal("Remove of a lost lease = true")
		}

		sleepUntil(start.Add(10 * time.Second))
		if len(lost.Events()) != 1 {
			t.Fatalf("lost = %+v, want only b once", lost.Events())
		}
		if n := len(r.callsWith(b)); n != 1 {
			t.Fatalf("gone lease sent %d times", n)
		}
		if n := len(r.callsWith(a)); n != 15 {
			t.Fatalf("a renewed %d times, want 15", n)
		}
		for _, call := range r.Calls()[1:] {
			if len(call.leases) != 2 {
				t.Fatalf("batch %v", call.leases)
			}
		}
	})
}

func TestTransientRetriedUntilDeadline(t *testing.T) {
	cases := []struct {
		name  string
		ttl   time.Duration
		opts  []Option
		retry time.Duration // expected pause between attempts
	}{
		{"ttl/10 bound", ttl1s, nil, retry1s},
		{"retry option bound", ttl1s, []Option{WithRetryInterval(30 * time.Millisecond)}, 30 * time.Millisecond},
		{"default retry bound", 30 * time.Second, nil, DefaultRetryInterval},
		{"large retry option", ttl1s, []Option{WithRetryInterval(time.Hour)}, retry1s},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var lost lostLog
				r := &fakeRenewer{}
				r.set(all(errors.New("connection refused")))
				w := newWD(t, r, c.opts...)
				start := time.Now()
				l := lost.lease(c.ttl, true)
				mustAdd(t, w, l, start)
				first := time.Duration(float64(c.ttl) * DefaultRenewFraction)
				deadline := start.Add(c.ttl - Drift(c.ttl))

				sleepUntil(deadline.Add(-time.Nanosecond))
				if ev := lost.Events(); len(ev) != 0 {
					t.Fatalf("lost before the deadline: %+v", ev)
				}
				sleepUntil(deadline)
				ev := lost.of(l)
				if len(ev) != 1 || !errors.Is(ev[0].cause, ErrExpired) || !ev[0].at.Equal(deadline) {
					t.Fatalf("lost = %+v, want ErrExpired at %v", ev, deadline.Sub(start))
				}
				calls := r.Calls()
				var want []time.Duration
				for at := first; start.Add(at).Before(deadline); at += c.retry {
					want = append(want, at)
				}
				wantCallTimes(t, calls, start, want...)
				for _, call := range calls {
					if !call.deadline.Equal(deadline) {
						t.Fatalf("ctx deadline %v, want %v", call.deadline.Sub(start), deadline.Sub(start))
					}
				}
				wantDeadline(t, w, l, time.Time{}, false)
				sleepUntil(start.Add(10 * c.ttl))
				if len(r.Calls()) != len(calls) || len(lost.Events()) != 1 {
					t.Fatalf("activity after loss: %d calls, %d lost", len(r.Calls()), len(lost.Events()))
				}
			})
		})
	}
}

func TestTransientThenRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		var n atomic.Int32
		r := &fakeRenewer{}
		r.set(func(ctx context.Context, leases []*Lease) []error {
			if n.Add(1) <= 2 {
				return all(errors.New("timeout"))(ctx, leases)
			}
			return make([]error, len(leases))
		})
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		sleepUntil(start.Add(renewAt1s + 2*retry1s))
		third := renewAt1s + 2*retry1s // 868.67 ms, succeeds
		wantCallTimes(t, r.Calls(), start, renewAt1s, renewAt1s+retry1s, third)
		wantDeadline(t, w, l, start.Add(third+life1s), true)
		sleepUntil(start.Add(third + renewAt1s))
		wantCallTimes(t, r.Calls(), start, renewAt1s, renewAt1s+retry1s, third, third+renewAt1s)
		sleepUntil(start.Add(5 * time.Second))
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost: %+v", ev)
		}
	})
}

func TestExpiredWhileRenewHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		var ctxErr atomic.Value
		r := &fakeRenewer{}
		r.set(func(ctx context.Context, leases []*Lease) []error {
			<-ctx.Done()
			ctxErr.Store(ctx.Err())
			return all(ctx.Err())(ctx, leases)
		})
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		sleepUntil(start.Add(life1s - time.Nanosecond))
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost early: %+v", ev)
		}
		sleepUntil(start.Add(life1s))
		ev := lost.of(l)
		if len(ev) != 1 || !errors.Is(ev[0].cause, ErrExpired) || !ev[0].at.Equal(start.Add(life1s)) {
			t.Fatalf("lost = %+v, want ErrExpired at the deadline", ev)
		}
		if err, _ := ctxErr.Load().(error); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Renew ctx ended with %v, want DeadlineExceeded", err)
		}
		sleepUntil(start.Add(5 * time.Second))
		wantCallTimes(t, r.Calls(), start, renewAt1s)
		if len(lost.Events()) != 1 || w.Len() != 0 {
			t.Fatalf("lost %d, Len %d", len(lost.Events()), w.Len())
		}
	})
}

func TestGoneWhileDeadlineRacesIsLostOnce(t *testing.T) {
	// The Renewer answers ErrGone exactly at the deadline: whichever goroutine sees the loss
	// first, OnLost runs once.
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		r.set(func(ctx context.Context, leases []*Lease) []error {
			<-ctx.Done()
			return all(ErrGone)(ctx, leases)
		})
		w := newWD(t, r)
		start := time.Now()
		l := lost.lease(ttl1s, true)
		mustAdd(t, w, l, start)
		sleepUntil(start.Add(3 * time.Second))
		ev := lost.of(l)
		if len(ev) != 1 || !ev[0].at.Equal(start.Add(life1s)) {
			t.Fatalf("lost = %+v, want once at the deadline", ev)
		}
		if !errors.Is(ev[0].cause, ErrExpired) && !errors.Is(ev[0].cause, ErrGone) {
			t.Fatalf("cause = %v", ev[0].cause)
		}
	})
}

func TestFixedLeaseWatchedOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		fixed := lost.lease(ttl1s, false)
		fixed2 := lost.lease(5*time.Second, false)
		renewing := lost.lease(ttl1s, true)
		mustAdd(t, w, fixed, start)
		mustAdd(t, w, fixed2, start)
		mustAdd(t, w, renewing, start)
		wantDeadline(t, w, fixed, start.Add(life1s), true)

		sleepUntil(start.Add(life1s - time.Nanosecond))
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost early: %+v", ev)
		}
		sleepUntil(start.Add(life1s))
		ev := lost.of(fixed)
		if len(ev) != 1 || !errors.Is(ev[0].cause, ErrExpired) || !ev[0].at.Equal(start.Add(life1s)) {
			t.Fatalf("fixed lost = %+v, want ErrExpired at %v", ev, life1s)
		}
		wantDeadline(t, w, fixed, time.Time{}, false)

		sleepUntil(start.Add(10 * time.Second))
		ev = lost.of(fixed2)
		if want := start.Add(5*time.Second - Drift(5*time.Second)); len(ev) != 1 || !ev[0].at.Equal(want) {
			t.Fatalf("fixed2 lost = %+v, want at %v", ev, want.Sub(start))
		}
		if len(r.callsWith(fixed)) != 0 || len(r.callsWith(fixed2)) != 0 {
			t.Fatal("a fixed lease was sent to the Renewer")
		}
		if n := len(r.callsWith(renewing)); n != 15 {
			t.Fatalf("renewing lease renewed %d times, want 15", n)
		}
		if len(lost.of(renewing)) != 0 || len(lost.Events()) != 2 {
			t.Fatalf("lost = %+v", lost.Events())
		}
		if w.Len() != 1 {
			t.Fatalf("Len = %d, want 1", w.Len())
		}
	})
}

func TestTooFewResultsIsTransient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		a, b := lost.lease(ttl1s, true), lost.lease(ttl1s, true)
		mustAdd(t, w, a, start)
		mustAdd(t, w, b, start)
		// Only the first lease of each batch gets an answer (success); extra results are
		// ignored.
		r.set(func(_ context.Context, leases []*Lease) []error {
			if len(leases) == 1 {
				return []error{nil, ErrGone, ErrGone}
			}
			return []error{nil}
		})
		sleepUntil(start.Add(renewAt1s))
		calls := r.Calls()
		if len(calls) != 1 {
			t.Fatalf("%d calls", len(calls))
		}
		answered, unanswered := calls[0].leases[0], calls[0].leases[1]
		wantDeadline(t, w, answered, start.Add(renewAt1s+life1s), true)
		wantDeadline(t, w, unanswered, start.Add(life1s), true)
		// The unanswered lease is retried after retry1s, alone (and renewed).
		sleepUntil(start.Add(renewAt1s + retry1s))
		calls = r.Calls()
		if len(calls) != 2 || len(calls[1].leases) != 1 || calls[1].leases[0] != unanswered {
			t.Fatalf("calls = %+v, want a retry of the unanswered lease", calls)
		}
		wantDeadline(t, w, unanswered, start.Add(renewAt1s+retry1s+life1s), true)
		if ev := lost.Events(); len(ev) != 0 {
			t.Fatalf("lost: %+v", ev)
		}

		// No answer at all: retried, then expired.
		r.set(func(context.Context, []*Lease) []error { return nil })
		sleepUntil(start.Add(10 * time.Second))
		if ev := lost.Events(); len(ev) != 2 || !errors.Is(ev[0].cause, ErrExpired) || !errors.Is(ev[1].cause, ErrExpired) {
			t.Fatalf("lost = %+v, want both expired", ev)
		}
		if w.Len() != 0 {
			t.Fatalf("Len = %d", w.Len())
		}
	})
}

// ---------------------------------------------------------------------------------------------
// Close.

func TestClose(t *testing.T) {
	t.Run("drops leases without OnLost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var lost lostLog
			r := &fakeRenewer{}
			w := newWD(t, r)
			start := time.Now()
			leases := []*Lease{lost.lease(ttl1s, true), lost.lease(ttl1s, false), lost.lease(time.Minute, true)}
			for _, l := range leases {
				mustAdd(t, w, l, start)
			}
			sleepUntil(start.Add(100 * time.Millisecond))
			w.Close()
			synctest.Wait() // let the exited goroutines go
			wantWatchdogGoroutines(t, "after Close", 0, 0)
			if w.Len() != 0 {
				t.Fatalf("Len = %d", w.Len())
			}
			for _, l := range leases {
				wantDeadline(t, w, l, time.Time{}, false)
				if w.Remove(l) {
					t.Fatal("Remove after Close = true")
				}
			}
			if err := w.Add(lost.lease(ttl1s, true), time.Now()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Add after Close = %v, want ErrClosed", err)
			}
			w.Close() // idempotent
			time.Sleep(time.Minute)
			if ev := lost.Events(); len(ev) != 0 {
				t.Fatalf("OnLost after Close: %+v", ev)
			}
			if n := len(r.Calls()); n != 0 {
				t.Fatalf("%d renewals", n)
			}
		})
	})

	t.Run("before any Add", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var lost lostLog
			w := newWD(t, &fakeRenewer{})
			w.Close()
			l := lost.lease(ttl1s, true)
			if err := w.Add(l, time.Now()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Add after Close = %v, want ErrClosed", err)
			}
			wantDeadline(t, w, l, time.Time{}, false)
			if w.started {
				t.Fatal("Add after Close started the loop")
			}
		})
	})

	t.Run("cancels renewals in flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var lost lostLog
			var ctxErr atomic.Value
			r := &fakeRenewer{}
			r.set(func(ctx context.Context, leases []*Lease) []error {
				<-ctx.Done()
				ctxErr.Store(ctx.Err())
				return all(ErrGone)(ctx, leases) // must not reach OnLost: dropped by Close
			})
			w := newWD(t, r)
			start := time.Now()
			l := lost.lease(ttl1s, true)
			mustAdd(t, w, l, start)
			sleepUntil(start.Add(700 * time.Millisecond))
			if n := len(r.Calls()); n != 1 {
				t.Fatalf("%d calls in flight", n)
			}
			w.Close()
			if !time.Now().Equal(start.Add(700 * time.Millisecond)) {
				t.Fatalf("Close waited until %v", time.Since(start))
			}
			if err, _ := ctxErr.Load().(error); !errors.Is(err, context.Canceled) {
				t.Fatalf("Renew ctx ended with %v, want Canceled", err)
			}
			synctest.Wait() // let the exited goroutines go
			wantWatchdogGoroutines(t, "after Close", 0, 0)
			if ev := lost.Events(); len(ev) != 0 {
				t.Fatalf("OnLost after Close: %+v", ev)
			}
		})
	})

	t.Run("concurrent with Add", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var lost lostLog
			w := newWD(t, &fakeRenewer{})
			var wg sync.WaitGroup
			var added, closed atomic.Int32
			for range 8 {
				wg.Go(func() {
					for range 100 {
						switch err := w.Add(lost.lease(ttl1s, true), time.Now()); {
						case err == nil:
							added.Add(1)
						case errors.Is(err, ErrClosed):
							closed.Add(1)
						default:
							t.Errorf("Add: %v", err)
						}
					}
				})
			}
			w.Close()
			wg.Wait()
			if w.Len() != 0 {
				t.Fatalf("Len after Close = %d (added %d, refused %d)", w.Len(), added.Load(), closed.Load())
			}
			time.Sleep(time.Minute)
			if ev := lost.Events(); len(ev) != 0 {
				t.Fatalf("OnLost after Close: %d", len(ev))
			}
		})
	})
}

func TestDeadlineAndLen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost lostLog
		r := &fakeRenewer{}
		w := newWD(t, r)
		start := time.Now()
		never := lost.lease(ttl1s, true)
		wantDeadline(t, w, never, time.Time{}, false)
		if w.Len() != 0 {
			t.Fatalf("Len = %d", w.Len())
		}
		a := lost.lease(ttl1s, true)
		b := lost.lease(30*time.Second, false)
		mustAdd(t, w, a, start)
		mustAdd(t, w, b, start.Add(-time.Second))
		if w.Len() != 2 {
			t.Fatalf("Len = %d", w.Len())
		}
		wantDeadline(t, w, a, start.Add(life1s), true)
		wantDeadline(t, w, b, start.Add(29*time.Second-302*time.Millisecond), true)
		sleepUntil(start.Add(renewAt1s))
		wantDeadline(t, w, a, start.Add(renewAt1s+life1s), true)
		w.Remove(a)
		if w.Len() != 1 {
			t.Fatalf("Len = %d", w.Len())
		}
		sleepUntil(start.Add(time.Minute))
		if w.Len() != 0 || len(lost.of(b)) != 1 {
			t.Fatalf("Len = %d, lost = %+v", w.Len(), lost.Events())
		}
	})
}

// ---------------------------------------------------------------------------------------------
// Real time, under -race.

// TestHammer adds and removes leases from many goroutines while renewals run, with a
// Renewer that succeeds, fails, reports leases gone and stalls at random.
func TestHammer(t *testing.T) {
	const (
		workers  = 16
		duration = 800 * time.Millisecond
		shortTTL = 30 * time.Millisecond
		// Stable leases are always renewed successfully; their TTL leaves ~95 ms of slack
		// for scheduling delays under -race.
		stableTTL = 300 * time.Millisecond
	)
	type state struct {
		removed atomic.Bool  // Remove returned true
		lost    atomic.Int32 // OnLost calls
		stable  bool
	}
	var lateCalls atomic.Int32
	r := &fakeRenewerFunc{fn: func(ctx context.Context, leases []*Lease) []error {
		for _, l := range leases {
			if l.Data.(*state).lost.Load() != 0 {
				// Taken for sending before its deadline passed, entering Renew after: possible
				// (a tiny window), and harmless; only counted.
				lateCalls.Add(1)
			}
		}
		errs := make([]error, len(leases))
		if rand.IntN(20) == 0 {
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		}
		for i, l := range leases {
			s := l.Data.(*state)
			if s.stable {
				continue
			}
			switch rand.IntN(10) {
			case 0:
				errs[i] = fmt.Errorf("wrapped: %w", ErrGone)
			case 1, 2:
				errs[i] = errors.New("transient")
			}
		}
		if rand.IntN(50) == 0 {
			return errs[:len(errs)/2]
		}
		return errs
	}}
	w, err := New(r, WithBatchSize(7), WithRetryInterval(2*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	newLease := func(ttl time.Duration, renew, stable bool) (*Lease, *state) {
		s := &state{stable: stable}
		l := &Lease{TTL: ttl, Renew: renew, Data: s}
		l.OnLost = func(_ *Lease, cause error) {
			if !errors.Is(cause, ErrGone) && !errors.Is(cause, ErrExpired) {
				t.Errorf("OnLost cause %v", cause)
			}
			s.lost.Add(1)
		}
		return l, s
	}

	var stable []*Lease
	var stableStates []*state
	for range 20 {
		l, s := newLease(stableTTL, true, true)
		if err := w.Add(l, time.Now()); err != nil {
			t.Fatal(err)
		}
		stable, stableStates = append(stable, l), append(stableStates, s)
	}

	var (
		mu  sync.Mutex
		all []*state
		wg  sync.WaitGroup
		end = time.Now().Add(duration)
	)
	for range workers {
		wg.Go(func() {
			var mine []*state
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(end) {
				l, s := newLease(shortTTL, rand.IntN(4) != 0, false)
				if err := w.Add(l, time.Now()); err != nil {
					if !errors.Is(err, ErrExpired) {
						t.Errorf("Add: %v", err)
					}
					continue
				}
				mine = append(mine, s)
				w.Len()
				w.Deadline(l)
				time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
				if rand.IntN(5) != 0 {
					if w.Remove(l) {
						s.removed.Store(true)
					}
				}
			}
		})
	}
	wg.Wait()
	for i, l := range stable {
		if !w.Remove(l) {
			t.Errorf("stable lease %d was lost (lost %d times)", i, stableStates[i].lost.Load())
		}
	}
	w.Close()

	var removed, lostN int
	for _, s := range append(all, stableStates...) {
		n := s.lost.Load()
		if n > 1 {
			t.Fatalf("OnLost ran %d times for one lease", n)
		}
		if n == 1 && s.removed.Load() {
			t.Fatal("OnLost ran for a lease whose Remove returned true")
		}
		if s.removed.Load() {
			removed++
		}
		lostN += int(n)
	}
	t.Logf("%d leases: %d removed, %d lost; %d lease renewals entered Renew after the loss",
		len(all), removed, lostN, lateCalls.Load())
	if len(all) == 0 || removed == 0 || lostN == 0 {
		t.Fatal("hammer did not exercise both removal and loss")
	}
}

// fakeRenewerFunc adapts a function (safe for concurrent use) to a Renewer.
type fakeRenewerFunc struct {
	fn func(ctx context.Context, leases []*Lease) []error
}

func (f *fakeRenewerFunc) Renew(ctx context.Context, leases []*Lease) []error {
	return f.fn(ctx, leases)
}

// reportingRenewer renews every lease but gone (ErrGone), and returns a report that sleeps
// for slow and records that it ran.
type reportingRenewer struct {
	gone     *Lease
	slow     time.Duration
	reported atomic.Int32
	order    chan string
}

func (r *reportingRenewer) Renew(ctx context.Context, leases []*Lease) []error {
	errs, _ := r.RenewReport(ctx, leases)
	return errs
}

func (r *reportingRenewer) RenewReport(_ context.Context, leases []*Lease) ([]error, func()) {
	errs := make([]error, len(leases))
	for i, l := range leases {
		if l == r.gone {
			errs[i] = ErrGone
		}
	}
	return errs, func() {
		if r.reported.Add(1) == 1 {
			r.order <- "report"
			time.Sleep(r.slow)
		}
	}
}

// A ReportingRenewer's report runs once its round's results are applied and before the
// lost leases' OnLost: a report that takes longer than what is left of the renewed lease
// does not make the watchdog drop it, and the loss is told after the report.
func TestReportingRenewer_reportAfterResultsApplied(t *testing.T) {
	const ttl = 300 * time.Millisecond
	r := &reportingRenewer{slow: 250 * time.Millisecond, order: make(chan string, 4)}
	w, err := New(r)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	kept := &Lease{TTL: ttl, Renew: true, OnLost: func(*Lease, error) { r.order <- "kept lost" }}
	gone := &Lease{TTL: ttl, Renew: true, OnLost: func(*Lease, error) { r.order <- "gone lost" }}
	r.gone = gone
	now := time.Now()
	if err := w.Add(kept, now); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(gone, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"report", "gone lost"} {
		if got := <-r.order; got != want {
			t.Fatalf("got %q, want %q (the report comes before the round's losses are told)", got, want)
		}
	}
	// The slow report outlasted kept's first lease (renewed at 2/3 of it): kept lives on.
	time.Sleep(2 * ttl)
	select {
	case s := <-r.order:
		t.Fatalf("%s: a lease renewed in the reported round was dropped while the report ran", s)
	default:
	}
	if !w.Remove(kept) {
		t.Fatal("kept is no longer registered")
	}
}
