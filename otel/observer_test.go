package relockotel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	relockotel "github.com/relock-go/relock/otel"
	"github.com/relock-go/relock/rlock"
)

// Durations whose seconds are exact in binary, so that histogram sums compare exactly.
const (
	d125 = 125 * time.Millisecond
	d250 = 250 * time.Millisecond
	d500 = 500 * time.Millisecond
)

// TestObserver_metrics_scripted plays a scripted scenario through the hooks (a contended
// mutex handed off, a re-entry, a busy TryLock, a canceled and a failed acquisition, a loss,
// a late Unlock, semaphore permits, a RedLock, renewal rounds, replays, a subscription
// outage, give-backs) and
// checks every metric's every point: instrument, unit, attribute set, count and sum, with
// the up-down counters also read mid-way.
func TestObserver_metrics_scripted(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	lock := func(kind rlock.Kind, name, owner string, wait time.Duration) rlock.AcquireStartInfo {
		return rlock.AcquireStartInfo{Kind: kind, Name: name, Owner: owner, Wait: wait}
	}
	unlock := rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o1"}

	// o1 takes invoice:1 and re-enters it.
	r.acquire(ctx, lock(rlock.KindMutex, "invoice:1", "o1", -1),
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d125, Attempts: 1, Token: 100})
	r.acquire(ctx, lock(rlock.KindMutex, "invoice:1", "o1", -1),
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d125, Attempts: 1, Reentered: true, Token: 100})
	// o2 starts to wait for it.
	o2 := lock(rlock.KindMutex, "invoice:1", "o2", -1)
	o2ctx := r.obs.AcquireStart(ctx, o2)

	got, metas := r.collect(t)
	expect(t, got, snapshot{
		relockotel.MetricAcquireDuration: {"relock.kind=mutex,relock.outcome=acquired": hist{2, 0.25}},
		relockotel.MetricGrants: {
			"relock.handed_off=false,relock.kind=mutex,relock.reentered=false": int64(1),
			"relock.handed_off=false,relock.kind=mutex,relock.reentered=true":  int64(1),
		},
		relockotel.MetricHoldsActive:    {"relock.kind=mutex": int64(1)},
		relockotel.MetricAcquiresActive: {"relock.kind=mutex": int64(1)},
	})
	for name, want := range map[string]meta{
		relockotel.MetricAcquireDuration: {"s", "histogram"},
		relockotel.MetricGrants:          {"{grant}", "counter"},
		relockotel.MetricHoldsActive:     {"{hold}", "updown"},
		relockotel.MetricAcquiresActive:  {"{call}", "updown"},
	} {
		if metas[name] != want {
			t.Errorf("%s: %+v, want %+v", name, metas[name], want)
		}
	}

	// o1 unlocks twice; the second Unlock frees the lock and hands it to o2.
	r.release(ctx, unlock, rlock.ReleaseDoneInfo{Took: d250})
	r.release(ctx, unlock, rlock.ReleaseDoneInfo{Took: d250, Freed: true, HandedOff: true})
	r.obs.HoldEnd(rlock.HoldEndInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o1", Token: 100, Held: 2 * time.Second, Cause: rlock.EndUnlocked})
	r.obs.AcquireDone(o2ctx, rlock.AcquireDoneInfo{AcquireStartInfo: o2, Outcome: rlock.OutcomeAcquired,
		Took: d500, Attempts: 1, Waited: true, HandedOff: true, Token: 101})

	// Three acquisitions that do not acquire.
	r.acquire(ctx, lock(rlock.KindFairMutex, "report", "o3", time.Second),
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeBusy, Took: time.Second, Attempts: 2, Waited: true})
	r.acquire(ctx, lock(rlock.KindReadLock, "cfg", "o3", -1),
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeCanceled, Err: context.Canceled, Took: d250, Attempts: 1, Waited: true})
	r.acquire(ctx, lock(rlock.KindWriteLock, "cfg", "o3", -1),
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeError, Err: fmt.Errorf("rlock: lock %q: %w", "cfg", rlock.ErrClosed), Took: d125})

	// o2 loses the lock, then unlocks late.
	r.obs.HoldEnd(rlock.HoldEndInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o2", Token: 101, Held: 4 * time.Second,
		Cause: rlock.EndLost, Err: rlock.ErrLockLost})
	r.release(ctx, rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o2"},
		rlock.ReleaseDoneInfo{Took: d125, Err: fmt.Errorf("rlock: unlock %q: %w", "invoice:1", rlock.ErrNotHeld)})

	// An Unlock after a fixed lease ran out.
	r.release(ctx, rlock.ReleaseStartInfo{Kind: rlock.KindFairMutex, Name: "report", Owner: "o3"},
		rlock.ReleaseDoneInfo{Took: d125, Err: fmt.Errorf("rlock: unlock %q: %w", "report", rlock.ErrLeaseExpired)})

	// Counted permits: granted and given back, no tenure.
	r.acquire(ctx, rlock.AcquireStartInfo{Kind: rlock.KindSemaphore, Name: "pool", Owner: "o3", Wait: -1, Permits: 2},
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d125, Attempts: 1})
	r.release(ctx, rlock.ReleaseStartInfo{Kind: rlock.KindSemaphore, Name: "pool", Owner: "o3", Permits: 2},
		rlock.ReleaseDoneInfo{Took: d125})

	// A RedLock's tenure is counted as a lock's: up at the grant, down at its HoldEnd.
	r.acquire(ctx, lock(rlock.KindRedLock, "r", "o3", -1),
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d125})
	r.obs.HoldEnd(rlock.HoldEndInfo{Kind: rlock.KindRedLock, Name: "r", Owner: "o3", Held: time.Second, Cause: rlock.EndClosed})

	// The watchdog, replays, the subscription, give-backs.
	r.obs.RenewalRound(rlock.RenewalRoundInfo{Leases: 3, Scripts: 1, Took: d250})
	r.obs.RenewalRound(rlock.RenewalRoundInfo{Leases: 2, Scripts: 3, Failures: 1, Lost: 1, Took: d500, Err: rlock.ErrLockLost})
	r.obs.Replay(rlock.ReplayInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o1", Op: "acquire", Sends: 2})
	r.obs.Replay(rlock.ReplayInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o1", Op: "release", Sends: 3, Err: rlock.ErrUnknownOutcome})
	r.obs.Subscription(rlock.SubscriptionInfo{Channel: "relock:{invoice:1}:ch", Err: errors.New("connection reset")})
	r.obs.Subscription(rlock.SubscriptionInfo{Channel: "relock:{invoice:1}:ch", Up: true})
	r.obs.GiveBack(rlock.GiveBackInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "o1", Holds: 1, Reason: rlock.GiveBackCanceled})
	r.obs.GiveBack(rlock.GiveBackInfo{Kind: rlock.KindSemaphore, Name: "pool", Holds: 2, Reason: rlock.GiveBackLate, Err: errors.New("i/o timeout")})

	got, metas = r.collect(t)
	expect(t, got, snapshot{
		relockotel.MetricAcquireDuration: {
			"relock.kind=mutex,relock.outcome=acquired":                     hist{3, 0.75},
			"relock.kind=fair_mutex,relock.outcome=busy":                    hist{1, 1},
			"relock.kind=read_lock,relock.outcome=canceled":                 hist{1, 0.25},
			"error.type=closed,relock.kind=write_lock,relock.outcome=error": hist{1, 0.125},
			"relock.kind=semaphore,relock.outcome=acquired":                 hist{1, 0.125},
			"relock.kind=red_lock,relock.outcome=acquired":                  hist{1, 0.125},
		},
		relockotel.MetricWaitDuration: {
			"relock.kind=mutex,relock.outcome=acquired":     hist{1, 0.5},
			"relock.kind=fair_mutex,relock.outcome=busy":    hist{1, 1},
			"relock.kind=read_lock,relock.outcome=canceled": hist{1, 0.25},
		},
		relockotel.MetricContended: {
			"relock.kind=mutex,relock.outcome=acquired":     int64(1),
			"relock.kind=fair_mutex,relock.outcome=busy":    int64(1),
			"relock.kind=read_lock,relock.outcome=canceled": int64(1),
		},
		relockotel.MetricHoldDuration: {
			"relock.end_cause=unlock,relock.kind=mutex":    hist{1, 2},
			"relock.end_cause=lost,relock.kind=mutex":      hist{1, 4},
			"relock.end_cause=closed,relock.kind=red_lock": hist{1, 1},
		},
		relockotel.MetricReleaseDuration: {
			"relock.kind=mutex":                               hist{2, 0.5},
			"error.type=not_held,relock.kind=mutex":           hist{1, 0.125},
			"error.type=lease_expired,relock.kind=fair_mutex": hist{1, 0.125},
			"relock.kind=semaphore":                           hist{1, 0.125},
		},
		relockotel.MetricRenewalDuration: {"": hist{2, 0.75}},
		relockotel.MetricGrants: {
			"relock.handed_off=false,relock.kind=mutex,relock.reentered=false":     int64(1),
			"relock.handed_off=false,relock.kind=mutex,relock.reentered=true":      int64(1),
			"relock.handed_off=true,relock.kind=mutex,relock.reentered=false":      int64(1),
			"relock.handed_off=false,relock.kind=semaphore,relock.reentered=false": int64(1),
			"relock.handed_off=false,relock.kind=red_lock,relock.reentered=false":  int64(1),
		},
		relockotel.MetricLosses:          {"relock.kind=mutex": int64(1)},
		relockotel.MetricRenewals:        {"": int64(5)},
		relockotel.MetricRenewalFailures: {"": int64(1)},
		relockotel.MetricRenewalScripts:  {"": int64(4)},
		relockotel.MetricReplays: {
			"relock.kind=mutex,relock.replay.op=acquire,relock.replay.result=answered": int64(1),
			"relock.kind=mutex,relock.replay.op=release,relock.replay.result=unknown":  int64(1),
		},
		relockotel.MetricSubscriptionChanges: {
			"relock.subscription.state=down": int64(1),
			"relock.subscription.state=up":   int64(1),
		},
		relockotel.MetricGiveBacks: {
			"relock.giveback.reason=canceled,relock.giveback.result=returned,relock.kind=mutex": int64(1),
			"relock.giveback.reason=late,relock.giveback.result=failed,relock.kind=semaphore":   int64(1),
		},
		// Three tenures began and ended; the semaphore's permits report none.
		relockotel.MetricHoldsActive: {"relock.kind=mutex": int64(0), "relock.kind=red_lock": int64(0)},
		relockotel.MetricAcquiresActive: {
			"relock.kind=mutex":      int64(0),
			"relock.kind=fair_mutex": int64(0),
			"relock.kind=read_lock":  int64(0),
			"relock.kind=write_lock": int64(0),
			"relock.kind=semaphore":  int64(0),
			"relock.kind=red_lock":   int64(0),
		},
	})
	want := map[string]meta{
		relockotel.MetricAcquireDuration:     {"s", "histogram"},
		relockotel.MetricWaitDuration:        {"s", "histogram"},
		relockotel.MetricHoldDuration:        {"s", "histogram"},
		relockotel.MetricReleaseDuration:     {"s", "histogram"},
		relockotel.MetricRenewalDuration:     {"s", "histogram"},
		relockotel.MetricGrants:              {"{grant}", "counter"},
		relockotel.MetricContended:           {"{acquisition}", "counter"},
		relockotel.MetricLosses:              {"{loss}", "counter"},
		relockotel.MetricRenewals:            {"{lease}", "counter"},
		relockotel.MetricRenewalFailures:     {"{lease}", "counter"},
		relockotel.MetricRenewalScripts:      {"{script}", "counter"},
		relockotel.MetricReplays:             {"{replay}", "counter"},
		relockotel.MetricSubscriptionChanges: {"{change}", "counter"},
		relockotel.MetricGiveBacks:           {"{giveback}", "counter"},
		relockotel.MetricHoldsActive:         {"{hold}", "updown"},
		relockotel.MetricAcquiresActive:      {"{call}", "updown"},
	}
	for name, w := range want {
		if metas[name] != w {
			t.Errorf("%s: %+v, want %+v", name, metas[name], w)
		}
	}
	if len(metas) != len(want) {
		t.Errorf("%d metrics, want %d", len(metas), len(want))
	}
}

// TestObserver_nameAttribute: the lock's name is on no metric by default, and on exactly
// the per-lock metrics with WithNameAttribute(true).
func TestObserver_nameAttribute(t *testing.T) {
	play := func(r *rig) {
		ctx := context.Background()
		s := rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "invoice:7", Owner: "o", Wait: -1}
		r.acquire(ctx, s, rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d125, Attempts: 1, Token: 1})
		r.obs.HoldEnd(rlock.HoldEndInfo{Kind: rlock.KindMutex, Name: "invoice:7", Owner: "o", Held: time.Second, Cause: rlock.EndUnlocked})
		r.obs.RenewalRound(rlock.RenewalRoundInfo{Leases: 1, Scripts: 1, Took: d125})
	}

	off := newRig(t)
	play(off)
	got, _ := off.collect(t)
	for name, pts := range got {
		for k := range pts {
			if strings.Contains(k, string(relockotel.AttrLockName)) {
				t.Errorf("default: %s has the name attribute: {%s}", name, k)
			}
		}
	}

	on := newRig(t, relockotel.WithNameAttribute(true))
	play(on)
	got, _ = on.collect(t)
	expect(t, got, snapshot{
		relockotel.MetricAcquireDuration: {"relock.kind=mutex,relock.lock.name=invoice:7,relock.outcome=acquired": hist{1, 0.125}},
		relockotel.MetricGrants: {
			"relock.handed_off=false,relock.kind=mutex,relock.lock.name=invoice:7,relock.reentered=false": int64(1),
		},
		relockotel.MetricHoldDuration:    {"relock.end_cause=unlock,relock.kind=mutex,relock.lock.name=invoice:7": hist{1, 1}},
		relockotel.MetricHoldsActive:     {"relock.kind=mutex,relock.lock.name=invoice:7": int64(0)},
		relockotel.MetricAcquiresActive:  {"relock.kind=mutex,relock.lock.name=invoice:7": int64(0)},
		relockotel.MetricRenewalDuration: {"": hist{1, 0.125}},
		relockotel.MetricRenewals:        {"": int64(1)},
		relockotel.MetricRenewalFailures: {"": int64(0)},
		relockotel.MetricRenewalScripts:  {"": int64(1)},
	})
}

// attrs returns a span's attributes as a map.
func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

func wantAttrs(t *testing.T, span string, got []attribute.KeyValue, want ...attribute.KeyValue) {
	t.Helper()
	g, w := attrs(got), attrs(want)
	if len(g) != len(w) {
		t.Errorf("%s: %d attributes %v, want %d %v", span, len(g), got, len(w), want)
	}
	for k, v := range w {
		if g[k] != v {
			t.Errorf("%s: %s = %v, want %v", span, k, g[k].String(), v.String())
		}
	}
}

// TestObserver_spans: acquisitions and releases are spanned as children of the caller's
// span, in its trace, with the documented names, kind, attributes and status: OK for a grant
// and a release, unset for a busy TryLock, Error with the error recorded for a failure.
func TestObserver_spans(t *testing.T) {
	r := newRig(t)
	ctx, parent := r.tp.Tracer("caller").Start(context.Background(), "handler")

	s := rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "secret-owner", Wait: -1}
	r.acquire(ctx, s, rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d500, Attempts: 2,
		Waited: true, HandedOff: true, Token: 42})
	r.release(ctx, rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "secret-owner"},
		rlock.ReleaseDoneInfo{Took: d125, Freed: true})
	busy := rlock.AcquireStartInfo{Kind: rlock.KindSemaphore, Name: "pool", Owner: "secret-owner", Wait: d250, Permits: 3}
	r.acquire(ctx, busy, rlock.AcquireDoneInfo{Outcome: rlock.OutcomeBusy, Took: d250, Attempts: 1, Waited: true})
	lost := fmt.Errorf("rlock: lock %q: %w", "invoice:1", rlock.ErrLockLost)
	r.acquire(ctx, rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "secret-owner", Wait: -1, Lease: 2 * time.Second},
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeError, Err: lost, Took: d125, Attempts: 0})
	notHeld := fmt.Errorf("rlock: unlock %q: %w", "invoice:1", rlock.ErrNotHeld)
	r.release(ctx, rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "invoice:1", Owner: "secret-owner"},
		rlock.ReleaseDoneInfo{Took: d125, Err: notHeld})
	parent.End()

	ended := r.spans.Ended()
	if len(ended) != 5+1 {
		t.Fatalf("%d spans ended, want 6", len(ended))
	}
	if len(r.spans.Started()) != 6 {
		t.Errorf("%d spans started, want 6", len(r.spans.Started()))
	}
	pc := parent.SpanContext()
	for i, sp := range ended[:5] {
		if sp.Parent().SpanID() != pc.SpanID() || sp.SpanContext().TraceID() != pc.TraceID() {
			t.Errorf("span %d (%s): parent %s in trace %s, want the caller's span %s in %s",
				i, sp.Name(), sp.Parent().SpanID(), sp.SpanContext().TraceID(), pc.SpanID(), pc.TraceID())
		}
		if sp.InstrumentationScope().Name != relockotel.ScopeName {
			t.Errorf("span %d: scope %q", i, sp.InstrumentationScope().Name)
		}
		for _, kv := range sp.Attributes() {
			if kv.Value.String() == "secret-owner" {
				t.Errorf("span %d (%s) records the owner id as %s", i, sp.Name(), kv.Key)
			}
		}
	}
	if ended[5].Name() != "handler" {
		t.Errorf("last span %q, want the caller's", ended[5].Name())
	}

	type want struct {
		name   string
		status codes.Code
		desc   string
		events int
		attrs  []attribute.KeyValue
	}
	for i, w := range []want{
		{relockotel.SpanAcquire, codes.Unset, "", 0, []attribute.KeyValue{
			relockotel.AttrLockName.String("invoice:1"), relockotel.AttrKind.String("mutex"),
			relockotel.AttrWait.Float64(-1), relockotel.AttrLease.Float64(0),
			relockotel.AttrOutcome.String("acquired"), relockotel.AttrWaited.Bool(true),
			relockotel.AttrAttempts.Int(2), relockotel.AttrHandedOff.Bool(true),
			relockotel.AttrReentered.Bool(false), relockotel.AttrToken.Int64(42),
		}},
		{relockotel.SpanRelease, codes.Unset, "", 0, []attribute.KeyValue{
			relockotel.AttrLockName.String("invoice:1"), relockotel.AttrKind.String("mutex"),
			relockotel.AttrFreed.Bool(true), relockotel.AttrHandedOff.Bool(false),
		}},
		{relockotel.SpanAcquire, codes.Unset, "", 0, []attribute.KeyValue{
			relockotel.AttrLockName.String("pool"), relockotel.AttrKind.String("semaphore"),
			relockotel.AttrWait.Float64(0.25), relockotel.AttrLease.Float64(0), relockotel.AttrPermits.Int(3),
			relockotel.AttrOutcome.String("busy"), relockotel.AttrWaited.Bool(true),
			relockotel.AttrAttempts.Int(1), relockotel.AttrHandedOff.Bool(false), relockotel.AttrReentered.Bool(false),
		}},
		{relockotel.SpanAcquire, codes.Error, lost.Error(), 1, []attribute.KeyValue{
			relockotel.AttrLockName.String("invoice:1"), relockotel.AttrKind.String("mutex"),
			relockotel.AttrWait.Float64(-1), relockotel.AttrLease.Float64(2),
			relockotel.AttrOutcome.String("error"), relockotel.AttrWaited.Bool(false),
			relockotel.AttrAttempts.Int(0), relockotel.AttrHandedOff.Bool(false), relockotel.AttrReentered.Bool(false),
			relockotel.AttrErrorType.String("lock_lost"),
		}},
		{relockotel.SpanRelease, codes.Error, notHeld.Error(), 1, []attribute.KeyValue{
			relockotel.AttrLockName.String("invoice:1"), relockotel.AttrKind.String("mutex"),
			relockotel.AttrFreed.Bool(false), relockotel.AttrHandedOff.Bool(false),
			relockotel.AttrErrorType.String("not_held"),
		}},
	} {
		sp := ended[i]
		if sp.Name() != w.name {
			t.Errorf("span %d: name %q, want %q", i, sp.Name(), w.name)
		}
		if sp.SpanKind().String() != "internal" {
			t.Errorf("span %d: kind %s, want internal", i, sp.SpanKind())
		}
		if sp.Status().Code != w.status || sp.Status().Description != w.desc {
			t.Errorf("span %d: status %v %q, want %v %q", i, sp.Status().Code, sp.Status().Description, w.status, w.desc)
		}
		if len(sp.Events()) != w.events {
			t.Errorf("span %d: %d events, want %d", i, len(sp.Events()), w.events)
		}
		wantAttrs(t, fmt.Sprintf("span %d (%s)", i, sp.Name()), sp.Attributes(), w.attrs...)
	}
}

// TestObserver_contextJoin: the context AcquireStart returns carries the acquisition's span
// (work started from it would be its child), and a Done hook given a context of its own
// (not from the Start hook) records its metrics, ends no span and does not panic; nor does
// a nil context.
func TestObserver_contextJoin(t *testing.T) {
	r := newRig(t)
	s := rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "n", Owner: "o", Wait: -1}
	ctx := r.obs.AcquireStart(context.Background(), s)
	_, child := r.tp.Tracer("caller").Start(ctx, "inside")
	child.End()
	r.obs.AcquireDone(ctx, rlock.AcquireDoneInfo{AcquireStartInfo: s, Outcome: rlock.OutcomeAcquired, Took: d125, Token: 1})
	ended := r.spans.Ended()
	if len(ended) != 2 || ended[0].Parent().SpanID() != ended[1].SpanContext().SpanID() {
		t.Fatalf("the span started from AcquireStart's context is not the acquisition's child: %d spans", len(ended))
	}

	// A caller's own span in the context is not ended by a Done hook.
	callerCtx, callerSpan := r.tp.Tracer("caller").Start(context.Background(), "caller")
	r.obs.AcquireDone(callerCtx, rlock.AcquireDoneInfo{AcquireStartInfo: s, Outcome: rlock.OutcomeBusy, Took: d125})
	r.obs.ReleaseDone(callerCtx, rlock.ReleaseDoneInfo{ReleaseStartInfo: rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "n"}, Took: d125})
	if !callerSpan.IsRecording() {
		t.Errorf("a Done hook ended the caller's span")
	}
	callerSpan.End()
	var nilCtx context.Context
	r.obs.AcquireDone(nilCtx, rlock.AcquireDoneInfo{AcquireStartInfo: s, Outcome: rlock.OutcomeBusy, Took: d125})
	r.obs.ReleaseStart(nilCtx, rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "n"})
	if n := len(r.spans.Ended()); n != 3 {
		t.Errorf("%d spans ended, want 3 (acquire, inside, caller)", n)
	}
	got, _ := r.collect(t)
	if h := got[relockotel.MetricAcquireDuration]["relock.kind=mutex,relock.outcome=busy"]; h != (hist{2, 0.25}) {
		t.Errorf("busy acquisitions recorded %+v, want {2 0.25}", h)
	}
}

// TestObserver_invalid: a nil provider or a nil Option is an error wrapping
// rlock.ErrInvalid, and no Observer is returned.
func TestObserver_invalid(t *testing.T) {
	for name, opts := range map[string][]relockotel.Option{
		"nil MeterProvider":  {relockotel.WithMeterProvider(nil)},
		"nil TracerProvider": {relockotel.WithTracerProvider(nil)},
		"nil Option":         {relockotel.WithNameAttribute(true), nil},
	} {
		obs, err := relockotel.Observer(opts...)
		if !errors.Is(err, rlock.ErrInvalid) || obs != nil {
			t.Errorf("%s: (%v, %v), want (nil, an error wrapping rlock.ErrInvalid)", name, obs, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "relockotel: ") {
			t.Errorf("%s: error %q lacks the package prefix", name, err)
		}
	}
}

// TestObserver_globalProviders: without options the Observer records on the global
// providers as set when it is made.
func TestObserver_globalProviders(t *testing.T) {
	prevMP, prevTP := otel.GetMeterProvider(), otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetMeterProvider(prevMP); otel.SetTracerProvider(prevTP) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	otel.SetMeterProvider(mp)
	otel.SetTracerProvider(tp)

	obs, err := relockotel.Observer()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{obs: obs, reader: reader, spans: sr, tp: tp}
	r.acquire(context.Background(), rlock.AcquireStartInfo{Kind: rlock.KindLatch, Name: "l", Wait: -1},
		rlock.AcquireDoneInfo{Outcome: rlock.OutcomeAcquired, Took: d125})
	got, _ := r.collect(t)
	if h := got[relockotel.MetricAcquireDuration]["relock.kind=latch,relock.outcome=acquired"]; h != (hist{1, 0.125}) {
		t.Errorf("global MeterProvider: acquire.duration %+v, want {1 0.125}", h)
	}
	if _, ok := got[relockotel.MetricHoldsActive]; ok {
		t.Errorf("a latch's Await counted as a hold")
	}
	if n := len(sr.Ended()); n != 1 {
		t.Errorf("global TracerProvider: %d spans, want 1", n)
	}
}

// TestObserver_hammer: hooks called from many goroutines at once (run with -race) add up
// exactly, and the up-down counters come back to zero.
func TestObserver_hammer(t *testing.T) {
	r := newRig(t)
	const workers, rounds = 4, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "hot", Owner: fmt.Sprint("o", w), Wait: -1}
			for i := range rounds {
				ctx := r.obs.AcquireStart(context.Background(), s)
				r.obs.AcquireDone(ctx, rlock.AcquireDoneInfo{AcquireStartInfo: s, Outcome: rlock.OutcomeAcquired,
					Took: d125, Waited: i%2 == 0, Token: int64(i)})
				r.release(context.Background(), rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "hot", Owner: s.Owner},
					rlock.ReleaseDoneInfo{Took: d125, Freed: true})
				r.obs.HoldEnd(rlock.HoldEndInfo{Kind: rlock.KindMutex, Name: "hot", Owner: s.Owner, Held: d250, Cause: rlock.EndUnlocked})
				r.obs.RenewalRound(rlock.RenewalRoundInfo{Leases: 2, Scripts: 1})
			}
		})
	}
	wg.Wait()
	const n = workers * rounds
	got, _ := r.collect(t)
	expect(t, got, snapshot{
		relockotel.MetricAcquireDuration: {"relock.kind=mutex,relock.outcome=acquired": hist{n, n * 0.125}},
		relockotel.MetricWaitDuration:    {"relock.kind=mutex,relock.outcome=acquired": hist{n / 2, n / 2 * 0.125}},
		relockotel.MetricContended:       {"relock.kind=mutex,relock.outcome=acquired": int64(n / 2)},
		relockotel.MetricGrants:          {"relock.handed_off=false,relock.kind=mutex,relock.reentered=false": int64(n)},
		relockotel.MetricReleaseDuration: {"relock.kind=mutex": hist{n, n * 0.125}},
		relockotel.MetricHoldDuration:    {"relock.end_cause=unlock,relock.kind=mutex": hist{n, n * 0.25}},
		relockotel.MetricRenewalDuration: {"": hist{n, 0}},
		relockotel.MetricRenewals:        {"": int64(2 * n)},
		relockotel.MetricRenewalFailures: {"": int64(0)},
		relockotel.MetricRenewalScripts:  {"": int64(n)},
		relockotel.MetricHoldsActive:     {"relock.kind=mutex": int64(0)},
		relockotel.MetricAcquiresActive:  {"relock.kind=mutex": int64(0)},
	})
	if got := len(r.spans.Ended()); got != 2*n {
		t.Errorf("%d spans, want %d", got, 2*n)
	}
}

// TestObserver_twoObservers: two relockotel Observers on one Client (say, two providers)
// each end their own span, once, as the core chains their contexts (each Start hook gets the
// context the one before returned; every Done hook the last one); the second's span is a
// child of the first's.
func TestObserver_twoObservers(t *testing.T) {
	a, b := newRig(t), newRig(t)
	s := rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "n", Owner: "o", Wait: -1}
	ctxA := a.obs.AcquireStart(context.Background(), s)
	ctxB := b.obs.AcquireStart(ctxA, s)
	d := rlock.AcquireDoneInfo{AcquireStartInfo: s, Outcome: rlock.OutcomeAcquired, Took: d125, Token: 9}
	a.obs.AcquireDone(ctxB, d)
	b.obs.AcquireDone(ctxB, d)
	rs := rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "n", Owner: "o"}
	ctxA = a.obs.ReleaseStart(context.Background(), rs)
	ctxB = b.obs.ReleaseStart(ctxA, rs)
	a.obs.ReleaseDone(ctxB, rlock.ReleaseDoneInfo{ReleaseStartInfo: rs, Took: d125, Freed: true})
	b.obs.ReleaseDone(ctxB, rlock.ReleaseDoneInfo{ReleaseStartInfo: rs, Took: d125, Freed: true})

	for name, r := range map[string]*rig{"first": a, "second": b} {
		if n, m := len(r.spans.Started()), len(r.spans.Ended()); n != 2 || m != 2 {
			t.Errorf("%s Observer: %d spans started, %d ended, want 2 and 2", name, n, m)
		}
		got, _ := r.collect(t)
		if h := got[relockotel.MetricAcquireDuration]["relock.kind=mutex,relock.outcome=acquired"]; h != (hist{1, 0.125}) {
			t.Errorf("%s Observer: acquire.duration %+v, want {1 0.125}", name, h)
		}
	}
	ea, eb := a.spans.Ended(), b.spans.Ended()
	if len(ea) == 2 && len(eb) == 2 {
		if eb[0].Parent().SpanID() != ea[0].SpanContext().SpanID() {
			t.Errorf("the second Observer's acquire span is not the first's child")
		}
		if v := attrs(ea[0].Attributes())[relockotel.AttrToken]; v.AsInt64() != 9 {
			t.Errorf("the first Observer's span lacks its end attributes: token %v", v.AsInt64())
		}
	}
}
