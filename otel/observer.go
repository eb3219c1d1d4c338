package relockotel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/relock-go/relock/rlock"
)

// ScopeName is the instrumentation scope of the Meter and the Tracer that [Observer] gets
// from its providers: the module's import path.
const ScopeName = "github.com/relock-go/relock/otel"

// The names of the spans [Observer] starts. Both are fixed: the lock's name and kind are
// attributes, never part of the span name, so that the names stay few (as OpenTelemetry
// asks of span names) and a query for "every acquisition" is one name.
const (
	// SpanAcquire spans one acquisition call (Lock, LockLease, TryLock, RLock, Acquire,
	// TryAcquire, Await), from its AcquireStart to its AcquireDone.
	SpanAcquire = "relock.acquire"
	// SpanRelease spans one release call (Unlock, RUnlock, Release, CountDown), from its
	// ReleaseStart to its ReleaseDone.
	SpanRelease = "relock.release"
)

// The names of the metrics, their instrument and unit. The package doc and the README's
// "OpenTelemetry" section have them as a table with their attributes.
const (
	// MetricAcquireDuration: histogram, s; every acquisition call, whatever its outcome.
	MetricAcquireDuration = "relock.acquire.duration"
	// MetricWaitDuration: histogram, s; the acquisition calls that waited for a release.
	MetricWaitDuration = "relock.wait.duration"
	// MetricHoldDuration: histogram, s; tenures, from the grant to their end.
	MetricHoldDuration = "relock.hold.duration"
	// MetricReleaseDuration: histogram, s; every release call.
	MetricReleaseDuration = "relock.release.duration"
	// MetricRenewalDuration: histogram, s; the watchdog's rounds (its count: the rounds).
	MetricRenewalDuration = "relock.renewal.duration"
	// MetricGrants: counter, {grant}; acquisitions that acquired, re-entries included.
	MetricGrants = "relock.acquire.grants"
	// MetricContended: counter, {acquisition}; acquisitions that found the lock taken and
	// waited.
	MetricContended = "relock.acquire.contended"
	// MetricLosses: counter, {loss}; tenures lost while held.
	MetricLosses = "relock.hold.losses"
	// MetricRenewals: counter, {lease}; leases the watchdog renewed or tried to.
	MetricRenewals = "relock.renewal.leases"
	// MetricRenewalFailures: counter, {lease}; leases whose renewal failed.
	MetricRenewalFailures = "relock.renewal.failures"
	// MetricRenewalScripts: counter, {script}; renew scripts the watchdog sent.
	MetricRenewalScripts = "relock.renewal.scripts"
	// MetricReplays: counter, {replay}; requests sent again because their reply was lost.
	MetricReplays = "relock.replays"
	// MetricSubscriptionChanges: counter, {change}; release channels going down or up.
	MetricSubscriptionChanges = "relock.subscription.changes"
	// MetricGiveBacks: counter, {giveback}; grants the Client gave back on its own.
	MetricGiveBacks = "relock.givebacks"
	// MetricHoldsActive: up-down counter, {hold}; tenures held now.
	MetricHoldsActive = "relock.hold.active"
	// MetricAcquiresActive: up-down counter, {call}; acquisition calls in flight.
	MetricAcquiresActive = "relock.acquire.active"
)

// The attribute keys of metrics and spans.
const (
	// AttrKind is the primitive's kind ([rlock.Kind]: "mutex", "read_lock"...), on every
	// per-lock metric and every span.
	AttrKind = attribute.Key("relock.kind")
	// AttrOutcome is how an acquisition ended ([rlock.Outcome]: "acquired", "busy",
	// "canceled", "error").
	AttrOutcome = attribute.Key("relock.outcome")
	// AttrEndCause is why a tenure ended ([rlock.EndCause]: "unlock", "lease_expired",
	// "lost", "closed").
	AttrEndCause = attribute.Key("relock.end_cause")
	// AttrLockName is the lock's name as given to the Client: on every span, and on the
	// per-lock metrics only with [WithNameAttribute].
	AttrLockName = attribute.Key("relock.lock.name")
	// AttrReentered: the grant added a hold to the owner's tenure (a re-entry).
	AttrReentered = attribute.Key("relock.reentered")
	// AttrHandedOff: the grant came from a release that passed the lock on (acquisitions),
	// or the release passed it on (releases).
	AttrHandedOff = attribute.Key("relock.handed_off")
	// AttrReplayOp is what a replay sent again ([rlock.ReplayInfo]'s Op): "acquire",
	// "release", or a semaphore's or latch's "set", "add", "drain", "delete", "extend",
	// "count_down".
	AttrReplayOp = attribute.Key("relock.replay.op")
	// AttrReplayResult is what came of a replay: "answered" (the outcome is known) or
	// "unknown" (it stayed unknown: the call returned an error wrapping
	// [rlock.ErrUnknownOutcome]).
	AttrReplayResult = attribute.Key("relock.replay.result")
	// AttrSubscriptionState is "down" when a channel that waiters listen on stopped being
	// served, "up" when it is served again.
	AttrSubscriptionState = attribute.Key("relock.subscription.state")
	// AttrGiveBackReason is why the Client gave a grant back on its own
	// ([rlock.GiveBackReason]: "canceled", "late", "no_replica_ack", "lost", "orphan").
	AttrGiveBackReason = attribute.Key("relock.giveback.reason")
	// AttrGiveBackResult is "returned" when Redis took a give-back, "failed" when it did not
	// (the holds expire there with their lease).
	AttrGiveBackResult = attribute.Key("relock.giveback.result")
	// AttrErrorType classifies a failure, as OpenTelemetry's error.type does: one of
	// "unknown_outcome", "closed", "lock_lost", "lease_expired", "not_held",
	// "no_replica_ack", "wrong_type", "no_permission", "upgrade", "invalid", "canceled",
	// "deadline_exceeded" or "_OTHER" (the first sentinel the error wraps, in this order).
	// It is on failed acquisitions (outcome "error") and failed releases, metrics and spans.
	AttrErrorType = attribute.Key("error.type")

	// AttrToken is the fencing token of the tenure granted (spans of acquisitions that
	// acquired a lock with tokens; absent for read holds, semaphores, the latch and a
	// MultiLock, which have none).
	AttrToken = attribute.Key("relock.token")
	// AttrWaited: the first attempt was refused and the call waited (acquisition spans).
	AttrWaited = attribute.Key("relock.waited")
	// AttrAttempts counts the acquire scripts the call sent (acquisition spans).
	AttrAttempts = attribute.Key("relock.attempts")
	// AttrWait is the bound on the call's wait in seconds, -1 for none (acquisition spans).
	AttrWait = attribute.Key("relock.wait")
	// AttrLease is the fixed lease asked for in seconds, 0 for watchdog mode (acquisition
	// spans).
	AttrLease = attribute.Key("relock.lease")
	// AttrPermits is how many permits the call takes or gives back (spans of semaphore
	// calls; absent for locks).
	AttrPermits = attribute.Key("relock.permits")
	// AttrFreed: the release gave back the owner's last hold, ending its tenure (release
	// spans).
	AttrFreed = attribute.Key("relock.freed")
)

// Histogram bucket boundaries, in seconds. The SDK's default boundaries (0 to 10000) are
// meant for milliseconds; these follow OpenTelemetry's HTTP duration buckets for calls, and
// reach an hour for holds.
var (
	callBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets = []float64{0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
)

// Observer returns an [rlock.Observer] that records relock's metrics on a Meter and starts
// spans on a Tracer, both named [ScopeName], from the providers the options give (the
// global ones by default). Pass it to [rlock.WithObserver]:
//
//	obs, err := relockotel.Observer()
//	if err != nil { ... }
//	c, err := rlock.Dial(opt, rlock.WithObserver(obs))
//
// The Observer has every hook set. It keeps no state of its own (every figure lives in the
// instruments) and starts no goroutine, so there is nothing to close; one Observer may serve
// many Clients, whose figures then add up. Its hooks never block and never panic, whatever
// the events; a Done hook given a context that its Start hook did not return records its
// metrics and ends no span.
//
// Observer returns an error wrapping [rlock.ErrInvalid] for a nil Option or a nil provider,
// or the error of the Meter when it refuses an instrument (the Observer is then not made).
func Observer(opts ...Option) (*rlock.Observer, error) {
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("relockotel: option %d is nil: %w", i, rlock.ErrInvalid)
		}
	}
	o := buildOptions(opts)
	if o.nilMP {
		return nil, fmt.Errorf("relockotel: nil MeterProvider: %w", rlock.ErrInvalid)
	}
	if o.nilTP {
		return nil, fmt.Errorf("relockotel: nil TracerProvider: %w", rlock.ErrInvalid)
	}
	r, err := newRecorder(o)
	if err != nil {
		return nil, err
	}
	return &rlock.Observer{
		AcquireStart: r.acquireStart,
		AcquireDone:  r.acquireDone,
		ReleaseStart: r.releaseStart,
		ReleaseDone:  r.releaseDone,
		HoldEnd:      r.holdEnd,
		RenewalRound: r.renewalRound,
		Replay:       r.replay,
		Subscription: r.subscription,
		GiveBack:     r.giveBack,
	}, nil
}

// recorder holds the instruments; its methods are the Observer's hooks. Every field but
// sets is set by newRecorder and never changed, and sets is a sync.Map, so the hooks may run
// concurrently.
type recorder struct {
	withName bool
	sets     sync.Map // attrKey -> *attrOpts, without the name attribute (lockAttrs)
	tracer   trace.Tracer

	acquireDur, waitDur, holdDur, releaseDur, renewDur                     metric.Float64Histogram
	grants, contended, losses, renewals, renewFails, renewScripts, replays metric.Int64Counter
	subChanges, giveBacks                                                  metric.Int64Counter
	holdsActive, acquiresActive                                            metric.Int64UpDownCounter
}

func newRecorder(o options) (*recorder, error) {
	m := o.mp.Meter(ScopeName)
	r := &recorder{withName: o.withName, tracer: o.tp.Tracer(ScopeName)}
	var errs []error
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	upDown := func(name, unit, desc string) metric.Int64UpDownCounter {
		c, err := m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	r.acquireDur = hist(MetricAcquireDuration, "Duration of lock and permit acquisition calls, whatever their outcome.", callBuckets)
	r.waitDur = hist(MetricWaitDuration, "Duration of the acquisition calls that waited for a release (their first attempt was refused).", callBuckets)
	r.holdDur = hist(MetricHoldDuration, "How long tenures lasted, from the grant to their end.", holdBuckets)
	r.releaseDur = hist(MetricReleaseDuration, "Duration of release calls.", callBuckets)
	r.renewDur = hist(MetricRenewalDuration, "Duration of the watchdog's renewal rounds.", callBuckets)
	r.grants = counter(MetricGrants, "{grant}", "Acquisitions that acquired, re-entries included.")
	r.contended = counter(MetricContended, "{acquisition}", "Acquisitions that found the lock taken and waited.")
	r.losses = counter(MetricLosses, "{loss}", "Tenures lost while held (the owner was told with ErrLockLost).")
	r.renewals = counter(MetricRenewals, "{lease}", "Leases the watchdog renewed or tried to.")
	r.renewFails = counter(MetricRenewalFailures, "{lease}", "Leases whose renewal failed (lost, or to be retried).")
	r.renewScripts = counter(MetricRenewalScripts, "{script}", "Renew scripts the watchdog sent.")
	r.replays = counter(MetricReplays, "{replay}", "Requests sent again because their reply was lost.")
	r.subChanges = counter(MetricSubscriptionChanges, "{change}", "Channels that waiters listen on going down or coming back.")
	r.giveBacks = counter(MetricGiveBacks, "{giveback}", "Grants the Client gave back on its own (their caller had gone, they came too late...).")
	r.holdsActive = upDown(MetricHoldsActive, "{hold}", "Tenures held now (a re-entry does not count twice).")
	r.acquiresActive = upDown(MetricAcquiresActive, "{call}", "Acquisition calls in flight: sending their first attempt or waiting.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("relockotel: make instruments: %w", err)
	}
	return r, nil
}

// spanKey is the context key under which a Start hook leaves its span for the Done hook.
// A key of its own (rather than trace.SpanFromContext) keeps a Done hook from ending a span
// that the caller put in the context; its recorder field keeps two Observers on one Client
// apart: the core hands each Start hook the context the one before it returned, and every
// Done hook the last one, which then carries both spans.
type spanKey struct{ r *recorder }

// hasTenure reports whether acquisitions of kind begin tenures that end with a HoldEnd
// event: the locks do (Mutex, FairMutex, SpinMutex, both sides of an RWMutex) and a
// RedLock. The semaphores, the latch and a MultiLock (whose members report their own
// tenures) report no HoldEnd (see rlock.Observer's "What each primitive reports").
func hasTenure(k rlock.Kind) bool {
	switch k {
	case rlock.KindMutex, rlock.KindFairMutex, rlock.KindSpinMutex, rlock.KindReadLock, rlock.KindWriteLock,
		rlock.KindRedLock:
		return true
	}
	return false
}

// maxExtra is the most attributes a metric adds to the kind (and the name).
const maxExtra = 3

// attrKey identifies a set of per-lock attributes without the name: the kind and up to
// maxExtra more (string and bool values only, so the key is comparable).
type attrKey struct {
	kind  rlock.Kind
	extra [maxExtra]attribute.KeyValue
}

// lockAttrs returns the attributes every per-lock metric carries, then extra (at most
// maxExtra). Without the name attribute the sets are few (kinds x outcomes x causes...) and
// each is built once and cached, so that a hook allocates nothing for its attributes; with
// the name, a set is built per call (a cache would grow with the names).
func (r *recorder) lockAttrs(kind rlock.Kind, name string, extra ...attribute.KeyValue) *attrOpts {
	if !r.withName && len(extra) <= maxExtra {
		k := attrKey{kind: kind}
		copy(k.extra[:], extra)
		if opt, ok := r.sets.Load(k); ok {
			return opt.(*attrOpts)
		}
		opt, _ := r.sets.LoadOrStore(k, r.buildAttrs(kind, name, extra))
		return opt.(*attrOpts)
	}
	return r.buildAttrs(kind, name, extra)
}

// attrOpts is an attribute set as the options of Add and Record, made once: passing a
// slice that exists already spares each call a variadic slice.
type attrOpts struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func (r *recorder) buildAttrs(kind rlock.Kind, name string, extra []attribute.KeyValue) *attrOpts {
	kv := make([]attribute.KeyValue, 0, 2+len(extra))
	kv = append(kv, AttrKind.String(string(kind)))
	if r.withName {
		kv = append(kv, AttrLockName.String(name))
	}
	kv = append(kv, extra...)
	opt := metric.WithAttributeSet(attribute.NewSet(kv...))
	return &attrOpts{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
}

func (r *recorder) acquireStart(ctx context.Context, e rlock.AcquireStartInfo) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	r.acquiresActive.Add(ctx, 1, r.lockAttrs(e.Kind, e.Name).add...)
	// Attributes are set only on a recording span: an unsampled acquisition pays for none
	// (a sampler sees the span's name and parent, not the lock's name).
	ctx, span := r.tracer.Start(ctx, SpanAcquire, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		wait := -1.0
		if e.Wait >= 0 {
			wait = e.Wait.Seconds()
		}
		span.SetAttributes(AttrLockName.String(e.Name), AttrKind.String(string(e.Kind)),
			AttrWait.Float64(wait), AttrLease.Float64(e.Lease.Seconds()))
		if e.Permits != 0 {
			span.SetAttributes(AttrPermits.Int(e.Permits))
		}
	}
	return context.WithValue(ctx, spanKey{r}, span)
}

func (r *recorder) acquireDone(ctx context.Context, e rlock.AcquireDoneInfo) {
	if ctx == nil {
		ctx = context.Background()
	}
	r.acquiresActive.Add(ctx, -1, r.lockAttrs(e.Kind, e.Name).add...)
	outcome := AttrOutcome.String(string(e.Outcome))
	errType := attribute.KeyValue{}
	if e.Outcome == rlock.OutcomeError {
		errType = AttrErrorType.String(errorType(e.Err))
		r.acquireDur.Record(ctx, e.Took.Seconds(), r.lockAttrs(e.Kind, e.Name, outcome, errType).rec...)
	} else {
		r.acquireDur.Record(ctx, e.Took.Seconds(), r.lockAttrs(e.Kind, e.Name, outcome).rec...)
	}
	if e.Waited {
		at := r.lockAttrs(e.Kind, e.Name, outcome)
		r.waitDur.Record(ctx, e.Took.Seconds(), at.rec...)
		r.contended.Add(ctx, 1, at.add...)
	}
	if e.Outcome == rlock.OutcomeAcquired {
		r.grants.Add(ctx, 1, r.lockAttrs(e.Kind, e.Name, AttrReentered.Bool(e.Reentered), AttrHandedOff.Bool(e.HandedOff)).add...)
		if !e.Reentered && hasTenure(e.Kind) {
			r.holdsActive.Add(ctx, 1, r.lockAttrs(e.Kind, e.Name).add...)
		}
	}

	span, ok := ctx.Value(spanKey{r}).(trace.Span)
	if !ok {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(outcome, AttrWaited.Bool(e.Waited), AttrAttempts.Int(e.Attempts),
			AttrHandedOff.Bool(e.HandedOff), AttrReentered.Bool(e.Reentered))
		if e.Outcome == rlock.OutcomeAcquired && e.Token != 0 {
			span.SetAttributes(AttrToken.Int64(e.Token))
		}
		if e.Outcome == rlock.OutcomeError {
			span.SetAttributes(errType)
			fail(span, e.Err)
		}
	}
	span.End()
}

func (r *recorder) releaseStart(ctx context.Context, e rlock.ReleaseStartInfo) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, span := r.tracer.Start(ctx, SpanRelease, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(AttrLockName.String(e.Name), AttrKind.String(string(e.Kind)))
		if e.Permits != 0 {
			span.SetAttributes(AttrPermits.Int(e.Permits))
		}
	}
	return context.WithValue(ctx, spanKey{r}, span)
}

func (r *recorder) releaseDone(ctx context.Context, e rlock.ReleaseDoneInfo) {
	if ctx == nil {
		ctx = context.Background()
	}
	errType := attribute.KeyValue{}
	if e.Err != nil {
		errType = AttrErrorType.String(errorType(e.Err))
		r.releaseDur.Record(ctx, e.Took.Seconds(), r.lockAttrs(e.Kind, e.Name, errType).rec...)
	} else {
		r.releaseDur.Record(ctx, e.Took.Seconds(), r.lockAttrs(e.Kind, e.Name).rec...)
	}
	span, ok := ctx.Value(spanKey{r}).(trace.Span)
	if !ok {
		return
	}
	if span.IsRecording() {
		span.SetAttributes(AttrFreed.Bool(e.Freed), AttrHandedOff.Bool(e.HandedOff))
		if e.Err != nil {
			span.SetAttributes(errType)
			fail(span, e.Err)
		}
	}
	span.End()
}

func (r *recorder) holdEnd(e rlock.HoldEndInfo) {
	ctx := context.Background()
	r.holdDur.Record(ctx, e.Held.Seconds(), r.lockAttrs(e.Kind, e.Name, AttrEndCause.String(string(e.Cause))).rec...)
	if hasTenure(e.Kind) {
		r.holdsActive.Add(ctx, -1, r.lockAttrs(e.Kind, e.Name).add...)
	}
	if e.Cause == rlock.EndLost {
		r.losses.Add(ctx, 1, r.lockAttrs(e.Kind, e.Name).add...)
	}
}

func (r *recorder) renewalRound(e rlock.RenewalRoundInfo) {
	ctx := context.Background()
	r.renewDur.Record(ctx, e.Took.Seconds())
	r.renewals.Add(ctx, int64(e.Leases))
	r.renewFails.Add(ctx, int64(e.Failures))
	r.renewScripts.Add(ctx, int64(e.Scripts))
}

func (r *recorder) replay(e rlock.ReplayInfo) {
	result := "answered"
	if e.Err != nil {
		result = "unknown"
	}
	r.replays.Add(context.Background(), 1, r.lockAttrs(e.Kind, e.Name,
		AttrReplayOp.String(e.Op), AttrReplayResult.String(result)).add...)
}

func (r *recorder) subscription(e rlock.SubscriptionInfo) {
	state := "down"
	if e.Up {
		state = "up"
	}
	r.subChanges.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(AttrSubscriptionState.String(state)))) // rare: not cached
}

func (r *recorder) giveBack(e rlock.GiveBackInfo) {
	result := "returned"
	if e.Err != nil {
		result = "failed"
	}
	r.giveBacks.Add(context.Background(), 1, r.lockAttrs(e.Kind, e.Name,
		AttrGiveBackReason.String(string(e.Reason)), AttrGiveBackResult.String(result)).add...)
}

// fail marks span as failed with err (a nil err still marks it: the event said so).
func fail(span trace.Span, err error) {
	msg := "failed"
	if err != nil {
		msg = err.Error()
		span.RecordError(err)
	}
	span.SetStatus(codes.Error, msg)
}

// errorTypes maps relock's sentinels to error.type values, the most telling first: an
// error that wraps several (an unknown outcome because the Client closed) gets the first.
var errorTypes = []struct {
	err  error
	name string
}{
	{rlock.ErrUnknownOutcome, "unknown_outcome"},
	{rlock.ErrClosed, "closed"},
	{rlock.ErrLockLost, "lock_lost"},
	{rlock.ErrLeaseExpired, "lease_expired"}, // before not_held, which it wraps
	{rlock.ErrNotHeld, "not_held"},
	{rlock.ErrNoReplicaAck, "no_replica_ack"},
	{rlock.ErrWrongType, "wrong_type"},
	{rlock.ErrNoPermission, "no_permission"},
	{rlock.ErrUpgrade, "upgrade"},
	{rlock.ErrInvalid, "invalid"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// errorType returns the error.type value of err: a bounded set of names, "_OTHER" for an
// error relock has no sentinel for (OpenTelemetry's fallback value).
func errorType(err error) string {
	for _, t := range errorTypes {
		if errors.Is(err, t.err) {
			return t.name
		}
	}
	return "_OTHER"
}
