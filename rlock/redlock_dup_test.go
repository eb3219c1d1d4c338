package rlock_test

import (
	"fmt"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Two Clients on one redis-server are refused by a RedLock's first acquire, with ErrInvalid
// and the reason, also when every Client is an ACL user with exactly rlock.ACLRule (no INFO)
// and on miniredis; five distinct servers are accepted, under the rule too.
func TestRedLock_duplicateServerRefused(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no time bound
	ss := redServers(t, 5)
	name := redistest.Name(t)
	const prefix = "dup:"
	acl := func(s *redistest.Server, user string) *rlock.Client { return aclUser(t, s, user, prefix) }
	plain := func(addr string) *rlock.Client { return redClients(t, []string{addr})[0] }

	for _, tc := range []struct {
		what    string
		clients func() []*rlock.Client
		dup     bool
	}{
		{"five servers", func() []*rlock.Client { return redClients(t, addrsOf(ss)) }, false},
		{"five servers, ACL rule", func() []*rlock.Client {
			var cs []*rlock.Client
			for i, s := range ss {
				cs = append(cs, acl(s, fmt.Sprint("locker", i)))
			}
			return cs
		}, false},
		{"two Clients on one server", func() []*rlock.Client {
			return []*rlock.Client{plain(ss[0].Addr()), plain(ss[1].Addr()), plain(ss[0].Addr())}
		}, true},
		{"two Clients on one server, ACL rule", func() []*rlock.Client {
			return []*rlock.Client{acl(ss[0], "locker0"), acl(ss[1], "locker1"), acl(ss[2], "locker2"), acl(ss[3], "locker3"), acl(ss[1], "locker1")}
		}, true},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := rlock.NewRedLock(name, tc.clients())
			err := r.Lock(bg)
			if !tc.dup {
				require.NoError(t, err)
				require.NoError(t, r.Unlock(bg))
				return
			}
			require.ErrorIs(t, err, rlock.ErrInvalid)
			require.ErrorContains(t, err, "same server")
			t.Log(err)
			_, err = r.TryLock(bg, 0, 0)
			require.ErrorIs(t, err, rlock.ErrInvalid, "and every later call")
			require.Equal(t, 0, holdersOn(t, ss, redKey(name)), "nothing taken")
		})
	}

	t.Run("miniredis", func(t *testing.T) {
		var cs []*rlock.Client
		for range 2 {
			_, rc := redistest.Miniredis(t)
			c, err := rlock.New(rc)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			cs = append(cs, c)
		}
		mr, rc := redistest.Miniredis(t)
		c3, err := rlock.New(rc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c3.Close() })
		r := rlock.NewRedLock(name, append(cs, c3))
		require.NoError(t, r.Lock(bg), "three miniredis")
		require.NoError(t, r.Unlock(bg))

		rc2, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true, AlwaysRESP2: true, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(rc2.Close)
		c4, err := rlock.New(rc2)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c4.Close() })
		err = rlock.NewRedLock(name, append(cs, c3, c4)).Lock(bg)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.ErrorContains(t, err, "same server")
	})
}

// A closed Client takes no part in the duplicate-server check (it never grants, so it
// cannot make two grants of one server count twice): the check completes without it and
// is not run again by every later acquire. Two open Clients on one server are still found
// with a closed Client beside them. (Before, the closed Client's probe write failed without
// a Redis reply, the check stayed incomplete, and each acquire wrote and read the probe keys
// on every server again, two round trips more, for as long as the Client stayed closed.)
func TestRedLock_closedClientLeavesDuplicateCheckComplete(t *testing.T) {
	ss := redServers(t, 3)
	name := redistest.Name(t)
	probes := func() int {
		n := 0
		for _, s := range ss {
			msg := s.Do(t, "KEYS", "*redlock-probe*")
			keys, err := msg.AsStrSlice()
			require.NoError(t, err)
			n += len(keys)
		}
		return n
	}
	cs := redClients(t, addrsOf(ss))
	require.NoError(t, cs[2].Close())
	r := rlock.NewRedLock(name, cs)
	require.NoError(t, r.Lock(bg), "a majority of the Clients open")
	require.NoError(t, r.Unlock(bg))
	require.Equal(t, 2, probes(), "the open Clients' probe keys")
	for _, s := range ss {
		s.Do(t, "FLUSHALL")
	}
	for range 3 {
		require.NoError(t, r.Lock(bg))
		require.NoError(t, r.Unlock(bg))
		o := rlock.NewRedLock(name, cs) // another handle over the set
		require.NoError(t, o.Lock(bg))
		require.NoError(t, o.Unlock(bg))
	}
	require.Zero(t, probes(), "the check is complete: no acquire runs it again")

	dup := redClients(t, []string{ss[0].Addr(), ss[1].Addr(), ss[0].Addr()})
	require.NoError(t, dup[1].Close())
	err := rlock.NewRedLock(name, dup).Lock(bg)
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.ErrorContains(t, err, "same server")
}
