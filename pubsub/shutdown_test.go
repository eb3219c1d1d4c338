package pubsub

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
)

// Shutdown bounds Close's wait: while the connection is being dialled again to a server
// that accepts and never answers (rueidis sets it up under a context of its own, which no
// cancellation reaches: its HELLO waits out ConnWriteTimeout, 20 s here), Shutdown wakes the
// waiters, returns ctx's error when ctx ends, and Watch fails with ErrClosed. A later Close
// waits for the goroutine left dialling, which exits once the dial fails (here when the
// server drops its connections), dialling nothing more.
func TestShutdown_boundedWhileDialling(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	silent := redistest.StartSilent(t)
	sw := redistest.NewDialSwitch(silent.Addr())
	opt := sw.Option(srv.Addr()) // later dials are the Subscriber's
	opt.DisableCache = true
	opt.ConnWriteTimeout = 20 * time.Second
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	s, err := New(c)
	require.NoError(t, err)
	t.Cleanup(s.Close) // before silent's (cleanups run in reverse), after the test closed it: the dial has failed by then
	ch := name(t)
	w := watchLive(t, s, ch)
	drain(w)

	sw.RedialSubscriptions(t, srv) // to the silent server
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Shutdown(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a goroutine still dials: Shutdown must answer ctx's error")
	require.Less(t, took, 3*time.Second, "Shutdown waited for the dial (ConnWriteTimeout 20s)")
	before := sw.Dials()
	recv(t, w, "Shutdown")
	_, err = s.Watch(ch)
	require.ErrorIs(t, err, ErrClosed)

	silent.Close() // the dial fails: the goroutine exits
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close after Shutdown did not return once the dial failed")
	}
	require.NoError(t, s.Shutdown(context.Background()), "every goroutine has exited")
	require.Equal(t, before, sw.Dials(), "dialled again after Shutdown")
}

// Sharded, alike: a node connection being dialled to a master that accepts and never answers
// (SIGSTOPped) does not hold Shutdown past its ctx; once the node answers again, the
// goroutine left behind closes the connection it got without subscribing, and Close, which
// waits for it, returns.
func TestShutdown_shardedBoundedWhileDialling(t *testing.T) {
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
	homes[1].Pause(t)           // resumed below, or by the client's cleanup
	w, err := s.Watch(names[1]) // a connection to the paused node is dialled
	require.NoError(t, err)
	defer w.Close()
	select {
	case addr := <-dedicating:
		require.Equal(t, homes[1].Addr(), addr)
	case <-time.After(waitTimeout):
		t.Fatal("no connection to the paused node was asked for")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Shutdown(ctx)
	took := time.Since(start)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a goroutine still dials: Shutdown must answer ctx's error")
	require.Less(t, took, 3*time.Second, "Shutdown waited for the dial to the paused node")
	recv(t, w, "Shutdown")

	homes[1].Resume(t) // the dial completes
	closed := make(chan struct{})
	go func() {
		s.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close after Shutdown did not return once the node answered")
	}
	require.EqualValues(t, 0, homes[1].ShardNumSub(t, names[1]), "subscribed after Shutdown")
}
