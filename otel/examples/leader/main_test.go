package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/rlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClients dials n relock Clients on one Redis (the embedded miniredis unless
// $REDIS_URL or $REDIS_ADDR say otherwise), closed at the test's end.
func newClients(t *testing.T, n int, opts ...rlock.Option) ([]*rlock.Client, rueidis.ClientOption) {
	t.Helper()
	opt, stop, _, err := redisOptions()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	var cs []*rlock.Client
	for range n {
		c, err := rlock.Dial(opt, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs, opt
}

// within waits for cond, polled, up to a ceiling never reached unless the behaviour is
// wrong.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ceiling)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, ceiling)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLeader_oneAtATime: three replicas run the leader loop; the job never runs on two at
// once; each shutdown of the leader hands the lock to another replica, with a higher
// fencing token; every Run returns nil on shutdown and the lock is free at the end.
func TestLeader_oneAtATime(t *testing.T) {
	cs, _ := newClients(t, 3)
	name := "test:leader:" + t.Name()
	var (
		active, maxActive atomic.Int32
		mu                sync.Mutex
		leader            = -1
		runs              = map[int]int{}
		tokens            []int64
	)
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, len(cs))
	results := make([]error, len(cs))
	for i, c := range cs {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		l := &Leader{
			Mutex:  c.Mutex(name),
			Period: 10 * time.Millisecond,
			Job: func(ctx context.Context) error {
				n := active.Add(1)
				for m := maxActive.Load(); n > m && !maxActive.CompareAndSwap(m, n); m = maxActive.Load() {
				}
				time.Sleep(2 * time.Millisecond) // a job that takes time, so overlaps would show
				active.Add(-1)
				mu.Lock()
				runs[i]++
				mu.Unlock()
				return nil
			},
			Started: func(term Term) {
				mu.Lock()
				leader = i
				tokens = append(tokens, term.Token)
				mu.Unlock()
			},
		}
		wg.Go(func() { results[i] = l.Run(ctx) })
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
		wg.Wait()
	}()
	stopped := map[int]bool{}
	for range len(cs) {
		var cur int
		within(t, "a leader ran the job 3 times", func() bool {
			mu.Lock()
			defer mu.Unlock()
			cur = leader
			return cur >= 0 && !stopped[cur] && runs[cur] >= 3
		})
		stopped[cur] = true
		cancels[cur]()
	}
	wg.Wait()

	if maxActive.Load() != 1 {
		t.Errorf("the job ran on %d replicas at once", maxActive.Load())
	}
	if len(tokens) != 3 {
		t.Errorf("%d terms, want 3 (one per replica, each ended by its shutdown): tokens %v", len(tokens), tokens)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("fencing tokens did not rise: %v", tokens)
		}
	}
	for i, err := range results {
		if err != nil {
			t.Errorf("replica %d: Run returned %v on shutdown, want nil", i, err)
		}
	}
	if locked, err := cs[0].Mutex(name).IsLocked(context.Background()); err != nil || locked {
		t.Errorf("after every shutdown the lock is held: (%v, %v)", locked, err)
	}
}

// TestLeader_lossStepsDown: when the lock is lost (its key deleted), the running job's
// context is cancelled with cause ErrLockLost, the term ends with that cause, and the
// replica competes again and leads a new term with a higher token.
func TestLeader_lossStepsDown(t *testing.T) {
	cs, opt := newClients(t, 1, rlock.WithWatchdogTimeout(time.Second))
	m := cs[0].Mutex("test:leader:" + t.Name())
	var (
		mu        sync.Mutex
		terms     []Term
		ended     []Term
		jobCauses []error
	)
	l := &Leader{
		Mutex:  m,
		Period: time.Hour, // one run per term: it waits for the end of its term
		Job: func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			jobCauses = append(jobCauses, context.Cause(ctx))
			mu.Unlock()
			return nil
		},
		Started: func(term Term) { mu.Lock(); terms = append(terms, term); mu.Unlock() },
		Ended:   func(term Term) { mu.Lock(); ended = append(ended, term); mu.Unlock() },
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	var wg sync.WaitGroup
	wg.Go(func() { runErr = l.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	within(t, "the first term", func() bool { mu.Lock(); defer mu.Unlock(); return len(terms) == 1 })
	opt.DisableCache = true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := rc.Do(context.Background(), rc.B().Del().Key(m.Key()).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	within(t, "a second term after the loss", func() bool { mu.Lock(); defer mu.Unlock(); return len(terms) == 2 })
	cancel()
	wg.Wait()

	if runErr != nil {
		t.Errorf("Run: %v, want nil", runErr)
	}
	if len(ended) != 2 || !errors.Is(ended[0].Cause, rlock.ErrLockLost) || errors.Is(ended[1].Cause, rlock.ErrLockLost) {
		t.Fatalf("terms ended with %+v, want a loss then a shutdown", ended)
	}
	if len(jobCauses) != 2 || !errors.Is(jobCauses[0], rlock.ErrLockLost) {
		t.Errorf("the job's contexts ended with %v, want ErrLockLost first", jobCauses)
	}
	if terms[1].Token <= terms[0].Token {
		t.Errorf("token %d after the loss, not above %d", terms[1].Token, terms[0].Token)
	}
}

// TestLeader_invalid: a Leader without its Mutex or Job, or with a Period <= 0, is refused
// with an error wrapping rlock.ErrInvalid.
func TestLeader_invalid(t *testing.T) {
	cs, _ := newClients(t, 1)
	job := func(context.Context) error { return nil }
	m := cs[0].Mutex("test:leader:invalid")
	for name, l := range map[string]*Leader{
		"no Mutex":    {Period: time.Second, Job: job},
		"no Job":      {Mutex: m, Period: time.Second},
		"zero Period": {Mutex: m, Job: job},
	} {
		if err := l.Run(context.Background()); !errors.Is(err, rlock.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestRun_demo runs the demo as `go run` would and checks its story and its metrics: the
// job's counter, and relock's (the grants, the one loss, the tenures ended by the loss and
// by the shutdowns, the renewals).
func TestRun_demo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"replica-1 leads (fencing token ",
		"steps down (lock lost: ",
		"steps down (shutdown)",
		"== metrics (stdoutmetric, compact encoder)",
		"job.runs{replica=1}",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, s)
		}
	}
	for _, want := range []string{
		"relock.acquire.grants{",
		"relock.hold.losses{relock.kind=mutex,relock.lock.name=" + lockName + "}",
		"relock.hold.duration{relock.end_cause=lost,",
		"relock.hold.duration{relock.end_cause=unlock,",
		"relock.renewal.leases{}",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the demo's metrics lack %q:\n%s", want, s)
		}
	}
}

// TestLeader_clientClosed: when the replica's Client closes, a leading Run ends its term
// (the job's context is cancelled with cause ErrClosed) and returns an error wrapping
// rlock.ErrClosed, and so does a Run waiting for the lock.
func TestLeader_clientClosed(t *testing.T) {
	cs, _ := newClients(t, 2)
	name := "test:leader:" + t.Name()
	started := make(chan struct{})
	var jobCause error
	leading := &Leader{Mutex: cs[0].Mutex(name), Period: time.Hour,
		Job: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			jobCause = context.Cause(ctx)
			return nil
		}}
	waiting := &Leader{Mutex: cs[1].Mutex(name), Period: time.Hour, Job: func(context.Context) error { return nil }}
	var leadErr, waitErr error
	var wg sync.WaitGroup
	wg.Go(func() { leadErr = leading.Run(context.Background()) })
	select {
	case <-started:
	case <-time.After(ceiling):
		t.Fatal("no term began")
	}
	wg.Go(func() { waitErr = waiting.Run(context.Background()) })
	cs[1].Close()
	cs[0].Close()
	wg.Wait()
	if !errors.Is(leadErr, rlock.ErrClosed) || !errors.Is(jobCause, rlock.ErrClosed) {
		t.Errorf("leading Run: %v, job's cause %v; want both ErrClosed", leadErr, jobCause)
	}
	if !errors.Is(waitErr, rlock.ErrClosed) {
		t.Errorf("waiting Run: %v, want ErrClosed", waitErr)
	}
}
