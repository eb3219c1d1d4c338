package rlock_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Through Redis Sentinel: locking, pub/sub wake-up and renewal work, and keep working across
// a failover (SENTINEL FAILOVER promotes the replica): a lock held across it (its lease
// outlasting the failover) is renewed on the new master, a waiter parked across it is woken by
// the release there, and a fresh lock works there.
func TestSentinel_lockAcrossFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: multi-node topology: a master, a replica and a sentinel, across a failover (run without -short)")
	}
	master := redistest.Start(t)
	replica := redistest.Start(t, redistest.WithReplicaOf(master))
	sentinel := redistest.Start(t, redistest.WithSentinel(master, "relock"))
	viaSentinel := func(o *rueidis.ClientOption) {
		o.Sentinel = rueidis.SentinelOption{MasterSet: "relock"}
		o.ForceSingleClient = false
	}
	newClient := func() *rlock.Client {
		c, err := rlock.New(sentinel.Client(t, viaSentinel), rlock.WithWatchdogTimeout(10*time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// The Sentinel kills every client connection of the servers it reconfigures: ask the
	// replica through a client that reconnects, and treat a failed call as "not yet".
	rc := replica.Client(t)
	onReplica := func(args ...string) (rueidis.RedisMessage, error) {
		return rc.Do(bg, rc.B().Arbitrary(args...).Build()).ToMessage()
	}
	c1, c2 := newClient(), newClient()
	onMaster := &backend{name: "redis", srv: master} // where the waiters subscribe, before the failover
	name := redistest.Name(t)
	holder, waiter := c1.Mutex(name), c2.Mutex(name)

	// Through the Sentinel's master: a waiter of another Client is woken by the release.
	require.NoError(t, holder.Lock(bg))
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(bg) }()
	subscribed(t, onMaster, holder.Key()+":released", 1)
	require.NoError(t, holder.Unlock(bg))
	require.NoError(t, await(t, got, 10*time.Second, "the waiter to be woken through Sentinel"))
	require.NoError(t, waiter.Unlock(bg))

	// The Sentinel knows the replica, and the replica is in sync. A replica the Sentinel
	// found in the master's INFO is listed with flags "slave" before the Sentinel has had an
	// INFO reply from the replica itself (it was so when first listed in 5 of 5 tries here:
	// info-refresh 0, master-link-status mostly "err"); SENTINEL FAILOVER then refuses it
	// (NOGOODSLAVE, seen once under load): sentinelSelectSlave skips a replica whose last INFO
	// reply is older than 3 INFO periods (30s), and one never heard from counts as infinitely
	// old. So the wait also asks for an INFO reply from the replica (info-refresh, ms since it
	// came, 0 for never) that is recent and says the replica's link is up.
	redistest.WaitFor(t, 20*time.Second, "the Sentinel to know the replica in sync", func() bool {
		msg := replica.Do(t, "INFO", "replication")
		info, _ := msg.ToString()
		if !strings.Contains(info, "master_link_status:up") {
			return false
		}
		msg = sentinel.Do(t, "SENTINEL", "REPLICAS", "relock")
		reps, _ := msg.ToArray()
		for _, r := range reps {
			fields, _ := r.AsStrMap()
			refresh, err := strconv.ParseInt(fields["info-refresh"], 10, 64)
			if fields["port"] == strconv.Itoa(replica.Port()) && fields["flags"] == "slave" &&
				err == nil && refresh > 0 && refresh < 20_000 && fields["master-link-status"] == "ok" {
				return true
			}
		}
		return false
	})

	// A lock held across the failover, renewed by the watchdog, and a waiter parked on it.
	require.NoError(t, holder.Lock(bg))
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	go func() { got <- waiter.Lock(ctx) }()
	subscribed(t, onMaster, holder.Key()+":released", 1)
	redistest.WaitFor(t, 5*time.Second, "the lock to reach the replica", func() bool {
		msg, err := onReplica("EXISTS", holder.Key())
		n, _ := msg.AsInt64()
		return err == nil && n == 1
	})
	msg := sentinel.Do(t, "SENTINEL", "FAILOVER", "relock")
	require.NoError(t, msg.Error())
	redistest.WaitFor(t, 30*time.Second, "the replica to be promoted", func() bool {
		msg := sentinel.Do(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "relock")
		addr, _ := msg.AsStrSlice()
		return len(addr) == 2 && addr[1] == strconv.Itoa(replica.Port())
	})
	// The watchdog renews the lock on the new master (its lease, 10 s, outlasts the failover).
	pttl := func() int64 {
		msg, err := onReplica("PTTL", holder.Key())
		if err != nil {
			return -3
		}
		n, _ := msg.AsInt64()
		return n
	}
	var p0 int64
	redistest.WaitFor(t, 10*time.Second, "the promoted replica to answer", func() bool { p0 = pttl(); return p0 != -3 })
	require.Positive(t, p0, "the promoted replica has the lock")
	redistest.WaitFor(t, 20*time.Second, "a renewal on the new master", func() bool { return pttl() > p0+500 })
	require.NoError(t, holder.Err(bg), "still held after the failover")
	require.NoError(t, holder.Unlock(bg))
	require.NoError(t, await(t, got, 30*time.Second, "the parked waiter to be woken on the new master"))
	require.NoError(t, waiter.Unlock(bg))

	// A fresh lock on the new master.
	fresh := c1.Mutex(redistest.Name(t))
	require.NoError(t, fresh.Lock(bg))
	msg, err := onReplica("EXISTS", fresh.Key())
	require.NoError(t, err)
	n, err := msg.AsInt64()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the new master holds the new lock")
	require.NoError(t, fresh.Unlock(bg))
}
