package rlock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// logBuffer collects slog lines (text, without the time) safely across goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.buf.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func newTestLogger(level slog.Level) (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == "held" {
			return slog.Attr{}
		}
		return a
	}})), lb
}

// The hot path logs nothing, even at Debug: an uncontended cycle, a re-entry, contention.
func TestWithLogger_hotPathIsSilent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, lb := newTestLogger(slog.LevelDebug)
		c := b.client(t, rlock.WithLogger(l))
		name := redistest.Name(t)
		m := c.Mutex(name)
		for i := 0; i < 3; i++ {
			require.NoError(t, m.Lock(bg))
			require.NoError(t, m.Lock(bg))
			ok, err := c.Mutex(name).TryLock(bg, 0, 0)
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, m.Unlock(bg))
			require.NoError(t, m.Unlock(bg))
		}
		require.Empty(t, lb.lines())
	})
}

// A loss is an Error with kind, name, owner, token and cause; the renewal that found it a
// Warn; both at once, nothing else.
func TestWithLogger_loss(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, lb := newTestLogger(slog.LevelInfo)
		// Renewed every 250ms (the loss found as soon as with 300ms at two thirds), each
		// renewal with about 640ms to be confirmed: 300ms left under 100ms, and a stall of that
		// much on a loaded machine ended the hold by its deadline (no renewal's Warn line).
		c := b.client(t, rlock.WithLogger(l), rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25))
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		tok, err := m.Token(bg)
		require.NoError(t, err)
		_, err = b.do(t, "DEL", m.Key())
		require.NoError(t, err)
		within(t, 10*time.Second, "the loss", m.Done(bg))
		// HoldEnd is told right after Done closes.
		redistest.WaitFor(t, 10*time.Second, "the loss to be logged", func() bool { return len(lb.lines()) >= 2 })
		lines := lb.lines()
		require.Len(t, lines, 2, "%q", lines)
		require.Equal(t, `level=WARN msg="relock: renewal failed" leases=1 failures=1 lost=1 error="watchdog: lease gone"`, lines[0])
		require.Regexp(t, `^level=ERROR msg="relock: lock lost" kind=mutex name=`+name+` owner=client:`+c.ID()+` token=`+
			strconv.FormatInt(tok, 10)+` cause=lost error="rlock: lock lost: lease gone"$`, lines[1])
	})
}

// A fixed lease that runs out is an Info line; replays and give-backs are Debug.
func TestWithLogger_leaseReplayGiveBack(t *testing.T) {
	t.Parallel()
	eachBackendParallel(t, func(t *testing.T, b *backend) {
		l, lb := newTestLogger(slog.LevelDebug)
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc, rlock.WithLogger(l))
		require.NoError(t, err)
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.NoError(t, m.LockLease(bg, 500*time.Millisecond)) // in time on a loaded machine: a late grant's give-back is logged too
		within(t, 10*time.Second, "the lease to run out", m.Done(bg))
		redistest.WaitFor(t, 10*time.Second, "the expiry to be logged", func() bool { return len(lb.lines()) == 1 })
		require.ErrorIs(t, m.Unlock(bg), rlock.ErrLeaseExpired)
		lc.drop.Store(1)
		require.NoError(t, m.Lock(bg))
		require.NoError(t, m.Unlock(bg))

		ctx, cancel := context.WithCancel(bg)
		defer cancel()
		lc.onDrop = cancel
		lc.drop.Store(1)
		ok, err := m.TryLock(ctx, time.Second, 0)
		require.False(t, ok)
		require.ErrorIs(t, err, context.Canceled)
		// The background resolution of the dropped send (its replay, then the give-back)
		// must end before Close: Close cut it short in the CI proof at f221ff7 (-race, the
		// explorers beside it), adding "outcome unknown: client closed" lines.
		redistest.WaitFor(t, 10*time.Second, "the background give-back to be logged", func() bool {
			for _, line := range lb.lines() {
				if strings.Contains(line, `msg="relock: given back"`) {
					return true
				}
			}
			return false
		})
		require.NoError(t, c.Close())
		lines := lb.lines()
		// The caller's ctx ends as the first send's reply is dropped. When the attempt sees
		// the reply first, it replays it in the foreground, which ends at once with the ctx
		// and says so (WARN: outcome unknown), and the resolution goes on in the background;
		// when it sees the ctx's end first, the background resolves the send alone (no WARN).
		// Both are right; the rest is the same.
		if len(lines) == 5 {
			require.Regexp(t, `^level=WARN msg="relock: request replayed" kind=mutex name=\S+ owner=client:\S+ op=acquire sends=\d+ error="rlock: outcome unknown: .*"$`, lines[2])
			lines = append(lines[:2:2], lines[3:]...)
		}
		require.Len(t, lines, 4, "%q", lines)
		require.Regexp(t, `^level=DEBUG msg="relock: lease expired" kind=mutex name=\S+ owner=client:\S+ token=\d+ cause=lease_expired error="rlock: not held: its fixed lease ran out"$`, lines[0])
		require.Regexp(t, `^level=DEBUG msg="relock: request replayed" kind=mutex name=\S+ owner=client:\S+ op=acquire sends=2$`, lines[1])
		require.Regexp(t, `^level=DEBUG msg="relock: request replayed" kind=mutex name=\S+ owner=client:\S+ op=acquire sends=\d+$`, lines[2])
		require.Regexp(t, `^level=DEBUG msg="relock: given back" kind=mutex name=\S+ owner=client:\S+ holds=1 reason=canceled$`, lines[3])
	})
}

// A lost subscription is a Warn, its return an Info.
func TestWithLogger_subscription(t *testing.T) {
	b := realBackend(t)
	l, lb := newTestLogger(slog.LevelInfo)
	name := redistest.Name(t)
	holder := b.client(t).Mutex(name)
	require.NoError(t, holder.Lock(bg))
	c := b.client(t, rlock.WithLogger(l))
	waiter := c.Mutex(name)
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(bg) }()
	parked(t, b, waiter, 1)
	_, err := b.do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	redistest.WaitFor(t, 10*time.Second, "the subscription to come back", func() bool { return len(lb.lines()) == 2 })
	lines := lb.lines()
	ch := waiter.Key() + ":released"
	require.Regexp(t, `^level=WARN msg="relock: subscription lost" channel=`+regexpQuote(ch)+` error=.+$`, lines[0])
	require.Equal(t, `level=INFO msg="relock: subscription restored" channel=`+ch, lines[1])
	require.NoError(t, holder.Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "the waiter"))
	require.NoError(t, waiter.Unlock(bg))
}

func regexpQuote(s string) string {
	r := strings.NewReplacer(`{`, `\{`, `}`, `\}`, `.`, `\.`, `:`, `:`)
	return r.Replace(s)
}

// A RedLock's loss (its key deleted on a majority) is one Error line, of kind red_lock, from
// the Logger of its first Client; its instances' own losses are not logged on their own.
func TestWithLogger_redLockLoss(t *testing.T) {
	var addrs []string
	var ms []*miniredis.Miniredis
	for range 3 {
		m := miniredis.RunT(t)
		ms = append(ms, m)
		addrs = append(addrs, m.Addr())
	}
	l, lb := newTestLogger(slog.LevelError)
	// As TestWithLogger_loss: renewals every 250ms, each with about 640ms to be confirmed.
	cs := redClients(t, addrs, rlock.WithLogger(l), rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25))
	name := redistest.Name(t)
	rl := rlock.NewRedLock(name, cs)
	require.NoError(t, rl.Lock(bg))
	// Lock returns at a majority: a third grant still on its way could land after the
	// deletions and keep a majority.
	settled(t, rl)
	tok, err := rl.Token(bg)
	require.NoError(t, err)
	ms[0].Del(redKey(name))
	ms[1].Del(redKey(name))
	within(t, 10*time.Second, "the loss", rl.Done(bg))
	redistest.WaitFor(t, 10*time.Second, "the loss to be logged", func() bool { return len(lb.lines()) >= 1 })
	time.Sleep(100 * time.Millisecond) // a second line would come now
	lines := lb.lines()
	require.Len(t, lines, 1, "%q", lines)
	require.Regexp(t, `^level=ERROR msg="relock: lock lost" kind=red_lock name=`+name+` owner=\S+ token=`+
		strconv.FormatInt(tok, 10)+` cause=lost error=".*fewer than a majority.*"$`, lines[0])
	require.ErrorIs(t, rl.Unlock(bg), rlock.ErrNotHeld)
}
