package rlock_test

// Bad and extreme input, case by case (the boundshunt survey): each case feeds one exported
// constructor, option or method a value at or past its bounds and records what came back, on
// a real redis-server. The project's rule: bad input gets a clear error (errors.Is-able) and
// loses nothing: never a panic, a hang, a silent default, or a key left without an expiry.
// After each case the keys under its prefix are listed with their TTLs.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

type boundsEnv struct {
	t      *testing.T
	srv    *redistest.Server
	rc     rueidis.Client
	prefix string
}

// client makes a Client with the case's prefix (unless opts set another) and opts.
func (e *boundsEnv) client(opts ...rlock.Option) (*rlock.Client, error) {
	c, err := rlock.New(e.rc, append([]rlock.Option{rlock.WithKeyPrefix(e.prefix)}, opts...)...)
	if err == nil {
		e.t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

func (e *boundsEnv) mustClient(opts ...rlock.Option) *rlock.Client {
	c, err := e.client(opts...)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return c
}

// keys lists every key (matching pattern) with its PTTL.
func (e *boundsEnv) keys(pattern string) map[string]int64 {
	out := map[string]int64{}
	cursor := "0"
	for {
		msg := e.srv.Do(e.t, "SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
		arr, err := msg.ToArray()
		if err != nil {
			e.t.Fatalf("SCAN: %v", err)
		}
		cursor, _ = arr[0].ToString()
		ks, _ := arr[1].AsStrSlice()
		for _, k := range ks {
			p := e.srv.Do(e.t, "PTTL", k)
			n, _ := p.AsInt64()
			out[k] = n
		}
		if cursor == "0" {
			return out
		}
	}
}

type boundsCase struct {
	name string
	// run returns what the call returned, as text, and an error to classify.
	run func(e *boundsEnv) (string, error)
	// want: "invalid" (an error wrapping ErrInvalid, nothing written), "ok" (documented
	// meaning), "err" (some clear error), or "" (record only).
	want string
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, rlock.ErrInvalid):
		return "ErrInvalid"
	case errors.Is(err, rlock.ErrClosed):
		return "ErrClosed"
	case errors.Is(err, rlock.ErrNotHeld):
		return "ErrNotHeld"
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case errors.Is(err, context.Canceled):
		return "Canceled"
	}
	return "other"
}

const boundsHang = 4 * time.Second

func runBoundsCases(t *testing.T, cases []boundsCase) {
	srv := redistest.Start(t)
	rc := srv.Client(t)
	for i, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			e := &boundsEnv{t: t, srv: srv, rc: rc, prefix: fmt.Sprintf("bh%d:", i)}
			srv.Do(t, "FLUSHALL")
			type res struct {
				out   string
				err   error
				panic any
			}
			done := make(chan res, 1)
			go func() {
				var r res
				defer func() {
					if p := recover(); p != nil {
						r.panic = p
					}
					done <- r
				}()
				r.out, r.err = bc.run(e)
			}()
			var r res
			select {
			case r = <-done:
			case <-time.After(boundsHang):
				t.Fatalf("HANG: no return within %v", boundsHang)
			}
			if r.panic != nil {
				t.Fatalf("PANIC: %v", r.panic)
			}
			errText := ""
			if r.err != nil {
				errText = r.err.Error()
				if len(errText) > 300 {
					errText = errText[:300] + "..."
				}
			}
			ks := e.keys("*")
			var noTTL []string
			for k, p := range ks {
				if p == -1 {
					noTTL = append(noTTL, k)
				}
			}
			t.Logf("RESULT out=%q err=%s %q keys=%d noTTL=%d", r.out, errKind(r.err), errText, len(ks), len(noTTL))
			switch bc.want {
			case "invalid":
				if !errors.Is(r.err, rlock.ErrInvalid) {
					t.Errorf("want ErrInvalid, got %v (out %q)", r.err, r.out)
				}
				if len(ks) != 0 {
					t.Errorf("ErrInvalid but keys written: %v", ks)
				}
			case "ok":
				if r.err != nil {
					t.Errorf("want success, got %v", r.err)
				}
			case "err":
				if r.err == nil {
					t.Errorf("want an error, got none (out %q)", r.out)
				}
			}
			for _, k := range noTTL {
				switch k {
				case "{" + e.prefix + "s}", "{" + e.prefix + "p}", "{" + e.prefix + "l}":
					// a semaphore's, a permit semaphore's, a latch's state: no expiry by design
				default:
					t.Errorf("key %q left without an expiry", k)
				}
			}
		})
	}
}

const maxDur = time.Duration(math.MaxInt64)

// newWith returns a case that builds a Client with opts and reports New's error.
func newWith(opts ...rlock.Option) func(e *boundsEnv) (string, error) {
	return func(e *boundsEnv) (string, error) {
		_, err := e.client(opts...)
		return "", err
	}
}

// lockCycleWith builds a Client with opts, Locks, reads the TTL, Unlocks.
func lockCycleWith(opts ...rlock.Option) func(e *boundsEnv) (string, error) {
	return func(e *boundsEnv) (string, error) {
		c, err := e.client(opts...)
		if err != nil {
			return "new", err
		}
		m := c.Mutex("x")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if err := m.Lock(ctx); err != nil {
			return "lock", err
		}
		ttl, _ := m.TTL(ctx)
		pttl := e.srv.Do(e.t, "PTTL", m.Key())
		n, _ := pttl.AsInt64()
		out := fmt.Sprintf("TTL %v redis PTTL %d", ttl, n)
		return out, m.Unlock(ctx)
	}
}

func TestBoundsHunt_options(t *testing.T) {
	cases := []boundsCase{
		{"watchdog 0", newWith(rlock.WithWatchdogTimeout(0)), "invalid"},
		{"watchdog -1", newWith(rlock.WithWatchdogTimeout(-1)), "invalid"},
		{"watchdog 9.999ms", newWith(rlock.WithWatchdogTimeout(10*time.Millisecond - 1)), "invalid"},
		{"watchdog max", lockCycleWith(rlock.WithWatchdogTimeout(maxDur)), ""},
		{"watchdog 10ms cycle", lockCycleWith(rlock.WithWatchdogTimeout(10 * time.Millisecond)), ""},
		{"fraction NaN", newWith(rlock.WithRenewFraction(math.NaN())), "invalid"},
		{"fraction +Inf", newWith(rlock.WithRenewFraction(math.Inf(1))), "invalid"},
		{"fraction -Inf", newWith(rlock.WithRenewFraction(math.Inf(-1))), "invalid"},
		{"fraction 0", newWith(rlock.WithRenewFraction(0)), "invalid"},
		{"fraction 1", newWith(rlock.WithRenewFraction(1)), "invalid"},
		{"fraction -0.5", newWith(rlock.WithRenewFraction(-0.5)), "invalid"},
		{"fraction 0.95", newWith(rlock.WithRenewFraction(0.95)), "invalid"},
		{"fraction 1e-300", newWith(rlock.WithRenewFraction(1e-300)), "invalid"},
		{"fraction smallest", newWith(rlock.WithRenewFraction(math.SmallestNonzeroFloat64)), "invalid"},
		{"cleanup 0", newWith(rlock.WithCleanupTimeout(0)), "invalid"},
		{"cleanup 999us", newWith(rlock.WithCleanupTimeout(999 * time.Microsecond)), "invalid"},
		{"cleanup -1", newWith(rlock.WithCleanupTimeout(-1)), "invalid"},
		{"cleanup max", lockCycleWith(rlock.WithCleanupTimeout(maxDur)), ""},
		{"linger -1", newWith(rlock.WithSubscriptionLinger(-1)), "invalid"},
		{"linger max", lockCycleWith(rlock.WithSubscriptionLinger(maxDur)), ""},
		{"waiter 29ms", newWith(rlock.WithWaiterTimeout(29 * time.Millisecond)), "invalid"},
		{"waiter max", lockCycleWith(rlock.WithWaiterTimeout(maxDur)), ""},
		{"ack -1", newWith(rlock.WithReplicaAck(-1, time.Second)), "invalid"},
		{"ack 1 timeout 0", newWith(rlock.WithReplicaAck(1, 0)), "invalid"},
		{"ack 1 timeout 999us", newWith(rlock.WithReplicaAck(1, 999*time.Microsecond)), "invalid"},
		{"ack 0 timeout -1", newWith(rlock.WithReplicaAck(0, -1)), ""},
		{"ack 1 timeout above the watchdog timeout", newWith(rlock.WithWatchdogTimeout(time.Second), rlock.WithReplicaAck(1, 2*time.Second)), "invalid"},
		{"ack 1 timeout above, watchdog timeout given last", newWith(rlock.WithReplicaAck(1, 2*time.Second), rlock.WithWatchdogTimeout(time.Second)), "invalid"},
		{"ack 1 timeout at the watchdog timeout", newWith(rlock.WithReplicaAck(1, time.Second), rlock.WithWatchdogTimeout(time.Second)), "ok"},
		{"pubsub -1", newWith(rlock.WithPubSub(-1)), "invalid"},
		{"pubsub 3", newWith(rlock.WithPubSub(3)), "invalid"},
		{"pubsub sharded standalone", newWith(rlock.WithPubSub(rlock.PubSubSharded)), "invalid"},
		{"observer nil", newWith(rlock.WithObserver(nil)), "invalid"},
		{"logger nil", newWith(rlock.WithLogger(nil)), "invalid"},
		{"prefix {", newWith(rlock.WithKeyPrefix("a{")), "invalid"},
		{"prefix }", newWith(rlock.WithKeyPrefix("a}")), "invalid"},
		{"prefix empty", func(e *boundsEnv) (string, error) {
			c, err := rlock.New(e.rc, rlock.WithKeyPrefix(""))
			if err != nil {
				return "", err
			}
			defer c.Close()
			m := c.Mutex(e.prefix + "x")
			if err := m.Lock(bg); err != nil {
				return m.Key(), err
			}
			return m.Key(), m.Unlock(bg)
		}, ""},
		{"prefix newline/space/non-utf8", lockCycleWith(rlock.WithKeyPrefix("bhX:\n \xff:")), ""},
		{"prefix 1MB", lockCycleWith(rlock.WithKeyPrefix(strings.Repeat("p", 1<<20))), ""},
		{"clientinfo huge", newWith(rlock.WithClientInfo(rlock.ClientInfo{Host: strings.Repeat("h", 1<<20)})), "invalid"},
		{"clientinfo pid -1", newWith(rlock.WithClientInfo(rlock.ClientInfo{PID: -1})), "invalid"},
		{"New nil Option", newWith(nil), "invalid"},
		{"New nil Option among others", newWith(rlock.WithWatchdogTimeout(time.Second), nil), "invalid"},
		{"zero Observer", lockCycleWith(rlock.WithObserver(&rlock.Observer{})), "ok"},
		{"cleanup 250 years", lockCycleWith(rlock.WithCleanupTimeout(250 * 365 * 24 * time.Hour)), "ok"},
		{"cleanup 200 years", lockCycleWith(rlock.WithCleanupTimeout(200 * 365 * 24 * time.Hour)), "ok"},
		{"New nil", func(e *boundsEnv) (string, error) { _, err := rlock.New(nil); return "", err }, "invalid"},
		{"Dial nil ctx", func(e *boundsEnv) (string, error) {
			//lint:ignore SA1012 testing nil ctx
			_, err := rlock.DialContext(nil, rueidis.ClientOption{InitAddress: []string{e.srv.Addr()}}) //nolint:staticcheck
			return "", err
		}, "invalid"},
		{"Dial no address", func(e *boundsEnv) (string, error) {
			c, err := rlock.Dial(rueidis.ClientOption{})
			if c != nil {
				c.Close()
			}
			return "", err
		}, "err"},
	}
	runBoundsCases(t, cases)
}

// withLock runs f on a Mutex of a default Client with name.
func mutexCase(name string, f func(e *boundsEnv, m *rlock.Mutex) (string, error)) func(e *boundsEnv) (string, error) {
	return func(e *boundsEnv) (string, error) {
		c := e.mustClient()
		return f(e, c.Mutex(name))
	}
}

func pttlOf(e *boundsEnv, key string) int64 {
	msg := e.srv.Do(e.t, "PTTL", key)
	n, _ := msg.AsInt64()
	return n
}

// tryCycle TryLocks with wait and lease, reports Redis's PTTL, and Unlocks.
func tryCycle(name string, wait, lease time.Duration) func(e *boundsEnv) (string, error) {
	return mutexCase(name, func(e *boundsEnv, m *rlock.Mutex) (string, error) {
		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		defer cancel()
		ok, err := m.TryLock(ctx, wait, lease)
		if err != nil || !ok {
			return fmt.Sprintf("ok=%v", ok), err
		}
		out := fmt.Sprintf("ok=%v PTTL %d key len %d", ok, pttlOf(e, m.Key()), len(m.Key()))
		return out, m.Unlock(ctx)
	})
}

var (
	cancelledCtx = func() context.Context { c, f := context.WithCancel(bg); f(); return c }()
)

func TestBoundsHunt_mutex(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; its ctx bounds and 4 s hang guard are generous
	mb := strings.Repeat("n", 1<<20)
	cases := []boundsCase{
		{"lease 1ns", tryCycle("x", 0, 1), "invalid"}, // lease <= 0 is watchdog mode; 1ns > 0 is a fixed lease below 10ms
		{"lease 500us", tryCycle("x", 0, 500*time.Microsecond), "invalid"},
		{"lease 9.999ms", tryCycle("x", 0, 10*time.Millisecond-1), "invalid"},
		// A 10ms lease may run out before the Unlock (ErrLeaseExpired): recorded only.
		{"lease 10ms", tryCycle("x", 0, 10*time.Millisecond), ""},
		{"lease 10.9ms", tryCycle("x", 0, 10900*time.Microsecond), ""},
		{"lease 0 (watchdog)", tryCycle("x", 0, 0), "ok"},
		{"lease -1 (watchdog)", tryCycle("x", 0, -1), "ok"},
		{"lease min int64 (watchdog)", tryCycle("x", 0, math.MinInt64), "ok"},
		{"lease max", tryCycle("x", 0, maxDur), "ok"},
		{"wait max free", tryCycle("x", maxDur, 0), "ok"},
		{"wait -1", tryCycle("x", -1, 0), "invalid"},
		{"wait min int64", tryCycle("x", math.MinInt64, 0), "invalid"},
		{"LockLease 0", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) { return "", m.LockLease(bg, 0) }), "invalid"},
		{"LockLease -1", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) { return "", m.LockLease(bg, -1) }), "invalid"},
		{"LockLease max", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) {
			if err := m.LockLease(bg, maxDur); err != nil {
				return "", err
			}
			ttl, err := m.TTL(bg)
			return fmt.Sprintf("TTL %v PTTL %d", ttl, pttlOf(e, m.Key())), errors.Join(err, m.Unlock(bg))
		}), "ok"},
		{"wait max held by other, ctx 300ms", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			a, b := c.Mutex("x"), c.Mutex("x")
			if err := a.Lock(bg); err != nil {
				return "", err
			}
			defer a.Unlock(bg)
			ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
			defer cancel()
			ok, err := b.TryLock(ctx, maxDur, 0)
			return fmt.Sprintf("ok=%v", ok), err
		}, "err"},
		{"Lock cancelled ctx", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) { return "", m.Lock(cancelledCtx) }), "err"},
		{"TryLock cancelled ctx", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) {
			ok, err := m.TryLock(cancelledCtx, 0, 0)
			return fmt.Sprint(ok), err
		}), "err"},
		{"Lock nil ctx", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) { return "", m.Lock(noCtx) }), "invalid"},
		{"Unlock nil ctx", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) { return "", m.Unlock(noCtx) }), "invalid"},
		{"Unlock not held", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) { return "", m.Unlock(bg) }), "err"},
		{"Unlock cancelled ctx after Lock", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) {
			if err := m.Lock(bg); err != nil {
				return "", err
			}
			return "", m.Unlock(cancelledCtx)
		}), "ok"},
		{"empty name", tryCycle("", 0, 0), "invalid"},
		{"name 1MB", tryCycle(mb, 0, 0), "ok"},
		{"name {", tryCycle("a{b", 0, 0), "ok"},
		{"name }", tryCycle("a}b", 0, 0), "ok"},
		{"name {tag}", tryCycle("a{tag}b", 0, 0), "ok"},
		{"name {}", tryCycle("{}", 0, 0), "ok"},
		{"name %", tryCycle("%7B", 0, 0), "ok"},
		{"name space newline nul", tryCycle("a b\nc\x00d", 0, 0), "ok"},
		{"name non-utf8", tryCycle("\xff\xfe", 0, 0), "ok"},
		{"name ~ fast-looking", tryCycle("~h:x 1.1", 0, 0), "ok"},
		{"name *?[", tryCycle("*?[", 0, 0), "ok"},
		{"owner empty", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) {
			return "", m.Lock(rlock.WithOwner(bg, ""))
		}), "invalid"},
		{"owner space ~", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) {
			ctx := rlock.WithOwner(bg, "~h:a 1.2 q:x token")
			if err := m.Lock(ctx); err != nil {
				return "", err
			}
			n, _ := m.HoldCount(ctx)
			hc := e.srv.Do(e.t, "HGETALL", m.Key())
			s, _ := hc.AsStrMap()
			return fmt.Sprintf("holds %d hash %q", n, s), m.Unlock(ctx)
		}), "ok"},
		{"owner 1MB", mutexCase("x", func(e *boundsEnv, m *rlock.Mutex) (string, error) {
			ctx := rlock.WithOwner(bg, mb)
			if err := m.Lock(ctx); err != nil {
				return "", err
			}
			return "", m.Unlock(ctx)
		}), "ok"},
		{"owner non-utf8 newline", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			m := c.Mutex("x")
			ctx := rlock.WithOwner(bg, "\xff\n\x00")
			if err := m.Lock(ctx); err != nil {
				return "", err
			}
			info, err := c.Inspect(ctx, "x")
			return fmt.Sprintf("%+v", info.Holders), errors.Join(err, m.Unlock(ctx))
		}, "ok"},
	}
	runBoundsCases(t, cases)
}

const maxPermits = 1 << 50

func semCase(f func(e *boundsEnv, s *rlock.Semaphore) (string, error)) func(e *boundsEnv) (string, error) {
	return func(e *boundsEnv) (string, error) { return f(e, e.mustClient().Semaphore("s")) }
}

func psemCase(f func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error)) func(e *boundsEnv) (string, error) {
	return func(e *boundsEnv) (string, error) { return f(e, e.mustClient().PermitSemaphore("p")) }
}

func latchCase(f func(e *boundsEnv, l *rlock.CountDownLatch) (string, error)) func(e *boundsEnv) (string, error) {
	return func(e *boundsEnv) (string, error) { return f(e, e.mustClient().CountDownLatch("l")) }
}

func TestBoundsHunt_semaphores(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; its ctx bounds and 4 s hang guard are generous
	cases := []boundsCase{
		{"sem Acquire 0", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.Acquire(bg, 0) }), "invalid"},
		{"sem Acquire -1", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.Acquire(bg, -1) }), "invalid"},
		{"sem Acquire 2^50+1", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.Acquire(bg, maxPermits+1) }), "invalid"},
		{"sem Acquire maxint", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.Acquire(bg, math.MaxInt) }), "invalid"},
		{"sem TryAcquire wait -1", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			_, err := s.TryAcquire(bg, 1, -1)
			return "", err
		}), "invalid"},
		{"sem TryAcquire wait max on empty, ctx 200ms", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			ok, err := s.TryAcquire(ctx, 1, maxDur)
			return fmt.Sprint(ok), err
		}), "err"},
		{"sem Release 0", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.Release(bg, 0) }), "invalid"},
		{"sem Release minint", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.Release(bg, math.MinInt) }), "invalid"},
		{"sem AddPermits 0", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.AddPermits(bg, 0) }), "invalid"},
		{"sem AddPermits -2^50-1", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) { return "", s.AddPermits(bg, -maxPermits-1) }), "invalid"},
		{"sem TrySetPermits -1", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			_, err := s.TrySetPermits(bg, -1)
			return "", err
		}), "invalid"},
		{"sem TrySetPermits 0", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			ok, err := s.TrySetPermits(bg, 0)
			return fmt.Sprint(ok), err
		}), ""},
		{"sem TrySetPermitsTTL ttl 0", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			_, err := s.TrySetPermitsTTL(bg, 1, 0)
			return "", err
		}), "invalid"},
		{"sem TrySetPermitsTTL ttl 500us", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			_, err := s.TrySetPermitsTTL(bg, 1, 500*time.Microsecond)
			return "", err
		}), "invalid"},
		{"sem TrySetPermitsTTL ttl 1.5ms", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			ok, err := s.TrySetPermitsTTL(bg, 1, 1500*time.Microsecond)
			return fmt.Sprintf("%v PTTL %d", ok, pttlOf(e, s.Key())), err
		}), ""},
		{"sem TrySetPermitsTTL ttl max", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			ok, err := s.TrySetPermitsTTL(bg, 1, maxDur)
			return fmt.Sprintf("%v PTTL %d", ok, pttlOf(e, s.Key())), err
		}), ""},
		// TestBoundsHunt_drainPermitsBeyond2p53: recorded here, checked there.
		{"sem total beyond 2^53 then drain", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			for range 9 {
				if err := s.Release(bg, maxPermits); err != nil {
					return "release", err
				}
			}
			if err := s.Release(bg, 1); err != nil {
				return "release 1", err
			}
			avail, _ := s.AvailablePermits(bg)
			drained, err := s.DrainPermits(bg)
			if err != nil {
				return "", err
			}
			after, err := s.AvailablePermits(bg)
			raw := e.srv.Do(e.t, "GET", s.Key())
			rs, _ := raw.ToString()
			return fmt.Sprintf("avail %d drained %d after %d raw %q", avail, drained, after, rs), err
		}), ""},
		{"sem total toward 2^63", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			e.srv.Do(e.t, "SET", s.Key(), "9223372036854775000")
			err := s.Release(bg, 1000)
			raw := e.srv.Do(e.t, "GET", s.Key())
			rs, _ := raw.ToString()
			return "raw " + rs, err
		}), "err"},
		{"sem Acquire at 2^53+1", semCase(func(e *boundsEnv, s *rlock.Semaphore) (string, error) {
			e.srv.Do(e.t, "SET", s.Key(), "9007199254740993")
			ok, err := s.TryAcquire(bg, 3, 0)
			raw := e.srv.Do(e.t, "GET", s.Key())
			rs, _ := raw.ToString()
			return fmt.Sprintf("%v raw %s", ok, rs), err
		}), ""},
		{"psem TrySetPermits -1", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			_, err := p.TrySetPermits(bg, -1)
			return "", err
		}), "invalid"},
		{"psem TrySetPermits 2^50+1", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			_, err := p.TrySetPermits(bg, maxPermits+1)
			return "", err
		}), "invalid"},
		{"psem AddPermits 0", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) { return "", p.AddPermits(bg, 0) }), "invalid"},
		{"psem Acquire lease 0", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			_, err := p.Acquire(bg, 0)
			return "", err
		}), "invalid"},
		{"psem Acquire lease 9ms", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			_, err := p.Acquire(bg, 9*time.Millisecond)
			return "", err
		}), "invalid"},
		{"psem Acquire lease max", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			if _, err := p.TrySetPermits(bg, 1); err != nil {
				return "set", err
			}
			pm, err := p.Acquire(bg, maxDur)
			if err != nil {
				return "", err
			}
			ttl, terr := p.TTL(bg, pm.ID)
			return fmt.Sprintf("ttl %v leases PTTL %d", ttl, pttlOf(e, p.Key()+":leases")), errors.Join(terr, p.Release(bg, pm.ID))
		}), "ok"},
		{"psem Extend lease max", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			if _, err := p.TrySetPermits(bg, 1); err != nil {
				return "set", err
			}
			pm, err := p.Acquire(bg, time.Second)
			if err != nil {
				return "", err
			}
			err = p.Extend(bg, pm.ID, maxDur)
			ttl, terr := p.TTL(bg, pm.ID)
			return fmt.Sprintf("ttl %v", ttl), errors.Join(err, terr, p.Release(bg, pm.ID))
		}), "ok"},
		{"psem Extend lease 0", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) { return "", p.Extend(bg, "x", 0) }), "invalid"},
		{"psem Extend empty id", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) { return "", p.Extend(bg, "", time.Second) }), "invalid"},
		{"psem Release empty id", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) { return "", p.Release(bg, "") }), "invalid"},
		{"psem Release unknown id", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			return "", p.Release(bg, "no such \n id")
		}), "err"},
		{"psem Release weird id on existing", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) {
			if _, err := p.TrySetPermits(bg, 1); err != nil {
				return "set", err
			}
			return "", p.Release(bg, "/x/999999999999999")
		}), "err"},
		{"psem TTL empty id", psemCase(func(e *boundsEnv, p *rlock.PermitSemaphore) (string, error) { _, err := p.TTL(bg, ""); return "", err }), "invalid"},
		{"latch TrySetCount 0", latchCase(func(e *boundsEnv, l *rlock.CountDownLatch) (string, error) {
			_, err := l.TrySetCount(bg, 0)
			return "", err
		}), "invalid"},
		{"latch TrySetCount -1", latchCase(func(e *boundsEnv, l *rlock.CountDownLatch) (string, error) {
			_, err := l.TrySetCount(bg, -1)
			return "", err
		}), "invalid"},
		{"latch TrySetCount maxint64 then CountDown", latchCase(func(e *boundsEnv, l *rlock.CountDownLatch) (string, error) {
			if _, err := l.TrySetCount(bg, math.MaxInt64); err != nil {
				return "set", err
			}
			err := l.CountDown(bg)
			n, cerr := l.Count(bg)
			return fmt.Sprintf("count %d", n), errors.Join(err, cerr)
		}), ""},
		{"latch TrySetCount 2^53+1 then CountDown", latchCase(func(e *boundsEnv, l *rlock.CountDownLatch) (string, error) {
			if _, err := l.TrySetCount(bg, 1<<53+1); err != nil {
				return "set", err
			}
			err := l.CountDown(bg)
			n, cerr := l.Count(bg)
			return fmt.Sprintf("count %d", n), errors.Join(err, cerr)
		}), ""},
		{"latch TryAwait -1", latchCase(func(e *boundsEnv, l *rlock.CountDownLatch) (string, error) {
			_, err := l.TryAwait(bg, -1)
			return "", err
		}), "invalid"},
		{"latch TryAwait max, ctx 200ms", latchCase(func(e *boundsEnv, l *rlock.CountDownLatch) (string, error) {
			if _, err := l.TrySetCount(bg, 1); err != nil {
				return "set", err
			}
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			ok, err := l.TryAwait(ctx, maxDur)
			_, _ = l.Delete(bg)
			return fmt.Sprint(ok), err
		}), "err"},
	}
	runBoundsCases(t, cases)
}

func TestBoundsHunt_family(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; its ctx bounds and 4 s hang guard are generous
	cases := []boundsCase{
		{"rw TryLock lease 9ms", func(e *boundsEnv) (string, error) {
			_, err := e.mustClient().RWMutex("x").TryLock(bg, 0, 9*time.Millisecond)
			return "", err
		}, "invalid"},
		{"rw TryRLock lease 9ms", func(e *boundsEnv) (string, error) {
			_, err := e.mustClient().RWMutex("x").TryRLock(bg, 0, 9*time.Millisecond)
			return "", err
		}, "invalid"},
		{"rw TryRLock wait -1", func(e *boundsEnv) (string, error) {
			_, err := e.mustClient().RWMutex("x").TryRLock(bg, -1, 0)
			return "", err
		}, "invalid"},
		{"rw RLockLease max", func(e *boundsEnv) (string, error) {
			rw := e.mustClient().RWMutex("x")
			if err := rw.RLockLease(bg, maxDur); err != nil {
				return "", err
			}
			return fmt.Sprintf("PTTL %d", pttlOf(e, rw.Key())), rw.RUnlock(bg)
		}, "ok"},
		{"rw LockLease max", func(e *boundsEnv) (string, error) {
			rw := e.mustClient().RWMutex("x")
			if err := rw.LockLease(bg, maxDur); err != nil {
				return "", err
			}
			return fmt.Sprintf("PTTL %d", pttlOf(e, rw.Key())), rw.Unlock(bg)
		}, "ok"},
		{"rw writer waits, waiter timeout max, ctx 200ms", func(e *boundsEnv) (string, error) {
			c := e.mustClient(rlock.WithWaiterTimeout(maxDur))
			a, b := c.RWMutex("x"), c.RWMutex("x")
			if err := a.RLock(bg); err != nil {
				return "", err
			}
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			err := b.Lock(ctx)
			keys := e.keys("*")
			ru := a.RUnlock(bg)
			return fmt.Sprintf("keys while waiting %v", keys), errors.Join(err, ru)
		}, "err"},
		{"fair waiter, waiter timeout max, ctx 200ms", func(e *boundsEnv) (string, error) {
			c := e.mustClient(rlock.WithWaiterTimeout(maxDur))
			a, b := c.FairMutex("x"), c.FairMutex("x")
			if err := a.Lock(bg); err != nil {
				return "", err
			}
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			err := b.Lock(ctx)
			time.Sleep(50 * time.Millisecond)
			keys := e.keys("*")
			return fmt.Sprintf("keys after %v", keys), errors.Join(err, a.Unlock(bg))
		}, "err"},
		{"fair TryLock lease max", func(e *boundsEnv) (string, error) {
			f := e.mustClient().FairMutex("x")
			ok, err := f.TryLock(bg, 0, maxDur)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%v PTTL %d", ok, pttlOf(e, f.Key())), f.Unlock(bg)
		}, "ok"},
		{"fair TryLock wait max, lease max, free", func(e *boundsEnv) (string, error) {
			f := e.mustClient().FairMutex("x")
			ok, err := f.TryLock(bg, maxDur, maxDur)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%v", ok), f.Unlock(bg)
		}, "ok"},
		{"spin TryLock wait max held ctx 200ms", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			a, b := c.SpinMutex("x"), c.SpinMutex("x")
			if err := a.Lock(bg); err != nil {
				return "", err
			}
			ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
			defer cancel()
			_, err := b.TryLock(ctx, maxDur, maxDur)
			return "", errors.Join(err, a.Unlock(bg))
		}, "err"},
		{"spin LockLease max", func(e *boundsEnv) (string, error) {
			s := e.mustClient().SpinMutex("x")
			if err := s.LockLease(bg, maxDur); err != nil {
				return "", err
			}
			return fmt.Sprintf("PTTL %d", pttlOf(e, s.Key())), s.Unlock(bg)
		}, "ok"},
		{"multi zero members", func(e *boundsEnv) (string, error) { return "", rlock.NewMultiLock().Lock(bg) }, "invalid"},
		{"multi same lock twice", func(e *boundsEnv) (string, error) {
			m := e.mustClient().Mutex("x")
			return "", rlock.NewMultiLock(m, m).Lock(bg)
		}, "invalid"},
		{"multi same name two handles", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			return "", rlock.NewMultiLock(c.Mutex("x"), c.Mutex("x")).Lock(bg)
		}, "invalid"},
		{"multi same name mutex+fair", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			return "", rlock.NewMultiLock(c.Mutex("x"), c.FairMutex("x")).Lock(bg)
		}, "invalid"},
		{"multi same name two Clients", func(e *boundsEnv) (string, error) {
			c1, c2 := e.mustClient(), e.mustClient()
			ml := rlock.NewMultiLock(c1.Mutex("x"), c2.Mutex("x"))
			ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
			defer cancel()
			err := ml.Lock(ctx)
			if err == nil {
				return "locked", ml.Unlock(bg)
			}
			return "", err
		}, ""},
		{"multi rw read + write same name", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			rw := c.RWMutex("x")
			ml := rlock.NewMultiLock(rw, rw.RLocker())
			ctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
			defer cancel()
			err := ml.Lock(ctx)
			if err == nil {
				return "locked", ml.Unlock(bg)
			}
			return "", err
		}, ""},
		{"Client.MultiLock duplicate names", func(e *boundsEnv) (string, error) {
			return "", e.mustClient().MultiLock("x", "x").Lock(bg)
		}, "invalid"},
		{"Client.MultiLock empty name", func(e *boundsEnv) (string, error) {
			return "", e.mustClient().MultiLock("x", "").Lock(bg)
		}, "invalid"},
		{"Client.MultiLock no names", func(e *boundsEnv) (string, error) {
			return "", e.mustClient().MultiLock().Lock(bg)
		}, "invalid"},
		{"multi TryLock lease 9ms", func(e *boundsEnv) (string, error) {
			_, err := e.mustClient().MultiLock("x", "y").TryLock(bg, 0, 9*time.Millisecond)
			return "", err
		}, "invalid"},
		{"multi TryLock lease max", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			ml := c.MultiLock("x", "y")
			ok, err := ml.TryLock(bg, 0, maxDur)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%v PTTL %d", ok, pttlOf(e, c.Mutex("x").Key())), ml.Unlock(bg)
		}, "ok"},
		{"multi Unlock not held", func(e *boundsEnv) (string, error) {
			return "", e.mustClient().MultiLock("x", "y").Unlock(bg)
		}, "err"},
		{"closed Client Lock", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			m := c.Mutex("x")
			c.Close()
			return "", m.Lock(bg)
		}, "err"},
		{"closed Client new handle", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			c.Close()
			_, err := c.Semaphore("s").TrySetPermits(bg, 1)
			return "", err
		}, "err"},
		{"closed Client Close twice", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			c.Close()
			return "", c.Close()
		}, "ok"},
		{"closed Client Inspect", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			c.Close()
			_, err := c.Inspect(bg, "x")
			return "", err
		}, "err"},
		{"closed Client Unlock of a held lock", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			m := c.Mutex("x")
			if err := m.Lock(bg); err != nil {
				return "", err
			}
			c.Close()
			err := m.Unlock(bg)
			return fmt.Sprintf("PTTL after %d", pttlOf(e, m.Key())), err
		}, "err"},
		{"Inspect empty", func(e *boundsEnv) (string, error) { _, err := e.mustClient().Inspect(bg, ""); return "", err }, "invalid"},
		{"Inspect 1MB", func(e *boundsEnv) (string, error) {
			i, err := e.mustClient().Inspect(bg, strings.Repeat("z", 1<<20))
			return string(i.Kind) + " " + i.Type, err
		}, "ok"},
		{"Inspect nil ctx", func(e *boundsEnv) (string, error) { _, err := e.mustClient().Inspect(noCtx, "x"); return "", err }, "invalid"},
		{"List bad glob", func(e *boundsEnv) (string, error) {
			c := e.mustClient()
			if err := c.Mutex("x").Lock(bg); err != nil {
				return "", err
			}
			var names []string
			var lerr error
			for n, err := range c.List(bg, "[") {
				if err != nil {
					lerr = err
					break
				}
				names = append(names, n)
			}
			return fmt.Sprint(names), lerr
		}, ""},
		{"ForceUnlockSeen zero Info", func(e *boundsEnv) (string, error) {
			_, err := e.mustClient().ForceUnlockSeen(bg, rlock.Info{})
			return "", err
		}, "invalid"},
		{"ForceUnlockSeen name only", func(e *boundsEnv) (string, error) {
			_, err := e.mustClient().ForceUnlockSeen(bg, rlock.Info{Name: "x", Kind: rlock.KindMutex})
			return "", err
		}, ""},
		{"Do nil fn", func(e *boundsEnv) (string, error) { return "", rlock.Do(bg, e.mustClient().Mutex("x"), nil) }, "invalid"},
		{"Do nil lock", func(e *boundsEnv) (string, error) {
			return "", rlock.Do(bg, nil, func(context.Context) error { return nil })
		}, "invalid"},
		{"TryDo wait -1", func(e *boundsEnv) (string, error) {
			_, err := rlock.TryDo(bg, e.mustClient().Mutex("x"), -1, 0, func(context.Context) error { return nil })
			return "", err
		}, "invalid"},
		{"TryDo lease 9ms", func(e *boundsEnv) (string, error) {
			_, err := rlock.TryDo(bg, e.mustClient().Mutex("x"), 0, 9*time.Millisecond, func(context.Context) error { return nil })
			return "", err
		}, "invalid"},
		{"ACLRule newline", func(e *boundsEnv) (string, error) { _, err := rlock.ACLRule("a\nb:"); return "", err }, "invalid"},
		{"ACLRule non-utf8", func(e *boundsEnv) (string, error) { _, err := rlock.ACLRule("\xff:"); return "", err }, "invalid"},
		{"ACLRule brace", func(e *boundsEnv) (string, error) { r, err := rlock.ACLRule("a{:"); return r, err }, "invalid"},
		{"ACLRule empty", func(e *boundsEnv) (string, error) { r, err := rlock.ACLRule(""); return r, err }, ""},
		{"ACLRule glob chars", func(e *boundsEnv) (string, error) { r, err := rlock.ACLRule("a*[?]\\:"); return r, err }, ""},
		{"InspectACLRule glob chars", func(e *boundsEnv) (string, error) { r, err := rlock.InspectACLRule("a*[?]\\:"); return r, err }, ""},
	}
	runBoundsCases(t, cases)
}

func TestBoundsHunt_redlock(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; its ctx bounds and 4 s hang guard are generous
	srvs := redistest.StartN(t, 3)
	mk := func(t *testing.T, i int, opts ...rlock.Option) *rlock.Client {
		c, err := rlock.New(srvs[i].Client(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	three := func(t *testing.T) []*rlock.Client { return []*rlock.Client{mk(t, 0), mk(t, 1), mk(t, 2)} }
	type rc struct {
		name string
		run  func(t *testing.T) (string, error)
		want string
	}
	cases := []rc{
		{"0 clients", func(t *testing.T) (string, error) { return "", rlock.NewRedLock("x", nil).Lock(bg) }, "invalid"},
		{"1 client", func(t *testing.T) (string, error) { return "", rlock.NewRedLock("x", three(t)[:1]).Lock(bg) }, "invalid"},
		{"2 clients", func(t *testing.T) (string, error) { return "", rlock.NewRedLock("x", three(t)[:2]).Lock(bg) }, "invalid"},
		{"dup client", func(t *testing.T) (string, error) {
			cs := three(t)
			return "", rlock.NewRedLock("x", []*rlock.Client{cs[0], cs[1], cs[0]}).Lock(bg)
		}, "invalid"},
		{"two Clients one server", func(t *testing.T) (string, error) {
			cs := three(t)
			return "", rlock.NewRedLock("x", []*rlock.Client{cs[0], cs[1], mk(t, 0)}).Lock(bg)
		}, "invalid"},
		{"nil client", func(t *testing.T) (string, error) {
			cs := three(t)
			return "", rlock.NewRedLock("x", []*rlock.Client{cs[0], cs[1], nil}).Lock(bg)
		}, "invalid"},
		{"empty name", func(t *testing.T) (string, error) { return "", rlock.NewRedLock("", three(t)).Lock(bg) }, "invalid"},
		// TestBoundsHunt_redLockInstanceTimeoutZero.
		{"instance timeout 0", func(t *testing.T) (string, error) {
			return "", rlock.NewRedLock("x", three(t), rlock.WithInstanceTimeout(0)).Lock(bg)
		}, "invalid"},
		{"instance timeout -1", func(t *testing.T) (string, error) {
			return "", rlock.NewRedLock("x", three(t), rlock.WithInstanceTimeout(-1)).Lock(bg)
		}, "invalid"},
		// A nil RedLockOption is refused, as New refuses a nil Option (TestBoundsHunt_redLockNilOption).
		{"nil option", func(t *testing.T) (string, error) {
			return "", rlock.NewRedLock("x", three(t), nil).Lock(bg)
		}, "invalid"},
		{"instance timeout max", func(t *testing.T) (string, error) {
			r := rlock.NewRedLock("x", three(t), rlock.WithInstanceTimeout(maxDur))
			if err := r.Lock(bg); err != nil {
				return "", err
			}
			ttl, _ := r.TTL(bg)
			return fmt.Sprintf("TTL %v", ttl), r.Unlock(bg)
		}, "ok"},
		{"instance timeout above lease", func(t *testing.T) (string, error) {
			r := rlock.NewRedLock("x", three(t), rlock.WithInstanceTimeout(time.Hour))
			ok, err := r.TryLock(bg, 0, 50*time.Millisecond)
			if err != nil || !ok {
				return fmt.Sprint(ok), err
			}
			return "true", r.Unlock(bg)
		}, ""},
		{"LockLease max", func(t *testing.T) (string, error) {
			r := rlock.NewRedLock("x", three(t))
			if err := r.LockLease(bg, maxDur); err != nil {
				return "", err
			}
			ttl, _ := r.TTL(bg)
			return fmt.Sprintf("TTL %v", ttl), r.Unlock(bg)
		}, "ok"},
		{"TryLock lease 9ms", func(t *testing.T) (string, error) {
			_, err := rlock.NewRedLock("x", three(t)).TryLock(bg, 0, 9*time.Millisecond)
			return "", err
		}, "invalid"},
		{"TryLock wait -1", func(t *testing.T) (string, error) {
			_, err := rlock.NewRedLock("x", three(t)).TryLock(bg, -1, 0)
			return "", err
		}, "invalid"},
		{"name 1MB with braces", func(t *testing.T) (string, error) {
			r := rlock.NewRedLock(strings.Repeat("{a}", 1<<18), three(t))
			if err := r.Lock(bg); err != nil {
				return "", err
			}
			return "", r.Unlock(bg)
		}, "ok"},
		{"closed instance client", func(t *testing.T) (string, error) {
			cs := three(t)
			cs[1].Close()
			r := rlock.NewRedLock("x", cs)
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			err := r.Lock(ctx)
			if err == nil {
				return "locked with a closed instance", r.Unlock(bg)
			}
			return "", err
		}, ""},
		{"all instance clients closed", func(t *testing.T) (string, error) {
			cs := three(t)
			for _, c := range cs {
				c.Close()
			}
			ctx, cancel := context.WithTimeout(bg, time.Second)
			defer cancel()
			return "", rlock.NewRedLock("x", cs).Lock(ctx)
		}, "err"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range srvs {
				s.Do(t, "FLUSHALL")
			}
			type res struct {
				out string
				err error
				p   any
			}
			done := make(chan res, 1)
			go func() {
				var r res
				defer func() { r.p = recover(); done <- r }()
				r.out, r.err = tc.run(t)
			}()
			var r res
			select {
			case r = <-done:
			case <-time.After(boundsHang):
				t.Fatalf("HANG")
			}
			if r.p != nil {
				t.Fatalf("PANIC %v", r.p)
			}
			t.Logf("RESULT out=%q err=%s %v", r.out, errKind(r.err), r.err)
			switch tc.want {
			case "invalid":
				if !errors.Is(r.err, rlock.ErrInvalid) {
					t.Errorf("want ErrInvalid")
				}
			case "ok":
				if r.err != nil {
					t.Errorf("want nil")
				}
			case "err":
				if r.err == nil {
					t.Errorf("want error")
				}
			}
			for i, s := range srvs {
				e := &boundsEnv{t: t, srv: s}
				for k, p := range e.keys("*") {
					if p == -1 {
						t.Errorf("server %d: key %q without expiry", i, k)
					}
				}
			}
		})
	}
}

// boundsHandles returns a valid handle of every kind, of Client c.
func boundsHandles(c *rlock.Client, c2, c3 *rlock.Client) map[string]any {
	return map[string]any{
		"Client":          c,
		"Mutex":           c.Mutex("m"),
		"FairMutex":       c.FairMutex("f"),
		"SpinMutex":       c.SpinMutex("sp"),
		"RWMutex":         c.RWMutex("rw"),
		"ReadLocker":      c.RWMutex("rw2").RLocker(),
		"Semaphore":       c.Semaphore("s"),
		"PermitSemaphore": c.PermitSemaphore("p"),
		"CountDownLatch":  c.CountDownLatch("l"),
		"MultiLock":       c.MultiLock("a", "b"),
		"RedLock":         rlock.NewRedLock("r", []*rlock.Client{c, c2, c3}),
	}
}

// callAll calls every exported method of every handle with ctx (other arguments valid) and
// reports panics and results. It skips Close.
func callAll(t *testing.T, handles map[string]any, ctx context.Context) {
	ctxType := reflect.TypeFor[context.Context]()
	for name, h := range handles {
		v := reflect.ValueOf(h)
		for i := range v.NumMethod() {
			method := v.Type().Method(i)
			if method.Name == "Close" {
				continue
			}
			if ctx == nil && method.Name == "WithNewOwner" {
				continue // panics: TestBoundsHunt_withOwnerNilCtx
			}
			what := name + "." + method.Name
			mt := method.Type
			fixed := mt.NumIn() - 1
			if mt.IsVariadic() {
				fixed--
			}
			args := []reflect.Value{}
			for j := 1; j <= fixed; j++ {
				if mt.In(j) == ctxType {
					if ctx == nil {
						args = append(args, reflect.Zero(ctxType))
					} else {
						args = append(args, reflect.ValueOf(ctx))
					}
					continue
				}
				args = append(args, argFor(t, mt.In(j)))
			}
			var out []reflect.Value
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				out = v.Method(i).Call(args)
				if method.Name == "List" || method.Name == "HoldContext" {
					// drive the iterator / cancel the context
					if method.Name == "HoldContext" {
						out[1].Interface().(context.CancelFunc)()
					} else {
						for _, err := range out[0].Interface().(iter.Seq2[string, error]) {
							out = []reflect.Value{reflect.ValueOf(&err).Elem()}
							break
						}
					}
				}
			}()
			select {
			case p := <-done:
				if p != nil {
					t.Errorf("%s panicked: %v", what, p)
					continue
				}
			case <-time.After(boundsHang):
				t.Errorf("%s hung", what)
				continue
			}
			var res []string
			for _, o := range out {
				if o.Type() == reflect.TypeFor[error]() || o.Kind() == reflect.Interface && o.Type().Implements(reflect.TypeFor[error]()) {
					if o.IsNil() {
						res = append(res, "err=nil")
					} else {
						res = append(res, "err="+errKind(o.Interface().(error)))
					}
					continue
				}
				res = append(res, fmt.Sprintf("%.60v", o.Interface()))
			}
			t.Logf("%s -> %v", what, res)
		}
	}
}

func TestBoundsHunt_nilCtxEveryMethod(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	var cs []*rlock.Client
	for _, s := range srvs {
		c, err := rlock.New(s.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	callAll(t, boundsHandles(cs[0], cs[1], cs[2]), nil)
	for i, s := range srvs {
		e := &boundsEnv{t: t, srv: s}
		if ks := e.keys("*"); len(ks) != 0 {
			t.Errorf("server %d: nil ctx calls wrote %v", i, ks)
		}
	}
}

func TestBoundsHunt_cancelledCtxEveryMethod(t *testing.T) {
	srvs := redistest.StartN(t, 3)
	var cs []*rlock.Client
	for _, s := range srvs {
		c, err := rlock.New(s.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	callAll(t, boundsHandles(cs[0], cs[1], cs[2]), cancelledCtx)
	time.Sleep(100 * time.Millisecond)
	for i, s := range srvs {
		e := &boundsEnv{t: t, srv: s}
		for k, p := range e.keys("*") {
			t.Logf("server %d: key %q PTTL %d after cancelled-ctx calls", i, k, p)
		}
	}
}

// noCtx is a nil context.Context, passed on purpose: every method must refuse it.
var noCtx context.Context
