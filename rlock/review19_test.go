package rlock_test

// review19: the fast grant's string form (issue 23, DESIGN 5 "The fast form") attacked. Each
// test here failed on main at 90ec7b9; see the report on branch review19.

import (
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestReview19_fastGrantOnAnotherKindsStringLeavesNoFenceWithoutExpiry: a fast grant on a
// name whose key holds a string of another kind (a Semaphore's count, a latch's, a user's
// value) is refused by SET NX, and its INCR makes a missing fence 1, without an expiry.
// execFast then sends acquire.lua with ARGV[7] 's', but acquire.lua answers WRONGTYPE at its
// HMGET (fastHash: not a fast form) before the refusal path's PEXPIRE NX: the fence is left
// for ever. (The fence goes missing regularly: a fast grant's INCR keeps the counter's
// one-second expiry, while fastUntil counts a second from the grant.)
func TestReview19_fastGrantOnAnotherKindsStringLeavesNoFenceWithoutExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		rlock.SetFastAlways(c, true)
		name := redistest.Name(t)
		m := c.Mutex(name)
		fence := m.Key() + ":fence"
		// A Semaphore of the same name: its count is a string at the lock's key.
		s := c.Semaphore(name)
		ok, err := s.TrySetPermits(bg, 3)
		require.NoError(t, err)
		require.True(t, ok)
		require.False(t, b.exists(t, fence))
		_, err = m.TryLock(bg, 0, 0)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		require.NotEqualValues(t, -1, r18pttl(t, b, fence), "the refused Lock left the fence %q without an expiry",
			func() string { v, _ := b.do(t, "GET", fence); s, _ := v.ToString(); return s }())
	})
}

// TestReview19_fastHashUnderAnACLWithoutPexpireLeavesNoTempKey: ACLRule's doc, "a call
// refused under a rule that lacks commands leaves no key without an expiry". Under a rule
// without PEXPIRE (MULTI kept: the fast grant needs no PEXPIRE, its SET sets the expiry), a
// Mutex held in the fast form is made a hash by the next script that meets it (lib_fast's
// fastHash: HSET <lock>:f, PEXPIRE <lock>:f, RENAME): here another owner's Lock and the
// holder's re-entry. The PEXPIRE is refused after the HSET, and the script fails there:
// <lock>:f is left for ever, a hash with the holder's token field.
func TestReview19_fastHashUnderAnACLWithoutPexpireLeavesNoTempKey(t *testing.T) {
	b := realBackend(t)
	const prefix = "r19acl:"
	var rule []string
	for _, r := range aclRule(t, prefix) {
		if r != "+pexpire" {
			rule = append(rule, r)
		}
	}
	b.srv.Do(t, append([]string{"ACL", "SETUSER", "r19", "reset", "on", ">pw"}, aclRule(t, prefix)...)...)
	dial := func() *rlock.Client {
		c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}, Username: "r19", Password: "pw"},
			rlock.WithKeyPrefix(prefix))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c, other := dial(), dial()
	name := redistest.Name(t)
	m, o := c.Mutex(name), other.Mutex(name)
	r18warm(t, m)
	b.srv.Do(t, append([]string{"ACL", "SETUSER", "r19", "reset", "on", ">pw"}, rule...)...)
	ok, err := m.TryLock(bg, 0, 0) // the fast grant: MULTI; SET NX PX; INCR; EXEC
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, strings.HasPrefix(keyValue(t, b.srv, m.Key()), "string ~"), "held in the fast form: %s", keyValue(t, b.srv, m.Key()))
	_, err = o.TryLock(bg, 0, 0)
	t.Logf("another owner's TryLock: %v", err)
	tmp := m.Key() + ":f"
	require.NotEqualValues(t, -1, r18pttl(t, b, tmp), "%s left without an expiry (%s)", tmp, keyValue(t, b.srv, tmp))
}
