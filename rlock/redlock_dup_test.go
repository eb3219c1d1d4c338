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
