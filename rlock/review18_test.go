package rlock_test

// review18: the fast grant (issue 23, DESIGN 5 "The fast form") attacked. Each test here
// failed on main at c5fb4e8; see the report on branch review18.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// r18pttl is key's PTTL (-2: absent, -1: no expiry).
func r18pttl(t *testing.T, b *backend, key string) int64 {
	t.Helper()
	msg, err := b.do(t, "PTTL", key)
	require.NoError(t, err)
	n, err := msg.AsInt64()
	require.NoError(t, err)
	return n
}

// r18warm makes m's next fresh acquire a fast grant: its handle locked the name uncontended
// a moment ago (fast.go's fastUntil).
func r18warm(t *testing.T, m *rlock.Mutex) {
	t.Helper()
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Unlock(bg))
}

// TestReview18_fastGrantLeavesAStringAtTheLockUntouched: README's bad-input row ("a key of
// another type at the lock's name ... ErrWrongType; the user's data untouched"). A handle
// that locked the name a moment ago sends its next Lock as the transaction, whose HSETNX
// fails with WRONGTYPE inside EXEC but whose PEXPIRE NX still runs: the user's string gets
// the lock's lease as its expiry and vanishes with it.
func TestReview18_fastGrantLeavesAStringAtTheLockUntouched(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client(t)
		m := c.Mutex(redistest.Name(t))
		r18warm(t, m)
		_, err := b.do(t, "SET", m.Key(), "the user's data")
		require.NoError(t, err)
		_, err = m.TryLock(bg, 0, 0)
		require.ErrorIs(t, err, rlock.ErrWrongType)
		require.EqualValues(t, -1, r18pttl(t, b, m.Key()),
			"the user's string at the lock's key was given an expiry by the refused Lock")
	})
}

// TestReview18_fastGrantOnABadFenceLeavesNoHold: a fence of another type (or a string that is
// not a fence value) fails the acquire with ErrWrongType, and, as acquire.lua writes the
// fence before it touches the lock, leaves the lock free. The fast grant's HSETNX and PEXPIRE
// apply (only INCR fails in EXEC), and the resend's conversion fails at the fence: the lock
// stays held in the fast form for the whole lease by an owner whose Lock failed, and every
// other owner is refused.
func TestReview18_fastGrantOnABadFenceLeavesNoHold(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, bad := range [][]string{{"SET", "not a token"}, {"RPUSH", "a list"}} {
			c, other := b.client(t), b.client(t)
			name := redistest.Name(t) + bad[0]
			m, o := c.Mutex(name), other.Mutex(name)
			r18warm(t, m)
			fence := m.Key() + ":fence"
			_, err := b.do(t, "DEL", fence)
			require.NoError(t, err)
			_, err = b.do(t, bad[0], fence, bad[1])
			require.NoError(t, err)
			_, err = m.TryLock(bg, 0, 0)
			require.ErrorIs(t, err, rlock.ErrWrongType, bad[0])
			require.False(t, b.exists(t, m.Key()), "%s: the failed Lock left the lock held: token %q, pttl %d",
				bad[0], tokenField(t, b, m.Key()), r18pttl(t, b, m.Key()))
			_, err = b.do(t, "DEL", fence)
			require.NoError(t, err)
			ok, err := o.TryLock(bg, 0, 0)
			require.NoError(t, err)
			require.True(t, ok, "%s: another owner is refused by the failed Lock's hold", bad[0])
			require.NoError(t, o.Unlock(bg))
		}
	})
}

// TestReview18_refusedFastGrantLeavesNoFenceWithoutExpiry: the fence counter lives a second
// after it is seeded, and INCR keeps that expiry, so a handle whose last grant was an INCR
// (a fast grant half a second after the seed) is still eligible once the fence has expired.
// Its next Lock, refused because another owner holds the lock, goes as the transaction: the
// INCR makes the fence 1, without an expiry, and the refusal path (acquire.lua's, which does
// not touch the fence) leaves it so. lib_fence: "so that no fence is left without an expiry".
func TestReview18_refusedFastGrantLeavesNoFenceWithoutExpiry(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no bound below half a second
	eachBackend(t, func(t *testing.T, b *backend) {
		c, other := b.client(t), b.client(t)
		name := redistest.Name(t)
		m, o := c.Mutex(name), other.Mutex(name)
		fence := m.Key() + ":fence"
		r18warm(t, m) // a script: seeds the fence, which lives 1 s
		time.Sleep(400 * time.Millisecond)
		r18warm(t, m) // a fast grant (INCR): fast for 1 s more
		require.NoError(t, o.Lock(bg))
		deadline := time.Now().Add(2 * time.Second)
		for r18pttl(t, b, fence) != -2 {
			require.True(t, time.Now().Before(deadline), "the fence did not expire")
			time.Sleep(5 * time.Millisecond)
		}
		ok, err := m.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.NotEqualValues(t, -1, r18pttl(t, b, fence), "the refused Lock left the fence %q without an expiry",
			func() string { v, _ := b.do(t, "GET", fence); s, _ := v.ToString(); return s }())
		require.NoError(t, o.Unlock(bg))
	})
}

// TestReview18_fastGrantOnAnotherPrimitivesHash: "One name is one primitive ... a Mutex takes
// a PermitSemaphore's hash for a lock held by another" (DESIGN 3 then); a read-write lock's
// hash held by readers was refused too (acquire.lua: no token there, a hold of another owner).
// force_release.lua refuses both ('mode', 'permits': WRONGTYPE), and since session 27 so do
// the acquires (ErrWrongType, checked here). The fast grant's HSETNX sees
// no token field in either and takes them: the Mutex is granted beside the readers (or the
// semaphore), its PEXPIRE NX gives the semaphore an expiry, and its Unlock (fast_release's
// DEL) deletes the semaphore's or the read-write lock's state.
func TestReview18_fastGrantOnAnotherPrimitivesHash(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		t.Run("permit semaphore", func(t *testing.T) {
			c := b.client(t)
			name := redistest.Name(t)
			m, ps := c.Mutex(name), c.PermitSemaphore(name)
			require.Equal(t, m.Key(), ps.Key())
			r18warm(t, m)
			ok, err := ps.TrySetPermits(bg, 3)
			require.NoError(t, err)
			require.True(t, ok)
			ok, err = m.TryLock(bg, 0, 0)
			if ok {
				pttl := r18pttl(t, b, ps.Key())
				_ = m.Unlock(bg)
				n, _ := ps.Permits(bg)
				t.Fatalf("the Mutex was granted on the permit semaphore's hash (its pttl then %d; after the Mutex's Unlock, Permits %d, key exists %v)",
					pttl, n, b.exists(t, ps.Key()))
			}
			// Refused as another kind's hash since session 27 (acquire.lua's HMGET reads
			// 'permits'); before, taken for a lock held by another: (false, nil).
			require.ErrorIs(t, err, rlock.ErrWrongType)
		})
		t.Run("read-write lock held by a reader", func(t *testing.T) {
			c, other := b.client(t), b.client(t)
			name := redistest.Name(t)
			m, rw := c.Mutex(name), other.RWMutex(name)
			r18warm(t, m)
			require.NoError(t, rw.RLock(bg))
			ok, err := m.TryLock(bg, 0, 0)
			if ok {
				_ = m.Unlock(bg)
				t.Fatalf("the Mutex was granted while a reader holds the name (after its Unlock, the read-write lock's key exists %v)",
					b.exists(t, m.Key()))
			}
			require.ErrorIs(t, err, rlock.ErrWrongType) // since session 27, as above
			require.NoError(t, rw.RUnlock(bg))
		})
	})
}

// TestReview18_forcedFastTenureReleaseReplayTellsTheLoss: a tenure forced away is told lost
// at its Unlock, even when the Unlock's first reply is lost and a replay asks the forced
// record (release.lua's ended: -1). force_release.lua records a fast tenure's token as its
// token field, '~<owner> <seq>', but the Client's replay names the tenure's number (the
// INCR's answer): the record never matches, the replay answers -2, and the Client takes it
// for its first send having freed the lock: Unlock returns nil for a hold it had lost.
// The full-form tenure (the handle's first Lock, a script) is the control: told lost.
func TestReview18_forcedFastTenureReleaseReplayTellsTheLoss(t *testing.T) {
	t.Parallel() // its own server(s), Clients and names; no time bound
	eachBackend(t, func(t *testing.T, b *backend) {
		var drop atomic.Bool
		hc := &hookClient{Client: b.rueidis(t)}
		hc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			res := call()
			if (cmd.script == "fast_release" || cmd.script == "release") && drop.CompareAndSwap(true, false) {
				return rueidis.NewErrorResult(context.DeadlineExceeded) // applied, reply lost
			}
			return res
		})
		c, err := rlock.New(hc)
		require.NoError(t, err)
		defer c.Close()
		admin := b.client(t)
		name := redistest.Name(t)
		m := c.Mutex(name)
		for _, fast := range []bool{false, true} {
			require.NoError(t, m.Lock(bg))
			require.Equal(t, fast, strings.HasPrefix(tokenField(t, b, m.Key()), "~"), "fast %v", fast)
			freed, err := admin.Mutex(name).ForceUnlock(bg)
			require.NoError(t, err)
			require.True(t, freed)
			drop.Store(true)
			err = m.Unlock(bg)
			require.False(t, drop.Load(), "no reply was dropped")
			require.True(t, errors.Is(err, rlock.ErrLockLost) || errors.Is(err, rlock.ErrNotHeld),
				"fast %v: Unlock of a tenure forced away answered %v", fast, err)
		}
	})
}

// TestReview18_renewalOfTheOwnersOwnGhostTellsTheLoss: a fast form whose number the fence
// records as spent is free (a ghost: DESIGN 5), for the acquirers and the readers. renew.lua
// does not read the fence: after the owner's tenure is gone from Redis (lease run out, or a
// force) and its own lingering transaction lands (a ghost of the owner's, written here by
// hand as it would land), the owner's renewals keep confirming a lock that IsLocked and
// HoldCount call free, and the loss is never told (Err nil; Unlock frees the ghost and
// answers nil).
func TestReview18_renewalOfTheOwnersOwnGhostTellsTheLoss(t *testing.T) {
	t.Parallel() // its own servers; it waits out leases
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, ghost := range []bool{false, true} { // false: the control, the tenure lost alone
			c := b.client(t, rlock.WithWatchdogTimeout(300*time.Millisecond))
			m := c.Mutex(redistest.Name(t) + strconv.FormatBool(ghost))
			require.NoError(t, m.Lock(bg))
			info, err := c.Inspect(bg, m.Name())
			require.NoError(t, err)
			require.Len(t, info.Holders, 1)
			owner := info.Holders[0].Owner
			msg, err := b.do(t, "TIME")
			require.NoError(t, err)
			tm, _ := msg.AsStrSlice()
			sec, _ := strconv.ParseInt(tm[0], 10, 64)
			until := strconv.FormatInt(sec*1000+60000, 10)
			// The tenure lost, and the owner's transaction of number ab.1 (spent by its replay)
			// landing in its place: one script, so that no renewal runs in between.
			_, err = b.do(t, "EVAL", `redis.call('del', KEYS[1])
if ARGV[3] == 'true' then
  redis.call('hset', KEYS[1], 'token', ARGV[1])
  redis.call('pexpire', KEYS[1], 30000)
  redis.call('set', KEYS[2], '1800000000000000/ab.1/' .. ARGV[2], 'px', 60000)
end
return 1`, "2", m.Key(), m.Key()+":fence", "~"+owner+" ab.1", until, strconv.FormatBool(ghost))
			require.NoError(t, err)
			locked, err := m.IsLocked(bg)
			require.NoError(t, err)
			require.False(t, locked, "a ghost reads as free")
			n, err := m.HoldCount(bg)
			require.NoError(t, err)
			require.Zero(t, n)
			time.Sleep(400 * time.Millisecond) // past the tenure's lease: renewals ran
			require.Error(t, m.Err(bg), "ghost %v: the owner's tenure is gone from Redis; its renewals renewed its own ghost", ghost)
			require.Error(t, m.Unlock(bg), "ghost %v: Unlock of a lost tenure", ghost)
		}
	})
}

// TestReview18_fastGrantUnderAnACLWithoutMultiAndPexpire: a rule that loses MULTI and PEXPIRE
// (an operator tightening the user's rights while a handle is warm; the old ACLRule, which had
// no MULTI, with PEXPIRE taken away). MULTI refused, the transaction's commands run one by one:
// HSETNX writes the fast form, PEXPIRE is refused, and the resend's conversion (acquire.lua's
// convert) writes the full form and then fails at its own PEXPIRE: the lock is left held, by
// an owner whose Lock failed, without an expiry (ACLRule's doc: "a call refused under a rule
// that lacks commands leaves no key without an expiry").
func TestReview18_fastGrantUnderAnACLWithoutMultiAndPexpire(t *testing.T) {
	b := realBackend(t)
	const prefix = "r18acl:"
	var rule []string
	for _, r := range aclRule(t, prefix) {
		if r != "+multi" && r != "+pexpire" {
			rule = append(rule, r)
		}
	}
	full := append([]string{"ACL", "SETUSER", "r18", "reset", "on", ">pw"}, aclRule(t, prefix)...)
	b.srv.Do(t, full...)
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}, Username: "r18", Password: "pw"},
		rlock.WithKeyPrefix(prefix))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex(redistest.Name(t))
	r18warm(t, m)
	b.srv.Do(t, append([]string{"ACL", "SETUSER", "r18", "reset", "on", ">pw"}, rule...)...)
	_, err = m.TryLock(bg, 0, 0)
	require.ErrorIs(t, err, rlock.ErrNoPermission)
	for _, k := range []string{m.Key(), m.Key() + ":fence"} {
		require.NotEqualValues(t, -1, r18pttl(t, b, k), "%s left without an expiry (%s)", k, keyValue(t, b.srv, k))
	}
}
