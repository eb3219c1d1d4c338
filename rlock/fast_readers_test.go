package rlock_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// fastShape is one of the two ways a plain lock's fast form is written (docs/DESIGN.md
// section 5, "Two forms of it"), which every reader must read alike.
type fastShape struct {
	name string // the subtest's name; Inspect's Info.Type of the form
	// write writes owner's fast form of seq at key, with a 30 s lease, and returns its text
	// ("~<owner> <seq>"); more are fields besides token, which only the hash carries.
	write func(t *testing.T, b *backend, key, owner, seq string, more ...string) string
	// fields: the form carries fields besides token (a waiter's mark w, the owner's own
	// count, q: fields). Only the hash does; the cases about them run on it only.
	fields bool
}

var fastShapes = []fastShape{
	{name: "hash", write: fastLock, fields: true},
	{name: "string", write: fastString, fields: false},
}

// extra returns fields kv for a shape that carries fields besides token (the hash), none
// for the string.
func (s fastShape) extra(kv ...string) []string {
	if !s.fields {
		return nil
	}
	return kv
}

// eachFastShape runs fn on each backend, once per shape of the fast form (subtests "hash"
// and "string").
func eachFastShape(t *testing.T, fn func(t *testing.T, b *backend, s fastShape)) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, s := range fastShapes {
			t.Run(s.name, func(t *testing.T) { fn(t, b, s) })
		}
	})
}

// fastLock writes a plain lock's fast form as a hash, as a script makes it of the string
// (lib_fast.lua's fastHash): the hash at key holds token = "~<owner> <seq>" (and the fields
// more), with a 30 s lease.
func fastLock(t *testing.T, b *backend, key, owner, seq string, more ...string) string {
	t.Helper()
	tok := "~" + owner + " " + seq
	_, err := b.do(t, append([]string{"HSET", key, "token", tok}, more...)...)
	require.NoError(t, err)
	_, err = b.do(t, "PEXPIRE", key, "30000")
	require.NoError(t, err)
	return tok
}

// fastString writes a plain lock's fast form as the fast grant's transaction writes it (SET
// key "~<owner> <seq>" NX PX <lease>): a string, with a 30 s lease. A string has no fields:
// more is a test's mistake.
func fastString(t *testing.T, b *backend, key, owner, seq string, more ...string) string {
	t.Helper()
	require.Empty(t, more, "the string form carries no fields besides its text")
	tok := "~" + owner + " " + seq
	_, err := b.do(t, "SET", key, tok, "PX", "30000")
	require.NoError(t, err)
	return tok
}

// spendFast records seq as spent in the fence at key for a minute, as a replay does
// (lib_spent.lua): a fast form of seq is then a ghost.
func spendFast(t *testing.T, b *backend, key, seq string) {
	t.Helper()
	msg, err := b.do(t, "TIME")
	require.NoError(t, err)
	tm, err := msg.AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	now := sec*1000 + usec/1000
	_, err = b.do(t, "SET", key+":fence", fmt.Sprintf("1000/%s/%d", seq, now+60000), "PX", "60000")
	require.NoError(t, err)
}

// TestReaders_fastForm: the Go readers read a Mutex's fast form, in either shape, as its
// owner's one hold with no token known (IsLocked, HoldCount, TTL, Inspect's Kind Mutex,
// Type the shape's ("hash", "string"), holder with Token 0, no Since and the owner's
// ClientID; the FairMutex's readers as on a full form; the RWMutex answers ErrWrongType as
// on a full form), ForceUnlockSeen frees it only in the very form seen (not the owner's next
// fast tenure, not an Info built by hand) and records its text as the forced tenure, and a
// ghost (its sequence number spent in the fence; the hash one with a waiter's mark) is a
// free lock everywhere. The hash form with a waiter's mark is still the Mutex's hold for
// the FairMutex; a user's string stays ErrWrongType. Before, HoldCount said 0 to the fast
// owner, Inspect showed no holder (and ForceUnlockSeen freed whatever fast form it found), a
// ghost read as held, and every string was ErrWrongType.
func TestReaders_fastForm(t *testing.T) {
	eachFastShape(t, func(t *testing.T, b *backend, s fastShape) {
		c := b.client(t)
		name := redistest.Name(t)
		m, other := c.Mutex(name), c.Mutex(name)
		key := m.Key()
		owner := rlock.ModelOwnerID(m, bg)
		clear := func() { _, _ = b.do(t, "DEL", key, key+":fence", key+":forced") }

		// A fast form: held by its owner, one hold, token unknown.
		s.write(t, b, key, owner, "7.3")
		locked, err := m.IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked, "IsLocked of a fast form")
		n, err := m.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 1, n, "HoldCount of the fast form's owner")
		n, err = other.HoldCount(bg)
		require.NoError(t, err)
		require.Equal(t, 0, n, "HoldCount of another owner")
		ttl, err := m.TTL(bg)
		require.NoError(t, err)
		require.True(t, ttl > 20*time.Second && ttl <= 30*time.Second, "TTL of a fast form: %v", ttl)
		locked, err = c.FairMutex(name).IsLocked(bg)
		require.NoError(t, err)
		require.True(t, locked, "FairMutex.IsLocked of a fast form")
		_, err = c.RWMutex(name).IsLocked(bg)
		require.ErrorIs(t, err, rlock.ErrWrongType, "RWMutex.IsLocked of a fast form: as of a full form")

		in, err := c.Inspect(bg, name)
		require.NoError(t, err)
		require.Equal(t, rlock.KindMutex, in.Kind)
		require.Equal(t, s.name, in.Type, "Type: the key's, the shape's")
		require.Zero(t, in.Token, "Token of a fast form: not known to Redis")
		require.True(t, in.TTL > 20*time.Second, "Inspect's TTL of a fast form: %v", in.TTL)
		require.Len(t, in.Holders, 1)
		h := in.Holders[0]
		require.Equal(t, owner, h.Owner)
		require.EqualValues(t, 1, h.Holds)
		require.True(t, h.Since.IsZero(), "Since of a fast form: unknown")
		require.Equal(t, c.ID(), h.ClientID)
		require.True(t, h.TTL > 0)

		// As seen: freed only in the very form shown.
		s.write(t, b, key, owner, "7.4") // the owner's next fast tenure
		_, err = c.ForceUnlockSeen(bg, in)
		require.ErrorIs(t, err, rlock.ErrConflict, "a fast tenure begun since is not the one seen")
		tok := s.write(t, b, key, owner, "7.5")
		in, err = c.Inspect(bg, name)
		require.NoError(t, err)
		hand := rlock.Info{Name: in.Name, Key: in.Key, Kind: in.Kind, Holders: in.Holders} // Token 0, not the form
		_, err = c.ForceUnlockSeen(bg, hand)
		require.ErrorIs(t, err, rlock.ErrConflict, "an Info built by hand does not free a fast form")
		freed, err := c.ForceUnlockSeen(bg, in)
		require.NoError(t, err)
		require.True(t, freed)
		rec, err := b.do(t, "HGET", key+":forced", owner)
		require.NoError(t, err)
		str, _ := rec.ToString()
		require.Equal(t, tok, str, "the forced record names the fast tenure by its text")
		clear()

		// A ghost (the hash one marked by a waiter): free for every reader.
		s.write(t, b, key, owner, "7.3", s.extra("w", "1")...)
		spendFast(t, b, key, "7.3")
		locked, err = m.IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked, "IsLocked of a ghost")
		n, err = m.HoldCount(bg)
		require.NoError(t, err)
		require.Zero(t, n, "HoldCount of a ghost's owner")
		ttl, err = m.TTL(bg)
		require.NoError(t, err)
		require.Zero(t, ttl, "TTL of a ghost")
		locked, err = c.RWMutex(name).IsLocked(bg)
		require.NoError(t, err)
		require.False(t, locked, "RWMutex.IsLocked of a ghost")
		in, err = c.Inspect(bg, name)
		require.NoError(t, err)
		require.Equal(t, rlock.KindNone, in.Kind)
		require.Equal(t, "none", in.Type)
		require.Empty(t, in.Holders)
		require.False(t, in.Contended)
		require.Zero(t, in.TTL)
		freed, err = m.ForceUnlock(bg)
		require.NoError(t, err)
		require.False(t, freed, "ForceUnlock of a ghost frees nothing")
		ex, _ := b.do(t, "EXISTS", key, key+":forced")
		x, _ := ex.AsInt64()
		require.Zero(t, x, "the ghost is deleted, no forced record written")
		clear()

		if s.fields {
			// The hash form of a FairMutex's name, with a waiter's mark: still the Mutex's hold.
			fastLock(t, b, key, owner, "7.3", "w", "1")
			locked, err = c.FairMutex(name).IsLocked(bg)
			require.NoError(t, err)
			require.True(t, locked, "FairMutex.IsLocked of a marked fast form")
			clear()
		}

		if s.name == "string" {
			// A user's string (not a fast form): another type, as before.
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
		}
	})
}

// TestReaders_fullFormCalls: on a full-form lock, IsLocked, HoldCount and TTL send as many
// commands as before the fast form (one, one and two: now HGETALL for TYPE, HMGET for HGET,
// HGETALL and PTTL in one round trip for TYPE then PTTL); only a fast form reads the fence (GET
// and TIME). It passes on the code before the fast form too.
func TestReaders_fullFormCalls(t *testing.T) {
	b := realBackend(t)
	c := b.client(t)
	name := redistest.Name(t)
	m := c.Mutex(name)
	require.NoError(t, m.Lock(bg))
	defer func() { require.NoError(t, m.Unlock(bg)) }()
	counted := []string{"hgetall", "hmget", "hget", "type", "pttl", "get", "time"}
	calls := func(f func()) map[string]int {
		t.Helper()
		_, err := b.do(t, "CONFIG", "RESETSTAT")
		require.NoError(t, err)
		f()
		msg, err := b.do(t, "INFO", "commandstats")
		require.NoError(t, err)
		text, _ := msg.ToString()
		out := map[string]int{}
		for _, line := range strings.Split(text, "\n") {
			for _, cmd := range counted {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
					out[cmd], _ = strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				}
			}
		}
		return out
	}
	total := func(m map[string]int) int {
		n := 0
		for _, v := range m {
			n += v
		}
		return n
	}
	got := calls(func() {
		_, err := m.IsLocked(bg)
		require.NoError(t, err)
	})
	require.Equal(t, 1, total(got), "IsLocked: %v", got)
	got = calls(func() {
		_, err := m.HoldCount(bg)
		require.NoError(t, err)
	})
	require.Equal(t, 1, total(got), "HoldCount: %v", got)
	got = calls(func() {
		_, err := m.TTL(bg)
		require.NoError(t, err)
	})
	require.Equal(t, 2, total(got), "TTL: %v", got)
}

// TestModelHelpers_fastForm: the model test's reads of Redis (redisHashCount for its counts,
// and so redis-ghost, redis-missing, redis-lost; redisGhost for its end-keys check) read a
// fast form, in either shape, as its owner's one hold and a ghost as free, as the Client's
// readers do; the hash form's own count field of the owner rules; a user's string is an
// error. Before, the model read HGET owner: 0 for the fast form's owner, and every string
// was an error (WRONGTYPE).
func TestModelHelpers_fastForm(t *testing.T) {
	eachFastShape(t, func(t *testing.T, b *backend, s fastShape) {
		admin := b.rueidis(t)
		key := "{" + redistest.Name(t) + "}"
		count := func(owner string) int {
			t.Helper()
			n, err := redisHashCount(bg, admin, key, owner)
			require.NoError(t, err)
			return n
		}
		ghost := func() bool {
			t.Helper()
			g, err := redisGhost(bg, admin, key)
			require.NoError(t, err)
			return g
		}
		require.Zero(t, count("h:a"), "no lock")
		require.False(t, ghost())
		s.write(t, b, key, "h:a", "7.3", s.extra("w", "1", "q:u:x", "c.1/0")...)
		require.Equal(t, 1, count("h:a"), "the fast form's owner")
		require.Zero(t, count("h:b"), "another owner")
		require.False(t, ghost())
		if s.fields {
			_, err := b.do(t, "HSET", key, "h:a", "3")
			require.NoError(t, err)
			require.Equal(t, 3, count("h:a"), "the owner's count field rules")
			_, err = b.do(t, "HDEL", key, "h:a")
			require.NoError(t, err)
		}
		spendFast(t, b, key, "7.3")
		require.Zero(t, count("h:a"), "a ghost's owner")
		require.True(t, ghost(), "a ghost")
		s.write(t, b, key, "h:a", "7.4")
		require.Equal(t, 1, count("h:a"), "another number than the spent one")
		require.False(t, ghost())
		if s.name == "string" {
			_, err := b.do(t, "SET", key, "hello")
			require.NoError(t, err)
			_, err = redisGhost(bg, admin, key)
			require.Error(t, err, "a user's string")
		}
	})
}
