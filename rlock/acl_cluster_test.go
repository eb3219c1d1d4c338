package rlock_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestACLRule_cluster: on a real 3-master, 3-replica Redis Cluster, a user with exactly
// ACLRule's rights (set on every node: Redis Cluster does not share ACL users) runs the whole
// family, its waiters woken by sharded pub/sub (PubSubAuto), rueidis reading the slot map.
func TestACLRule_cluster(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rule := aclRule(t, "")
	for _, n := range cl.Nodes() {
		n.Do(t, append([]string{"ACL", "SETUSER", "locker", "reset", "on", ">pw-locker"}, rule...)...)
	}
	// A 1 s lease, as TestACLRule_isEnough's: a third of it (333 ms) for each renewal to land
	// on a loaded machine (300ms left under 100ms, and exerciseFamily's Mutex must stay held
	// through two leases of sleep).
	const lease = time.Second
	dial := func() *rlock.Client {
		c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{cl.Nodes()[0].Addr()}, Username: "locker", Password: "pw-locker"},
			rlock.WithWatchdogTimeout(lease))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c, c2 := dial(), dial()
	exerciseFamily(t, c, c2, lease)

	// A waiter subscribes (SSUBSCRIBE is in the rule) and is woken by the release: short
	// leases would let a waiter whose subscription was refused get through by its timer.
	m := c.Mutex(redistest.Name(t))
	require.NoError(t, m.LockLease(bg, time.Minute))
	got := make(chan error, 1)
	w := c2.Mutex(m.Name())
	go func() { got <- w.Lock(bg) }()
	waitShardSub(t, cl, m.Key()+":released")
	require.NoError(t, m.Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "the waiter woken by the release"))
	require.NoError(t, w.Unlock(bg))
}
