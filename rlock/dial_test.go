package rlock_test

import (
	"context"
	"errors"
	"net"
	"sync"
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
