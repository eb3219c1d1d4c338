package rlock_test

// review19: the fast grant's string form (issue 23, DESIGN 5 "The fast form") attacked. Each
// test here failed on main at 90ec7b9; see the report on branch review19.

import (
	"testing"

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
