package relockotel_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/relock-go/relock/internal/redistest"
	relockotel "github.com/relock-go/relock/otel"
	"github.com/relock-go/relock/rlock"
)

// tally is an Observer that keeps the raw events, beside the OpenTelemetry one on the same
// Client: the figures the module exports must be exactly what the events say.
type tally struct {
	mu     sync.Mutex
	events []any
}

func (ta *tally) add(e any) { ta.mu.Lock(); ta.events = append(ta.events, e); ta.mu.Unlock() }

func (ta *tally) all() []any {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return append([]any(nil), ta.events...)
}

func (ta *tally) observer() *rlock.Observer {
	return &rlock.Observer{
		AcquireStart: func(ctx context.Context, e rlock.AcquireStartInfo) context.Context { ta.add(e); return ctx },
		AcquireDone:  func(_ context.Context, e rlock.AcquireDoneInfo) { ta.add(e) },
		ReleaseStart: func(ctx context.Context, e rlock.ReleaseStartInfo) context.Context { ta.add(e); return ctx },
		ReleaseDone:  func(_ context.Context, e rlock.ReleaseDoneInfo) { ta.add(e) },
		HoldEnd:      func(e rlock.HoldEndInfo) { ta.add(e) },
		RenewalRound: func(e rlock.RenewalRoundInfo) { ta.add(e) },
		Replay:       func(e rlock.ReplayInfo) { ta.add(e) },
		Subscription: func(e rlock.SubscriptionInfo) { ta.add(e) },
		GiveBack:     func(e rlock.GiveBackInfo) { ta.add(e) },
	}
}

// backend is a Redis to lock on: miniredis, and a real redis-server.
type backend struct {
	name   string
	client func(t *testing.T) rueidis.Client
}

var backends = []backend{
	{"miniredis", func(t *testing.T) rueidis.Client { _, c := redistest.Miniredis(t); return c }},
	{"redis-server", func(t *testing.T) rueidis.Client { return redistest.Start(t).Client(t) }},
}

// TestE2E_mutex drives a real Mutex through a scenario (a traced cycle with a re-entry,
// busy TryLocks, a waiter granted after a release, a loss, a Close that ends a tenure) on
// miniredis and on redis-server, with the relockotel Observer and a raw tally of events on
// the same Client. The figures are checked twice: against fixed expectations where the
// scenario fixes them (tenures by end cause, losses, busy calls, in-flight counts back to
// zero, the traced spans' parent and token), and against the tally for every point of
// every metric (counts exact, sums of seconds to 1e-9).
func TestE2E_mutex(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rc := b.client(t)
			r := newRig(t)
			ta := &tally{}
			c, err := rlock.New(rc, rlock.WithObserver(r.obs), rlock.WithObserver(ta.observer()),
				rlock.WithWatchdogTimeout(2*time.Second)) // room for a loaded machine: no loss but the one the test makes
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			name := redistest.Name(t)
			m, other := c.Mutex(name), c.Mutex(name)
			bg := context.Background()

			// 1. A traced cycle with a re-entry.
			pctx, parent := r.tp.Tracer("caller").Start(bg, "handler")
			must(t, m.Lock(pctx))
			must(t, m.Lock(pctx))
			tok, err := m.Token(pctx)
			must(t, err)
			must(t, m.Unlock(pctx))
			must(t, m.Unlock(pctx))
			parent.End()

			// 2. Busy: a single attempt, then a bounded wait.
			must(t, other.Lock(bg))
			for _, wait := range []time.Duration{0, 100 * time.Millisecond} {
				if ok, err := m.TryLock(bg, wait, 0); ok || err != nil {
					t.Fatalf("TryLock(%v) while held: (%v, %v)", wait, ok, err)
				}
			}

			// 3. A waiter granted after the release.
			got := make(chan error, 1)
			before := len(ta.all())
			go func() { got <- m.Lock(bg) }()
			redistest.WaitFor(t, 10*time.Second, "the waiter to start", func() bool { return len(ta.all()) > before })
			must(t, other.Unlock(bg))
			select {
			case err := <-got:
				must(t, err)
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter was never granted")
			}
			must(t, m.Unlock(bg))

			// 4. A loss: the key deleted behind the holder's back.
			must(t, m.Lock(bg))
			hctx, cancel := m.HoldContext(bg)
			defer cancel()
			if err := rc.Do(bg, rc.B().Del().Key(m.Key()).Build()).Error(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-hctx.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("the loss was not noticed")
			}
			if err := m.Unlock(bg); err == nil {
				t.Fatal("Unlock after a loss succeeded")
			}

			// 5. Close ends a tenure.
			must(t, m.Lock(bg))
			c.Close()

			events := ta.all()
			snap, _ := r.collect(t)

			// Fixed expectations.
			hold := snap[relockotel.MetricHoldDuration]
			for cause, n := range map[string]uint64{"unlock": 3, "lost": 1, "closed": 1} {
				if h, _ := hold["relock.end_cause="+cause+",relock.kind=mutex"].(hist); h.Count != n {
					t.Errorf("tenures ended by %s: %d, want %d", cause, h.Count, n)
				}
			}
			fixed := map[string]map[string]any{
				relockotel.MetricLosses:         {"relock.kind=mutex": int64(1)},
				relockotel.MetricHoldsActive:    {"relock.kind=mutex": int64(0)},
				relockotel.MetricAcquiresActive: {"relock.kind=mutex": int64(0)},
			}
			for metric, pts := range fixed {
				if !equalPoints(snap[metric], pts) {
					t.Errorf("%s: %s, want %s", metric, show(snap[metric]), show(pts))
				}
			}
			if h, _ := snap[relockotel.MetricAcquireDuration]["relock.kind=mutex,relock.outcome=busy"].(hist); h.Count != 2 {
				t.Errorf("busy acquisitions: %d, want 2", h.Count)
			}

			// Every point against the raw events.
			want := expected(events)
			for name, pts := range want {
				if !closePoints(snap[name], pts) {
					t.Errorf("%s:\n got %s\nwant (from the events) %s", name, show(snap[name]), show(pts))
				}
			}
			for name := range snap {
				if _, ok := want[name]; !ok {
					t.Errorf("metric %s not explained by the events: %s", name, show(snap[name]))
				}
			}

			// Spans: one per call; the traced cycle's four are the caller's children.
			starts := 0
			for _, e := range events {
				switch e.(type) {
				case rlock.AcquireStartInfo, rlock.ReleaseStartInfo:
					starts++
				}
			}
			spans := r.spans.Ended()
			if len(spans) != starts+1 {
				t.Fatalf("%d spans ended, want %d (one per call) + the caller's", len(spans), starts)
			}
			pc := parent.SpanContext()
			children := 0
			for _, sp := range spans {
				if sp.Parent().SpanID() != pc.SpanID() {
					continue
				}
				children++
				if sp.SpanContext().TraceID() != pc.TraceID() {
					t.Errorf("span %s left the caller's trace", sp.Name())
				}
				a := attrs(sp.Attributes())
				if sp.Name() == relockotel.SpanAcquire && a[relockotel.AttrReentered].AsBool() == false {
					if got := a[relockotel.AttrToken].AsInt64(); got != tok {
						t.Errorf("the traced grant's span has token %d, want %d", got, tok)
					}
				}
				if sp.Status().Code != codes.Unset {
					t.Errorf("span %s: status %v", sp.Name(), sp.Status())
				}
			}
			if children != 4 {
				t.Errorf("%d spans under the caller's, want 4 (Lock, Lock, Unlock, Unlock)", children)
			}
			for _, sp := range spans {
				if sp.Name() == relockotel.SpanRelease && sp.Status().Code == codes.Error {
					return // the Unlock after the loss
				}
			}
			t.Errorf("no release span with status Error (the Unlock after the loss)")
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// expected computes, from raw events, every point the Observer must export (the name
// attribute off), by the rules the package documents.
func expected(events []any) snapshot {
	s := snapshot{}
	add := func(metric, key string, v int64) {
		if s[metric] == nil {
			s[metric] = map[string]any{}
		}
		n, _ := s[metric][key].(int64)
		s[metric][key] = n + v
	}
	obs := func(metric, key string, d time.Duration) {
		if s[metric] == nil {
			s[metric] = map[string]any{}
		}
		h, _ := s[metric][key].(hist)
		s[metric][key] = hist{h.Count + 1, h.Sum + d.Seconds()}
	}
	kind := func(k rlock.Kind, extra ...attribute.KeyValue) string {
		return enc(attribute.NewSet(append(extra, relockotel.AttrKind.String(string(k)))...))
	}
	tenure := func(k rlock.Kind) bool {
		switch k {
		case rlock.KindMutex, rlock.KindFairMutex, rlock.KindSpinMutex, rlock.KindReadLock, rlock.KindWriteLock,
			rlock.KindRedLock:
			return true
		}
		return false
	}
	for _, e := range events {
		switch e := e.(type) {
		case rlock.AcquireStartInfo:
			add(relockotel.MetricAcquiresActive, kind(e.Kind), 1)
		case rlock.AcquireDoneInfo:
			add(relockotel.MetricAcquiresActive, kind(e.Kind), -1)
			out := relockotel.AttrOutcome.String(string(e.Outcome))
			if e.Outcome == rlock.OutcomeError {
				obs(relockotel.MetricAcquireDuration, kind(e.Kind, out, relockotel.AttrErrorType.String(errorTypeOf(e.Err))), e.Took)
			} else {
				obs(relockotel.MetricAcquireDuration, kind(e.Kind, out), e.Took)
			}
			if e.Waited {
				obs(relockotel.MetricWaitDuration, kind(e.Kind, out), e.Took)
				add(relockotel.MetricContended, kind(e.Kind, out), 1)
			}
			if e.Outcome == rlock.OutcomeAcquired {
				add(relockotel.MetricGrants, kind(e.Kind, relockotel.AttrReentered.Bool(e.Reentered), relockotel.AttrHandedOff.Bool(e.HandedOff)), 1)
				if !e.Reentered && tenure(e.Kind) {
					add(relockotel.MetricHoldsActive, kind(e.Kind), 1)
				}
			}
		case rlock.ReleaseDoneInfo:
			if e.Err != nil {
				obs(relockotel.MetricReleaseDuration, kind(e.Kind, relockotel.AttrErrorType.String(errorTypeOf(e.Err))), e.Took)
			} else {
				obs(relockotel.MetricReleaseDuration, kind(e.Kind), e.Took)
			}
		case rlock.HoldEndInfo:
			obs(relockotel.MetricHoldDuration, kind(e.Kind, relockotel.AttrEndCause.String(string(e.Cause))), e.Held)
			if tenure(e.Kind) {
				add(relockotel.MetricHoldsActive, kind(e.Kind), -1)
			}
			if e.Cause == rlock.EndLost {
				add(relockotel.MetricLosses, kind(e.Kind), 1)
			}
		case rlock.RenewalRoundInfo:
			obs(relockotel.MetricRenewalDuration, "", e.Took)
			add(relockotel.MetricRenewals, "", int64(e.Leases))
			add(relockotel.MetricRenewalFailures, "", int64(e.Failures))
			add(relockotel.MetricRenewalScripts, "", int64(e.Scripts))
		case rlock.ReplayInfo:
			res := "answered"
			if e.Err != nil {
				res = "unknown"
			}
			add(relockotel.MetricReplays, kind(e.Kind, relockotel.AttrReplayOp.String(e.Op), relockotel.AttrReplayResult.String(res)), 1)
		case rlock.SubscriptionInfo:
			st := "down"
			if e.Up {
				st = "up"
			}
			add(relockotel.MetricSubscriptionChanges, enc(attribute.NewSet(relockotel.AttrSubscriptionState.String(st))), 1)
		case rlock.GiveBackInfo:
			res := "returned"
			if e.Err != nil {
				res = "failed"
			}
			add(relockotel.MetricGiveBacks, kind(e.Kind, relockotel.AttrGiveBackReason.String(string(e.Reason)), relockotel.AttrGiveBackResult.String(res)), 1)
		}
	}
	return s
}

// errorTypeOf is the error.type the package documents for err (the first sentinel err
// wraps, in the documented order).
func errorTypeOf(err error) string {
	for _, t := range []struct {
		err  error
		name string
	}{
		{rlock.ErrUnknownOutcome, "unknown_outcome"}, {rlock.ErrClosed, "closed"}, {rlock.ErrLockLost, "lock_lost"},
		{rlock.ErrLeaseExpired, "lease_expired"}, {rlock.ErrNotHeld, "not_held"}, {rlock.ErrNoReplicaAck, "no_replica_ack"}, {rlock.ErrWrongType, "wrong_type"},
		{rlock.ErrNoPermission, "no_permission"}, {rlock.ErrUpgrade, "upgrade"}, {rlock.ErrInvalid, "invalid"},
		{context.Canceled, "canceled"}, {context.DeadlineExceeded, "deadline_exceeded"},
	} {
		if errors.Is(err, t.err) {
			return t.name
		}
	}
	return "_OTHER"
}

// closePoints is equalPoints with histogram sums compared to 1e-9 (the events' durations
// are added in another order than the SDK's).
func closePoints(got, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		switch w := w.(type) {
		case hist:
			g, ok := got[k].(hist)
			if !ok || g.Count != w.Count || math.Abs(g.Sum-w.Sum) > 1e-9 {
				return false
			}
		default:
			if got[k] != w {
				return false
			}
		}
	}
	return true
}

// plain returns a Client without an Observer on a fresh server of b's kind (a RedLock's
// other masters).
func plain(t *testing.T, b backend) *rlock.Client {
	t.Helper()
	c, err := rlock.New(b.client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestE2E_family runs one cycle of every primitive of the family (the five locks, both
// semaphores, the latch, a MultiLock and a RedLock) on miniredis and redis-server, and
// checks that every point the Observer exports is what the events say, and that the
// figures of what is held or in flight come back to zero for every kind: the kinds the
// module counts as tenures are exactly the ones whose ends the core reports.
func TestE2E_family(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			rc := b.client(t)
			r := newRig(t)
			ta := &tally{}
			c, err := rlock.New(rc, rlock.WithObserver(r.obs), rlock.WithObserver(ta.observer()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			name := redistest.Name(t)
			bg := context.Background()
			type locker interface {
				Lock(context.Context) error
				Unlock(context.Context) error
			}
			rw := c.RWMutex(name + ":rw")
			for _, l := range []locker{c.Mutex(name + ":m"), c.FairMutex(name + ":f"), c.SpinMutex(name + ":s"), rw,
				c.MultiLock(name+":a", name+":b"), rlock.NewRedLock(name+":red", []*rlock.Client{c, plain(t, b), plain(t, b)})} {
				must(t, l.Lock(bg))
				must(t, l.Unlock(bg))
			}
			must(t, rw.RLock(bg))
			must(t, rw.RUnlock(bg))

			sem := c.Semaphore(name + ":sem")
			if _, err := sem.TrySetPermits(bg, 2); err != nil {
				t.Fatal(err)
			}
			must(t, sem.Acquire(bg, 2))
			must(t, sem.Release(bg, 2))
			ps := c.PermitSemaphore(name + ":ps")
			if _, err := ps.TrySetPermits(bg, 1); err != nil {
				t.Fatal(err)
			}
			p, err := ps.Acquire(bg, time.Minute)
			must(t, err)
			must(t, ps.Release(bg, p.ID))
			latch := c.CountDownLatch(name + ":latch")
			if _, err := latch.TrySetCount(bg, 1); err != nil {
				t.Fatal(err)
			}
			must(t, latch.CountDown(bg))
			must(t, latch.Await(bg))
			c.Close()

			snap, _ := r.collect(t)
			want := expected(ta.all())
			for name, pts := range want {
				if !closePoints(snap[name], pts) {
					t.Errorf("%s:\n got %s\nwant (from the events) %s", name, show(snap[name]), show(pts))
				}
			}
			for name := range snap {
				if _, ok := want[name]; !ok {
					t.Errorf("metric %s not explained by the events: %s", name, show(snap[name]))
				}
			}
			for _, metric := range []string{relockotel.MetricHoldsActive, relockotel.MetricAcquiresActive} {
				for k, v := range snap[metric] {
					if v != int64(0) {
						t.Errorf("%s{%s} = %v after every cycle, want 0", metric, k, v)
					}
				}
			}
			kinds := map[string]bool{}
			for k := range snap[relockotel.MetricAcquireDuration] {
				kinds[k] = true
			}
			for _, k := range []rlock.Kind{rlock.KindMutex, rlock.KindFairMutex, rlock.KindSpinMutex, rlock.KindReadLock,
				rlock.KindWriteLock, rlock.KindSemaphore, rlock.KindPermitSemaphore, rlock.KindLatch, rlock.KindMultiLock, rlock.KindRedLock} {
				if !kinds["relock.kind="+string(k)+",relock.outcome=acquired"] {
					t.Errorf("no acquisition of kind %s recorded: %v", k, kinds)
				}
			}
			if got := len(snap[relockotel.MetricHoldsActive]); got != 6 {
				t.Errorf("hold.active has %d kinds, want the 5 locks and the RedLock (their members count for a MultiLock): %s", got, show(snap[relockotel.MetricHoldsActive]))
			}
		})
	}
}
