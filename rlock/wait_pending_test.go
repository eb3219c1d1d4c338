package rlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// splitSubClient sends commands through Client and gives the Subscriber (Dedicate) its
// connections from sub: a test can cut the subscription's connection alone.
type splitSubClient struct {
	rueidis.Client
	sub rueidis.Client
}

func (s splitSubClient) Dedicate() (rueidis.DedicatedClient, func()) { return s.sub.Dedicate() }

// A waiter whose channel is not live when it has watched it (its Client's subscription to
// the channel is still to be confirmed) and whose holder released between its first
// attempt and the Watch: the lock is free, and no message of the release will reach the
// waiter. It must take the lock promptly, not sleep until the holder's old lease end (30 s
// here) or its bound: either by an attempt right after the Watch, or by the confirmation's
// wake-up, or, when no confirmation is coming soon, by an attempt made anyway.
//
//   - black-holed: the Subscriber's connection (its own, through a proxy) swallows every
//     byte: no confirmation comes while it lasts (the dial hangs up to rueidis's bound, then
//     fails, and again), while commands (direct) are answered;
//   - refused: the waiter's user may not SUBSCRIBE (an ACL rule without it): each SUBSCRIBE
//     is answered NOPERM;
//   - reset: the subscription connection, live for another lock, is reset (CLIENT KILL)
//     with the release: it reconnects.
func TestWait_releaseBeforeWatchOnPendingChannel(t *testing.T) {
	t.Parallel() // servers, users, Clients and names of its own
	b := realBackend(t)

	run := func(t *testing.T, rc rueidis.Client, release func(hm *rlock.Mutex), prepare func(c *rlock.Client)) {
		hc := b.client(t) // watchdog mode: a 30 s lease
		name := redistest.Name(t)
		hm := hc.Mutex(name)
		require.NoError(t, hm.Lock(bg))
		whc := &hookClient{Client: rc}
		var first atomic.Bool
		var released atomic.Int64 // unix nanos of the release
		whc.set(func(_ context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult {
			res := call()
			if cmd.script == "acquire" && first.CompareAndSwap(false, true) {
				// Between the waiter's first attempt (refused) and its Watch.
				release(hm)
				released.Store(time.Now().UnixNano())
			}
			return res
		})
		c, err := rlock.New(whc)
		require.NoError(t, err)
		defer c.Close()
		if prepare != nil {
			prepare(c)
		}
		ctx, cancel := context.WithTimeout(bg, 8*time.Second)
		defer cancel()
		m := c.Mutex(name)
		err = m.Lock(ctx)
		took := time.Since(time.Unix(0, released.Load()))
		require.NoError(t, err, "the waiter's Lock on a lock free since %v", took)
		t.Logf("taken %v after the release", took)
		require.Less(t, took, 3*time.Second, "the waiter slept past the release")
		require.NoError(t, m.Unlock(bg))
	}

	t.Run("black-holed", func(t *testing.T) {
		p := proxyTo(t, b.srv)
		sub := b.srv.Client(t, func(o *rueidis.ClientOption) {
			o.InitAddress = []string{p.Addr()}
			o.DisableCache = true
		})
		defer p.SetBlackhole(false)
		run(t, splitSubClient{Client: b.rueidis(t), sub: sub}, func(hm *rlock.Mutex) {
			p.SetBlackhole(true)
			require.NoError(t, hm.Unlock(bg))
		}, nil)
	})

	t.Run("refused", func(t *testing.T) {
		var rule []string
		for _, r := range aclRule(t, "") {
			if r != "+subscribe" && r != "+ssubscribe" {
				rule = append(rule, r)
			}
		}
		require.Less(t, len(rule), len(aclRule(t, "")), "the rule has no SUBSCRIBE to take out")
		args := append([]string{"ACL", "SETUSER", "nosub", "reset", "on", ">pw"}, rule...)
		msg := b.srv.Do(t, args...)
		require.NoError(t, msg.Error())
		rc := b.srv.Client(t, func(o *rueidis.ClientOption) {
			o.Username, o.Password = "nosub", "pw"
			o.DisableCache = true
		})
		run(t, rc, func(hm *rlock.Mutex) { require.NoError(t, hm.Unlock(bg)) }, nil)
	})

	t.Run("reset", func(t *testing.T) {
		run(t, b.rueidis(t), func(hm *rlock.Mutex) {
			msg := b.srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
			require.NoError(t, msg.Error())
			require.NoError(t, hm.Unlock(bg))
		}, func(c *rlock.Client) {
			// Another lock's waiter keeps the subscription connection up and live.
			other := redistest.Name(t) + "-other"
			oh := b.client(t).Mutex(other)
			require.NoError(t, oh.Lock(bg))
			om := c.Mutex(other)
			go func() { _, _ = om.TryLock(bg, 20*time.Second, 0) }()
			redistest.WaitFor(t, 10*time.Second, "the other waiter's live subscription", func() bool {
				return rlock.ChannelLive(c, om)
			})
			t.Cleanup(func() { _ = oh.Unlock(bg) })
		})
	})
}
