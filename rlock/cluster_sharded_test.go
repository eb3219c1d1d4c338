package rlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// waitShardSub waits until a Client subscribed channel on the master of its slot.
func waitShardSub(t *testing.T, cl *redistest.Cluster, channel string) {
	t.Helper()
	m := cl.MasterOf(t, channel)
	redistest.WaitFor(t, 10*time.Second, "a sharded subscription to "+channel+" on "+m.Addr(), func() bool {
		return m.ShardNumSub(t, channel) > 0
	})
}

// On a Cluster, waiters of every kind are woken by sharded pub/sub (PubSubAuto): each
// channel is subscribed on the master of its slot (SHARDNUMSUB there), releases SPUBLISH on
// that master, and no node runs a classic PUBLISH (which the cluster bus would broadcast to
// every node).
func TestCluster_wakeUpsAreSharded(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	for _, n := range cl.Nodes() {
		n.ResetStats(t)
	}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	masters := map[string]bool{}
	base := redistest.Name(t)
	for i := 0; i < 6; i++ { // names on every master, most likely
		name := fmt.Sprintf("%s-%d", base, i)
		got := make(chan error, 1)

		m := c.Mutex("m:" + name)
		require.NoError(t, m.Lock(ctx))
		w := c2.Mutex("m:" + name)
		go func() { got <- w.Lock(ctx) }()
		waitShardSub(t, cl, m.Key()+":released")
		masters[cl.MasterOf(t, m.Key()).Addr()] = true
		require.NoError(t, m.Unlock(ctx))
		require.NoError(t, await(t, got, 10*time.Second, "mutex waiter"))
		require.NoError(t, w.Unlock(ctx))

		f := c.FairMutex("f:" + name)
		require.NoError(t, f.Lock(ctx))
		fw := c2.FairMutex("f:" + name)
		go func() { got <- fw.Lock(ctx) }()
		waitShardSub(t, cl, f.Key()+":released")
		require.NoError(t, f.Unlock(ctx))
		require.NoError(t, await(t, got, 10*time.Second, "fair waiter"))
		require.NoError(t, fw.Unlock(ctx))

		rw := c.RWMutex("rw:" + name)
		require.NoError(t, rw.RLock(ctx))
		rww := c2.RWMutex("rw:" + name)
		go func() { got <- rww.Lock(ctx) }()
		waitShardSub(t, cl, rw.Key()+":released")
		require.NoError(t, rw.RUnlock(ctx))
		require.NoError(t, await(t, got, 10*time.Second, "writer waiting for a reader"))
		require.NoError(t, rww.Unlock(ctx))

		s := c.Semaphore("s:" + name)
		ok, err := s.TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.Acquire(ctx, 1))
		go func() { got <- c2.Semaphore("s:"+name).Acquire(ctx, 1) }()
		waitShardSub(t, cl, s.Key()+":released")
		require.NoError(t, s.Release(ctx, 1))
		require.NoError(t, await(t, got, 10*time.Second, "semaphore waiter"))

		l := c.CountDownLatch("l:" + name)
		ok, err = l.TrySetCount(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		go func() { got <- c2.CountDownLatch("l:" + name).Await(ctx) }()
		waitShardSub(t, cl, l.Key()+":released")
		require.NoError(t, l.CountDown(ctx))
		require.NoError(t, await(t, got, 10*time.Second, "latch waiter"))
	}
	require.Greater(t, len(masters), 1, "names on more than one master")
	var spublish int64
	for _, n := range cl.Nodes() {
		st := n.CommandStats(t)
		require.Zero(t, st["publish"], "classic PUBLISH on %s", n.Addr())
		spublish += st["spublish"]
	}
	require.Positive(t, spublish, "releases SPUBLISH")
}

// PubSubSharded needs a Cluster client; PubSubClassic on a Cluster publishes classically.
func TestPubSubMode_choices(t *testing.T) {
	_, c := redistest.Miniredis(t)
	_, err := rlock.New(c, rlock.WithPubSub(rlock.PubSubSharded))
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.True(t, strings.Contains(err.Error(), "Cluster"), err.Error())
	_, err = rlock.New(c, rlock.WithPubSub(rlock.PubSubMode(7)))
	require.ErrorIs(t, err, rlock.ErrInvalid)
	rc, err := rlock.New(c, rlock.WithPubSub(rlock.PubSubClassic))
	require.NoError(t, err)
	require.NoError(t, rc.Close())
}
