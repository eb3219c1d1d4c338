package rlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// silentServer accepts connections and never answers: a client's handshake waits on it.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// DialContext returns when its context ends, with the context's cause, even while the
// server does not answer; the client it was making is closed behind it.
func TestDialContext_boundedByContext(t *testing.T) {
	// Last (cleanups run in reverse): once the server's cleanup closed its connections, the
	// abandoned handshake fails, its client is closed, and a rueidis refresh that it
	// scheduled sleeps up to a second: wait for both, so that goleak finds nothing.
	t.Cleanup(redistest.WaitRueidisGoroutines)
	addr := silentServer(t)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// Without the context, the handshake would wait out ConnWriteTimeout.
	c, err := rlock.DialContext(ctx, rueidis.ClientOption{InitAddress: []string{addr}, ConnWriteTimeout: 20 * time.Second})
	took := time.Since(start)
	require.Nil(t, c)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, took, 5*time.Second, "returned long after its context ended")
	// The server's cleanup closes its connections: the abandoned handshake ends, and the
	// client made behind it is closed (goleak, in TestMain, sees nothing left).
}

// DialContext with a context already ended, or nil, dials nothing.
func TestDialContext_endedOrNil(t *testing.T) {
	ctx, cancel := context.WithCancelCause(bg)
	cause := errors.New("shutting down")
	cancel(cause)
	_, err := rlock.DialContext(ctx, rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}})
	require.ErrorIs(t, err, cause)
	//lint:ignore SA1012 a nil context is what the test passes
	_, err = rlock.DialContext(nil, rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}})
	require.ErrorIs(t, err, rlock.ErrInvalid)
}

// DialContext on a live server makes a working Client; a context ended afterwards does not
// touch it (later dials are rueidis's own).
func TestDialContext_works(t *testing.T) {
	b := realBackend(t)
	ctx, cancel := context.WithCancel(bg)
	c, err := rlock.DialContext(ctx, rueidis.ClientOption{InitAddress: []string{b.srv.Addr()}})
	require.NoError(t, err)
	defer c.Close()
	cancel()
	m := c.Mutex(t.Name())
	require.NoError(t, m.Lock(bg))
	require.NoError(t, m.Unlock(bg))
}

// Close of a Client made by Dial returns promptly while its subscription connection is
// being dialled to a server that does not answer: Close ends that dial (its handshake would
// otherwise hold Close up to opt.Dialer.Timeout, here 20 s). The subscription connection is
// killed while a waiter listens; its next dial goes to a silent server.
func TestClose_endsASubscriptionDial(t *testing.T) {
	t.Cleanup(redistest.WaitRueidisGoroutines)
	srv := redistest.Start(t)
	silent := silentServer(t)
	var toSilent atomic.Bool
	dialled := make(chan struct{}, 16) // a dial to the silent server began
	opt := rueidis.ClientOption{
		InitAddress:       []string{srv.Addr()},
		ForceSingleClient: true,
		PipelineMultiplex: -1, // one connection for requests, dialled by Dial: later dials are the subscription's
		Dialer:            net.Dialer{Timeout: 20 * time.Second},
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
	}
	c, err := rlock.Dial(opt)
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
	require.Less(t, took, 5*time.Second, "Close waited for the subscription's dial (Dialer.Timeout 20s)")
	select {
	case err := <-waited:
		require.ErrorIs(t, err, rlock.ErrClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not end with the Client")
	}
}
