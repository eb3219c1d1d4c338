package chaos

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The ACL and startup rows of the bad-input section: a user that lacks one command a script
// needs (on acquire, on release, on renewal), and credentials or a certificate that a server
// refuses at startup. A refused command must come back to the caller promptly as
// ErrNoPermission, leave nothing in Redis that would stay forever, and start no retry loop:
// the scripts the Client sends and the refusals Redis logs (ACL LOG) are counted.

// aclLocker makes user on srv with exactly rlock.ACLRule("") minus the rules in without, and a
// relock Client (Dial) that locks as that user, closed at cleanup.
func aclLocker(t *testing.T, srv *redistest.Server, user string, without []string, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	args := []string{"ACL", "SETUSER", user, "reset", "on", ">pw-" + user}
	rule, err := rlock.ACLRule("")
	if err != nil {
		t.Fatalf("ACLRule: %v", err)
	}
	for _, r := range strings.Fields(rule) {
		keep := true
		for _, w := range without {
			keep = keep && r != w
		}
		if keep {
			args = append(args, r)
		}
	}
	aclDo(t, srv, args...)
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: "pw-" + user}, opts...)
	if err != nil {
		t.Fatalf("rlock.Dial as %s: %v", user, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// aclDo runs args on srv as the default user and fails t on an error reply.
func aclDo(t *testing.T, srv *redistest.Server, args ...string) {
	t.Helper()
	msg := srv.Do(t, args...)
	if err := msg.Error(); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
}

// scriptsRun is the number of scripts srv ran so far (EVALSHA and EVAL calls, refused ones
// included).
func scriptsRun(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	s := srv.CommandStats(t)
	return s["evalsha"] + s["eval"]
}

// refusedObjects lists the commands (or keys) srv's ACL LOG says it refused, one per entry.
func refusedObjects(t *testing.T, srv *redistest.Server) []string {
	t.Helper()
	msg := srv.Do(t, "ACL", "LOG")
	entries, err := msg.ToArray()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var out []string
	for _, e := range entries {
		m, err := e.AsMap()
		if err != nil {
			t.Fatalf("ACL LOG entry: %v", err)
		}
		v := m["object"]
		o, _ := v.ToString()
		out = append(out, o)
	}
	return out
}

// refusals is the number of commands srv refused for want of ACL rights since its ACL LOG was
// last reset (the sum of the log entries' counts: Redis folds repeats into one entry).
func refusals(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	msg := srv.Do(t, "ACL", "LOG")
	entries, err := msg.ToArray()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	var n int64
	for _, e := range entries {
		m, err := e.AsMap()
		if err != nil {
			t.Fatalf("ACL LOG entry: %v", err)
		}
		c := m["count"]
		n += mustInt(t, &c)
	}
	return n
}

// pttl is the lock key's PTTL on srv: -2 when there is no key, -1 when it has no expiry.
func pttl(t *testing.T, srv *redistest.Server, key string) int64 {
	t.Helper()
	msg := srv.Do(t, "PTTL", key)
	return mustInt(t, &msg)
}

func TestBadInput_noPermission(t *testing.T) {
	srv := redistest.Start(t)
	other := relock(t, srv, srv.Addr())
	const lease = time.Second // the watchdog timeout: a refused release or renewal leaves the lock to expire within it

	t.Run("acquire", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "ACL: the lock's user lacks a command the acquire script needs (`ACLRule` minus `+hset`)",
			expected: "Lock fails well within the caller's ctx (< 1 s) with ErrNoPermission naming the lock; nothing left in Redis without an expiry; no retry: no script sent afterwards"})
		c := aclLocker(t, srv, "nohset", []string{"+hset"}, rlock.WithWatchdogTimeout(lease))
		m := c.Mutex(redistest.Name(t))
		aclDo(t, srv, "ACL", "LOG", "RESET")
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := m.Lock(ctx)
		took := time.Since(start)
		wantErr(t, "Lock without HSET", err, rlock.ErrNoPermission)
		if err != nil && !strings.Contains(err.Error(), m.Name()) {
			t.Errorf("the error does not name the lock %q: %v", m.Name(), err)
		}
		if took > time.Second {
			t.Errorf("Lock returned after %v, want < 1s", took)
		}
		for _, key := range []string{m.Key(), m.Key() + ":fence"} {
			if p := pttl(t, srv, key); p == -1 {
				t.Errorf("the refused Lock left %s without an expiry", key)
			}
		}
		lockKey := pttl(t, srv, m.Key())
		wantErr(t, "Err after a refused Lock", m.Err(bg), rlock.ErrNotHeld)
		refused := refusals(t, srv)
		before := scriptsRun(t, srv)
		time.Sleep(time.Second)
		after, refusedAfter := scriptsRun(t, srv), refusals(t, srv)
		if after != before || refusedAfter != refused {
			t.Errorf("the Client kept trying after the refusal: %d scripts, %d more refusals in 1s", after-before, refusedAfter-refused)
		}
		o := other.Mutex(m.Name())
		if ok, err := o.TryLock(bg, 0, 0); !ok || err != nil {
			t.Errorf("another owner cannot take the lock after the refused Lock: %v %v", ok, err)
		} else {
			must(t, o.Unlock(bg))
		}
		what := "no lock key"
		if lockKey >= 0 {
			what = fmt.Sprintf("lock key with PTTL %dms", lockKey)
		}
		t.Logf("Lock: %v", err)
		setOutcome(t, fmt.Sprintf("Lock in %v: %.150q; %s, the fence with its expiry; %d refusal(s) in the ACL log (of %q); then 0 scripts and 0 refusals in 1 s; another owner takes the lock",
			took.Round(time.Millisecond), err, what, refused, refusedObjects(t, srv)))
	})

	t.Run("release", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "ACL: the holder's user loses a command the release needs (`ACL SETUSER <user> -del` after Lock, watchdog lease 1 s)",
			expected: "Unlock fails promptly with ErrNoPermission naming the lock; the lock expires with its lease (the watchdog stops renewing it); another owner gets it after the lease; no retry loop"})
		c := aclLocker(t, srv, "nodel", nil, rlock.WithWatchdogTimeout(lease))
		m := c.Mutex(redistest.Name(t))
		must(t, m.Lock(bg))
		hctx, hcancel := m.HoldContext(bg)
		defer hcancel()
		aclDo(t, srv, "ACL", "SETUSER", "nodel", "-del")
		aclDo(t, srv, "ACL", "LOG", "RESET")
		before := scriptsRun(t, srv)
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := m.Unlock(ctx)
		took := time.Since(start)
		wantErr(t, "Unlock without DEL", err, rlock.ErrNoPermission)
		if err != nil && !strings.Contains(err.Error(), m.Name()) {
			t.Errorf("the error does not name the lock %q: %v", m.Name(), err)
		}
		if took > time.Second {
			t.Errorf("Unlock returned after %v, want < 1s", took)
		}
		refused := refusals(t, srv)
		if refused != 1 {
			t.Errorf("%d refusals by the end of Unlock, want 1 (the release, sent once)", refused)
		}
		// The lock must go by itself, within its lease (+ a generous margin).
		expired := time.Duration(-1)
		for deadline := start.Add(lease + 2*time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if pttl(t, srv, m.Key()) == -2 {
				expired = time.Since(start)
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
		scripts, refusedAfter := scriptsRun(t, srv)-before, refusals(t, srv)
		if refusedAfter != refused {
			t.Errorf("the release was retried: %d more refusals after Unlock returned", refusedAfter-refused)
		}
		held := "its hold context still open, Err nil"
		if herr := m.Err(bg); herr != nil {
			held = fmt.Sprintf("Err %.60q", herr)
		}
		select {
		case <-hctx.Done():
			held = fmt.Sprintf("hold context ended (cause %.60q)", context.Cause(hctx))
		default:
		}
		setOutcome(t, fmt.Sprintf("Unlock in %v: %.150q; %d refusal(s) (of %q), none after Unlock returned",
			took.Round(time.Millisecond), err, refused, refusedObjects(t, srv)))
		if expired < 0 {
			// The lock stays: the watchdog goes on renewing a hold whose release was refused.
			// Give the right back, so that the holder can unlock and the lock be freed.
			stillHeld := pttl(t, srv, m.Key())
			aclDo(t, srv, "ACL", "SETUSER", "nodel", "+del")
			uerr := m.Unlock(bg)
			o := other.Mutex(m.Name())
			ok, oerr := o.TryLock(bg, 0, 0)
			if !ok || oerr != nil {
				t.Errorf("another owner cannot take the lock after the holder's second Unlock (%v): %v %v", uerr, ok, oerr)
			} else {
				must(t, o.Unlock(bg))
			}
			setRow(t, func(r *row) {
				r.status = "known bug"
				r.outcome += fmt.Sprintf("; but the lock did not expire: %v after the refusal it was still held (PTTL %dms), renewed by the watchdog (%d scripts, no further refusal), %s; once DEL was allowed again the holder's next Unlock returned %v and another owner took it",
					lease+2*time.Second, stillHeld, scripts, held, uerr)
			})
			t.Skipf("known bug: a refused release in watchdog mode leaves the hold renewed by the watchdog, so the lock does not expire with its lease as ErrNoPermission's doc says (%d scripts in %v, %s)",
				scripts, lease+2500*time.Millisecond, held)
		}
		if scripts > 3 {
			t.Errorf("%d scripts from the refused Unlock to 0.5s after the expiry: the watchdog or a retry kept going", scripts)
		}
		o := other.Mutex(m.Name())
		ok, oerr := o.TryLock(bg, 0, 0)
		if !ok || oerr != nil {
			t.Errorf("another owner cannot take the lock after its lease: %v %v", ok, oerr)
		} else {
			must(t, o.Unlock(bg))
		}
		setRow(t, func(r *row) {
			r.outcome += fmt.Sprintf("; the lock expired %v after the refusal; %d script(s) in all; %s; another owner took it",
				expired.Round(10*time.Millisecond), scripts, held)
		})
	})

	t.Run("renewal", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "ACL: the holder's user loses a command the renew script uses (`ACL SETUSER <user> -pttl` after Lock, watchdog lease 1 s)",
			expected: "the holder is told (Done closes, HoldContext's cause wraps ErrLockLost) within the lease + 0.5 s; the key expires; another owner gets it; the renewal is not retried in a tight loop (a handful of scripts)"})
		c := aclLocker(t, srv, "nopttl", nil, rlock.WithWatchdogTimeout(lease))
		m := c.Mutex(redistest.Name(t))
		must(t, m.Lock(bg))
		hctx, hcancel := m.HoldContext(bg)
		defer hcancel()
		done := m.Done(bg)
		aclDo(t, srv, "ACL", "LOG", "RESET")
		before := scriptsRun(t, srv)
		aclDo(t, srv, "ACL", "SETUSER", "nopttl", "-pttl")
		start := time.Now()
		var told time.Duration
		select {
		case <-hctx.Done():
			told = time.Since(start)
		case <-time.After(lease + 5*time.Second):
			t.Fatalf("the holder was not told %v after its renewals were refused", lease+5*time.Second)
		}
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Errorf("Done still open 1s after the hold context ended")
		}
		cause := context.Cause(hctx)
		if !errors.Is(cause, rlock.ErrLockLost) {
			t.Errorf("hold ended with %v, want ErrLockLost", cause)
		}
		if told > lease+500*time.Millisecond {
			t.Errorf("the holder was told %v after the refusal began, more than the lease (%v) + 0.5s", told, lease)
		}
		expired := time.Duration(-1)
		for deadline := start.Add(lease + 2*time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if pttl(t, srv, m.Key()) == -2 {
				expired = time.Since(start)
				break
			}
		}
		if expired < 0 {
			t.Errorf("the lock is still there %v after its renewals were refused (lease %v)", lease+2*time.Second, lease)
		}
		atNotice := scriptsRun(t, srv) - before
		time.Sleep(time.Second)
		scripts, refused := scriptsRun(t, srv)-before, refusals(t, srv)
		if scripts > 8 || scripts != atNotice {
			t.Errorf("renewal retried: %d scripts until the notice, %d in all 1s after the expiry (%d refusals)", atNotice, scripts, refused)
		}
		o := other.Mutex(m.Name())
		ok, oerr := o.TryLock(bg, 0, 0)
		if !ok || oerr != nil {
			t.Errorf("another owner cannot take the lock after the loss: %v %v", ok, oerr)
		} else {
			must(t, o.Unlock(bg))
		}
		uerr := m.Unlock(bg)
		wantErr(t, "Unlock after the loss", uerr, rlock.ErrNotHeld)
		t.Logf("cause: %v", cause)
		setOutcome(t, fmt.Sprintf("told %v after the refusals began (lease %v), cause %.110q (wraps ErrNoPermission: %v); key gone after %v; %d renew script(s), %d refusal(s) (of %q), none after the notice; another owner took it; Unlock: ErrNotHeld",
			told.Round(10*time.Millisecond), lease, cause, errors.Is(cause, rlock.ErrNoPermission), expired.Round(10*time.Millisecond), scripts, refused, refusedObjects(t, srv)))
	})
}

func TestBadInput_startup(t *testing.T) {
	// Dial takes no ctx: its bound is rueidis's dial and handshake timeouts. A caller that
	// builds its own rueidis client meets the same error in rueidis.NewClient, before rlock.New.
	const bound = 5 * time.Second
	// A failed rueidis.NewClient leaves behind a cluster-refresh goroutine that sleeps ~0.75 s
	// before it tries once more and ends (rueidis's singleflight DelayDo): wait for it, so that
	// goleak (TestMain) does not find it when these are the last tests to run.
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && strings.Contains(allStacks(), "rueidis.(*call).DelayDo") {
			time.Sleep(20 * time.Millisecond)
		}
	})
	dialFails := func(t *testing.T, opt rueidis.ClientOption, want string) (took time.Duration, rerr, err error) {
		t.Helper()
		start := time.Now()
		c, err := rlock.Dial(opt)
		took = time.Since(start)
		if err == nil {
			_ = c.Close()
			t.Fatal("rlock.Dial succeeded; want an error")
		}
		if took > bound {
			t.Errorf("Dial's error came after %v, want < %v", took, bound)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Dial: %v, want an error that says %q", err, want)
		}
		opt.DisableCache = true
		var rc rueidis.Client
		rc, rerr = rueidis.NewClient(opt)
		if rerr == nil {
			rc.Close()
			t.Errorf("rueidis.NewClient succeeded; want an error")
		} else if !strings.Contains(rerr.Error(), want) {
			t.Errorf("rueidis.NewClient: %v, want an error that says %q", rerr, want)
		}
		return took, rerr, err
	}

	t.Run("wrongPassword", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "a wrong password at startup (`requirepass`, and an ACL user)",
			expected: "a clear WRONGPASS error from Dial within a bound (< 5 s); nothing to lock with"})
		srv := redistest.Start(t, redistest.WithPassword("right"))
		rule, err := rlock.ACLRule("")
		if err != nil {
			t.Fatalf("ACLRule: %v", err)
		}
		aclDo(t, srv, append([]string{"ACL", "SETUSER", "locker", "reset", "on", ">pw"}, strings.Fields(rule)...)...)
		took, rerr, err := dialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Password: "wrong"}, "WRONGPASS")
		took2, _, _ := dialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: "locker", Password: "wrong"}, "WRONGPASS")
		setOutcome(t, fmt.Sprintf("Dial in %v (ACL user: %v): %.100q; rueidis.NewClient fails the same way (%.60q), so rlock.New is never reached",
			took.Round(time.Millisecond), took2.Round(time.Millisecond), err, rerr))
	})

	t.Run("expiredCertificate", func(t *testing.T) {
		result(t, row{order: "bad input", fault: "the server's TLS certificate expired (CA still valid)",
			expected: "a clear x509 error naming the expired certificate from Dial within a bound (< 5 s); nothing to lock with"})
		srv := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{Expired: true}))
		took, rerr, err := dialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: srv.TLSConfig()}, "certificate has expired")
		if !strings.Contains(err.Error(), "x509") {
			t.Errorf("Dial: %v, want an x509 error", err)
		}
		setOutcome(t, fmt.Sprintf("Dial in %v: %.140q; rueidis.NewClient fails the same way (%.40q...), so rlock.New is never reached",
			took.Round(time.Millisecond), err, rerr))
	})
}

// allStacks is the stack of every goroutine.
func allStacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
