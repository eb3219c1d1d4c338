package rlock_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// backend is a Redis the tests run against: miniredis (fast) or a real redis-server.
type backend struct {
	name string
	mr   *miniredis.Miniredis // nil for real Redis
	srv  *redistest.Server    // nil for miniredis
	cl   *redistest.Cluster   // a real Redis Cluster (then srv and mr are nil)
	rc   rueidis.Client       // cl's admin client
	// mrWriteTimeout, when set, is the ConnWriteTimeout of the rueidis clients to miniredis
	// (rueidis cuts a connection whose replies are that late; its default is 10 s).
	mrWriteTimeout time.Duration
}

// eachBackend runs fn as a subtest against miniredis and against a real redis-server that
// it starts (skipped with a clear message when none is installed, failed under CI).
func eachBackend(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		if testing.Short() && redisServerInstalled() {
			t.Skip("short: run on the real redis-server only (run without -short for miniredis too)")
		}
		mr := miniredis.RunT(t)
		b := &backend{name: "miniredis", mr: mr}
		b.syncClock(t)
		fn(t, b)
	})
	t.Run("redis", func(t *testing.T) {
		fn(t, realBackend(t))
	})
}

// eachBackendParallel is eachBackend with the two subtests side by side: for tests that wait
// out leases or timeouts with bounds of half a second or more, and touch no package-wide
// state (whether or not the test itself runs beside the others).
func eachBackendParallel(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Helper()
	eachBackend(t, func(t *testing.T, b *backend) {
		t.Parallel()
		fn(t, b)
	})
}

// redisServerInstalled reports whether the real backend can run (redistest finds
// redis-server on PATH): with -short, eachBackend then skips the miniredis one.
func redisServerInstalled() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// realBackend starts a real redis-server for t.
func realBackend(t *testing.T, opts ...redistest.Option) *backend {
	t.Helper()
	return &backend{name: "redis", srv: redistest.Start(t, opts...)}
}

// syncClock advances miniredis's clock with real time, so that leases expire there as they
// would on a real server.
func (b *backend) syncClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		last := time.Now()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				b.mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// rueidis returns a new rueidis client to the backend, closed at cleanup.
func (b *backend) rueidis(t *testing.T) rueidis.Client {
	t.Helper()
	if b.cl != nil {
		return b.cl.Client(t)
	}
	if b.srv != nil {
		return b.srv.Client(t)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{b.mr.Addr()},
		DisableCache:      true,
		AlwaysRESP2:       true,
		ForceSingleClient: true,
		ConnWriteTimeout:  b.mrWriteTimeout,
	})
	if err != nil {
		t.Fatalf("rueidis client to miniredis: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// client returns a new relock Client on its own rueidis client, closed at cleanup.
func (b *backend) client(t *testing.T, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	c, err := rlock.New(b.rueidis(t), opts...)
	if err != nil {
		t.Fatalf("rlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// do runs an admin command on the backend.
func (b *backend) do(t *testing.T, args ...string) (rueidis.RedisMessage, error) {
	t.Helper()
	if b.cl != nil {
		if len(args) == 3 && strings.EqualFold(args[0], "PUBSUB") {
			// PUBSUB NUMSUB / SHARDNUMSUB: asked of the master of the channel's slot.
			msg := b.cl.MasterOf(t, args[2]).Do(t, args...)
			return msg, msg.Error()
		}
		if b.rc == nil {
			b.rc = b.cl.Client(t)
		}
		cmd := b.rc.B().Arbitrary(args[0])
		if len(args) > 1 { // routed by its first argument, a key
			return b.rc.Do(context.Background(), cmd.Keys(args[1]).Args(args[2:]...).Build()).ToMessage()
		}
		return b.rc.Do(context.Background(), cmd.Build()).ToMessage()
	}
	if b.srv != nil {
		msg := b.srv.Do(t, args...)
		return msg, msg.Error()
	}
	c := b.rueidis(t)
	return c.Do(context.Background(), c.B().Arbitrary(args...).Build()).ToMessage()
}

// exists reports whether key exists.
func (b *backend) exists(t *testing.T, key string) bool {
	t.Helper()
	msg, err := b.do(t, "EXISTS", key)
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	n, _ := msg.AsInt64()
	return n == 1
}

// await returns the error ch delivers, failing t if none comes within d.
func await(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("timed out after %v: %s", d, what)
		return nil
	}
}

// within fails t unless ch closes within d.
func within(t *testing.T, d time.Duration, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// tryInTime runs try, a TryLock with a short fixed lease and no wait that must succeed, again
// while it fails with ErrLeaseExpired: on a loaded machine a grant can come back after its lease
// ran out, and TryLock then gives it back and returns that error (its documented outcome, which
// is not what these tests are about; LockLease tries again by itself). It fails t on any other
// error or a refusal, or after 20 late grants.
func tryInTime(t *testing.T, try func() (bool, error)) {
	t.Helper()
	for i := 1; ; i++ {
		ok, err := try()
		if !errors.Is(err, rlock.ErrLeaseExpired) || i == 20 {
			require.NoError(t, err, "attempt %d", i)
			require.True(t, ok, "attempt %d", i)
			return
		}
		t.Logf("attempt %d: the grant came back after its lease ran out (%v); again", i, err)
	}
}

var bg = context.Background()
