package rlock_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A RedLock reports its calls and its tenure to the Observer of the first of its Clients
// that has one (one Observer on every Client hears each call once); its instances' holds
// are not reported on their own.
func TestObserver_redLock(t *testing.T) {
	for _, backend := range []string{"miniredis", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var addrs []string
			if backend == "redis" {
				addrs = addrsOf(redServers(t, 3))
			} else {
				for range 3 {
					addrs = append(addrs, miniredis.RunT(t).Addr())
				}
			}
			r := &recorder{}
			cs := redClients(t, addrs, rlock.WithObserver(r.observer()))
			name := redistest.Name(t)
			rl := rlock.NewRedLock(name, cs)
			require.NoError(t, rl.Lock(bg))
			tok, err := rl.Token(bg)
			require.NoError(t, err)
			require.NoError(t, rl.Lock(bg))
			other := rlock.NewRedLock(name, cs)
			ok, err := other.TryLock(bg, 0, time.Second)
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, rl.Unlock(bg))
			require.NoError(t, rl.Unlock(bg))
			require.ErrorIs(t, rl.Unlock(bg), rlock.ErrNotHeld)
			ev := r.take()
			var calls []string
			for _, e := range ev {
				if s := short(e); s != "" {
					calls = append(calls, s)
				}
			}
			require.Equal(t, []string{
				"AS red_lock", "AD red_lock acquired a=0 tok",
				"AS red_lock", "AD red_lock acquired a=0 reentered tok",
				"AS red_lock", "AD red_lock busy a=0",
				"RS red_lock", "RD red_lock", "RS red_lock", "HE red_lock unlock", "RD red_lock freed", "RS red_lock", "RD red_lock err",
			}, calls)
			require.Equal(t, rlock.AcquireStartInfo{Kind: rlock.KindRedLock, Name: name, Owner: ev[0].(rlock.AcquireStartInfo).Owner, Wait: -1}, ev[0])
			require.Equal(t, tok, ev[1].(rlock.AcquireDoneInfo).Token)
		})
	}
}

// A RedLock's tenures are reported as a Mutex's: HoldEnd once per tenure (not per hold),
// with the tenure's token, owner and cause: unlock (before the last Unlock's ReleaseDone),
// lease_expired, lost (the key deleted on a majority), closed (a majority of the instances'
// Clients closed, or the Close of the Client whose Observer hears the RedLock, before that
// Close returns, even though the tenure goes on on the other two).
func TestObserver_redLockTenures(t *testing.T) {
	for _, backend := range []string{"miniredis", "redis"} {
		t.Run(backend, func(t *testing.T) {
			// Servers of its own; the test itself stays serial, beside no other test: its exact
			// event lists want every instance's grant at the first attempt.
			t.Parallel()
			var addrs []string
			var del func(i int, key string)
			if backend == "redis" {
				ss := redServers(t, 3)
				addrs = addrsOf(ss)
				del = func(i int, key string) { ss[i].Do(t, "DEL", key) }
			} else {
				var ms []*miniredis.Miniredis
				for range 3 {
					m := miniredis.RunT(t)
					ms = append(ms, m)
					addrs = append(addrs, m.Addr())
				}
				del = func(i int, key string) { ms[i].Del(key) }
			}
			const lease = time.Second
			r := &recorder{}
			// byID returns Clients of addrs in the order of their ids (a RedLock's order),
			// and the addresses in that order.
			byID := func() ([]*rlock.Client, []string) {
				cs := redClients(t, addrs, rlock.WithObserver(r.observer()), rlock.WithWatchdogTimeout(lease),
					rlock.WithCleanupTimeout(time.Second))
				idx := []int{0, 1, 2}
				slices.SortFunc(idx, func(a, b int) int { return strings.Compare(cs[a].ID(), cs[b].ID()) })
				var sc []*rlock.Client
				var sa []string
				for _, i := range idx {
					sc, sa = append(sc, cs[i]), append(sa, addrs[i])
				}
				return sc, sa
			}
			cs, order := byID()
			indexOf := func(a string) int { return slices.Index(addrs, a) }
			name := redistest.Name(t)
			rl := rlock.NewRedLock(name, cs)
			holdEnd := func(ev []any) rlock.HoldEndInfo {
				t.Helper()
				for _, e := range ev {
					if he, ok := e.(rlock.HoldEndInfo); ok {
						return he
					}
				}
				t.Fatal("no HoldEnd")
				return rlock.HoldEndInfo{}
			}

			// unlock: one HoldEnd for two holds, before the last ReleaseDone.
			require.NoError(t, rl.Lock(bg))
			tok, err := rl.Token(bg)
			require.NoError(t, err)
			require.NoError(t, rl.Lock(bg))
			require.NoError(t, rl.Unlock(bg))
			require.NoError(t, rl.Unlock(bg))
			ev := r.take()
			require.Equal(t, []string{
				"AS red_lock", "AD red_lock acquired a=0 tok",
				"AS red_lock", "AD red_lock acquired a=0 reentered tok",
				"RS red_lock", "RD red_lock", "RS red_lock", "HE red_lock unlock", "RD red_lock freed",
			}, shorts(ev))
			owner := ev[0].(rlock.AcquireStartInfo).Owner
			require.Equal(t, tok, ev[1].(rlock.AcquireDoneInfo).Token, "the grant's token")
			require.Equal(t, tok, ev[3].(rlock.AcquireDoneInfo).Token, "the re-entry's token: the tenure's")
			he := holdEnd(ev)
			require.Equal(t, rlock.HoldEndInfo{Kind: rlock.KindRedLock, Name: name, Owner: owner, Token: tok,
				Held: he.Held, Cause: rlock.EndUnlocked, Err: rlock.ErrNotHeld}, he)
			require.Greater(t, he.Held, time.Duration(0))
			require.Less(t, he.Held, time.Minute)

			// lease_expired: told once, by the lease's end; the late Unlock tells nothing more.
			require.NoError(t, rl.LockLease(bg, 300*time.Millisecond))
			tok, err = rl.Token(bg)
			require.NoError(t, err)
			r.waitEvent(t, "HoldEnd lease_expired", func(e any) bool { _, ok := e.(rlock.HoldEndInfo); return ok })
			require.ErrorIs(t, rl.Unlock(bg), rlock.ErrLeaseExpired)
			ev = r.take()
			require.Equal(t, []string{"AS red_lock", "AD red_lock acquired a=0 tok", "HE red_lock lease_expired",
				"RS red_lock", "RD red_lock err"}, shorts(ev))
			he = holdEnd(ev)
			require.Equal(t, tok, he.Token)
			require.ErrorIs(t, he.Err, rlock.ErrLeaseExpired)

			// lost: the key deleted on a majority; the watchdog's renewals find it gone.
			require.NoError(t, rl.Lock(bg))
			settled(t, rl) // Lock returns at a majority: a third grant landing after the deletes would keep one
			tok, err = rl.Token(bg)
			require.NoError(t, err)
			del(indexOf(order[1]), redKey(name))
			del(indexOf(order[2]), redKey(name))
			r.waitEvent(t, "HoldEnd lost", func(e any) bool { _, ok := e.(rlock.HoldEndInfo); return ok })
			<-rl.Done(bg)
			require.ErrorIs(t, rl.Err(bg), rlock.ErrLockLost)
			require.ErrorIs(t, rl.Unlock(bg), rlock.ErrNotHeld)
			ev = r.take()
			require.Equal(t, []string{"AS red_lock", "AD red_lock acquired a=0 tok", "HE red_lock lost",
				"RS red_lock", "RD red_lock err"}, shorts(ev))
			he = holdEnd(ev)
			require.Equal(t, tok, he.Token)
			require.Equal(t, owner, he.Owner)
			require.ErrorIs(t, he.Err, rlock.ErrLockLost)
			// The instance that still held it gave it back at Unlock.
			require.Eventually(t, func() bool {
				ok, err := rl.IsLocked(bg)
				return err == nil && !ok
			}, 10*time.Second, 10*time.Millisecond)

			// closed by a majority of the instances' Clients (not the observing one): the
			// second Close ends the tenure and tells it before it returns.
			require.NoError(t, rl.Lock(bg))
			settled(t, rl) // Lock returns at a majority: the third grant may join the hold later
			r.take()
			require.NoError(t, cs[1].Close())
			require.Empty(t, shorts(r.all()), "a minority closed: the tenure goes on")
			require.NoError(t, cs[2].Close())
			ev = r.take()
			require.Equal(t, []string{"HE red_lock closed"}, shorts(ev))
			require.ErrorIs(t, holdEnd(ev).Err, rlock.ErrClosed)
			require.NoError(t, cs[0].Close())

			// closed: the Close of the observing Client (the first by id) ends the report,
			// before it returns, though the other two still hold the lock; nothing follows.
			cs, _ = byID()
			rl = rlock.NewRedLock(name+"-2", cs) // the first is held until its leases end (miniredis: never)
			require.NoError(t, rl.Lock(bg))
			settled(t, rl) // held on all three before one closes
			tok, err = rl.Token(bg)
			require.NoError(t, err)
			r.take()
			require.NoError(t, cs[0].Close())
			ev = r.take()
			require.Equal(t, []string{"HE red_lock closed"}, shorts(ev))
			require.Equal(t, tok, holdEnd(ev).Token)
			require.NoError(t, rl.Err(bg), "held on the other two")
			require.NoError(t, rl.Unlock(bg))
			require.Empty(t, shorts(r.take()), "nothing is told after the observing Client closed")
		})
	}
}
