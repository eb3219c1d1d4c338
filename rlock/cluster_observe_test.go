package rlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// subsOf returns the Subscription events of r so far.
func subsOf(r *recorder) []rlock.SubscriptionInfo {
	var out []rlock.SubscriptionInfo
	for _, e := range r.all() {
		if s, ok := e.(rlock.SubscriptionInfo); ok {
			out = append(out, s)
		}
	}
	return out
}

// On a real Cluster with sharded pub/sub, a waiter's channel whose slot moves to another
// master, then fails over to its replica (a manual failover), is told down then up, exactly
// once each time; the waiter still gets the lock at the release.
func TestObserver_subscriptionCluster(t *testing.T) {
	subscriptionCluster(t, func(cl *redistest.Cluster, channel string, downUp func(string, *redistest.Server)) {
		// The slot moves to another master: Redis unsubscribes the channel there.
		slot := redistest.Slot(channel)
		from := cl.MasterOf(t, channel)
		var to *redistest.Server
		for _, m := range cl.Masters(t) {
			if m != from {
				to = m
				break
			}
		}
		cl.MigrateSlot(t, slot, to)
		downUp("slot moved", nil)

		// Its master fails over to its replica. The subscriber may subscribe again on the
		// demoted master, now a replica of the shard (Redis serves SSUBSCRIBE there, and
		// propagates SPUBLISH to it within the shard). A failover back then changes nothing
		// for it: it is not told (not checked here).
		demoted := cl.MasterOf(t, channel)
		cl.Failover(t, demoted)
		downUp("manual failover", demoted)
	})
}

// A waiter's channel whose master is killed (its replica promoted) is told down, then up.
//
// This failed about 3 runs in 11 (down, never up): the broken subscription woke the waiter,
// whose attempt went to the master as it died and lost its reply; its replay, bounded by the
// cleanup timeout (5 s), could end before the promotion, and Lock failed with
// ErrUnknownOutcome: the waiter left, and its channel, with no waiter, was not subscribed
// again. A broken connection now wakes nobody before the channel is subscribed again (pubsub's
// TestSharded_killedMasterWakesOnceSubscribedAgain, which guards it). This test no longer
// does: with that wake-up at the break put back, it passed 11 runs in 11 on the acquire
// paths of today (16 in 16 without it). When the subscription does not come back, it logs
// whether the waiter's Lock had returned, which tells a waiter that left from a channel the
// Subscriber lost.
func TestObserver_subscriptionClusterKillMaster(t *testing.T) {
	subscriptionCluster(t, func(cl *redistest.Cluster, channel string, downUp func(string, *redistest.Server)) {
		master := cl.MasterOf(t, channel)
		// The holder's lock must survive the kill (replication is asynchronous, and a
		// replica that has just synced gets the stream only after its first acknowledgement,
		// up to a second later): else the promoted replica has no lock, the waiter gets it
		// and the holder's Unlock fails.
		cl.WaitReplicated(t, master, 20*time.Second)
		cl.KillMaster(t, master)
		downUp("master killed", nil)
	})
}

// subscriptionCluster starts a Cluster, parks a waiter of an observed Client on a lock
// held by another Client, runs faults (which call downUp after each change), then
// releases the lock and checks that the waiter gets it.
func subscriptionCluster(t *testing.T, faults func(cl *redistest.Cluster, channel string, downUp func(string, *redistest.Server))) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	holderC, err := rlock.New(rc)
	require.NoError(t, err)
	defer holderC.Close()
	r := &recorder{}
	c, err := rlock.New(rc, rlock.WithObserver(r.observer()))
	require.NoError(t, err)
	defer c.Close()

	name := redistest.Name(t)
	holder := holderC.Mutex(name)
	require.NoError(t, holder.Lock(bg))
	waiter := c.Mutex(name)
	channel := waiter.Key() + ":released"
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	waitShardSub(t, cl, channel)
	require.Empty(t, subsOf(r), "a first subscription is not a change")

	// downUp waits for the channel to be served again after a change, and checks that it
	// was told down (with why), then up, once each, and nothing more a while later.
	// replica, when not nil, is the replica of the slot's master that may serve the
	// channel too (Redis serves SSUBSCRIBE on a replica, and propagates SPUBLISH to it
	// within the shard).
	downUp := func(what string, replica *redistest.Server) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for s := subsOf(r); len(s) == 0 || !s[len(s)-1].Up; s = subsOf(r) {
			if time.Now().After(deadline) {
				// A channel whose waiter left is not subscribed again, by design: say
				// whether the waiter's Lock returned (and why), to tell that from a
				// channel with waiters that the Subscriber lost.
				select {
				case err := <-got:
					t.Logf("%s: the waiter's Lock returned: %v", what, err)
				default:
					t.Logf("%s: the waiter's Lock still waits", what)
				}
				t.Fatalf("%s: the subscription did not come back within 30s; told: %+v; SHARDNUMSUB on %s: %d",
					what, s, cl.MasterOf(t, channel).Addr(), cl.MasterOf(t, channel).ShardNumSub(t, channel))
			}
			time.Sleep(10 * time.Millisecond)
		}
		told := subsOf(r)
		deadline = time.Now().Add(10 * time.Second)
		served := func() bool {
			return cl.MasterOf(t, channel).ShardNumSub(t, channel) > 0 || replica != nil && replica.ShardNumSub(t, channel) > 0
		}
		for !served() {
			if time.Now().After(deadline) {
				var where []string
				for _, n := range cl.Nodes() {
					if n.Running() {
						where = append(where, fmt.Sprintf("%s:%d", n.Addr(), n.ShardNumSub(t, channel)))
					}
				}
				t.Fatalf("%s: told %+v, but no subscription in the slot's shard (master %s) 10s later (SHARDNUMSUB per node: %v)",
					what, told, cl.MasterOf(t, channel).Addr(), where)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(500 * time.Millisecond) // anything told twice comes now
		s := subsOf(r)
		require.Len(t, s, 2, "%s: %+v", what, s)
		require.Equal(t, channel, s[0].Channel)
		require.False(t, s[0].Up)
		require.Error(t, s[0].Err)
		require.Equal(t, rlock.SubscriptionInfo{Channel: channel, Up: true}, s[1])
		r.take()
	}

	faults(cl, channel, downUp)

	require.NoError(t, holder.Unlock(bg))
	require.NoError(t, await(t, got, 30*time.Second, "the waiter"))
	require.NoError(t, waiter.Unlock(bg))
}
