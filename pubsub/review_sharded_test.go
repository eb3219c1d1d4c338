package pubsub

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/hashslot"
	"github.com/relock-go/relock/internal/redistest"
)

// Review tests of the sharded Subscriber (real 3+3 Redis Cluster; skipped under -short).

// reviewOtherMaster returns a master other than m.
func reviewOtherMaster(t *testing.T, cl *redistest.Cluster, m *redistest.Server) *redistest.Server {
	t.Helper()
	for _, o := range cl.Masters(t) {
		if o != m {
			return o
		}
	}
	t.Fatal("no other master")
	return nil
}

// A Mark taken while the channel is live must not be Live after the subscription was lost
// and made again: a release published in between reached nobody. Here the slot moves away
// (Redis ends the subscription: sunsubscribe), a SPUBLISH reaches no subscriber, the slot
// comes back, and the channel is subscribed again on the same node connection: same conn
// object, same generation (gen is bumped only on a reconnect), same seq (no message was
// received). Waiter.Live(mark) then says that no release since the mark can have been missed,
// which is false: a caller whose attempt failed before that SPUBLISH would skip its retry
// (rlock/wait.go) and sleep until the holder's lease ends.
func TestReviewSharded_markLiveAcrossSlotRoundTrip(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	cl := redistest.StartCluster(t)
	rc := cl.Client(t)
	// A long linger: the channel stays known (and its mark comparable) while nobody waits.
	s, err := New(rc, WithSharded(), WithLinger(time.Minute))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	e := &shardEnv{t: t, cl: cl, rc: rc, s: s}

	ch := "{" + redistest.Name(t) + "}:released"
	from := cl.MasterOf(t, ch)
	to := reviewOtherMaster(t, cl, from)
	slot := int(hashslot.Of(ch))

	w0 := watchLive(t, s, ch)
	mark := s.Mark(ch) // taken before an attempt that fails
	require.True(t, w0.Live(mark))
	w0.Close() // the channel lingers, subscribed on from

	cl.MigrateSlot(t, slot, to)
	waitFor(t, "the subscription to end (sunsubscribe)", func() bool { return !s.Live(ch) })
	// The holder releases now: nobody hears it.
	require.EqualValues(t, 0, e.spublish(ch, "released"), "the release reached a subscriber")
	cl.MigrateSlot(t, slot, from)

	w1 := watch(t, s, ch) // another waiter subscribes the channel again, on from
	waitLive(t, s, w1, ch)
	drain(w1)
	w2 := watch(t, s, ch) // the caller of the failed attempt
	require.False(t, w2.Live(mark),
		"Live(mark) is true although the subscription was lost after the mark and a release published then reached nobody")
}

// The same on a manual failover, with a waiter present throughout: the demoted master ends
// the subscription (sunsubscribe), and the Subscriber subscribes again on the same node (now
// a replica, which serves SSUBSCRIBE for its master's slots) over the same connection. A
// release published on the promoted master between the two is lost, yet a mark taken before
// the failover is still Live.
func TestReviewSharded_markLiveAcrossFailover(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	e := newShardEnv(t)
	names, homes := e.channelsOnMasters(1)
	ch, master := names[0], homes[0]
	w1 := watchLive(t, e.s, ch)
	mark := e.s.Mark(ch)

	e.cl.Failover(t, master)
	recv(t, w1, "failover: the demoted master ended the subscription")
	waitLive(t, e.s, w1, ch)
	drain(w1)
	require.NotNil(t, e.subscribedOn(ch))
	t.Logf("subscribed again on %s (old master %s)", e.subscribedOn(ch).Addr(), master.Addr())

	w2 := watch(t, e.s, ch)
	require.False(t, w2.Live(mark),
		"Live(mark) is true although the subscription ended after the mark (a release in the gap is lost)")
}

// reviewSlotsSignal is a client that signals each CLUSTER SLOTS it is about to send.
// With waiting set, it also signals there when rueidis, sending a CLUSTER SLOTS, asks for
// its context's deadline or Done channel: the request is under way (on a connection already
// up, rueidis asks just before it sends the request and waits for the reply, whether on its
// synchronous path, which a cancellation does not reach, or its queue; when it must dial a
// connection first, at the dial). With dedicating set, it also sends the address of each
// node connection dedicated.
type reviewSlotsSignal struct {
	rueidis.Client
	asked      chan struct{}
	waiting    chan struct{}
	dedicating chan string
}

// reviewCtxAsked is a context that signals on ch (without blocking) each time its deadline
// or its Done channel is asked for.
type reviewCtxAsked struct {
	context.Context
	ch chan struct{}
}

func (c reviewCtxAsked) signal() {
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

func (c reviewCtxAsked) Deadline() (time.Time, bool) {
	c.signal()
	return c.Context.Deadline()
}

func (c reviewCtxAsked) Done() <-chan struct{} {
	c.signal()
	return c.Context.Done()
}

func (c reviewSlotsSignal) Nodes() map[string]rueidis.Client {
	nodes := c.Client.Nodes()
	if c.dedicating == nil {
		return nodes
	}
	out := make(map[string]rueidis.Client, len(nodes))
	for addr, n := range nodes {
		out[addr] = reviewDedicateSignal{Client: n, addr: addr, ch: c.dedicating}
	}
	return out
}

// reviewDedicateSignal is a node client that sends its address before each Dedicate.
type reviewDedicateSignal struct {
	rueidis.Client
	addr string
	ch   chan string
}

func (c reviewDedicateSignal) Dedicate() (rueidis.DedicatedClient, func()) {
	select {
	case c.ch <- c.addr:
	default:
	}
	return c.Client.Dedicate()
}

func (c reviewSlotsSignal) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if cs := cmd.Commands(); len(cs) >= 2 && cs[0] == "CLUSTER" && cs[1] == "SLOTS" {
		select {
		case c.asked <- struct{}{}:
		default:
		}
		if c.waiting != nil {
			ctx = reviewCtxAsked{Context: ctx, ch: c.waiting}
		}
	}
	return c.Client.Do(ctx, cmd)
}

// Close must not wait for a CLUSTER SLOTS that does not answer. The router asks it with a 5 s
// timeout derived from the Subscriber's context; rueidis (no client-side cache: the
// connection is in its synchronous mode, as rlock.Dial makes it) observes only the deadline,
// not the cancellation, so Close waits until the timeout.
//
// rueidis sends a keyless command such as CLUSTER SLOTS to any node it knows, and connects
// to a node only on its first request there; a connection's setup is out of reach of the
// cancellation (Close's documented bound, TestReviewSharded_closeWhileConnDials). So every
// node's connection is made before the nodes are paused, and Close comes once rueidis is
// waiting for the reply (reviewSlotsSignal.waiting), not merely once the router is about to
// ask: the test once closed the Subscriber on the router's signal, which under no load was
// nearly always before the router's Do had begun (a Close that could not fail), and under
// load (a loaded go test ./...) once after rueidis had begun to connect to a node not yet
// connected to, waiting 5.0 s for that dial's HELLO (reproduced with the router given 200ms
// to get into its Do: 1 of 6 runs took 4.8 s, its goroutine in rueidis's _newPipe, HELLO).
func TestReviewSharded_closeWhileRouterAsks(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	cl := redistest.StartCluster(t)
	rc := cl.Client(t, func(o *rueidis.ClientOption) { o.DisableCache = true })
	waiting := make(chan struct{}, 1)
	s, err := New(reviewSlotsSignal{Client: rc, asked: make(chan struct{}, 1), waiting: waiting}, WithSharded(), WithLinger(0))
	require.NoError(t, err)
	t.Cleanup(s.Close)

	// rueidis knows every node and is connected to each: whichever node it picks, the
	// CLUSTER SLOTS goes out on an existing connection.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	require.NoError(t, rc.Do(ctx, rc.B().ClusterSlots().Build()).Error())
	nodes := rc.Nodes()
	require.NotEmpty(t, nodes)
	for addr, n := range nodes {
		require.NoError(t, n.Do(ctx, n.B().Ping().Build()).Error(), "node %s", addr)
	}
	cancel()
	for _, n := range cl.Nodes() {
		n.Pause(t) // resumed by the client's cleanup
	}
	w, err := s.Watch("{" + redistest.Name(t) + "}:released") // the router asks CLUSTER SLOTS
	require.NoError(t, err)
	defer w.Close()
	select {
	case <-waiting:
	case <-time.After(waitTimeout):
		t.Fatal("the router's CLUSTER SLOTS never reached rueidis's wait")
	}

	start := time.Now()
	s.Close()
	took := time.Since(start)
	for _, n := range cl.Nodes() {
		n.Resume(t)
	}
	require.Less(t, took, 2*time.Second, "Close waited for the router's CLUSTER SLOTS")
}

// Close waits for a node connection that is being dialled, but no longer than rueidis's
// own bound: the conn loop gets its dedicated connection with node.Dedicate(), which rueidis
// dials (HELLO included) under context.Background(), out of reach of the Subscriber's
// cancellation. A node that accepts the TCP connection but does not answer (here
// SIGSTOPped) holds Close for rueidis's dial timeout (5 s here); the classic mode's
// s.client.Dedicate() behaves alike. Documented on Close; the test holds it to that bound.
func TestReviewSharded_closeWhileConnDials(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	cl := redistest.StartCluster(t)
	rc := cl.Client(t)
	dedicating := make(chan string, 16)
	s, err := New(reviewSlotsSignal{Client: rc, asked: make(chan struct{}, 1), dedicating: dedicating}, WithSharded(), WithLinger(0))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	e := &shardEnv{t: t, cl: cl, rc: rc, s: s}
	names, homes := e.channelsOnMasters(2) // on the first two masters
	watchLive(t, s, names[0])              // the Subscriber knows the slots now
	require.Equal(t, homes[0].Addr(), <-dedicating)
	homes[1].Pause(t)           // resumed by the client's cleanup
	w, err := s.Watch(names[1]) // a connection to the paused node is dialled
	require.NoError(t, err)
	defer w.Close()
	select {
	case addr := <-dedicating:
		require.Equal(t, homes[1].Addr(), addr)
	case <-time.After(waitTimeout):
		t.Fatal("no connection to the paused node was asked for")
	}

	start := time.Now()
	s.Close()
	took := time.Since(start)
	homes[1].Resume(t)
	require.Less(t, took, 8*time.Second, "Close waited for a dial to a node that does not answer beyond rueidis's bound")
}
