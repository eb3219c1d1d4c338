package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// fastString writes a plain lock's fast form as the fast grant's transaction writes it (SET
// key "~<owner> <seq>" NX PX <lease>): a string, with a 30 s lease.
func fastString(t *testing.T, b *backend, key, owner, seq string) string {
	t.Helper()
	tok := "~" + owner + " " + seq
	_, err := b.do(t, "SET", key, tok, "PX", "30000")
	require.NoError(t, err)
	return tok
}

// TestReaders_fastString: the Go readers read a fast form written as a string as its hash
// form {token: value}: its owner's one hold, token unknown (IsLocked, HoldCount, TTL, the
// FairMutex's readers; Inspect's Kind Mutex, Type "string", holder with Token 0;
// ForceUnlockSeen frees it in the very form seen); the RWMutex answers ErrWrongType as on the
// hash form; a string ghost is a free lock everywhere; a user's string stays ErrWrongType.
// Before, every string was ErrWrongType.
func TestReaders_fastString(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		name := redistest.Name(t)
		m, other := c.Mutex(name), c.Mutex(name)
		key := m.Key()
		owner := rlock.ModelOwnerID(m, bg)
		clear := func() { _, _ = b.do(t, "DEL", key, key+":fence", key+":forced") }

		fastString(t, b, key, owner, "c1.7")
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked, "IsLocked of a string fast form")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "HoldCount of the string fast form's owner")
		n, err = other.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 0, n, "HoldCount of another owner")
		ttl, err := m.TTL(bg)
		require.NoError(t, err)
		require.True(t, ttl > 20*time.Second && ttl <= 30*time.Second, "TTL of a string fast form: %v", ttl)
		locked, err = c.FairMutex(name).IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked, "FairMutex.IsLocked of a string fast form")
		_, err = c.RWMutex(name).IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType, "RWMutex.IsLocked of a string fast form: as of the hash form")

		in, err := c.Inspect(bg, name)
		require.NoError(t, err)
		require.Equal(t, rlock.KindMutex, in.Kind)
		require.Equal(t, "string", in.Type)
		require.Zero(t, in.Token)
		require.Len(t, in.Holders, 1)
		require.Equal(t, owner, in.Holders[0].Owner)
		require.EqualValues(t, 1, in.Holders[0].Holds)
		require.True(t, in.Holders[0].Since.IsZero())
		require.True(t, in.TTL > 20*time.Second)

		// As seen: the owner's next fast tenure is not the one seen; the one seen is freed.
		fastString(t, b, key, owner, "c1.8")
		_, err = c.ForceUnlockSeen(bg, in)
		require.ErrorIs(t, err, rlock.ErrConflict)
		tok := fastString(t, b, key, owner, "c1.9")
		in, err = c.Inspect(bg, name)
		require.NoError(t, err)
		freed, err := c.ForceUnlockSeen(bg, in)
		require.NoError(t, err)
		require.True(t, freed)
		rec, err := b.do(t, "HGET", key+":forced", owner)
		require.NoError(t, err)
		s, _ := rec.ToString()
		require.Equal(t, tok, s, "the forced record names the string fast tenure by its text")
		clear()

		// A string ghost: free for every reader.
		fastString(t, b, key, owner, "c1.7")
		spendFast(t, b, key, "c1.7")
		locked, err = m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked, "IsLocked of a string ghost")
		n, err = m.HoldCount(bg)
		require.NoError(t, err)
		require.Zero(t, n, "HoldCount of a string ghost's owner")
		ttl, err = m.TTL(bg)
		require.NoError(t, err)
		require.Zero(t, ttl, "TTL of a string ghost")
		locked, err = c.RWMutex(name).IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked, "RWMutex.IsLocked of a string ghost")
		in, err = c.Inspect(bg, name)
		require.NoError(t, err)
		require.Equal(t, rlock.KindNone, in.Kind)
		require.Equal(t, "none", in.Type)
		require.Empty(t, in.Holders)
		freed, err = m.ForceUnlock(bg)
		require.NoError(t, err)
		require.False(t, freed, "ForceUnlock of a string ghost frees nothing")
		ex, _ := b.do(t, "EXISTS", key, key+":forced")
		x, _ := ex.AsInt64()
		require.Zero(t, x, "the string ghost is deleted, no forced record written")
		clear()

		// A user's string: another type, as before.
		_, err = b.do(t, "SET", key, "hello")
		require.NoError(t, err)
		_, err = m.IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		require.ErrorContains(t, err, "a string")
		_, err = m.TTL(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		_, err = m.HoldCount(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		_, err = c.Inspect(bg, name)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		clear()
	})
}

// TestModelHelpers_fastString: the model test's reads of Redis (redisHashCount, redisGhost)
// read a fast form written as a string as its hash form, as the Client's readers do: its
// owner's one hold, a string ghost free; a user's string is an error. Before, every string
// was an error (WRONGTYPE).
func TestModelHelpers_fastString(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		admin := b.rueidis(t)
		key := "{" + redistest.Name(t) + "}"
		fastString(t, b, key, "h:a", "c1.7")
		n, err := redisHashCount(bg, admin, key, "h:a")
		require.NoError(t, err)
		require.Equal(t, 1, n, "the string fast form's owner")
		n, err = redisHashCount(bg, admin, key, "h:b")
		require.NoError(t, err)
		require.Zero(t, n, "another owner")
		g, err := redisGhost(bg, admin, key)
		require.NoError(t, err)
		require.False(t, g)
		spendFast(t, b, key, "c1.7")
		n, err = redisHashCount(bg, admin, key, "h:a")
		require.NoError(t, err)
		require.Zero(t, n, "a string ghost's owner")
		g, err = redisGhost(bg, admin, key)
		require.NoError(t, err)
		require.True(t, g, "a string ghost")
		_, err = b.do(t, "SET", key, "hello")
		require.NoError(t, err)
		_, err = redisGhost(bg, admin, key)
		require.Error(t, err, "a user's string")
	})
}
