package rlock_test

import (
	"bytes"
	"runtime"
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
	sw := redistest.NewDialSwitch(redistest.StartSilent(t).Addr())
	opt := sw.Option(srv.Addr()) // later dials are the subscription's
	opt.DisableCache = true
	opt.ConnWriteTimeout = 10 * time.Second
	rc, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	defer rc.Close()
	c, err := rlock.New(rc, rlock.WithCleanupTimeout(cleanup))
	require.NoError(t, err)
	defer c.Close()
	took := closeWhileSubscriptionRedials(t, srv, c, sw)
	require.Less(t, took, cleanup+3*time.Second, "Close waited for the subscription's handshake (ConnWriteTimeout 10s)")
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
