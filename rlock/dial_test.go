package rlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// DialContext returns when its context ends, with the context's cause, even while the
// server does not answer; the client it was making is closed behind it.
func TestDialContext_boundedByContext(t *testing.T) {
	// Last (cleanups run in reverse): once the server's cleanup closed its connections, the
	// abandoned handshake fails, its client is closed, and a rueidis refresh that it
	// scheduled sleeps up to a second: wait for both, so that goleak finds nothing.
	t.Cleanup(redistest.WaitRueidisGoroutines)
	addr := redistest.StartSilent(t).Addr()
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
// otherwise hold Close until rueidis gives it up, or until the cleanup timeout). The
// subscription connection is killed while a waiter listens; its next dial goes to a silent
// server.
func TestClose_endsASubscriptionDial(t *testing.T) {
	t.Cleanup(redistest.WaitRueidisGoroutines)
	srv := redistest.Start(t)
	sw := redistest.NewDialSwitch(redistest.StartSilent(t).Addr())
	// Later dials are the subscription's. A cleanup timeout longer than rueidis's bound on
	// the handshake (ConnWriteTimeout, 10 s by default): a Close that does not end the dial
	// waits it out, well past the bound below (the default, 5 s, would end the wait at 5 s).
	c, err := rlock.Dial(sw.Option(srv.Addr()), rlock.WithCleanupTimeout(time.Minute))
	require.NoError(t, err)
	defer c.Close()
	took := closeWhileSubscriptionRedials(t, srv, c, sw)
	require.Less(t, took, 5*time.Second, "Close waited for the subscription's dial (ConnWriteTimeout, 10s by default)")
}

// closeWhileSubscriptionRedials closes c while its subscription connection is dialled
// again through sw (to a silent server): another Client of srv holds a lock that a Lock of
// c waits for, srv drops c's subscription connection, and c's Close begins once its dial
// has begun. It returns how long Close took; the waiting Lock must end with ErrClosed.
func closeWhileSubscriptionRedials(t *testing.T, srv *redistest.Server, c *rlock.Client, sw *redistest.DialSwitch) time.Duration {
	t.Helper()
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

	sw.RedialSubscriptions(t, srv)
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	select {
	case err := <-waited:
		require.ErrorIs(t, err, rlock.ErrClosed)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not end with the Client")
	}
	return took
}
