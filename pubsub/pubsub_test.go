package pubsub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/internal/redistest"
)

// waitTimeout bounds every wait for an event. It is generous on purpose: the tests wait for
// events, never for a duration, so a slow machine only makes them slower, not flaky. It
// covers a reconnection too (the Subscriber's backoff is at most 1 s).
const waitTimeout = 10 * time.Second

// env is one Redis backend for a test: the client the Subscriber uses, another client that
// publishes, and admin access to the server.
type env struct {
	t      *testing.T
	client rueidis.Client // for the Subscriber
	pub    rueidis.Client // another client, for PUBLISH
	srv    *redistest.Server
	mr     *miniredis.Miniredis
	proxy  *faultproxy.Proxy           // miniredis: between client and the server
	addr   string                      // the server's address
	opt    func(*rueidis.ClientOption) // the options of client, for newClient
}

// newClient returns another client like e.client, to addr (e.g. a proxy), closed in cleanup.
func (e *env) newClient(addr string) rueidis.Client {
	e.t.Helper()
	o := rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true}
	e.opt(&o)
	c, err := rueidis.NewClient(o)
	require.NoError(e.t, err)
	e.t.Cleanup(c.Close)
	return c
}

type backend struct {
	name string
	real bool // a real redis-server (INFO commandstats, CLIENT KILL, Pause)
	open func(t *testing.T) *env
}

var backends = []backend{
	{name: "miniredis", open: func(t *testing.T) *env {
		mr, pub := redistest.Miniredis(t)
		// The Subscriber's client goes through a proxy, whose connections dropPubSub resets:
		// miniredis has no CLIENT KILL, and closing and restarting it on its port raced the
		// servers other test processes start for that port (.ci/run at 8085e6b:
		// TestConnectionLoss/miniredis, "bind: address already in use").
		p, err := faultproxy.New(mr.Addr())
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{p.Addr()},
			DisableCache:      true,
			AlwaysRESP2:       true,
			ForceSingleClient: true,
		})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		opt := func(o *rueidis.ClientOption) { o.DisableCache, o.AlwaysRESP2 = true, true }
		return &env{t: t, client: c, pub: pub, mr: mr, proxy: p, addr: mr.Addr(), opt: opt}
	}},
	{name: "redis", real: true, open: func(t *testing.T) *env {
		s := redistest.Start(t)
		opt := func(*rueidis.ClientOption) {}
		return &env{t: t, client: s.Client(t), pub: s.Client(t), srv: s, addr: s.Addr(), opt: opt}
	}},
	// RESP2 against a real server: rueidis then runs pub/sub on a second, private
	// connection of the dedicated client, the same code path as on miniredis, but here it
	// can be killed on its own with CLIENT KILL TYPE pubsub.
	{name: "redis-resp2", real: true, open: func(t *testing.T) *env {
		s := redistest.Start(t)
		resp2 := func(o *rueidis.ClientOption) { o.AlwaysRESP2, o.DisableCache = true, true }
		return &env{t: t, client: s.Client(t, resp2), pub: s.Client(t), srv: s, addr: s.Addr(), opt: resp2}
	}},
}

// forEach runs f once per backend, as subtests.
func forEach(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.open(t)) })
	}
}

// forEachReal is forEach restricted to real redis-server backends.
func forEachReal(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range backends {
		if b.real {
			t.Run(b.name, func(t *testing.T) { f(t, b.open(t)) })
		}
	}
}

// newSub returns a Subscriber on e's client, closed in cleanup before the client is.
func (e *env) newSub(opts ...Option) *Subscriber {
	e.t.Helper()
	return e.newSubOn(e.client, opts...)
}

// newSubOn returns a Subscriber on c, closed in cleanup (before c, if c was made earlier).
func (e *env) newSubOn(c rueidis.Client, opts ...Option) *Subscriber {
	e.t.Helper()
	s, err := New(c, opts...)
	require.NoError(e.t, err)
	e.t.Cleanup(s.Close)
	return s
}

// publish sends one PUBLISH from the other client and returns how many subscribers got it.
// Transport errors (a connection reset, a server that restarts) are retried.
func (e *env) publish(channel, msg string) int64 {
	e.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		n, err := e.pub.Do(ctx, e.pub.B().Publish().Channel(channel).Message(msg).Build()).AsInt64()
		cancel()
		if err == nil {
			return n
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("PUBLISH %s: %v", channel, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// numSub is PUBSUB NUMSUB for one channel, as the server sees it.
func (e *env) numSub(channel string) int64 {
	e.t.Helper()
	if e.mr != nil {
		return int64(e.mr.PubSubNumSub(channel)[channel])
	}
	msg := e.srv.Do(e.t, "PUBSUB", "NUMSUB", channel)
	vs, err := msg.ToArray()
	require.NoError(e.t, err)
	require.Len(e.t, vs, 2)
	n, err := vs[1].AsInt64()
	require.NoError(e.t, err)
	return n
}

// channels is PUBSUB CHANNELS, as the server sees it.
func (e *env) channels() []string {
	e.t.Helper()
	if e.mr != nil {
		return e.mr.PubSubChannels("")
	}
	msg := e.srv.Do(e.t, "PUBSUB", "CHANNELS")
	chs, err := msg.AsStrSlice()
	require.NoError(e.t, err)
	return chs
}

// dropPubSub breaks the Subscriber's connection: CLIENT KILL TYPE pubsub on a real server;
// on miniredis, a reset of every connection of e.client (through its proxy).
func (e *env) dropPubSub() {
	e.t.Helper()
	if e.proxy != nil {
		require.GreaterOrEqual(e.t, e.proxy.ResetAll(), 1, "no connection to reset")
		return
	}
	msg := e.srv.Do(e.t, "CLIENT", "KILL", "TYPE", "pubsub")
	n, err := msg.AsInt64()
	require.NoError(e.t, err)
	require.GreaterOrEqual(e.t, n, int64(1), "CLIENT KILL TYPE pubsub killed no connection")
}

// name returns a fresh channel name.
func name(t *testing.T) string { return redistest.Name(t) }

// recv waits for a wake-up of w and consumes it.
func recv(t *testing.T, w *Waiter, what string) {
	t.Helper()
	select {
	case <-w.C():
	case <-time.After(waitTimeout):
		t.Fatalf("no wake-up within %v: %s", waitTimeout, what)
	}
}

// none asserts that no waiter in ws holds a wake-up. It first takes the Subscriber's lock
// (through Waiting), so a hook that is delivering a message has finished.
func none(t *testing.T, s *Subscriber, what string, ws ...*Waiter) {
	t.Helper()
	s.Waiting("")
	for i, w := range ws {
		select {
		case <-w.C():
			t.Fatalf("%s: waiter #%d was woken", what, i)
		default:
		}
	}
}

// drain consumes any wake-up the waiters hold.
func drain(ws ...*Waiter) {
	for _, w := range ws {
		select {
		case <-w.C():
		default:
		}
	}
}

// waitFor polls cond until it holds, for conditions no event signals (server-side state).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	redistest.WaitFor(t, waitTimeout, what, cond)
}

// holds waits until w holds an unread wake-up, without consuming it.
func holds(t *testing.T, w *Waiter, what string) {
	t.Helper()
	waitFor(t, what, func() bool { return len(w.C()) == 1 })
}

// watch registers a waiter and closes it in cleanup.
func watch(t *testing.T, s *Subscriber, channel string) *Waiter {
	t.Helper()
	w, err := s.Watch(channel)
	require.NoError(t, err)
	t.Cleanup(w.Close)
	return w
}

// watchLive registers a waiter and waits until the channel is live; the wake-up of the
// confirmation is consumed.
func watchLive(t *testing.T, s *Subscriber, channel string) *Waiter {
	t.Helper()
	w := watch(t, s, channel)
	waitLive(t, s, w, channel)
	drain(w)
	return w
}

// waitLive waits until the channel's subscription is confirmed on the current connection.
func waitLive(t *testing.T, s *Subscriber, w *Waiter, channel string) {
	t.Helper()
	waitFor(t, "subscription of "+channel+" to be live", func() bool { return w.Live(s.Mark(channel)) })
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	s, err := New(nil)
	require.Error(t, err)
	require.Nil(t, s)

	_, c := redistest.Miniredis(t)
	s, err = New(c, WithLinger(-time.Millisecond))
	require.Error(t, err)
	require.Nil(t, s)

	s, err = New(c, WithLinger(0))
	require.NoError(t, err)
	s.Close()
	s, err = New(c)
	require.NoError(t, err)
	require.Equal(t, DefaultLinger, s.linger)
	s.Close()
}

// The first Watch of a channel is woken when Redis confirms the subscription.
func TestWatchWokenOnConfirmation(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		before := s.Mark(ch) // the channel does not exist yet
		w := watch(t, s, ch)
		require.Equal(t, 0, w.Ahead())
		require.Equal(t, 1, s.Waiting(ch))
		recv(t, w, "subscription confirmed")
		require.True(t, w.Live(s.Mark(ch)), "woken but not live")
		require.False(t, w.Live(before), "a mark taken before the subscription cannot be live")
		require.EqualValues(t, 1, e.numSub(ch))
		require.Contains(t, e.channels(), ch)
	})
}

// Several waiters that joined before the confirmation are all woken by it. On a real server
// the confirmation is held back by pausing the server.
func TestConfirmationWakesAll(t *testing.T) {
	t.Parallel()
	forEachReal(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		e.srv.Pause(t)
		ws := []*Waiter{watch(t, s, ch), watch(t, s, ch), watch(t, s, ch)}
		m := s.Mark(ch)
		for _, w := range ws {
			require.False(t, w.Live(m), "live while the server is paused")
		}
		e.srv.Resume(t)
		for i, w := range ws {
			recv(t, w, fmt.Sprintf("confirmation, waiter #%d", i))
		}
		for _, w := range ws {
			require.False(t, w.Live(m), "mark taken before the confirmation")
			require.True(t, w.Live(s.Mark(ch)))
		}
	})
}

// One PUBLISH wakes exactly one waiter, the longest waiting; the woken one moves to the back.
func TestPublishWakesOneInTurn(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		w1 := watch(t, s, ch)
		recv(t, w1, "subscription confirmed")
		w2, w3 := watch(t, s, ch), watch(t, s, ch)
		require.Equal(t, []int{0, 1, 2}, []int{w1.Ahead(), w2.Ahead(), w3.Ahead()})
		require.Equal(t, 3, s.Waiting(ch))
		none(t, s, "after joining a live channel", w1, w2, w3)

		order := []*Waiter{w1, w2, w3, w1, w2}
		all := []*Waiter{w1, w2, w3}
		for i, want := range order {
			require.EqualValues(t, 1, e.publish(ch, fmt.Sprint(i)), "one subscriber connection")
			recv(t, want, fmt.Sprintf("message %d", i))
			var others []*Waiter
			for _, w := range all {
				if w != want {
					others = append(others, w)
				}
			}
			none(t, s, fmt.Sprintf("message %d", i), others...)
		}
	})
}

// A WakeAll message wakes every waiter; a WakeTag message wakes only the waiters watching
// with that tag, and nobody when none does; a plain message still wakes one, tagged or not.
func TestWakeAllAndTag(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		plain := watchLive(t, s, ch)
		a, err := s.WatchTag(ch, "a")
		require.NoError(t, err)
		t.Cleanup(a.Close)
		b, err := s.WatchTag(ch, "b")
		require.NoError(t, err)
		t.Cleanup(b.Close)
		none(t, s, "joined a live channel", plain, a, b)

		e.publish(ch, WakeTag("b"))
		recv(t, b, "tagged b")
		none(t, s, "tagged b", plain, a)

		e.publish(ch, WakeTag("nobody"))
		e.publish(ch, WakeTag("a"))
		recv(t, a, "tagged a")
		none(t, s, "tagged nobody, then a", plain, b)

		e.publish(ch, WakeAll)
		recv(t, plain, "wake all")
		recv(t, a, "wake all")
		recv(t, b, "wake all")

		e.publish(ch, "0")
		recv(t, plain, "plain message: the longest waiting")
		none(t, s, "plain message", a, b)
	})
}

// A waiter that holds an unread wake-up is skipped: the next message goes to the next one.
func TestWakeSkipsHolder(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		w1 := watchLive(t, s, ch)
		w2, w3 := watch(t, s, ch), watch(t, s, ch)
		e.publish(ch, "1")
		holds(t, w1, "w1 woken by the first message")
		e.publish(ch, "2")
		recv(t, w2, "second message skips w1, which has not read its wake-up")
		none(t, s, "second message", w3)
		require.Len(t, w1.C(), 1)
	})
}

// Closing a waiter that holds an unread wake-up hands it to the next waiter.
func TestCloseHandsOnUnreadWakeUp(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		w1 := watchLive(t, s, ch)
		w2, w3 := watch(t, s, ch), watch(t, s, ch)
		e.publish(ch, "1")
		holds(t, w1, "w1 woken")
		w1.Close()
		recv(t, w2, "w1's unread wake-up handed on")
		none(t, s, "after w1 closed", w3)
		require.Equal(t, 2, s.Waiting(ch))
		w1.Close() // idempotent
		require.Equal(t, 2, s.Waiting(ch))

		// A waiter without a wake-up hands nothing on.
		w3.Close()
		none(t, s, "after w3 closed", w2)
		require.Equal(t, 1, s.Waiting(ch))
	})
}

// Pass hands a consumed wake-up to the next waiter, never to the passer itself.
func TestPass(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch := name(t)
		w1 := watchLive(t, s, ch)
		w2, w3 := watch(t, s, ch), watch(t, s, ch)
		e.publish(ch, "1")
		recv(t, w1, "message")
		w1.Pass()
		recv(t, w2, "passed by w1")
		none(t, s, "first pass", w1, w3)
		w1.Pass()
		recv(t, w3, "passed by w1 again")
		none(t, s, "second pass", w1, w2)

		// Every other waiter already holds a wake-up: Pass is a no-op.
		w1.Pass()
		w1.Pass()
		holds(t, w2, "w2")
		holds(t, w3, "w3")
		none(t, s, "pass to holders", w1)

		// Alone on the channel: Pass wakes nobody. (w2 and w3 read their wake-ups first, or
		// closing them would hand those on to w1.)
		drain(w2, w3)
		w2.Close()
		w3.Close()
		w1.Pass()
		none(t, s, "pass alone", w1)
	})
}

func TestLive(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch, other := name(t), name(t)
		w := watchLive(t, s, ch)
		wo := watchLive(t, s, other)

		m := s.Mark(ch)
		require.True(t, w.Live(m), "nothing arrived since the mark")
		require.False(t, wo.Live(m), "mark of another channel")
		require.False(t, w.Live(Mark{}), "zero mark")

		e.publish(other, "x")
		recv(t, wo, "message on the other channel")
		require.True(t, w.Live(m), "a message on another channel does not count")

		e.publish(ch, "x")
		recv(t, w, "message")
		require.False(t, w.Live(m), "a message arrived since the mark")
		require.True(t, w.Live(s.Mark(ch)), "fresh mark")
	})
}

func TestAheadAndWaiting(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		ch, other := name(t), name(t)
		require.Equal(t, 0, s.Waiting(ch))
		w1, w2, w3 := watch(t, s, ch), watch(t, s, ch), watch(t, s, ch)
		wo := watch(t, s, other)
		require.Equal(t, []int{0, 1, 2, 0}, []int{w1.Ahead(), w2.Ahead(), w3.Ahead(), wo.Ahead()})
		require.Equal(t, 3, s.Waiting(ch))
		require.Equal(t, 1, s.Waiting(other))
		w2.Close()
		require.Equal(t, 2, s.Waiting(ch))
		w4 := watch(t, s, ch)
		require.Equal(t, 2, w4.Ahead())
		require.Equal(t, 2, w3.Ahead(), "Ahead is fixed at Watch")
		w1.Close()
		w3.Close()
		w4.Close()
		require.Equal(t, 0, s.Waiting(ch))
		require.Equal(t, 1, s.Waiting(other))
	})
}

// After the last waiter leaves, the channel stays subscribed for the linger, then is
// unsubscribed; a later Watch subscribes again.
func TestLingerThenUnsubscribe(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		const linger = 50 * time.Millisecond
		s := e.newSub(WithLinger(linger))
		ch, keep := name(t), name(t)
		watchLive(t, s, keep) // another channel stays subscribed throughout
		w := watchLive(t, s, ch)
		require.Contains(t, e.channels(), ch)

		left := time.Now()
		w.Close()
		// Poll the server: the channel must disappear, and not before the linger.
		waitFor(t, "channel to be unsubscribed", func() bool {
			chs := e.channels()
			if slices.Contains(chs, ch) {
				return false
			}
			require.GreaterOrEqual(t, time.Since(left), linger, "unsubscribed before the linger")
			return true
		})
		require.Contains(t, e.channels(), keep)
		require.EqualValues(t, 0, e.numSub(ch))

		// Watching again subscribes again.
		w = watch(t, s, ch)
		recv(t, w, "new subscription confirmed")
		require.EqualValues(t, 1, e.numSub(ch))
		e.publish(ch, "x")
		recv(t, w, "message after resubscribing")
	})
}

// With a zero linger the channel is unsubscribed as soon as its last waiter leaves.
func TestZeroLinger(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub(WithLinger(0))
		ch := name(t)
		w := watchLive(t, s, ch)
		w.Close()
		waitFor(t, "channel to be unsubscribed", func() bool { return e.numSub(ch) == 0 })
	})
}

// A Watch during the linger reuses the subscription: no new SUBSCRIBE, and a mark taken
// during the linger is still live for the new waiter.
func TestReWatchDuringLingerReuses(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		// A long linger, so that the re-Watch surely falls inside it on a slow machine.
		s := e.newSub(WithLinger(time.Minute))
		ch := name(t)
		w := watchLive(t, s, ch)
		if e.srv != nil {
			e.srv.ResetStats(t)
		}
		w.Close()
		m := s.Mark(ch)
		require.Equal(t, 0, s.Waiting(ch))

		w2 := watch(t, s, ch)
		require.Equal(t, 0, w2.Ahead())
		require.True(t, w2.Live(m), "subscription reused: still live, same connection")
		require.EqualValues(t, 1, e.numSub(ch))
		if e.srv != nil {
			stats := e.srv.CommandStats(t)
			require.Zero(t, stats["subscribe"], "no new SUBSCRIBE: %v", stats)
			require.Zero(t, stats["unsubscribe"], "no UNSUBSCRIBE: %v", stats)
		}
		e.publish(ch, "x")
		recv(t, w2, "message on the reused subscription")
	})
}

// Losing the connection wakes every waiter of every channel once the Subscriber has
// reconnected and subscribed again (the break itself wakes nobody: see Loss in the package
// doc), and messages wake waiters again.
func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		a, b := name(t), name(t)
		wa := []*Waiter{watchLive(t, s, a), watch(t, s, a)}
		wb := []*Waiter{watchLive(t, s, b), watch(t, s, b)}
		all := append(slices.Clone(wa), wb...)
		drain(all...)
		ma := s.Mark(a)
		require.True(t, wa[0].Live(ma))

		e.dropPubSub()
		for i, w := range all {
			recv(t, w, fmt.Sprintf("connection lost and made again, waiter #%d", i))
			ch := a
			if i >= len(wa) {
				ch = b
			}
			require.True(t, s.Live(ch), "waiter #%d woken before its channel was subscribed again", i)
		}
		require.False(t, wa[0].Live(ma), "mark of the lost connection")

		waitLive(t, s, wa[0], a)
		waitLive(t, s, wb[0], b)
		require.False(t, wa[0].Live(ma), "mark of the lost connection, after reconnecting")
		require.EqualValues(t, 1, e.numSub(a))
		require.EqualValues(t, 1, e.numSub(b))

		// Live now, so the confirmations' wake-ups have all been delivered.
		drain(all...)
		for _, ws := range [][]*Waiter{wa, wb} {
			ch := a
			if ws[0] == wb[0] {
				ch = b
			}
			require.EqualValues(t, 1, e.publish(ch, "x"))
			select {
			case <-ws[0].C():
				none(t, s, "message after reconnect", ws[1])
			case <-ws[1].C():
				none(t, s, "message after reconnect", ws[0])
			case <-time.After(waitTimeout):
				t.Fatalf("no waiter of %s woken by a message after reconnecting", ch)
			}
		}
		none(t, s, "after both messages", all...)
	})
}

// Close wakes every waiter, makes Watch fail with ErrClosed, closes the connection and
// stops the goroutine (TestMain checks for leaks).
func TestClose(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub()
		a, b := name(t), name(t)
		ws := []*Waiter{watchLive(t, s, a), watch(t, s, a), watchLive(t, s, b)}
		drain(ws...)

		s.Close()
		for i, w := range ws {
			recv(t, w, fmt.Sprintf("Close, waiter #%d", i))
		}
		_, err := s.Watch(a)
		require.ErrorIs(t, err, ErrClosed)
		s.Close() // idempotent
		for _, w := range ws {
			w.Close()
			w.Pass()
		}
		require.Equal(t, 0, s.Waiting(a))
		// The connection is closed, not left subscribed in the client's pool.
		waitFor(t, "subscriptions to go away", func() bool { return len(e.channels()) == 0 })
	})
}

func TestCloseUnstartedAndConcurrent(t *testing.T) {
	t.Parallel()
	_, c := redistest.Miniredis(t)

	s, err := New(c)
	require.NoError(t, err)
	s.Close()
	_, err = s.Watch("x")
	require.ErrorIs(t, err, ErrClosed)
	s.Close()

	s, err = New(c)
	require.NoError(t, err)
	w, err := s.Watch("x")
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(s.Close)
	}
	wg.Wait()
	recv(t, w, "Close")
	w.Close()
}

// The message hook never blocks: 10,000 messages on a channel whose waiters never read do
// not hold up a message on another channel of the same Subscriber.
func TestHookNeverBlocks(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		const n = 10000
		s := e.newSub()
		busy, quiet := name(t), name(t)
		// The busy channel's waiters never read, not even their confirmation.
		wb := []*Waiter{watch(t, s, busy), watch(t, s, busy)}
		waitLive(t, s, wb[0], busy)
		wq := watchLive(t, s, quiet)

		ctx, cancel := context.WithTimeout(context.Background(), 4*waitTimeout)
		defer cancel()
		cmds := make(rueidis.Commands, 0, n+1)
		for i := range n {
			cmds = append(cmds, e.pub.B().Publish().Channel(busy).Message(fmt.Sprint(i)).Build())
		}
		cmds = append(cmds, e.pub.B().Publish().Channel(quiet).Message("wake").Build())
		for i, r := range e.pub.DoMulti(ctx, cmds...) {
			require.NoError(t, r.Error(), "publish #%d", i)
		}
		select {
		case <-wq.C():
		case <-time.After(4 * waitTimeout):
			t.Fatal("a message on another channel was stalled behind the busy one")
		}
		// Every busy message was counted, and each waiter holds just one wake-up.
		require.Equal(t, uint64(n), s.Mark(busy).seq)
		for _, w := range wb {
			require.Len(t, w.C(), 1)
		}
		require.Equal(t, 2, s.Waiting(busy))
	})
}

// Many goroutines watch, wait, pass and leave while messages flow; run with -race.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		s := e.newSub(WithLinger(time.Millisecond))
		chs := []string{name(t), name(t), name(t)}
		stop := make(chan struct{})
		pubDone := make(chan struct{})
		go func() {
			defer close(pubDone)
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ch := chs[i%len(chs)]
				_ = e.pub.Do(ctx, e.pub.B().Publish().Channel(ch).Message("x").Build()).Error()
			}
		}()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 100 {
					ch := chs[(g+i)%len(chs)]
					w, err := s.Watch(ch)
					if err != nil {
						t.Error(err)
						return
					}
					_ = s.Mark(ch)
					select {
					case <-w.C():
						if rand.IntN(2) == 0 {
							w.Pass()
						}
					case <-time.After(time.Millisecond):
					}
					_ = w.Live(s.Mark(ch))
					w.Close()
				}
			})
		}
		wg.Wait()
		close(stop)
		<-pubDone
		for _, ch := range chs {
			require.Equal(t, 0, s.Waiting(ch))
		}
		// Every channel is unsubscribed after its linger.
		waitFor(t, "all channels unsubscribed", func() bool {
			for _, ch := range chs {
				if e.numSub(ch) != 0 {
					return false
				}
			}
			return true
		})
	})
}

// ErrClosed is a sentinel usable with errors.Is.
func TestErrClosedSentinel(t *testing.T) {
	require.True(t, errors.Is(fmt.Errorf("wrap: %w", ErrClosed), ErrClosed))
}

// proxy is a TCP proxy to a Redis server that can drop a connection when the client sends
// given bytes on it, so a test can break the subscription connection at an exact moment.
type proxy struct {
	t       *testing.T
	ln      net.Listener
	up      string
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	drop    []byte // when non-nil: close the connection that sends these bytes (once)
	dropped chan struct{}
}

func startProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{t: t, ln: ln, up: upstream, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// dropOn arms the proxy: the next connection on which the client sends b is closed, before b
// reaches the server. The returned channel is closed when that happened.
func (p *proxy) dropOn(b string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = []byte(b)
	p.dropped = make(chan struct{})
	return p.dropped
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.up)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(u, c, true) })
		p.wg.Go(func() { p.pipe(c, u, false) })
	}
}

// pipe copies from src to dst; on the client-to-server side it watches for the drop bytes.
func (p *proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	var tail []byte // the end of what came before, so the bytes may straddle two reads
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				p.mu.Lock()
				drop := p.drop != nil && bytes.Contains(append(tail, buf[:n]...), p.drop)
				if drop {
					p.drop = nil
					close(p.dropped)
				}
				p.mu.Unlock()
				if drop {
					return
				}
				tail = append(tail[:0], buf[max(0, n-256):n]...)
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// The connection dies while a SUBSCRIBE is in flight: the Subscriber reconnects and
// subscribes everything again, and every waiter is woken.
func TestConnectionLossDuringSubscribe(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		p := startProxy(t, e.addr)
		s := e.newSubOn(e.newClient(p.addr()))
		a, b := name(t), name(t)
		wa := watchLive(t, s, a)
		dropped := p.dropOn(b) // the SUBSCRIBE carrying b
		wb := watch(t, s, b)
		select {
		case <-dropped:
		case <-time.After(waitTimeout):
			t.Fatal("SUBSCRIBE never went through the proxy")
		}
		recv(t, wa, "connection lost during SUBSCRIBE")
		waitLive(t, s, wa, a)
		waitLive(t, s, wb, b)
		drain(wa, wb)
		require.EqualValues(t, 1, e.publish(b, "x"))
		recv(t, wb, "message after reconnecting")
		require.EqualValues(t, 1, e.publish(a, "x"))
		recv(t, wa, "message after reconnecting")
	})
}
