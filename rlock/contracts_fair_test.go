package rlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// FairMutex: "A single attempt (TryLock with wait 0) never takes a place and never passes a
// waiter: it succeeds only on a free lock that nobody waits for", and a waiter that cannot
// remove its place (here: cut off from Redis, its connection black-holed) "does not block the
// queue for long: every place lives for the waiter timeout ... after it was last refreshed ...
// a dead waiter delays the others by at most about the waiter timeout".
func TestContracts_fairSingleAttemptNeverPassesADeadWaiter(t *testing.T) {
	t.Parallel()
	b := realBackend(t)
	const wt = time.Second
	p := proxyTo(t, b.srv)
	wc := redClients(t, []string{p.Addr()}, rlock.WithWaiterTimeout(wt), rlock.WithCleanupTimeout(300*time.Millisecond))[0]
	name := redistest.Name(t)
	holder := b.client(t, rlock.WithWaiterTimeout(wt)).FairMutex(name)
	require.NoError(t, holder.Lock(bg))
	wctx, cancel := context.WithCancel(bg)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- wc.FairMutex(name).Lock(wctx) }()
	redistest.WaitFor(t, 5*time.Second, "the waiter's place", func() bool {
		msg, err := b.do(t, "ZCARD", holder.Key()+":queue")
		n, _ := msg.AsInt64()
		return err == nil && n == 1
	})
	p.SetBlackhole(true)
	cut := time.Now()
	defer p.SetBlackhole(false)
	require.NoError(t, holder.Unlock(bg))

	c := b.client(t, rlock.WithWaiterTimeout(wt)).FairMutex(name)
	ok, err := c.TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok, "a single attempt passed the waiter whose place is live")
	ok, err = c.TryLock(bg, 5*time.Second, 0)
	require.NoError(t, err)
	require.True(t, ok)
	took := time.Since(cut)
	t.Logf("taken %v after the waiter was cut off (waiter timeout %v)", took, wt)
	require.Less(t, took, wt+wt/2+300*time.Millisecond, "the dead waiter delayed the others past about the waiter timeout")
	require.NoError(t, c.Unlock(bg))
	cancel()
	p.SetBlackhole(false)
	<-got
}
