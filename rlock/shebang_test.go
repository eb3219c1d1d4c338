package rlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
	"github.com/relock-go/relock/rlock"
)

// shebangTally counts, per script, the replies a Client's sends of relock's scripts got.
type shebangTally struct {
	mu sync.Mutex
	// refused: the server would not compile the flagged form ("#!lua flags=...": not
	// compiled, so not run); applied: answered without an error; ones: of those, answered 1;
	// other: the other errors (NOSCRIPT, answered by EVAL at once, is not counted).
	refused, applied, ones map[string]int
	other                  []string
}

// trace wraps rc in a hookClient that counts in s what each script send was answered.
func (s *shebangTally) trace(rc rueidis.Client) *hookClient {
	h := &hookClient{Client: rc}
	h.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
		res := call()
		err := res.Error()
		s.mu.Lock()
		defer s.mu.Unlock()
		switch re, _ := rueidis.IsRedisErr(err); {
		case err == nil:
			s.applied[cmd.script]++
			if n, _ := res.AsInt64(); n == 1 {
				s.ones[cmd.script]++
			}
		case lua.IsShebangError(err):
			s.refused[cmd.script]++
		case re != nil && re.IsNoScript():
		default:
			s.other = append(s.other, cmd.script+": "+err.Error())
		}
		return res
	})
	return h
}

// On a server that does not take the scripts' shebang flags (miniredis, Redis before 7), a
// Client's first flagged scripts are refused ("ERR Error compiling script (new function):
// <string> line:1(column:1) near '#'" on miniredis: not compiled, so not run) and each is sent
// again in its plain form: every one sent before the Client learned it from the first
// refusal, as many waiters' leaves at once. These are the replies
// TestFairMutex_Lock_manyWaitersAllAcquire saw on miniredis under load (60 on fair_leave, 4
// on fair_release: a Client's first release, one per Client); load only widens the window.
// Each refused call is applied once in its plain form, no caller sees the refusal, and
// nothing is left in Redis: every leave removes its waiter's place, every release its hold.
func TestFairMutex_shebangRefusalsAreSentAgainPlain(t *testing.T) {
	t.Parallel()
	b := &backend{name: "miniredis", mr: miniredis.RunT(t)}
	b.syncClock(t)
	tally := &shebangTally{refused: map[string]int{}, applied: map[string]int{}, ones: map[string]int{}}
	newClient := func() *rlock.Client {
		c, err := rlock.New(tally.trace(b.rueidis(t)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := newClient()
	name := redistest.Name(t)
	holder := c.FairMutex(name)
	// fair_acquire carries no flags: the Client has not learned anything yet.
	ok, err := holder.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	// Waiters queue, then give up together: their leaves are the Client's first flagged
	// scripts, sent side by side.
	const waiters = 20
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	got := make(chan error, waiters)
	owners := make([]string, waiters)
	for i := range waiters {
		owners[i] = fmt.Sprint("w", i)
		m := c.FairMutex(name)
		wctx := rlock.WithOwner(ctx, owners[i])
		go func() { got <- m.Lock(wctx) }()
	}
	for _, o := range owners {
		awaitFairPlace(t, b, holder, o)
	}
	cancel()
	for range waiters {
		require.ErrorIs(t, await(t, got, 30*time.Second, "the waiters to give up"), context.Canceled)
	}
	// A call outlives its ctx by returnGrace at most (50 ms): a leave not done by then goes on
	// in the background (each refused one costs two round trips more).
	redistest.WaitFor(t, 30*time.Second, "the leaves to be answered", func() bool {
		tally.mu.Lock()
		defer tally.mu.Unlock()
		return tally.applied["fair_leave"]+len(tally.other) >= waiters
	})
	for _, o := range owners {
		requireNoFairPlace(t, b, holder, o, "after its ctx ended")
	}
	tally.mu.Lock()
	require.Empty(t, tally.other, "errors other than the refusals")
	require.GreaterOrEqual(t, tally.refused["fair_leave"], 1, "the first leave is sent with its flags")
	require.Equal(t, waiters, tally.applied["fair_leave"], "each leave applied once")
	require.Equal(t, waiters, tally.ones["fair_leave"], "each leave removed its own place")
	t.Logf("fair_leave: %d refused, %d applied", tally.refused["fair_leave"], tally.applied["fair_leave"])
	tally.mu.Unlock()

	// The Client has learned: its release goes plain at once.
	require.NoError(t, holder.Unlock(bg))
	// A new Client's first release is refused once, then applied.
	m2 := newClient().FairMutex(name)
	ok, err = m2.TryLock(bg, 0, time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, m2.Unlock(bg))
	n, err := m2.HoldCount(bg)
	require.NoError(t, err)
	require.Zero(t, n, "the Client's view: no hold left")
	require.False(t, b.exists(t, m2.Key()), "Redis's: the lock is free")
	require.False(t, b.exists(t, m2.Key()+":queue"), "no place is left")
	require.False(t, b.exists(t, m2.Key()+":alive"), "no life record is left")

	tally.mu.Lock()
	defer tally.mu.Unlock()
	require.Empty(t, tally.other, "errors other than the refusals")
	require.Equal(t, 1, tally.refused["fair_release"], "only the new Client's first release is refused")
	require.Equal(t, 2, tally.applied["fair_release"], "each release applied once")
}
