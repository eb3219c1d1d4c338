package rlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Tenants apart (issue 15): two Clients with different key prefixes on one server never see,
// wake or unlock each other's locks, whatever the names; and with an ACL user per tenant, a
// tenant's user cannot touch the other's keys even with a forged prefix or owner id.

const (
	tenantA = "tenantA:"
	tenantB = "tenantB:"
	// tenantSeedEnv replays a run's random names: set it to the seed the test logged.
	tenantSeedEnv = "RELOCK_TENANT_SEED"
)

// tenantFixedNames are the awkward names every run covers: hash tags of their own, stray
// braces, escapes, binary bytes, names that spell a prefix, and names that look like a key's
// suffix.
var tenantFixedNames = []string{
	"x", "{x}", "}{", "{", "}", "{}", "a{b}c", "{x}y{z}", "%7B", "%",
	"\x00", "\xff\xfe\x00{", " ", ":", "*", "[a]?",
	"tenantA:x", "tenantB:x", "{tenantA:x}", "{tenantB:x}", "tenantA:{x}", "tenantB:{x}",
	"lock", ":lock", "x}:lock", "{x}:lock", "}:released",
}

// tenantNames returns tenantFixedNames followed by n random names from a seeded source, none
// twice (a name twice would find its own earlier lock held), logging the seed
// ($RELOCK_TENANT_SEED replays it).
func tenantNames(t *testing.T, n int) []string {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(tenantSeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q", tenantSeedEnv, s)
		seed = v
	}
	t.Logf("random names from seed %d (replay with %s=%d)", seed, tenantSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0x7e4a47))
	pieces := []string{"{", "}", ":", "%", "{x}", "tenantA:", "tenantB:", "{tenantA:", "{tenantB:", ":lock", "*", "\x00"}
	names := append([]string(nil), tenantFixedNames...)
	seen := make(map[string]bool)
	for _, name := range names {
		seen[name] = true
	}
	for len(names) < len(tenantFixedNames)+n {
		var b strings.Builder
		for parts := 1 + rng.IntN(6); parts > 0; parts-- {
			switch r := rng.IntN(10); {
			case r < 4:
				b.WriteString(pieces[rng.IntN(len(pieces))])
			case r < 7:
				b.WriteByte(byte(rng.IntN(256))) // binary, often not UTF-8
			default:
				b.WriteByte("abcxyz0123"[rng.IntN(10)])
			}
		}
		if name := b.String(); !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// tenantPair is a name in tenant A and one in tenant B.
type tenantPair struct{ a, b string }

func (p tenantPair) String() string { return fmt.Sprintf("A %q / B %q", p.a, p.b) }

// tenantPairs returns, for every name, the same name in both tenants, and names that spell
// the other tenant's prefix: A's "tenantB:"+name against B's name, and the reverse.
func tenantPairs(names []string) []tenantPair {
	var ps []tenantPair
	for _, n := range names {
		ps = append(ps, tenantPair{n, n}, tenantPair{tenantB + n, n}, tenantPair{n, tenantA + n})
	}
	return ps
}

// ofTenant reports whether key is one of prefix's: every key starts with the hash tag
// "{"+prefix, or, for a name with a hash tag of its own, with prefix.
func ofTenant(key, prefix string) bool {
	return strings.HasPrefix(key, "{"+prefix) || strings.HasPrefix(key, prefix)
}

// scanKeys returns every key on srv (SCAN, so it also works for a user restricted to some).
func scanKeys(t *testing.T, srv *redistest.Server) map[string]bool {
	t.Helper()
	keys := make(map[string]bool)
	cursor := "0"
	for {
		msg := srv.Do(t, "SCAN", cursor, "COUNT", "1000")
		arr, err := msg.ToArray()
		require.NoError(t, err, "SCAN")
		require.Len(t, arr, 2)
		cursor, err = arr[0].ToString()
		require.NoError(t, err)
		page, err := arr[1].AsStrSlice()
		require.NoError(t, err)
		for _, k := range page {
			keys[k] = true
		}
		if cursor == "0" {
			return keys
		}
	}
}

// tenantNumSub is the number of subscribers of channel on srv.
func tenantNumSub(t *testing.T, srv *redistest.Server, channel string) int64 {
	t.Helper()
	msg := srv.Do(t, "PUBSUB", "NUMSUB", channel)
	arr, err := msg.ToArray()
	require.NoError(t, err)
	require.Len(t, arr, 2)
	n, err := arr[1].AsInt64()
	require.NoError(t, err)
	return n
}

// tenantsApart checks one pair of names on Clients a (prefix tenantA) and b (prefix tenantB):
// both hold their name at once; IsLocked, HoldCount and TTL of each reflect its own lock only;
// ForceUnlock of one leaves the other's lock held; semaphores and latches of the two names
// keep their own counts.
func tenantsApart(t *testing.T, a, b *rlock.Client, p tenantPair) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	ma, mb := a.Mutex(p.a), b.Mutex(p.b)
	require.NotEqual(t, ma.Key(), mb.Key(), "%v: one key for both tenants", p)
	require.True(t, ofTenant(ma.Key(), tenantA), "%v: A's key %q", p, ma.Key())
	require.True(t, ofTenant(mb.Key(), tenantB), "%v: B's key %q", p, mb.Key())

	took := func(m *rlock.Mutex, lease time.Duration, who string) {
		t.Helper()
		ok, err := m.TryLock(ctx, 0, lease)
		require.NoError(t, err, "%v: %s", p, who)
		require.True(t, ok, "%v: %s", p, who)
	}
	state := func(m *rlock.Mutex, who string, locked bool, holds int, maxTTL time.Duration) {
		t.Helper()
		isLocked, err := m.IsLocked(ctx)
		require.NoError(t, err, "%v: %s", p, who)
		require.Equal(t, locked, isLocked, "%v: %s IsLocked", p, who)
		n, err := m.HoldCount(ctx)
		require.NoError(t, err, "%v: %s", p, who)
		require.Equal(t, holds, n, "%v: %s HoldCount", p, who)
		ttl, err := m.TTL(ctx)
		require.NoError(t, err, "%v: %s", p, who)
		if locked {
			require.LessOrEqual(t, ttl, maxTTL, "%v: %s TTL", p, who)
			require.Greater(t, ttl, maxTTL/2, "%v: %s TTL", p, who)
		} else {
			require.LessOrEqual(t, ttl, time.Duration(0), "%v: %s TTL of a free lock", p, who)
		}
	}
	// Both hold "the same name" at once, with different hold counts and leases.
	took(ma, time.Minute, "A takes")
	took(ma, time.Minute, "A re-enters")
	took(mb, 20*time.Second, "B takes")
	state(ma, "A", true, 2, time.Minute)
	state(mb, "B", true, 1, 20*time.Second)
	// Each lock is really held: another handle of its own tenant is refused.
	for _, m := range []*rlock.Mutex{a.Mutex(p.a), b.Mutex(p.b)} {
		ok, err := m.TryLock(ctx, 0, 0)
		require.NoError(t, err, "%v", p)
		require.False(t, ok, "%v: %q taken by a second handle while held", p, m.Key())
	}

	// ForceUnlock of one never frees the other's.
	freed, err := a.Mutex(p.a).ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, freed, "%v: A's ForceUnlock", p)
	state(ma, "A after A's ForceUnlock", false, 0, 0)
	state(mb, "B after A's ForceUnlock", true, 1, 20*time.Second)
	require.ErrorIs(t, ma.Unlock(ctx), rlock.ErrNotHeld, "%v: A's hold was forced away", p)
	ma2 := a.Mutex(p.a)
	took(ma2, time.Minute, "A takes again")
	freed, err = b.Mutex(p.b).ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, freed, "%v: B's ForceUnlock", p)
	state(mb, "B after B's ForceUnlock", false, 0, 0)
	state(ma2, "A after B's ForceUnlock", true, 1, time.Minute)
	require.NoError(t, ma2.Unlock(ctx), "%v", p)
	require.ErrorIs(t, mb.Unlock(ctx), rlock.ErrNotHeld, "%v: B's hold was forced away", p)

	// Semaphores and latches of the two names count apart.
	sa, sb := a.Semaphore(p.a), b.Semaphore(p.b)
	for _, s := range []struct {
		sem *rlock.Semaphore
		n   int
	}{{sa, 2}, {sb, 5}} {
		ok, err := s.sem.TrySetPermits(ctx, s.n)
		require.NoError(t, err, "%v", p)
		require.True(t, ok, "%v: %q set first", p, s.sem.Key())
	}
	require.NoError(t, sa.Acquire(ctx, 2))
	na, err := sa.AvailablePermits(ctx)
	require.NoError(t, err)
	nb, err := sb.AvailablePermits(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 5}, [2]int{na, nb}, "%v: permits A, B", p)
	for _, s := range []*rlock.Semaphore{sa, sb} {
		ok, err := s.Delete(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	la, lb := a.CountDownLatch(p.a), b.CountDownLatch(p.b)
	for _, l := range []struct {
		latch *rlock.CountDownLatch
		n     int64
	}{{la, 1}, {lb, 3}} {
		ok, err := l.latch.TrySetCount(ctx, l.n)
		require.NoError(t, err, "%v", p)
		require.True(t, ok, "%v: %q set first", p, l.latch.Key())
	}
	require.NoError(t, la.CountDown(ctx))
	ca, err := la.Count(ctx)
	require.NoError(t, err)
	cb, err := lb.Count(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 3}, [2]int64{ca, cb}, "%v: latch counts A, B", p)
	_, err = lb.Delete(ctx)
	require.NoError(t, err)
}

// tenantWaiters checks that a waiter on A's lock is woken neither by B's release nor by B's
// ForceUnlock of the lock of the same (or a look-alike) name, and is woken by A's release.
func tenantWaiters(t *testing.T, srv *redistest.Server, a, b *rlock.Client, p tenantPair) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	holderA, holderB := a.Mutex(p.a), b.Mutex(p.b)
	chA, chB := holderA.Key()+":released", holderB.Key()+":released"
	require.NotEqual(t, chA, chB, "%v", p)

	ok, err := holderA.TryLock(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "%v", p)
	ok, err = holderB.TryLock(ctx, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok, "%v", p)
	waiterA, waiterB := a.Mutex(p.a), b.Mutex(p.b)
	gotA := secGo(func() error { return waiterA.Lock(ctx) })
	gotB := secGo(func() error { return waiterB.Lock(ctx) })
	secListening(t, srv, chA)
	secListening(t, srv, chB)
	// Each tenant's subscription connection listens on its own channel only.
	require.EqualValues(t, 1, tenantNumSub(t, srv, chA), "%v: listeners of A's channel", p)
	require.EqualValues(t, 1, tenantNumSub(t, srv, chB), "%v: listeners of B's channel", p)

	stillWaiting := func(when string) {
		t.Helper()
		select {
		case err := <-gotA:
			t.Fatalf("%v: A's waiter returned (%v) %s", p, err, when)
		default:
		}
		locked, err := holderA.HoldCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, locked, "%v: A's holder %s", p, when)
	}
	// B's release wakes B's waiter (so it was published and delivered), not A's.
	require.NoError(t, holderB.Unlock(ctx))
	require.NoError(t, await(t, gotB, 10*time.Second, "B's waiter to be woken by B's release"))
	stillWaiting("after B's release")
	// B's ForceUnlock (which wakes every kind of waiter) frees B's lock only.
	freed, err := b.Mutex(p.b).ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, freed, "%v", p)
	stillWaiting("after B's ForceUnlock")
	// A's release wakes A's waiter.
	require.NoError(t, holderA.Unlock(ctx))
	require.NoError(t, await(t, gotA, 10*time.Second, "A's waiter to be woken by A's release"))
	require.NoError(t, waiterA.Unlock(ctx))
	require.ErrorIs(t, waiterB.Unlock(ctx), rlock.ErrNotHeld, "%v: B's waiter's hold was forced away", p)
}

// TestTenants_apart: two Clients with prefixes tenantA: and tenantB: on one server, over
// fixed awkward names and seeded random ones.
func TestTenants_apart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := secDial(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}, rlock.WithKeyPrefix(tenantA))
	b := secDial(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}, rlock.WithKeyPrefix(tenantB))
	names := tenantNames(t, 40)

	t.Run("locks", func(t *testing.T) {
		for _, p := range tenantPairs(names) {
			tenantsApart(t, a, b, p)
		}
	})
	t.Run("waiters", func(t *testing.T) {
		for _, p := range tenantPairs(names[:len(tenantFixedNames)+5]) {
			tenantWaiters(t, srv, a, b, p)
		}
	})
	t.Run("empty name", func(t *testing.T) {
		for _, c := range []*rlock.Client{a, b} {
			require.ErrorIs(t, c.Mutex("").Lock(bg), rlock.ErrInvalid)
			_, err := c.Mutex("").ForceUnlock(bg)
			require.ErrorIs(t, err, rlock.ErrInvalid)
		}
	})
}

// tenantWorkload makes c write every kind of key it can for each name: a lock taken and given
// back (fence, release record), a lock held, a fair lock held with a waiter that gave up
// (queue), a read lock held, a write lock with a waiting writer that gave up, a semaphore, a
// permit semaphore and a latch. It returns the locks it holds.
func tenantWorkload(t *testing.T, c *rlock.Client, names []string) []*rlock.Mutex {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	var held []*rlock.Mutex
	for _, n := range names {
		m := c.Mutex(n)
		require.NoError(t, m.Lock(ctx), "%q", n)
		require.NoError(t, m.Unlock(ctx), "%q", n)
		ok, err := m.TryLock(ctx, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "%q", n)
		held = append(held, m)

		f := c.FairMutex(n + "-fair")
		ok, err = f.TryLock(ctx, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "%q", n)
		ok, err = c.FairMutex(n+"-fair").TryLock(ctx, 30*time.Millisecond, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "%q: a fair waiter gave up", n)

		rw := c.RWMutex(n + "-rw")
		ok, err = rw.TryRLock(ctx, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "%q", n)
		w := c.RWMutex(n + "-w")
		ok, err = w.TryLock(ctx, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok, "%q", n)
		ok, err = c.RWMutex(n+"-w").TryLock(ctx, 30*time.Millisecond, time.Minute)
		require.NoError(t, err)
		require.False(t, ok, "%q: a waiting writer gave up", n)

		s := c.Semaphore(n + "-sem")
		_, err = s.TrySetPermits(ctx, 2)
		require.NoError(t, err)
		require.NoError(t, s.Acquire(ctx, 1))
		ps := c.PermitSemaphore(n + "-permits")
		_, err = ps.TrySetPermits(ctx, 2)
		require.NoError(t, err)
		_, err = ps.Acquire(ctx, time.Minute)
		require.NoError(t, err)
		l := c.CountDownLatch(n + "-latch")
		_, err = l.TrySetCount(ctx, 2)
		require.NoError(t, err)
		require.NoError(t, l.CountDown(ctx))
	}
	return held
}

// TestTenants_keys: every key a tenant writes, of every kind, starts with its prefix (inside
// the hash tag, "{tenantA:...", or, for a name with a tag of its own, "tenantA:..."), checked
// with SCAN after each tenant's workload; B's workload on the same names leaves A's locks held.
func TestTenants_keys(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a renewal or runs many names (run without -short)")
	}
	srv := redistest.Start(t)
	a := secDial(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}, rlock.WithKeyPrefix(tenantA))
	b := secDial(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}}, rlock.WithKeyPrefix(tenantB))
	names := tenantNames(t, 20)

	heldA := tenantWorkload(t, a, names)
	keysA := scanKeys(t, srv)
	require.NotEmpty(t, keysA)
	for k := range keysA {
		require.True(t, ofTenant(k, tenantA), "tenant A wrote %q", k)
	}
	tagged := 0
	for k := range keysA {
		if !strings.HasPrefix(k, "{") {
			tagged++
		}
	}
	require.Positive(t, tagged, "names with hash tags of their own wrote keys outside a {prefix tag")

	tenantWorkload(t, b, names)
	all := scanKeys(t, srv)
	newKeys := 0
	for k := range all {
		if keysA[k] {
			continue
		}
		newKeys++
		require.True(t, ofTenant(k, tenantB), "tenant B wrote %q", k)
	}
	require.Positive(t, newKeys)
	for _, m := range heldA {
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "A's %q after B's workload", m.Name())
	}
	t.Logf("%d keys of tenant A, %d of tenant B (%d names)", len(keysA), newKeys, len(names))
}

// tenantRules are the ACL rules of a user for prefix: the hand-written rule (every command
// but the dangerous ones; keys and channels of the prefix, both shapes) and rlock.ACLRule's
// (an error of ACLRule fails t).
func tenantRules(t *testing.T, prefix string) map[string][]string {
	return map[string][]string{
		"handwritten": {"resetkeys", "resetchannels",
			"~{" + prefix + "*", "~" + prefix + "*", "&{" + prefix + "*", "&" + prefix + "*",
			"+@all", "-@dangerous"},
		"ACLRule": aclRule(t, prefix),
	}
}

// tenantUser creates (or replaces) user with password "pw-"+user and rules on srv, and
// returns a Client that locks as that user with prefix.
func tenantUser(t *testing.T, srv *redistest.Server, user, prefix string, rules []string, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	secSetUser(t, srv, user, append([]string{"reset", "on", ">pw-" + user}, rules...)...)
	return tenantDial(t, srv, user, prefix, opts...)
}

// tenantDial returns a Client that locks as user (made by tenantUser) with prefix.
func tenantDial(t *testing.T, srv *redistest.Server, user, prefix string, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: "pw-" + user}
	return secDial(t, opt, append([]rlock.Option{rlock.WithKeyPrefix(prefix)}, opts...)...)
}

// noPermission checks that err is a prompt refusal for want of ACL rights.
func noPermission(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s was allowed", what)
	require.ErrorIs(t, err, rlock.ErrNoPermission, what)
	msg := err.Error()
	require.True(t, strings.Contains(msg, "NOPERM") || strings.Contains(msg, "can't run this command"),
		"%s: the error does not quote Redis's refusal: %v", what, err)
}

// TestTenants_aclUsers: with an ACL user per tenant, restricted to its prefix's keys and
// channels (both the hand-written rule and rlock.ACLRule's), each tenant runs everything on
// the awkward names (names with a hash tag of their own need the ~prefix* pattern beside
// ~{prefix*), and a tenant's user cannot touch the other's locks: not with a Client made
// with the other's prefix (Lock, TryLock, ForceUnlock, Unlock, IsLocked are refused), not by
// subscribing to its channels, not with a forged owner id; a forged owner id through the
// tenant's own prefix touches the tenant's own key only.
func TestTenants_aclUsers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: waits out a renewal or runs many names (run without -short)")
	}
	srv := redistest.Start(t)
	names := tenantNames(t, 10)
	for _, rule := range []string{"handwritten", "ACLRule"} {
		t.Run(rule, func(t *testing.T) {
			a := tenantUser(t, srv, "tA-"+rule, tenantA, tenantRules(t, tenantA)[rule], rlock.WithWatchdogTimeout(secLease))
			b := tenantUser(t, srv, "tB-"+rule, tenantB, tenantRules(t, tenantB)[rule])
			b2 := tenantDial(t, srv, "tB-"+rule, tenantB)
			t.Logf("tenant A's rule: %s", strings.Join(tenantRules(t, tenantA)[rule], " "))

			t.Run("apart", func(t *testing.T) {
				for _, p := range tenantPairs(names) {
					tenantsApart(t, a, b, p)
				}
				for _, p := range tenantPairs(tenantFixedNames[:6]) {
					tenantWaiters(t, srv, a, b, p)
				}
				secMutexWatchdog(t, srv, a)
			})

			t.Run("forged", func(t *testing.T) {
				// Bounded, so that a refusal retried until the caller's ctx ends fails the
				// test rather than hanging it.
				ctx, cancel := context.WithTimeout(bg, 30*time.Second)
				defer cancel()
				// A's user, with B's prefix.
				forged := tenantDial(t, srv, "tA-"+rule, tenantB)
				for _, n := range []string{"x", "{x}", "tenantA:x", redistest.Name(t)} {
					ctxB := rlock.WithOwner(ctx, "owner-of-B")
					held := b.Mutex(n)
					require.NoError(t, held.Lock(ctxB), "%q", n)
					fm := forged.Mutex(n)
					require.Equal(t, held.Key(), fm.Key(), "the forged Client aims at B's key")

					refused := func(what string, f func() error) {
						t.Helper()
						start := time.Now()
						noPermission(t, f(), fmt.Sprintf("%s (name %q)", what, n))
						require.Less(t, time.Since(start), 5*time.Second, "%s (name %q): the refusal was not prompt", what, n)
					}
					refused("Lock of B's lock through A's user", func() error { return fm.Lock(ctx) })
					refused("TryLock", func() error { _, err := fm.TryLock(ctx, 0, 0); return err })
					refused("TryLock with a wait", func() error { _, err := fm.TryLock(ctx, time.Second, 0); return err })
					refused("ForceUnlock", func() error { _, err := fm.ForceUnlock(ctx); return err })
					refused("Unlock with B's owner id", func() error { return fm.Unlock(rlock.WithOwner(ctx, "owner-of-B")) })
					refused("IsLocked", func() error { _, err := fm.IsLocked(ctx); return err })
					refused("ForceUnlock of a fair lock", func() error { _, err := forged.FairMutex(n).ForceUnlock(ctx); return err })
					refused("ForceUnlock of a read-write lock", func() error { _, err := forged.RWMutex(n).ForceUnlock(ctx); return err })
					refused("Delete of a semaphore", func() error { _, err := forged.Semaphore(n).Delete(ctx); return err })

					// A's own prefix, B's owner id: A's key, not B's.
					require.ErrorIs(t, a.Mutex(n).Unlock(rlock.WithOwner(ctx, "owner-of-B")), rlock.ErrNotHeld)
					_, err := a.Mutex(n).ForceUnlock(ctx)
					require.NoError(t, err)

					n2, err := held.HoldCount(ctxB)
					require.NoError(t, err)
					require.Equal(t, 1, n2, "%q: B's lock is untouched", n)
					require.NoError(t, held.Err(ctxB))
					// Within tenant B the owner id is a capability: another Client of B's
					// user that knows it unlocks.
					require.NoError(t, b2.Mutex(n).Unlock(ctxB), "%q", n)
					locked, err := held.IsLocked(ctx)
					require.NoError(t, err)
					require.False(t, locked, "%q", n)
				}

				// Raw commands of A's user on B's key and channel.
				rc := srv.Client(t, func(o *rueidis.ClientOption) {
					o.Username, o.Password, o.DisableCache = "tA-"+rule, "pw-tA-"+rule, true
				})
				key := b.Mutex("x").Key()
				err := rc.Do(ctx, rc.B().Get().Key(key).Build()).Error()
				require.ErrorContains(t, err, "NOPERM", "GET %q", key)
				err = rc.Do(ctx, rc.B().Get().Key(a.Mutex("x").Key()).Build()).Error()
				require.True(t, rueidis.IsRedisNil(err) || err != nil && strings.Contains(err.Error(), "WRONGTYPE"),
					"GET of A's own key: %v", err)
				subCtx, subCancel := context.WithTimeout(ctx, 10*time.Second)
				defer subCancel()
				err = rc.Receive(subCtx, rc.B().Subscribe().Channel(key+":released").Build(), func(rueidis.PubSubMessage) {})
				require.ErrorContains(t, err, "NOPERM", "SUBSCRIBE to B's channel")
			})
		})
	}

	// Without ~prefix*, names with a hash tag of their own are refused: their keys are
	// prefix+name+":lock", outside the "{prefix" tag.
	t.Run("tag pattern needed", func(t *testing.T) {
		c := tenantUser(t, srv, "tA-braceOnly", tenantA,
			[]string{"resetkeys", "resetchannels", "~{" + tenantA + "*", "&{" + tenantA + "*", "+@all", "-@dangerous"})
		m := c.Mutex("plain")
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Unlock(bg))
		noPermission(t, c.Mutex("{x}").Lock(bg), "a tagged name without ~tenantA:*")
	})
}
