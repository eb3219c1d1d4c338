package pubsub

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/hashslot"
	"github.com/relock-go/relock/internal/redistest"
)

// The sharded Subscriber on a real 3-master, 3-replica Redis Cluster.

type shardEnv struct {
	t  *testing.T
	cl *redistest.Cluster
	rc rueidis.Client
	s  *Subscriber
}

func newShardEnv(t *testing.T, opts ...Option) *shardEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	cl := redistest.StartCluster(t)
	rc := cl.Client(t)
	s, err := New(rc, append([]Option{WithSharded(), WithLinger(0)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return &shardEnv{t: t, cl: cl, rc: rc, s: s}
}

// spublish sends one SPUBLISH through the cluster client (retried while the slot moves or
// its master fails over) and returns how many subscribers got it.
func (e *shardEnv) spublish(channel, msg string) int64 {
	e.t.Helper()
	var n int64
	redistest.WaitFor(e.t, waitTimeout, "SPUBLISH "+channel, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		n, err = e.rc.Do(ctx, e.rc.B().Spublish().Channel(channel).Message(msg).Build()).AsInt64()
		return err == nil
	})
	return n
}

// channelsOnMasters returns n channel names whose slots are served by every master of the
// cluster in turn.
func (e *shardEnv) channelsOnMasters(n int) ([]string, []*redistest.Server) {
	e.t.Helper()
	masters := e.cl.Masters(e.t)
	var names []string
	var homes []*redistest.Server
	for i := 0; len(names) < n; i++ {
		ch := fmt.Sprintf("{%s-%d}:released", redistest.Name(e.t), i)
		m := e.cl.MasterOf(e.t, ch)
		if m == masters[len(names)%len(masters)] {
			names, homes = append(names, ch), append(homes, m)
		}
	}
	return names, homes
}

// Channels whose slots live on every master: each is subscribed on its own master only
// (SHARDNUMSUB there, none elsewhere), a SPUBLISH wakes one waiter of its channel and no
// other, and the last waiter leaving unsubscribes it.
func TestSharded_channelsOnEveryMaster(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	names, homes := e.channelsOnMasters(6)
	var ws []*Waiter
	for _, ch := range names {
		ws = append(ws, watchLive(t, e.s, ch))
	}
	for i, ch := range names {
		for _, m := range e.cl.Masters(t) {
			want := int64(0)
			if m == homes[i] {
				want = 1
			}
			require.Equal(t, want, m.ShardNumSub(t, ch), "SHARDNUMSUB of %s on %s (home %s)", ch, m.Addr(), homes[i].Addr())
		}
	}
	for i, ch := range names {
		require.EqualValues(t, 1, e.spublish(ch, "x"))
		recv(t, ws[i], "SPUBLISH on "+ch)
		others := append(append([]*Waiter(nil), ws[:i]...), ws[i+1:]...)
		none(t, e.s, "a message of another channel", others...)
	}
	for i, w := range ws {
		w.Close()
		waitFor(t, "unsubscribed after the last waiter left", func() bool { return homes[i].ShardNumSub(t, names[i]) == 0 })
	}
}

// A slot migration ends the subscription on the old master (Redis sends sunsubscribe): the
// waiter is woken, and the channel is subscribed again on the new master, where a message
// wakes it.
func TestSharded_slotMigration(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	names, homes := e.channelsOnMasters(1)
	ch, from := names[0], homes[0]
	w := watchLive(t, e.s, ch)
	mark := e.s.Mark(ch)
	var to *redistest.Server
	for _, m := range e.cl.Masters(t) {
		if m != from {
			to = m
			break
		}
	}
	e.cl.MigrateSlot(t, int(hashslot.Of(ch)), to)
	recv(t, w, "the slot moved: the subscription ended")
	waitLive(t, e.s, w, ch)
	drain(w)
	require.False(t, w.Live(mark), "a mark of the old node")
	require.EqualValues(t, 1, to.ShardNumSub(t, ch))
	require.EqualValues(t, 0, from.ShardNumSub(t, ch))
	require.EqualValues(t, 1, e.spublish(ch, "x"))
	recv(t, w, "a message on the new master")
}

// subscribedOn returns the node where channel has a sharded subscriber (a master, or a
// replica of its slot: Redis propagates SPUBLISH to the shard's replicas), or nil.
func (e *shardEnv) subscribedOn(channel string) *redistest.Server {
	e.t.Helper()
	for _, n := range e.cl.Nodes() {
		if n.Running() && n.ShardNumSub(e.t, channel) > 0 {
			return n
		}
	}
	return nil
}

// delivered asserts that messages on channel reach w again: a message sent while the
// subscription is being made again may be lost (the confirmation then wakes w), so it
// publishes until w is woken.
func (e *shardEnv) delivered(w *Waiter, channel string) {
	e.t.Helper()
	redistest.WaitFor(e.t, waitTimeout, "a message on "+channel+" to wake its waiter", func() bool {
		drain(w)
		e.spublish(channel, "x")
		select {
		case <-w.C():
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
}

// A manual failover and a master killed: a waiter whose subscription ends (Redis ends
// sharded subscriptions on a demoted master) or whose node dies is woken (once subscribed
// again, for a dead node), and messages on its channel reach it again: its channel is
// subscribed again on a node of its shard (after the failover, the demoted master itself, now
// a replica: Redis propagates SPUBLISH to the shard's replicas).
func TestSharded_failoverAndKill(t *testing.T) {
	t.Parallel()
	e := newShardEnv(t)
	names, homes := e.channelsOnMasters(3)
	ch, master := names[0], homes[0]
	w := watchLive(t, e.s, ch)
	other := watchLive(t, e.s, names[1])

	e.cl.Failover(t, master)
	recv(t, w, "failover: the demoted master ended the subscription")
	waitLive(t, e.s, w, ch)
	e.delivered(w, ch)

	// A channel subscribed on a master that is killed: the channel is subscribed again on the
	// promoted replica, and its waiter woken.
	require.Equal(t, homes[1], e.subscribedOn(names[1]))
	e.cl.KillMaster(t, homes[1])
	recv(t, other, "the channel's master was killed")
	waitLive(t, e.s, other, names[1])
	e.delivered(other, names[1])
	require.Equal(t, e.cl.MasterOf(t, names[1]), e.subscribedOn(names[1]))
}

// A master killed: its channel's waiter is not woken while the channel has no subscription,
// but once it is subscribed again on the promoted replica (the confirmation's wake-up, as
// after any loss: a release published meanwhile reached nobody). A wake-up at the loss itself
// sent the waiter's next attempt to the node at the moment it died: rueidis may not have
// seen its connection to that node close yet, so the request could be written into it and
// its reply lost, and rlock replays such an acquire only within its cleanup timeout (5 s),
// which a failover may outlast (the node timeout plus an election): the Lock then failed with
// ErrUnknownOutcome, its waiter left, and the channel, having no waiter any more, was never
// subscribed again (rlock's TestObserver_subscriptionClusterKillMaster, about 3 runs in 11).
// Nothing else is woken (another master's channel), and the channel is told down, then up.
func TestSharded_killedMasterWakesOnceSubscribedAgain(t *testing.T) {
	t.Parallel()
	n := &notices{}
	e := newShardEnv(t, n.option())
	names, homes := e.channelsOnMasters(2)
	ch, master := names[0], homes[0]
	w := watchLive(t, e.s, ch)
	other := watchLive(t, e.s, names[1])

	// The first wake-up of w after the kill, and whether the channel was live then.
	liveAtWake := make(chan bool, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-w.C():
			liveAtWake <- e.s.Live(ch)
		case <-stop:
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()

	promoted := e.cl.KillMaster(t, master)
	select {
	case live := <-liveAtWake:
		require.True(t, live, "woken while the channel had no subscription (its connection to the killed master broke)")
	case <-time.After(waitTimeout):
		t.Fatalf("the waiter was not woken within %v of the promotion of %s", waitTimeout, promoted.Addr())
	}
	require.EqualValues(t, 1, promoted.ShardNumSub(t, ch), "subscribed again on the promoted replica")
	none(t, e.s, "a channel of another master", other)
	waitFor(t, "told down, then up", func() bool { return len(n.all()) >= 2 })
	got := n.all()
	require.Len(t, got, 2, "%+v", got)
	require.Equal(t, notice{channel: ch}, notice{channel: got[0].channel, up: got[0].up}, "%+v", got)
	require.Error(t, got[0].err)
	require.Equal(t, notice{channel: ch, up: true}, got[1])
	e.delivered(w, ch)
}

// WithSharded needs a client in Cluster mode.
func TestSharded_needsCluster(t *testing.T) {
	t.Parallel()
	_, c := redistest.Miniredis(t)
	_, err := New(c, WithSharded())
	require.ErrorContains(t, err, "Cluster")
}

// A cluster of one node (a developer's setup) reports its slots without a host (it never met
// another node to learn its address): the Subscriber finds it by its port.
func TestSharded_oneNodeCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: a one-node Redis Cluster (run without -short)")
	}
	srv := redistest.Start(t, redistest.WithArgs("--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf")))
	msg := srv.Do(t, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	require.NoError(t, msg.Error())
	redistest.WaitFor(t, waitTimeout, "the cluster to be ready", func() bool {
		msg := srv.Do(t, "CLUSTER", "INFO")
		s, _ := msg.ToString()
		return strings.Contains(s, "cluster_state:ok")
	})
	rc := srv.Client(t, func(o *rueidis.ClientOption) { o.ForceSingleClient = false })
	require.Equal(t, rueidis.ClientModeCluster, rc.Mode())
	s, err := New(rc, WithSharded())
	require.NoError(t, err)
	t.Cleanup(s.Close)
	ch := "{" + name(t) + "}:released"
	w := watchLive(t, s, ch)
	n, err := rc.Do(context.Background(), rc.B().Spublish().Channel(ch).Message("x").Build()).AsInt64()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	recv(t, w, "SPUBLISH on a one-node cluster")
}
