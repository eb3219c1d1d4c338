package rlock_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// Close of a Client made by New returns within its cleanup timeout (plus a generous margin)
// while its subscription connection is being dialled to a server that accepts and never
// answers: the rueidis client, the caller's, sets that connection up under a context of its
// own (HELLO waits out ConnWriteTimeout, 10 s here), which Close cannot end. Before, Close
// waited for it (10.0 s).
func TestClose_newBoundedByCleanupTimeout(t *testing.T) {
	// Last (cleanups run in reverse): once the silent server's cleanup closed its
	// connections, the abandoned handshake fails and the subscription goroutine left
	// behind exits; wait for it and for rueidis's own, so that goleak finds nothing.
	t.Cleanup(func() {
		waitNoGoroutine(t, "pubsub.(*Subscriber).loop", 20*time.Second)
		redistest.WaitRueidisGoroutines()
	})
	const cleanup = 300 * time.Millisecond
	srv := redistest.Start(t)
	silent := silentServer(t)
	var toSilent atomic.Bool
	dialled := make(chan struct{}, 16) // a dial to the silent server began
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{srv.Addr()},
		DisableCache:      true,
		ForceSingleClient: true,
		PipelineMultiplex: -1, // one connection for requests, dialled now: later dials are the subscription's
		Dialer:            net.Dialer{Timeout: 20 * time.Second},
		ConnWriteTimeout:  10 * time.Second,
		DialCtxFn: func(ctx context.Context, addr string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			if toSilent.Load() {
				select {
				case dialled <- struct{}{}:
				default:
				}
				addr = silent
			}
			return d.DialContext(ctx, "tcp", addr)
		},
	})
	require.NoError(t, err)
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	holder, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer holder.Close()
	name := redistest.Name(t)
	require.NoError(t, holder.Mutex(name).Lock(bg))
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- c.Mutex(name).Lock(ctx) }()
	waitInfo(t, holder, name, "the waiter's subscription", func(in rlock.Info) bool { return in.Subscribers == 1 })

	toSilent.Store(true)
	srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
	select {
	case <-dialled:
	case <-time.After(20 * time.Second):
		t.Fatal("the subscription connection was not dialled again")
	}
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	require.Less(t, took, cleanup+3*time.Second, "Close waited for the subscription's handshake (ConnWriteTimeout 10s)")
	select {
	case err := <-waited:
		require.ErrorIs(t, err, rlock.ErrClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not end with the Client")
	}
}

// waitNoGoroutine waits up to d for no goroutine to run a function whose name contains fn.
func waitNoGoroutine(t *testing.T, fn string, d time.Duration) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(d)
	for {
		n := runtime.Stack(buf, true)
		if n == len(buf) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if !bytes.Contains(buf[:n], []byte(fn)) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("a goroutine in %s still runs %v after the test", fn, d)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
