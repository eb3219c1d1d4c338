// Package watchdog keeps leases alive: one scheduler goroutine per [Watchdog], whatever the
// number of leases, sends due renewals in batches through a [Renewer] and tells each lease's
// holder when the lease is lost.
//
// The watchdog knows nothing of locks. A lease is a duration granted by a remote party at
// some moment; the holder's conservative view of its end is
//
//	deadline = the moment the grant or last renewal was sent + lease - drift
//
// measured on the local monotonic clock. A renewable lease is renewed once a fraction of it
// (two thirds by default) has passed; a transient renewal error is retried until the
// deadline. The lease is lost, and its OnLost callback runs once, when
//
//  1. the Renewer reports it gone ([ErrGone]): the remote side no longer grants it; or
//  2. the deadline passes with no renewal confirmed: the remote side may have let it expire,
//     whether or not it is reachable.
//
// A fixed lease (not renewable) is only watched: OnLost runs at its deadline.
package watchdog

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults.
const (
	// DefaultRenewFraction is the share of a lease that passes before it is renewed.
	DefaultRenewFraction = 2.0 / 3.0
	// DefaultRetryInterval bounds the pause between retries of a failed renewal.
	DefaultRetryInterval = time.Second
	// DefaultBatchSize is the largest number of leases handed to one Renewer call.
	DefaultBatchSize = 512
	// MinRenewFraction is the smallest renew fraction New accepts: twice the share of a
	// lease by which a renewal may be brought forward to share a round with others due
	// near it (a twentieth). Below it a renewal may go out as soon as the last one is
	// confirmed: a fraction near 0 renewed back to back, thousands of calls a second for
	// one lease.
	MinRenewFraction = 0.1
)

// ErrInvalid is wrapped by the errors of New and Add that refuse an argument.
var ErrInvalid = errors.New("watchdog: invalid argument")

// ErrGone is what a [Renewer] reports for a lease that the remote side no longer grants.
var ErrGone = errors.New("watchdog: lease gone")

// ErrExpired is the cause given to OnLost when a lease's deadline passed unconfirmed.
var ErrExpired = errors.New("watchdog: lease expired before a renewal was confirmed")

// Renewer renews leases. Renew is called from a goroutine the Watchdog owns with leases that
// are all due; it returns one error per lease, in order: nil when renewed, an error wrapping
// [ErrGone] when the lease is gone, any other error when the renewal may be retried. The
// context ends at the earliest deadline among the leases.
type Renewer interface {
	Renew(ctx context.Context, leases []*Lease) []error
}

// ReportingRenewer is a Renewer that reports on its rounds. The Watchdog calls RenewReport
// instead of Renew, and calls the report it returns (when not nil) once the round's results
// are applied (the renewed leases' new deadlines set, the lost ones dropped) and before the
// lost leases' OnLost run: however long the report takes, it never holds back the leases of
// its own round. It does delay the rounds after it: keep it quick.
type ReportingRenewer interface {
	Renewer
	RenewReport(ctx context.Context, leases []*Lease) (errs []error, report func())
}

// Drift is the allowance subtracted from every lease for clock drift between the local and
// the remote clock: 1% of the lease plus 2 ms.
func Drift(lease time.Duration) time.Duration {
	return lease/100 + 2*time.Millisecond
}

// Lease is one registered lease. Its exported fields are set by the caller before
// [Watchdog.Add] and never changed afterwards.
type Lease struct {
	// TTL is the lease granted by each grant or renewal. Must be > 0.
	TTL time.Duration
	// Renew says whether the watchdog renews the lease (true) or only watches its deadline.
	Renew bool
	// OnLost runs once, on a watchdog goroutine, when the lease is lost, with the lease and
	// ErrGone (wrapped as the Renewer returned it) or ErrExpired. Must not be nil. It must not
	// block. It never runs once Remove returned true; when Remove returns false it may be
	// running or about to run. It is given the lease so that one function serves every lease
	// of a holder (with Data telling them apart), rather than a closure made per lease.
	OnLost func(l *Lease, cause error)
	// Data is the caller's, for its Renewer.
	Data any

	// Guarded by Watchdog.mu.
	deadline time.Time // conservative end of the lease
	next     time.Time // next renewal (renewable leases)
	inFlight bool      // a renewal of this lease is being sent
	retrying bool      // the last renewal failed: the next one is a retry
	index    int       // in the heap; -1 when not registered
	w        *Watchdog // nil once removed or lost
	gen      uint64    // counts registrations: a renewal answers only the one it was sent for
}

// Option configures a Watchdog.
type Option interface{ apply(*Watchdog) }

type optionFunc func(*Watchdog)

func (f optionFunc) apply(w *Watchdog) { f(w) }

// WithRenewFraction sets the share of a lease ([MinRenewFraction] <= f < 1) after which it is
// renewed. New refuses any other f with an error wrapping [ErrInvalid].
func WithRenewFraction(f float64) Option {
	return optionFunc(func(w *Watchdog) { w.fraction = f })
}

// WithRetryInterval sets the longest pause between retries of a failed renewal.
func WithRetryInterval(d time.Duration) Option {
	return optionFunc(func(w *Watchdog) { w.retry = d })
}

// WithBatchSize sets the largest number of leases handed to one Renewer call.
func WithBatchSize(n int) Option {
	return optionFunc(func(w *Watchdog) { w.batch = n })
}

// Watchdog schedules renewals for any number of leases from one goroutine, started by the
// first Add and stopped by Close. It is safe for concurrent use.
type Watchdog struct {
	renewer  Renewer
	fraction float64
	retry    time.Duration
	batch    int

	mu       sync.Mutex
	leases   leaseHeap
	started  bool
	closed   bool
	kick     chan struct{} // capacity 1: the schedule changed
	alarm    *time.Timer   // pokes the loop at wakeAt; created with the loop
	wakeAt   time.Time     // when the loop next looks at the leases
	ctx      context.Context
	cancel   context.CancelFunc
	pending  []taken        // due leases waiting for the renewal goroutine
	renewing bool           // the renewal goroutine is running
	wg       sync.WaitGroup // the loop and the renewal goroutine
}

// New returns a Watchdog that renews through r. It starts no goroutine until the first Add.
// A nil r, a nil Option or an option's value out of range is an error wrapping [ErrInvalid]
// (no Watchdog is made).
func New(r Renewer, opts ...Option) (*Watchdog, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil Renewer", ErrInvalid)
	}
	w := &Watchdog{
		renewer:  r,
		fraction: DefaultRenewFraction,
		retry:    DefaultRetryInterval,
		batch:    DefaultBatchSize,
		kick:     make(chan struct{}, 1),
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalid, i)
		}
		o.apply(w)
	}
	switch {
	case !(w.fraction >= MinRenewFraction && w.fraction < 1):
		return nil, fmt.Errorf("%w: renew fraction %v must be in [%v, 1)", ErrInvalid, w.fraction, MinRenewFraction)
	case w.retry <= 0:
		return nil, fmt.Errorf("%w: retry interval %v must be > 0", ErrInvalid, w.retry)
	case w.batch <= 0:
		return nil, fmt.Errorf("%w: batch size %d must be > 0", ErrInvalid, w.batch)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w, nil
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("watchdog: closed")

// Add registers l, granted (or last renewed) by a request sent at sent. From then on the
// watchdog renews it (if l.Renew) and calls l.OnLost if it is lost, until Remove. A lease
// whose deadline has already passed is not registered: Add returns ErrExpired. A nil l, a
// lease already registered, or one with no TTL or OnLost is an error wrapping [ErrInvalid];
// after Close, Add returns ErrClosed.
func (w *Watchdog) Add(l *Lease, sent time.Time) error {
	if l == nil {
		return fmt.Errorf("%w: nil lease", ErrInvalid)
	}
	if l.TTL <= 0 {
		return fmt.Errorf("%w: lease TTL %v must be > 0", ErrInvalid, l.TTL)
	}
	if l.OnLost == nil {
		return fmt.Errorf("%w: lease OnLost must not be nil", ErrInvalid)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if l.w != nil {
		return fmt.Errorf("%w: lease already registered", ErrInvalid)
	}
	l.deadline = sent.Add(l.TTL - Drift(l.TTL))
	if !time.Now().Before(l.deadline) {
		return ErrExpired
	}
	l.next = sent.Add(time.Duration(float64(l.TTL) * w.fraction))
	l.inFlight, l.retrying = false, false
	l.w = w
	l.gen++
	heap.Push(&w.leases, l)
	if !w.started {
		w.started = true
		w.alarm = time.AfterFunc(time.Hour, w.poke)
		w.wakeAt = time.Now() // the loop's first look comes at once
		w.wg.Add(1)
		go w.loop()
	} else if at := l.wake(); at.Before(w.wakeAt) {
		// Bring the loop's alarm forward rather than waking it now: a lock taken and given
		// back within its renewal period costs the loop nothing.
		w.wakeAt = at
		w.alarm.Reset(time.Until(at))
	}
	return nil
}

// Remove unregisters l. Once it returns true, the watchdog starts no new renewal of l, ignores
// the reply to one in flight and never calls l.OnLost. A renewal already started (being handed
// to the Renewer, or on the wire) may still reach the remote side; renewals must therefore be
// conditional on ownership there.
// Remove reports whether l was registered (false if it was lost or removed before).
func (w *Watchdog) Remove(l *Lease) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l.w != w {
		return false
	}
	w.drop(l)
	return true
}

// Deadline is l's conservative end as last confirmed, and whether l is registered.
func (w *Watchdog) Deadline(l *Lease) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return l.deadline, l.w == w
}

// Len is the number of registered leases.
func (w *Watchdog) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.leases)
}

// Close stops the watchdog's goroutines and waits for them. Registered leases are dropped
// without OnLost: their holders are going away with the watchdog.
func (w *Watchdog) Close() {
	w.mu.Lock()
	w.closed = true
	for len(w.leases) > 0 {
		w.drop(w.leases[0])
	}
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
}

// drop removes l from the heap. w.mu must be held.
func (w *Watchdog) drop(l *Lease) {
	if l.index >= 0 {
		heap.Remove(&w.leases, l.index)
	}
	l.w = nil
}

func (w *Watchdog) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// early is how much sooner than planned a renewal of l may go out, so that the renewals of
// leases taken at nearby moments share a call: a twentieth of the lease. Retries after a
// failure and deadlines are never brought forward.
func (l *Lease) early() time.Duration {
	if l.Renew && !l.inFlight && !l.retrying && l.next.Before(l.deadline) {
		return l.TTL / 20
	}
	return 0
}

// wake is when the loop must next look at l. w.mu must be held.
func (l *Lease) wake() time.Time {
	if l.Renew && !l.inFlight && l.next.Before(l.deadline) {
		return l.next
	}
	return l.deadline
}

// taken is a lease taken for renewal, with the registration it was taken for.
type taken struct {
	l   *Lease
	gen uint64
}

// current says whether t's registration still stands. w.mu must be held.
func (w *Watchdog) current(t taken) bool {
	return t.l.w == w && t.l.gen == t.gen
}

func (w *Watchdog) loop() {
	defer w.wg.Done()
	defer w.alarm.Stop()
	for {
		lost, due := w.collect()
		// OnLost may Remove a lease of due: renew checks each lease again before sending.
		for _, l := range lost {
			l.OnLost(l, ErrExpired)
		}
		if len(due) > 0 {
			w.mu.Lock()
			w.pending = append(w.pending, due...)
			start := !w.renewing && !w.closed
			w.renewing = w.renewing || start
			w.mu.Unlock()
			if start {
				w.wg.Add(1)
				go w.renewPending()
			}
		}
		select {
		case <-w.ctx.Done():
			return
		case <-w.kick:
		}
	}
}

// renewPending is the one renewal goroutine: it hands the pending leases to the Renewer, a
// batch at a time, and exits when none is left. However many leases are due, and however
// slow Redis is, at most one renewal call is in flight.
func (w *Watchdog) renewPending() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		if len(w.pending) == 0 || w.closed {
			w.pending = nil
			w.renewing = false
			w.mu.Unlock()
			return
		}
		n := min(len(w.pending), w.batch)
		batch := append([]taken(nil), w.pending[:n]...)
		w.pending = w.pending[n:]
		w.mu.Unlock()
		w.renew(batch)
	}
}

// collect takes the leases whose deadline passed (now lost) and those due for renewal (now
// in flight), and sets the alarm for the next look.
func (w *Watchdog) collect() (lost []*Lease, due []taken) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	wait := time.Hour
	defer func() {
		w.wakeAt = now.Add(wait)
		w.alarm.Reset(wait)
	}()
	for len(w.leases) > 0 {
		l := w.leases[0]
		at := l.wake()
		if at.After(now.Add(l.early())) {
			wait = at.Sub(now)
			return lost, due
		}
		if !now.Before(l.deadline) {
			w.drop(l)
			lost = append(lost, l)
			continue
		}
		l.inFlight = true
		heap.Fix(&w.leases, 0)
		due = append(due, taken{l, l.gen})
	}
	return lost, due
}

func (w *Watchdog) renew(batch []taken) {
	// Send only the leases still registered as they were when taken: one removed since (by
	// Remove, possibly from an OnLost run in between, or by Close) must not be renewed.
	w.mu.Lock()
	keep := batch[:0]
	for _, t := range batch {
		if w.current(t) {
			keep = append(keep, t)
		}
	}
	batch = keep
	if len(batch) == 0 {
		w.mu.Unlock()
		return
	}
	leases := make([]*Lease, len(batch))
	end := batch[0].l.deadline
	for i, t := range batch {
		leases[i] = t.l
		if t.l.deadline.Before(end) {
			end = t.l.deadline
		}
	}
	w.mu.Unlock()
	sent := time.Now()
	ctx, cancel := context.WithDeadline(w.ctx, end)
	var errs []error
	var report func()
	if rr, ok := w.renewer.(ReportingRenewer); ok {
		errs, report = rr.RenewReport(ctx, leases)
	} else {
		errs = w.renewer.Renew(ctx, leases)
	}
	cancel()

	var lost []*Lease
	var causes []error
	w.mu.Lock()
	now := time.Now()
	for i, l := range leases {
		if !w.current(batch[i]) { // removed (and maybe added again) while in flight
			continue
		}
		l.inFlight = false
		var err error
		if i < len(errs) {
			err = errs[i]
		} else {
			err = errors.New("watchdog: renewer returned too few results")
		}
		switch {
		case err == nil:
			l.retrying = false
			l.deadline = sent.Add(l.TTL - Drift(l.TTL))
			l.next = sent.Add(time.Duration(float64(l.TTL) * w.fraction))
		case errors.Is(err, ErrGone):
			w.drop(l)
			lost, causes = append(lost, l), append(causes, err)
			continue
		default:
			// Transient: retry soon, but never later than the deadline allows.
			l.retrying = true
			l.next = now.Add(min(w.retry, l.TTL/10+time.Millisecond))
		}
		heap.Fix(&w.leases, l.index)
	}
	w.mu.Unlock()
	w.poke()
	if report != nil {
		report()
	}
	for i, l := range lost {
		l.OnLost(l, causes[i])
	}
}

// leaseHeap orders leases by their next wake-up.
type leaseHeap []*Lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].wake().Before(h[j].wake()) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*Lease)
	l.index = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	l.index = -1
	*h = old[:len(old)-1]
	return l
}
