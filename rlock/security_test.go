package rlock_test

import (
	"context"
	"crypto/tls"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Security: relock over TLS, with a password or an ACL user, and through a Sentinel with
// passwords (issue 15). Every server here is a real redis-server started by redistest.

// secLease is the watchdog timeout of the Clients here: short, so that a renewal is seen
// within a few seconds, and long enough for a loaded machine under -race (2 s was not: a
// renewal over TLS landed after the lease in a .ci/run with a full go test -race beside it).
const secLease = 3 * time.Second

// secDial dials a Client (closed at cleanup) or fails t.
func secDial(t *testing.T, opt rueidis.ClientOption, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	c, err := rlock.Dial(opt, opts...)
	require.NoError(t, err, "rlock.Dial")
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// secDialFails dials with opt, expecting an error within a few seconds, and returns it.
func secDialFails(t *testing.T, opt rueidis.ClientOption) error {
	t.Helper()
	start := time.Now()
	c, err := rlock.Dial(opt)
	if err == nil {
		_ = c.Close()
		t.Fatalf("rlock.Dial succeeded; want an error")
	}
	require.Less(t, time.Since(start), 8*time.Second, "Dial's error came late: %v", err)
	t.Logf("Dial's error (after %v): %v", time.Since(start).Round(time.Millisecond), err)
	return err
}

// secListening waits until at least one connection listens on channel of srv.
func secListening(t *testing.T, srv *redistest.Server, channel string) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, "a waiter to subscribe to "+channel, func() bool {
		msg := srv.Do(t, "PUBSUB", "NUMSUB", channel)
		arr, _ := msg.ToArray()
		if len(arr) != 2 {
			return false
		}
		n, _ := arr[1].AsInt64()
		return n >= 1
	})
}

// secPTTL is the key's PTTL on srv in milliseconds (-2: no key).
func secPTTL(t *testing.T, srv *redistest.Server, key string) int64 {
	t.Helper()
	msg := srv.Do(t, "PTTL", key)
	n, err := msg.AsInt64()
	require.NoError(t, err, "PTTL %q", key)
	return n
}

// secGo runs f on a goroutine and delivers its error.
func secGo(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// secMutexBasics runs a Mutex through a and b, two Clients on srv: Lock/TryLock/Unlock, a waiter
// of b woken by a's release (through b's subscription connection), and ForceUnlock.
func secMutexBasics(t *testing.T, srv *redistest.Server, a, b *rlock.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	name := redistest.Name(t)
	ma, mb := a.Mutex(name), b.Mutex(name)

	require.NoError(t, ma.Lock(ctx))
	ok, err := mb.TryLock(ctx, 0, 0)
	require.NoError(t, err)
	require.False(t, ok, "TryLock of a held lock")
	ok, err = ma.TryLock(ctx, 0, 0)
	require.NoError(t, err)
	require.True(t, ok, "re-entry")
	n, err := ma.HoldCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.NoError(t, ma.Unlock(ctx))

	// A waiter of the other Client, woken by the release through pub/sub.
	woken := secGo(func() error { return mb.Lock(ctx) })
	secListening(t, srv, ma.Key()+":released")
	require.NoError(t, ma.Unlock(ctx))
	require.NoError(t, await(t, woken, 10*time.Second, "the waiter to be woken by the release"))
	require.NoError(t, mb.Unlock(ctx))

	// ForceUnlock frees a lock held by the other Client.
	ok, err = mb.TryLock(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = ma.ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, ok, "ForceUnlock found the lock")
	locked, err := ma.IsLocked(ctx)
	require.NoError(t, err)
	require.False(t, locked, "freed by ForceUnlock")
	ok, err = ma.TryLock(ctx, 0, 0)
	require.NoError(t, err)
	require.True(t, ok, "a forced-free lock can be taken")
	require.NoError(t, ma.Unlock(ctx))
}

// secRenewing is a held lock whose renewals secWatchdogRenews watches.
type secRenewing struct {
	what string
	key  string                                // its hash: the key whose lease is renewed
	done func(context.Context) <-chan struct{} // closes if the hold is lost
	err  func(context.Context) error
}

// secWatchdogRenews checks that every hold in hs (taken in watchdog mode, with lease secLease,
// at start) is renewed on srv and still held past one lease.
func secWatchdogRenews(t *testing.T, srv *redistest.Server, start time.Time, hs ...secRenewing) {
	t.Helper()
	last := make([]int64, len(hs))
	renewed := make([]bool, len(hs))
	for i, h := range hs {
		last[i] = secPTTL(t, srv, h.key)
		require.Positive(t, last[i], "%s: the lock's lease", h.what)
	}
	deadline := time.Now().Add(10 * secLease)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		all := true
		for i, h := range hs {
			select {
			case <-h.done(bg):
				t.Fatalf("%s: the hold ended while the watchdog should renew it: %v", h.what, h.err(bg))
			default:
			}
			p := secPTTL(t, srv, h.key)
			require.Positive(t, p, "%s: the lease ran out", h.what)
			if p > last[i] {
				renewed[i] = true
			}
			last[i] = p
			all = all && renewed[i]
		}
		if all && time.Since(start) > secLease+secLease/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: renewed %v of %d holds", 10*secLease, renewed, len(hs))
		}
		<-tick.C
	}
	for _, h := range hs {
		require.NoError(t, h.err(bg), "%s: still held past one lease", h.what)
	}
}

// secMutexWatchdog checks that a Mutex held by c in watchdog mode outlives one lease.
func secMutexWatchdog(t *testing.T, srv *redistest.Server, c *rlock.Client) {
	t.Helper()
	m := c.Mutex(redistest.Name(t))
	start := time.Now()
	require.NoError(t, m.Lock(bg))
	secWatchdogRenews(t, srv, start, secRenewing{"mutex", m.Key(), m.Done, m.Err})
	require.NoError(t, m.Unlock(bg))
}

// TLS: the whole Mutex (locking, a waiter woken through the subscription connection, the
// watchdog, ForceUnlock) over a server that speaks TLS only, dialled with a TLSConfig and
// with a rediss:// URL; and clear, prompt Dial errors for an untrusted or expired certificate.
func TestSecurity_TLS(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a renewal or runs many names (run without -short)")
	}
	srv := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{}))
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: srv.TLSConfig()}

	t.Run("TLSConfig", func(t *testing.T) {
		a, b := secDial(t, opt, rlock.WithWatchdogTimeout(secLease)), secDial(t, opt)
		secMutexBasics(t, srv, a, b)
		secMutexWatchdog(t, srv, a)
	})

	t.Run("URL", func(t *testing.T) {
		url := func() rueidis.ClientOption {
			o, err := rueidis.ParseURL("rediss://" + srv.Addr() + "/0")
			require.NoError(t, err)
			require.NotNil(t, o.TLSConfig, "rediss:// sets a TLSConfig")
			o.TLSConfig.RootCAs = srv.TLS().CAPool
			return o
		}
		a, b := secDial(t, url(), rlock.WithWatchdogTimeout(secLease)), secDial(t, url())
		secMutexBasics(t, srv, a, b)
		secMutexWatchdog(t, srv, a)
	})

	t.Run("untrusted", func(t *testing.T) {
		// No CA: the system's roots do not know the test's CA.
		err := secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: &tls.Config{}})
		require.ErrorContains(t, err, "certificate signed by unknown authority")
		// Another CA.
		other := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{}))
		err = secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: other.TLSConfig()})
		require.ErrorContains(t, err, "certificate signed by unknown authority")
		// Plain text to a TLS-only port.
		secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	})

	t.Run("expired", func(t *testing.T) {
		expired := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{Expired: true}))
		err := secDialFails(t, rueidis.ClientOption{InitAddress: []string{expired.Addr()}, TLSConfig: expired.TLSConfig()})
		require.ErrorContains(t, err, "certificate has expired")
	})
}

// Mutual TLS: a client certificate signed by the server's CA is required; without one, Dial
// fails promptly.
func TestSecurity_mutualTLS(t *testing.T) {
	srv := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{ClientAuth: true}))
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: srv.TLSConfig()}
	secMutexBasics(t, srv, secDial(t, opt), secDial(t, opt))

	noCert := &tls.Config{RootCAs: srv.TLS().CAPool}
	secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: noCert})
}

// secFamily runs every primitive through a and b, two Clients on srv: each is taken, a waiter
// of b (or of a) waits for it and is woken by its release, and it is given back. a renews by
// watchdog with lease secLease; the watchdog is checked on the Mutex, FairMutex and both
// holds of an RWMutex together.
func secFamily(t *testing.T, srv *redistest.Server, a, b *rlock.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	base := redistest.Name(t)
	name := func(kind string) string { return base + "-" + kind }

	t.Run("Mutex", func(t *testing.T) { secMutexBasics(t, srv, a, b) })

	t.Run("FairMutex", func(t *testing.T) {
		fa, fb := a.FairMutex(name("fair")), b.FairMutex(name("fair"))
		require.NoError(t, fa.Lock(ctx))
		woken := secGo(func() error { return fb.Lock(ctx) })
		secListening(t, srv, fa.Key()+":released")
		require.NoError(t, fa.Unlock(ctx))
		require.NoError(t, await(t, woken, 10*time.Second, "the fair waiter"))
		require.NoError(t, fb.Unlock(ctx))
	})

	t.Run("SpinMutex", func(t *testing.T) {
		sa, sb := a.SpinMutex(name("spin")), b.SpinMutex(name("spin"))
		require.NoError(t, sa.Lock(ctx))
		srv.ResetStats(t)
		woken := secGo(func() error { return sb.Lock(ctx) })
		redistest.WaitFor(t, 10*time.Second, "the spin waiter to try twice", func() bool {
			stats := srv.CommandStats(t)
			return stats["evalsha"]+stats["eval"] >= 2
		})
		require.NoError(t, sa.Unlock(ctx))
		require.NoError(t, await(t, woken, 10*time.Second, "the spin waiter"))
		require.NoError(t, sb.Unlock(ctx))
	})

	t.Run("RWMutex", func(t *testing.T) {
		ra, rb := a.RWMutex(name("rw")), b.RWMutex(name("rw"))
		require.NoError(t, ra.RLock(ctx))
		require.NoError(t, rb.RLock(ctx), "readers share")
		require.NoError(t, rb.RUnlock(ctx))
		woken := secGo(func() error { return rb.Lock(ctx) })
		secListening(t, srv, ra.Key()+":released")
		require.NoError(t, ra.RUnlock(ctx))
		require.NoError(t, await(t, woken, 10*time.Second, "the writer waiting for the reader"))
		read := secGo(func() error { return ra.RLock(ctx) })
		secListening(t, srv, ra.Key()+":released:read")
		require.NoError(t, rb.Unlock(ctx))
		require.NoError(t, await(t, read, 10*time.Second, "the reader waiting for the writer"))
		require.NoError(t, ra.RUnlock(ctx))
	})

	t.Run("Semaphore", func(t *testing.T) {
		sa, sb := a.Semaphore(name("sem")), b.Semaphore(name("sem"))
		ok, err := sa.TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, sa.Acquire(ctx, 1))
		woken := secGo(func() error { return sb.Acquire(ctx, 1) })
		secListening(t, srv, sa.Key()+":released")
		require.NoError(t, sa.Release(ctx, 1))
		require.NoError(t, await(t, woken, 10*time.Second, "the semaphore waiter"))
		require.NoError(t, sb.Release(ctx, 1))
		n, err := sa.AvailablePermits(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = sa.Delete(ctx)
		require.NoError(t, err)
	})

	t.Run("PermitSemaphore", func(t *testing.T) {
		pa, pb := a.PermitSemaphore(name("permits")), b.PermitSemaphore(name("permits"))
		ok, err := pa.TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		p, err := pa.Acquire(ctx, time.Minute)
		require.NoError(t, err)
		var q rlock.Permit
		woken := secGo(func() (err error) { q, err = pb.Acquire(ctx, time.Minute); return err })
		secListening(t, srv, pa.Key()+":released")
		require.NoError(t, pa.Release(ctx, p.ID))
		require.NoError(t, await(t, woken, 10*time.Second, "the permit waiter"))
		require.NoError(t, pb.Extend(ctx, q.ID, time.Minute))
		require.NoError(t, pb.Release(ctx, q.ID))
		_, err = pa.Delete(ctx)
		require.NoError(t, err)
	})

	t.Run("CountDownLatch", func(t *testing.T) {
		la, lb := a.CountDownLatch(name("latch")), b.CountDownLatch(name("latch"))
		ok, err := la.TrySetCount(ctx, 2)
		require.NoError(t, err)
		require.True(t, ok)
		opened := secGo(func() error { return lb.Await(ctx) })
		secListening(t, srv, la.Key()+":released")
		require.NoError(t, la.CountDown(ctx))
		n, err := lb.Count(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.NoError(t, lb.CountDown(ctx))
		require.NoError(t, await(t, opened, 10*time.Second, "the latch to open"))
	})

	t.Run("watchdog", func(t *testing.T) {
		m, f, rw, r := a.Mutex(name("wd")), a.FairMutex(name("wd-fair")), a.RWMutex(name("wd-rw")), a.RWMutex(name("wd-r"))
		start := time.Now()
		require.NoError(t, m.Lock(ctx))
		require.NoError(t, f.Lock(ctx))
		require.NoError(t, rw.Lock(ctx))
		require.NoError(t, r.RLock(ctx))
		rl := r.RLocker()
		secWatchdogRenews(t, srv, start,
			secRenewing{"mutex", m.Key(), m.Done, m.Err},
			secRenewing{"fair mutex", f.Key(), f.Done, f.Err},
			secRenewing{"write lock", rw.Key(), rw.Done, rw.Err},
			secRenewing{"read lock", r.Key(), rl.Done, rl.Err},
		)
		require.NoError(t, m.Unlock(ctx))
		require.NoError(t, f.Unlock(ctx))
		require.NoError(t, rw.Unlock(ctx))
		require.NoError(t, r.RUnlock(ctx))
	})
}

// secAuthFails checks that err, from a Dial with bad credentials, says that authentication
// failed.
func secAuthFails(t *testing.T, err error) {
	t.Helper()
	msg := err.Error()
	require.True(t, strings.Contains(msg, "WRONGPASS") || strings.Contains(strings.ToLower(msg), "auth"),
		"the error does not say that authentication failed: %v", err)
}

// Authentication with requirepass: every primitive works for a Client that gives the
// password; a wrong or missing password is a prompt Dial error that says so.
func TestSecurity_requirepass(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a renewal or runs many names (run without -short)")
	}
	srv := redistest.Start(t, redistest.WithPassword("s3cret pass"))
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Password: "s3cret pass"}
	secFamily(t, srv, secDial(t, opt, rlock.WithWatchdogTimeout(secLease)), secDial(t, opt))

	t.Run("wrong password", func(t *testing.T) {
		err := secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Password: "wrong"})
		require.ErrorContains(t, err, "WRONGPASS")
	})
	t.Run("no password", func(t *testing.T) {
		secAuthFails(t, secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}))
	})
}

// Authentication as an ACL user (with every right): every primitive works; a wrong password
// or an unknown user is a prompt Dial error that says so.
func TestSecurity_aclUser(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a renewal or runs many names (run without -short)")
	}
	srv := redistest.Start(t)
	secSetUser(t, srv, "locker", "on", ">pw", "~*", "&*", "+@all")
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: "locker", Password: "pw"}
	secFamily(t, srv, secDial(t, opt, rlock.WithWatchdogTimeout(secLease)), secDial(t, opt))

	t.Run("wrong password", func(t *testing.T) {
		err := secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: "locker", Password: "nope"})
		require.ErrorContains(t, err, "WRONGPASS")
	})
	t.Run("unknown user", func(t *testing.T) {
		err := secDialFails(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: "nobody", Password: "pw"})
		require.ErrorContains(t, err, "WRONGPASS")
	})
}

// TLS and a password together.
func TestSecurity_TLSAndPassword(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a renewal or runs many names (run without -short)")
	}
	srv := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{}), redistest.WithPassword("pw"))
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: srv.TLSConfig(), Password: "pw"}
	secMutexBasics(t, srv, secDial(t, opt), secDial(t, opt))
	u, err := rueidis.ParseURL("rediss://:pw@" + srv.Addr() + "/0")
	require.NoError(t, err)
	u.TLSConfig.RootCAs = srv.TLS().CAPool
	secMutexWatchdog(t, srv, secDial(t, u, rlock.WithWatchdogTimeout(secLease)))
	bad := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: srv.TLSConfig(), Password: "wrong"}
	require.ErrorContains(t, secDialFails(t, bad), "WRONGPASS")
}

// secSetUser runs ACL SETUSER name rules... on srv as the default user.
func secSetUser(t *testing.T, srv *redistest.Server, name string, rules ...string) {
	t.Helper()
	msg := srv.Do(t, append([]string{"ACL", "SETUSER", name}, rules...)...)
	require.NoError(t, msg.Error(), "ACL SETUSER %s %q", name, rules)
}

// Through a Sentinel, with passwords: the master requires one (the Sentinel is told it by
// "sentinel auth-pass"), and so does the Sentinel itself (SentinelOption.Password). Locking,
// a waiter woken by the release, ForceUnlock and the watchdog work on the master it names;
// a wrong master password is a prompt Dial error.
func TestSecurity_sentinelWithPasswords(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: a master and a sentinel (run without -short)")
	}
	master := redistest.Start(t, redistest.WithPassword("master-pw"))
	sentinel := redistest.Start(t, redistest.WithSentinel(master, "relock"), redistest.WithPassword("sentinel-pw"))
	redistest.WaitFor(t, 10*time.Second, "the Sentinel to reach its master", func() bool {
		msg := sentinel.Do(t, "SENTINEL", "MASTER", "relock")
		fields, _ := msg.AsStrMap()
		return fields["flags"] == "master" && fields["port"] == strconv.Itoa(master.Port())
	})
	opt := func(pw string) rueidis.ClientOption {
		return rueidis.ClientOption{
			InitAddress: []string{sentinel.Addr()},
			Sentinel:    rueidis.SentinelOption{MasterSet: "relock", Password: "sentinel-pw"},
			Password:    pw,
		}
	}
	a, b := secDial(t, opt("master-pw"), rlock.WithWatchdogTimeout(secLease)), secDial(t, opt("master-pw"))
	secMutexBasics(t, master, a, b)
	secMutexWatchdog(t, master, a)

	t.Run("wrong master password", func(t *testing.T) {
		require.ErrorContains(t, secDialFails(t, opt("wrong")), "WRONGPASS")
	})
	t.Run("wrong sentinel password", func(t *testing.T) {
		o := opt("master-pw")
		o.Sentinel.Password = "wrong"
		secAuthFails(t, secDialFails(t, o))
	})
}
