// Package relockotel feeds OpenTelemetry metrics and traces from relock's locks: an
// [rlock.Observer] that records every acquisition, release, tenure, renewal round, replay
// and subscription change on a MeterProvider and a TracerProvider.
//
//	import relockotel "github.com/relock-go/relock/otel"
//
//	obs, err := relockotel.Observer() // the global providers; see the options
//	if err != nil {
//		return err
//	}
//	c, err := rlock.Dial(opt, rlock.WithObserver(obs))
//
// It lives in a module of its own (github.com/relock-go/relock/otel), so that the core
// module does not depend on OpenTelemetry. The package is named relockotel rather than
// otel, after its directory, so that it never shadows go.opentelemetry.io/otel in a file
// that imports both (the convention of the OpenTelemetry contrib packages: otelhttp,
// otelgrpc, redisotel).
//
// # Metrics
//
// Durations are histograms in seconds; counts are Int64 counters; the figures held now are
// Int64 up-down counters. Every per-lock metric carries relock.kind ([AttrKind]); the lock's
// name ([AttrLockName]) only with [WithNameAttribute], because names are often per entity
// and every distinct attribute set is a series kept in memory and billed.
//
//	relock.acquire.duration   histogram  s           kind, outcome, error.type (outcome error)
//	relock.wait.duration      histogram  s           kind, outcome: acquisitions that waited
//	relock.hold.duration      histogram  s           kind, end_cause
//	relock.release.duration   histogram  s           kind, error.type (failed releases)
//	relock.renewal.duration   histogram  s           (none): one point per watchdog round
//	relock.acquire.grants     counter    {grant}     kind, reentered, handed_off
//	relock.acquire.contended  counter    {acquisition} kind, outcome: acquisitions that waited
//	relock.hold.losses        counter    {loss}      kind
//	relock.renewal.leases     counter    {lease}     (none): leases renewed or tried
//	relock.renewal.failures   counter    {lease}     (none)
//	relock.renewal.scripts    counter    {script}    (none)
//	relock.replays            counter    {replay}    kind, replay.op, replay.result
//	relock.subscription.changes counter  {change}    subscription.state
//	relock.givebacks          counter    {giveback}  kind, giveback.reason, giveback.result
//	relock.hold.active        up-down    {hold}      kind: tenures held now
//	relock.acquire.active     up-down    {call}      kind: acquisition calls in flight
//
// relock.acquire.active counts the calls between their start and their return: the ones
// waiting for a release and the ones sending their first attempt (the Observer API has no
// event for the moment a call starts to wait, so this is the exact figure nearest to "the
// waiters"). relock.hold.active goes up at a grant that starts a tenure (not a re-entry)
// and down at the tenure's end (HoldEnd), for the kinds whose tenures the core reports:
// Mutex, FairMutex, SpinMutex, both sides of RWMutex, and RedLock (its tenure on a
// majority, heard by the Observer of its first Client that has one; that Client's Close
// ends it there). Semaphore and PermitSemaphore permits, a CountDownLatch's Await and a
// MultiLock (whose members count on their own) report no tenure's end, so they are not
// counted there.
//
// Figures add up across the Clients that share one Observer; a MultiLock's members, being
// locks of their own, are counted beside the MultiLock (whose name attribute, when asked
// for, is its members' names joined with ",").
//
// # Spans
//
// An acquisition call is spanned as "relock.acquire" ([SpanAcquire]) and a release call as
// "relock.release" ([SpanRelease]), both of kind Internal. The span starts in the Start hook
// from the caller's context, so it is a child of the caller's span and joins its trace, and
// it ends in the Done hook. Its attributes: relock.lock.name, relock.kind, relock.wait,
// relock.lease and relock.permits at the start; relock.outcome, relock.waited,
// relock.attempts, relock.handed_off, relock.reentered and relock.token (when a lock with
// tokens was acquired) at the end; relock.freed and relock.handed_off for a release. A
// failed acquisition (outcome "error") or release has status Error, the error recorded as
// an event, and error.type; a busy or canceled acquisition is not an error (contention is
// not a failure, and the caller chose to stop).
//
// Attributes are set only on spans that record: an unsampled call pays for none, and a
// sampler sees the span's name and parent but not the lock's name.
//
// The owner id is never recorded: it is a capability (whoever knows it can unlock what the
// owner holds, see [rlock.WithOwner]), and trace backends are read by many.
package relockotel
