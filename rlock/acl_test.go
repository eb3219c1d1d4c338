package rlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// aclUser creates an ACL user with exactly rlock.ACLRule(prefix) and returns a Client that
// locks as that user, with opts.
func aclUser(t *testing.T, srv *redistest.Server, user, prefix string, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	args := append([]string{"ACL", "SETUSER", user, "reset", "on", ">pw-" + user}, aclRule(t, prefix)...)
	srv.Do(t, args...)
	opts = append([]rlock.Option{rlock.WithKeyPrefix(prefixOr(prefix))}, opts...)
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: "pw-" + user}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// aclRule is rlock.ACLRule(prefix), split into its rules; an error fails the test.
func aclRule(tb testing.TB, prefix string) []string {
	tb.Helper()
	rule, err := rlock.ACLRule(prefix)
	require.NoError(tb, err)
	return strings.Fields(rule)
}

// inspectACLRule is rlock.InspectACLRule(prefix), split into its rules; an error fails the
// test.
func inspectACLRule(tb testing.TB, prefix string) []string {
	tb.Helper()
	rule, err := rlock.InspectACLRule(prefix)
	require.NoError(tb, err)
	return strings.Fields(rule)
}

func prefixOr(p string) string {
	if p == "" {
		return rlock.DefaultKeyPrefix
	}
	return p
}

// exerciseFamily runs every primitive through c (and waits through c2, a second Client of the
// same user): locks, waiting and waking, the watchdog past two leases, force-unlock,
// semaphores, permits, latches and a multi-lock. It fails the test on any error.
func exerciseFamily(t *testing.T, c, c2 *rlock.Client, lease time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	name := redistest.Name(t)

	// Mutex: lock, re-enter, read, a waiter of another Client woken by the release, the
	// watchdog, force-unlock.
	m := c.Mutex(name)
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.Lock(ctx))
	_, err := m.Token(ctx)
	require.NoError(t, err)
	locked, err := m.IsLocked(ctx)
	require.NoError(t, err)
	require.True(t, locked)
	_, err = m.TTL(ctx)
	require.NoError(t, err)
	n, err := m.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got := make(chan error, 1)
	go func() {
		w := c2.Mutex(name)
		err := w.Lock(ctx)
		if err == nil {
			err = w.Unlock(ctx)
		}
		got <- err
	}()
	hw := watchHold(t, m.Done(ctx), lease/3)
	time.Sleep(2 * lease) // the watchdog renews meanwhile
	hw.noLoss(t, m.Err(ctx), "the watchdog keeps the lock")
	hw.noLoss(t, m.Unlock(ctx))
	hw.noLoss(t, m.Unlock(ctx))
	require.NoError(t, await(t, got, 10*time.Second, "the waiter to be woken"))
	ok, err := m.TryLock(ctx, 0, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	freed, err := c2.Mutex(name).ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, freed)
	require.ErrorIs(t, m.Unlock(ctx), rlock.ErrNotHeld)

	// The rest of the family.
	f := c.FairMutex(name + "-fair")
	require.NoError(t, f.Lock(ctx))
	require.NoError(t, f.Unlock(ctx))
	s := c.SpinMutex(name + "-spin")
	require.NoError(t, s.Lock(ctx))
	require.NoError(t, s.Unlock(ctx))
	rw := c.RWMutex(name + "-rw")
	require.NoError(t, rw.RLock(ctx))
	require.NoError(t, rw.RUnlock(ctx))
	require.NoError(t, rw.Lock(ctx))
	require.NoError(t, rw.Unlock(ctx))
	sem := c.Semaphore(name + "-sem")
	_, err = sem.TrySetPermits(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, sem.Acquire(ctx, 2))
	require.NoError(t, sem.Release(ctx, 2))
	ps := c.PermitSemaphore(name + "-psem")
	_, err = ps.TrySetPermits(ctx, 1)
	require.NoError(t, err)
	p, err := ps.Acquire(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, ps.Extend(ctx, p.ID, 2*time.Second))
	require.NoError(t, ps.Release(ctx, p.ID))
	l := c.CountDownLatch(name + "-latch")
	_, err = l.TrySetCount(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, l.CountDown(ctx))
	require.NoError(t, l.Await(ctx))
	ml := c.MultiLock(name+"-a", name+"-b")
	require.NoError(t, ml.Lock(ctx))
	require.NoError(t, ml.Unlock(ctx))
}

// TestACLRule_isEnough: a user with exactly ACLRule(prefix), and nothing else, runs the whole
// family, the watchdog, waiting and force-unlock, for the default prefix and for one with
// glob characters.
func TestACLRule_isEnough(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	// A 1 s lease: a third of it (333 ms) for each renewal to land beside the parallel tests.
	const lease = time.Second
	for i, prefix := range []string{"", "team*[a]?:"} {
		t.Run(fmt.Sprintf("prefix=%q", prefix), func(t *testing.T) {
			t.Parallel() // users, prefixes and names of their own
			user := fmt.Sprintf("locker%d", i)
			c := aclUser(t, b.srv, user, prefix, rlock.WithWatchdogTimeout(lease), rlock.WithClientInfo(rlock.ClientInfo{App: "acl"}))
			c2 := aclUser(t, b.srv, user, prefix, rlock.WithWatchdogTimeout(lease))
			exerciseFamily(t, c, c2, lease)
			// The Client's record (WithClientInfo) is written under the rule too.
			record := prefixOr(prefix) + "client:" + c.ID()
			exists := func() bool { msg := b.srv.Do(t, "EXISTS", record); n, _ := msg.AsInt64(); return n == 1 }
			for deadline := time.Now().Add(20 * time.Second); !exists(); time.Sleep(5 * time.Millisecond) {
				require.True(t, time.Now().Before(deadline), "no record at %s", record)
			}
		})
	}
}

// TestACLRule_keepsPrefixesApart: a user whose rule is for one prefix cannot touch the locks
// of another: a Client of that user made with the other prefix is refused.
func TestACLRule_keepsPrefixesApart(t *testing.T) {
	b := realBackend(t)
	aclUser(t, b.srv, "tenantA", "tenantA:")
	b.srv.Do(t, append([]string{"ACL", "SETUSER", "forger", "reset", "on", ">pw-forger"}, aclRule(t, "tenantA:")...)...)
	forged, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}, Username: "forger", Password: "pw-forger"},
		rlock.WithKeyPrefix("tenantB:"))
	require.NoError(t, err)
	defer forged.Close()
	tenantB := b.client(t, rlock.WithKeyPrefix("tenantB:"))
	name := redistest.Name(t)
	require.NoError(t, tenantB.Mutex(name).Lock(bg))
	_, err = forged.Mutex(name).ForceUnlock(bg)
	require.Error(t, err)
	require.ErrorIs(t, err, rlock.ErrNoPermission)
	ok, err := forged.Mutex(name).TryLock(bg, 0, 0)
	require.False(t, ok)
	require.ErrorIs(t, err, rlock.ErrNoPermission)
	locked, err := tenantB.Mutex(name).IsLocked(bg)
	require.NoError(t, err)
	require.True(t, locked, "tenant B's lock is untouched")
}

// TestACLRule_eachCommandRemoved: for every command of the rule, a user without it runs the
// family. Whatever fails must fail promptly with an error wrapping ErrNoPermission that names
// the lock and the refused command (no retry loop), and nothing may be left in Redis that
// would stay forever.
func TestACLRule_eachCommandRemoved(t *testing.T) {
	if testing.Short() {
		t.Skip("long: one run of the family per command (run without -short)")
	}
	// A server of its own, its bound 3 s, a renewal that does not land told as a loss (which
	// step takes): beside the other parallel tests. Its per-command runs stay one at a time.
	t.Parallel()
	b := realBackend(t)
	var cmds []string
	for _, r := range aclRule(t, "") {
		if strings.HasPrefix(r, "+") {
			cmds = append(cmds, r[1:])
		}
	}
	// The holder's lease outlasts every step before its Unlock, on a loaded machine too: with
	// 200 ms, a renewal held up by the load let the lease run out before the Unlock, which then
	// answered ErrNotHeld instead of the refusal it tests (without PUBLISH, in .ci/run's
	// company). The busy TryLock waits long enough to wait on the channel (its refusal marks
	// the lock, so that the release publishes), not for the lease.
	const lease, busyWait = time.Second, 400 * time.Millisecond
	for i, cmd := range cmds {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel() // a user, a key prefix and Clients of its own on the shared server
			prefix := fmt.Sprintf("minus%d:", i)
			var rule []string
			for _, r := range aclRule(t, prefix) {
				if r != "+"+cmd {
					rule = append(rule, r)
				}
			}
			user := "minus" + strings.ReplaceAll(cmd, "|", "-")
			b.srv.Do(t, append([]string{"ACL", "SETUSER", user, "reset", "on", ">pw"}, rule...)...)
			c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}, Username: user, Password: "pw"},
				rlock.WithKeyPrefix(prefix), rlock.WithWatchdogTimeout(lease), rlock.WithCleanupTimeout(time.Second))
			if err != nil {
				t.Logf("Dial refused without %s: %v", cmd, err)
				return
			}
			defer c.Close()
			name := redistest.Name(t)
			failed := 0
			step := func(what string, f func(ctx context.Context) error) {
				t.Helper()
				ctx, cancel := context.WithTimeout(bg, 5*time.Second)
				defer cancel()
				start := time.Now()
				err := f(ctx)
				if err == nil {
					return
				}
				failed++
				require.Less(t, time.Since(start), 3*time.Second, "%s without %s: returned after %v (%v)", what, cmd, time.Since(start), err)
				if errors.Is(err, rlock.ErrNotHeld) && failed > 1 {
					return // the give-back of what an earlier refused step did not take
				}
				if errors.Is(err, rlock.ErrLockLost) {
					return // a renewal was refused: the holder was told, the lock expired
				}
				require.ErrorIs(t, err, rlock.ErrNoPermission, "%s without %s", what, cmd)
				require.Contains(t, err.Error(), name, "%s without %s: the error names the lock", what, cmd)
				require.Regexp(t, `\b`+regexp.QuoteMeta(strings.ToUpper(cmd))+` refused`, err.Error(),
					"%s without %s: the error names the command", what, cmd)
			}
			m := c.Mutex(name)
			step("Lock", func(ctx context.Context) error { return m.Lock(ctx) })
			if msg := b.srv.Do(t, "PTTL", m.Key()); func() bool { n, _ := msg.AsInt64(); return n == -1 }() {
				t.Errorf("without %s: a Lock that failed left the lock %s without an expiry", cmd, m.Key())
			}
			step("TryLock (busy, waiting)", func(ctx context.Context) error {
				_, err := c.Mutex(name).TryLock(ctx, busyWait, 0)
				return err
			})
			step("Unlock", func(ctx context.Context) error { return m.Unlock(ctx) })
			step("IsLocked", func(ctx context.Context) error { _, err := m.IsLocked(ctx); return err })
			step("TTL", func(ctx context.Context) error { _, err := m.TTL(ctx); return err })
			step("HoldCount", func(ctx context.Context) error { _, err := m.HoldCount(ctx); return err })
			step("ForceUnlock", func(ctx context.Context) error { _, err := m.ForceUnlock(ctx); return err })
			f := c.FairMutex(name + "-fair")
			step("FairMutex.Lock", func(ctx context.Context) error { return f.Lock(ctx) })
			step("FairMutex.Unlock", func(ctx context.Context) error { return f.Unlock(ctx) })
			rw := c.RWMutex(name + "-rw")
			step("RLock", func(ctx context.Context) error { return rw.RLock(ctx) })
			step("RUnlock", func(ctx context.Context) error { return rw.RUnlock(ctx) })
			sem := c.Semaphore(name + "-sem")
			step("Semaphore.TrySetPermits", func(ctx context.Context) error { _, err := sem.TrySetPermits(ctx, 1); return err })
			step("Semaphore.TryAcquire", func(ctx context.Context) error { _, err := sem.TryAcquire(ctx, 1, 0); return err })
			step("Semaphore.Release", func(ctx context.Context) error { return sem.Release(ctx, 1) })
			ps := c.PermitSemaphore(name + "-psem")
			step("PermitSemaphore.TrySetPermits", func(ctx context.Context) error { _, err := ps.TrySetPermits(ctx, 1); return err })
			step("PermitSemaphore.TryAcquire", func(ctx context.Context) error {
				p, ok, err := ps.TryAcquire(ctx, 0, time.Second)
				if err == nil && ok {
					err = ps.Release(ctx, p.ID)
				}
				return err
			})
			l := c.CountDownLatch(name + "-latch")
			step("CountDownLatch.TrySetCount", func(ctx context.Context) error { _, err := l.TrySetCount(ctx, 1); return err })
			step("CountDownLatch.CountDown", func(ctx context.Context) error { return l.CountDown(ctx) })

			// Nothing stays forever: every key has an expiry, but the semaphores' and the
			// latch's counts, which live without one by design.
			keys := b.srv.Do(t, "KEYS", "*"+prefix+"*")
			names, _ := keys.AsStrSlice()
			for _, k := range names {
				msg := b.srv.Do(t, "PTTL", k)
				ttl, _ := msg.AsInt64()
				if ttl != -1 {
					continue
				}
				if !strings.HasSuffix(k, "-sem}") && !strings.HasSuffix(k, "-psem}") && !strings.HasSuffix(k, "-latch}") {
					t.Errorf("without %s: key %s left without an expiry", cmd, k)
				}
			}
			t.Logf("without %s: %d steps refused", cmd, failed)
		})
	}
}

// TestACLRule_inREADME: the README shows the rule ACLRule returns for the default prefix.
func TestACLRule_inREADME(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	s := string(b)
	i, j := strings.Index(s, "<!-- acl-rule:begin -->"), strings.Index(s, "<!-- acl-rule:end -->")
	require.True(t, i >= 0 && j > i, "README: the acl-rule markers")
	require.Contains(t, s[i:j], "ACL SETUSER locker reset on >secret "+strings.Join(aclRule(t, ""), " ")+"\n",
		"README: the ACL rule is not ACLRule's output; paste rlock.ACLRule(\"\")")
}

// TestACLRule_prefixes: a prefix that no printed rule can carry (whitespace, control
// characters, quotes, braces, invalid UTF-8) is refused by ACLRule and InspectACLRule with an
// error wrapping ErrInvalid that names it, and no rule. Any other prefix, odd as it may be,
// gives a rule that Redis takes as printed (split at its spaces, as redis-cli does) and that
// grants the prefix's keys, in both shapes, and no other key. (ACLRule("a b:") returned
// "... ~{a b:* ~a b:* ...": a rule Redis refuses, or, split at its spaces, a different one.)
func TestACLRule_prefixes(t *testing.T) {
	rules := map[string]func(string) (string, error){"ACLRule": rlock.ACLRule, "InspectACLRule": rlock.InspectACLRule}
	for _, p := range []string{"a b:", "a\tb:", "a\nb:", "a\rb:", "a\vb:", "a\fb:", "a\x00b:", "a\x01b:",
		"a\x1bb:", "a\x7fb:", "a\u0085b:", "a\u00a0b:", "a\u2028b:", "a\u3000b:", `a"b:`, "a'b:",
		"a{b:", "a}b:", "a\xffb:", " ", "relock: "} {
		for fn, f := range rules {
			rule, err := f(p)
			require.ErrorIs(t, err, rlock.ErrInvalid, "%s(%q) = %q", fn, p, rule)
			require.Empty(t, rule, "%s(%q)", fn, p)
			require.Contains(t, err.Error(), fmt.Sprintf("%q", p), "%s(%q)", fn, p)
		}
	}

	srv := redistest.Start(t)
	for i, p := range []string{"", "a(b):", "(x:", "a)", "a#b;c:", "é:", `team*[a]?\:`, "a%b&c~:"} {
		for fn, f := range rules {
			rule, err := f(p)
			require.NoError(t, err, "%s(%q)", fn, p)
			user := fmt.Sprintf("prefix%d-%s", i, fn)
			msg := srv.Do(t, append([]string{"ACL", "SETUSER", user, "reset", "on", "nopass"}, strings.Fields(rule)...)...)
			require.NoError(t, msg.Error(), "%s(%q): %q", fn, p, rule)
			for key, want := range map[string]bool{
				"{" + prefixOr(p) + "x}":     true, // a wrapped name
				prefixOr(p) + "{x}:lock":     true, // a name with its own hash tag
				"other:" + prefixOr(p) + "x": false,
				"{other:x}":                  false,
			} {
				msg := srv.Do(t, "ACL", "DRYRUN", user, "GET", key)
				got, err := msg.ToString()
				require.NoError(t, err)
				require.Equal(t, want, got == "OK", "%s(%q): GET %q: %s", fn, p, key, got)
			}
		}
	}
}
