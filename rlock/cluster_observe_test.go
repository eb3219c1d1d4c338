package rlock_test

import (
	"context"
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
// master, and then whose master is killed (its replica promoted), is told down then up,
// exactly once each time; the waiter still gets the lock at the release.
func TestObserver_subscriptionCluster(t *testing.T) {
	skipShortCluster(t)
	cl := redistest.StartCluster(t)
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
	downUp := func(what string) {
		t.Helper()
		redistest.WaitFor(t, 30*time.Second, what+": the subscription to come back", func() bool {
			s := subsOf(r)
			return len(s) > 0 && s[len(s)-1].Up
		})
		waitShardSub(t, cl, channel)
		time.Sleep(500 * time.Millisecond) // anything told twice comes now
		s := subsOf(r)
		require.Len(t, s, 2, "%s: %+v", what, s)
		require.Equal(t, channel, s[0].Channel)
		require.False(t, s[0].Up)
		require.Error(t, s[0].Err)
		require.Equal(t, rlock.SubscriptionInfo{Channel: channel, Up: true}, s[1])
		r.take()
	}

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
	downUp("slot moved")

	// Its master is killed; the replica takes over.
	cl.KillMaster(t, cl.MasterOf(t, channel))
	downUp("master killed")

	require.NoError(t, holder.Unlock(bg))
	require.NoError(t, await(t, got, 30*time.Second, "the waiter"))
	require.NoError(t, waiter.Unlock(bg))
}
