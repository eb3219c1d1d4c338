package rlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// clusterBackend starts a real Redis Cluster of 3 masters and 3 replicas
// (redistest.StartCluster): names spread over the masters, Redis refuses any script whose
// keys span slots, and waiters are woken by sharded pub/sub.
func clusterBackend(t *testing.T) (*backend, rueidis.Client) {
	t.Helper()
	cl := startCluster(t)
	rc := cl.Client(t)
	require.Equal(t, rueidis.ClientModeCluster, rc.Mode())
	return &backend{name: "cluster", cl: cl}, rc
}

func TestMutex_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("long: Redis Cluster topology (run without -short)")
	}
	b, rc := clusterBackend(t)
	c, err := rlock.New(rc, rlock.WithWatchdogTimeout(600*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()

	// Names of every shape, held together: the renewals go out grouped by slot.
	names := []string{"}x", "{user}:cart", "a{b", "{}", "plain"}
	for i := 0; i < 100; i++ {
		names = append(names, fmt.Sprintf("%s-%d", redistest.Name(t), i))
	}
	locks := make([]*rlock.Mutex, len(names))
	for i, name := range names {
		locks[i] = c.Mutex(name)
		require.NoError(t, locks[i].Lock(bg), name)
	}
	time.Sleep(1500 * time.Millisecond) // more than two renewal periods
	for i, m := range locks {
		require.NoError(t, m.Err(bg), names[i])
	}

	// A waiter of another Client is woken by the release.
	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	waiter := c2.Mutex(names[0])
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(bg) }()
	parked(t, b, locks[0], 1)
	require.NoError(t, locks[0].Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "waiter not woken on Cluster"))
	require.NoError(t, waiter.Unlock(bg))
	for _, m := range locks[1:] {
		require.NoError(t, m.Unlock(bg))
	}
}

// The rest of the family on Cluster, with names of every shape: every script's keys share a
// slot (Redis refuses them otherwise), and the wake-ups (tagged for the fair lock, wake-all
// for the latch) cross the cluster bus.
func TestFamily_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("long: Redis Cluster topology (run without -short)")
	}
	b, rc := clusterBackend(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	names := []string{"}x", "{user}:cart", "a{b", "{}", redistest.Name(t)}
	for _, name := range names {
		// FairMutex: the queue head of another Client is woken by its tagged message.
		f := c.FairMutex("fair:" + name)
		require.NoError(t, f.Lock(bg), name)
		got := make(chan error, 1)
		waiter := c2.FairMutex("fair:" + name)
		go func() { got <- waiter.Lock(bg) }()
		parked(t, b, f.Mutex, 1)
		require.NoError(t, f.Unlock(bg), name)
		require.NoError(t, await(t, got, 10*time.Second, "fair waiter on Cluster"), name)
		require.NoError(t, waiter.Unlock(bg), name)

		// SpinMutex.
		s := c.SpinMutex("spin:" + name)
		require.NoError(t, s.Lock(bg), name)
		require.NoError(t, s.Unlock(bg), name)

		// CountDownLatch: Await returns when the count reaches zero.
		l := c.CountDownLatch("latch:" + name)
		ok, err := l.TrySetCount(bg, 1)
		require.NoError(t, err, name)
		require.True(t, ok, name)
		go func() { got <- c2.CountDownLatch("latch:" + name).Await(bg) }()
		subscribed(t, b, l.Key()+":released", 1)
		require.NoError(t, l.CountDown(bg), name)
		require.NoError(t, await(t, got, 10*time.Second, "latch waiter on Cluster"), name)
	}
	// MultiLock over names in different slots: each member's scripts stay in one slot.
	ml := c.MultiLock(names...)
	require.NoError(t, ml.Lock(bg))
	ok, err := c2.MultiLock(names[0]).TryLock(bg, 0, 0)
	require.NoError(t, err)
	require.False(t, ok, "a member is held")
	require.NoError(t, ml.Unlock(bg))
}
