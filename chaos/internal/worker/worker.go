// Package worker is the contender loop of the chaos suite: lock a name, read the protected
// resource, work, write it back (a non-atomic increment carrying the fencing token), unlock,
// and report every lock operation with its call and return times. It runs the same in a
// goroutine of the test and in a separate contender process (../contender).
package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/relock-go/relock/rlock"
	"github.com/relock-go/relock/watchdog"
)

// Resource is the protected resource: it refuses any token lower than the highest it has
// seen for the name.
type Resource interface {
	// Read starts a critical section: it returns the counter, or ok=false if token is stale.
	Read(name, owner string, token int64) (value int64, ok bool)
	// Write ends it: it stores value unless token is stale.
	Write(name, owner string, token, value int64) (ok bool)
}

// Outcomes of an operation, as the history records them.
const (
	OutOK      = "ok"      // acquire: granted; release: the hold was given back
	OutFail    = "fail"    // acquire: the wait ran out with the lock held by another
	OutNotHeld = "notheld" // release: ErrNotHeld (the hold was lost or expired)
	OutNoop    = "noop"    // an error that relock says had no effect
	OutUnknown = "unknown" // the outcome is not known (ErrUnknownOutcome)
)

// Op is one lock operation of the history.
type Op struct {
	Kind   string `json:"kind"` // "acquire" or "release"
	Name   string `json:"name"`
	Owner  string `json:"owner"`
	Call   int64  `json:"call"` // Mono at the call
	Return int64  `json:"ret"`  // Mono at the return
	Out    string `json:"out"`
	Token  int64  `json:"token,omitempty"`
	Err    string `json:"err,omitempty"`
	// For a release: whether the holder had been told of a loss (Done closed with
	// ErrLockLost) before it wrote the resource.
	LostBeforeWrite bool `json:"lost_before_write,omitempty"`
}

// Lost is a loss notice: the hold (name, owner, token) learned at At that it lost the lock.
type Lost struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	At    int64  `json:"at"`
	Cause string `json:"cause"`
}

// Sink receives the history. Its methods may be called from several goroutines.
type Sink interface {
	Op(Op)
	Lost(Lost)
}

// Config bounds a run.
type Config struct {
	Names    []string      // the lock names, used in turn
	Iters    int           // at most this many acquisitions attempted (> 0)
	Deadline time.Time     // and no attempt starts after this
	Wait     time.Duration // TryLock wait per attempt
	// Lease is the TryLock lease: 0 holds in watchdog mode (renewed while held), > 0 a fixed
	// lease that ends by itself (keep Work well below it).
	Lease time.Duration
	// Stop, when not nil, ends the run once closed: no attempt starts after that.
	Stop <-chan struct{}
	Work time.Duration // time between the read and the write of the resource
	// Between, when set, runs between the read and the write (before the Work sleep), e.g.
	// to tell a test that the holder is inside its critical section.
	Between func(name string, token int64)
	// Kind is the lock used: "" or "mutex" (Client.Mutex), "fair" (Client.FairMutex), "spin"
	// (Client.SpinMutex), "rw" (Client.RWMutex's write side). The first three are one lock in
	// Redis, so they may share a name (the fair queue is then bypassed by the others, but
	// exclusion holds); "rw" may not. "red" is a RedLock over RedClients (the Client given
	// to Run then only names the owner in the history).
	Kind string
	// RedClients are a RedLock's Clients, one per independent server (Kind "red"), and
	// RedOptions its options.
	RedClients []*rlock.Client
	RedOptions []rlock.RedLockOption
	// Label tells apart several workers on one Client (each its own owner): it is added to
	// the owner in the history.
	Label string
}

// Lock is what a worker takes: a Mutex, or the write side of an RWMutex.
type Lock interface {
	TryLock(ctx context.Context, wait, lease time.Duration) (bool, error)
	Unlock(ctx context.Context) error
	Token(ctx context.Context) (int64, error)
	HoldContext(ctx context.Context) (context.Context, context.CancelFunc)
	Err(ctx context.Context) error
	Name() string
	Key() string
}

// handle returns the lock of kind for name (a FairMutex and a SpinMutex are Mutexes with
// another way of waiting; "rw" is an RWMutex's write side, which must not share a name
// with the other kinds).
func handle(c *rlock.Client, cfg Config, name string) Lock {
	switch cfg.Kind {
	case "red":
		return redLock{rlock.NewRedLock(name, cfg.RedClients, cfg.RedOptions...)}
	case "fair":
		return c.FairMutex(name).Mutex
	case "spin":
		return c.SpinMutex(name).Mutex
	case "rw":
		return c.RWMutex(name)
	}
	return c.Mutex(name)
}

// redLock is a RedLock as a worker's Lock: one handle is one owner; it has no single key.
type redLock struct{ *rlock.RedLock }

func (r redLock) Key() string { return "red:" + r.Name() }

// Run runs one contender with its own owner (one handle per name) until cfg's bounds or
// ctx. It returns the number of critical sections it entered.
func Run(ctx context.Context, c *rlock.Client, cfg Config, res Resource, sink Sink) int {
	handles := make([]Lock, len(cfg.Names))
	for i, n := range cfg.Names {
		handles[i] = handle(c, cfg, n)
	}
	owner := c.ID()
	if cfg.Label != "" {
		owner += "#" + cfg.Label
	}
	sections := 0
	for i := 0; i < cfg.Iters && ctx.Err() == nil && (cfg.Deadline.IsZero() || time.Now().Before(cfg.Deadline)) && !closed(cfg.Stop); i++ {
		m := handles[i%len(handles)]
		name := m.Name()
		who := owner + "/" + name + "/" + m.Key()
		op := Op{Kind: "acquire", Name: name, Owner: who, Call: Mono()}
		ok, err := m.TryLock(ctx, cfg.Wait, cfg.Lease)
		op.Return = Mono()
		switch {
		case ok:
			op.Out = OutOK
			op.Token, _ = m.Token(context.Background())
		case err == nil:
			op.Out = OutFail
		case errors.Is(err, rlock.ErrUnknownOutcome):
			op.Out, op.Err = OutUnknown, err.Error()
		case errors.Is(err, watchdog.ErrExpired) && !errors.Is(err, rlock.ErrLockLost):
			// A core before the late-grant fix (chaos.TestRegression_lateGrant) reported a grant
			// whose reply came after its lease as this error, yet Redis had granted it: for the
			// history that is a ghost hold, an operation whose outcome the caller cannot know.
			op.Out, op.Err = OutUnknown, err.Error()
		case ctx.Err() != nil:
			op.Out, op.Err = OutNoop, err.Error()
		default:
			op.Out, op.Err = OutNoop, err.Error()
		}
		sink.Op(op)
		if !ok {
			if err != nil && ctx.Err() == nil {
				pause(ctx, 5*time.Millisecond) // an error: do not spin
			}
			continue
		}
		sections++
		tok := op.Token
		var lostAt int64
		hctx, cancel := m.HoldContext(context.Background())
		watched := make(chan struct{})
		if hctx.Err() != nil {
			// Lost already, between the grant and now (e.g. this process was paused): the
			// context then says ErrNotHeld (chaos.TestRegression_holdContextAfterLoss), Err
			// tells the loss.
			close(watched)
			if err := m.Err(context.Background()); errors.Is(err, rlock.ErrLockLost) || errors.Is(context.Cause(hctx), rlock.ErrLockLost) {
				sink.Lost(Lost{Name: name, Owner: who, Token: tok, At: Mono(), Cause: fmt.Sprint(err)})
			}
		} else {
			go func() { // report a loss notice the moment it fires
				defer close(watched)
				<-hctx.Done()
				if cause := context.Cause(hctx); errors.Is(cause, rlock.ErrLockLost) {
					sink.Lost(Lost{Name: name, Owner: who, Token: tok, At: Mono(), Cause: cause.Error()})
				}
			}()
		}
		v, _ := res.Read(name, who, tok)
		if cfg.Between != nil {
			cfg.Between(name, tok)
		}
		pause(ctx, cfg.Work)
		if hctx.Err() != nil {
			lostAt = Mono()
		}
		// A holder that was told of a loss (or not yet) writes anyway: the resource, not the
		// holder's good manners, must refuse a stale token.
		res.Write(name, who, tok, v+1)
		rel := Op{Kind: "release", Name: name, Owner: who, Call: Mono(), Token: tok, LostBeforeWrite: lostAt != 0}
		uerr := m.Unlock(context.Background())
		rel.Return = Mono()
		switch {
		case uerr == nil:
			rel.Out = OutOK
		case errors.Is(uerr, rlock.ErrNotHeld):
			rel.Out, rel.Err = OutNotHeld, uerr.Error()
		default:
			rel.Out, rel.Err = OutUnknown, uerr.Error()
		}
		cancel()
		<-watched
		sink.Op(rel)
	}
	return sections
}

// closed reports whether ch is closed (false for a nil ch).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
