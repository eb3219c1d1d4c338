package rlock_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// waitInfo polls c.Inspect(name) until cond holds (state another goroutine is making, such
// as a waiter that parks), failing t after a generous bound.
func waitInfo(t *testing.T, c *rlock.Client, name string, what string, cond func(rlock.Info) bool) rlock.Info {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		in, err := c.Inspect(bg, name)
		require.NoError(t, err)
		if cond(in) {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) never showed %s; last: %+v", name, what, in)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// parkedAcquire starts fn (a blocking acquire of another Client) and returns a channel of its
// result; the test's cleanup cancels it.
func parkedAcquire(t *testing.T, fn func(ctx context.Context) error) <-chan error {
	ctx, cancel := context.WithCancel(bg)
	got, done := make(chan error, 1), make(chan struct{})
	go func() { defer close(done); got <- fn(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return got
}

// Inspect shows, for every primitive of the family, the kind, the holders with their hold
// counts and modes, the lease, the fencing token, the recorded waiters and the subscribers,
// as the scripts left them in Redis.
func TestInspect_family(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, c2 := b.client(t), b.client(t)
		base := redistest.Name(t)
		ctx := bg

		t.Run("none", func(t *testing.T) {
			in, err := c.Inspect(ctx, base+"-none")
			require.NoError(t, err)
			require.Equal(t, rlock.KindNone, in.Kind)
			require.Equal(t, "none", in.Type)
			require.Empty(t, in.Holders)
			require.Zero(t, in.TTL)
			require.False(t, in.ServerTime.IsZero())
		})

		t.Run("mutex", func(t *testing.T) {
			name := base + "-mutex"
			m := c.Mutex(name)
			require.NoError(t, m.Lock(ctx))
			require.NoError(t, m.Lock(ctx))
			token, err := m.Token(ctx)
			require.NoError(t, err)
			in, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			require.Equal(t, rlock.KindMutex, in.Kind)
			require.Equal(t, m.Key(), in.Key)
			require.Equal(t, token, in.Token)
			require.Equal(t, token, in.LastToken)
			require.Len(t, in.Holders, 1)
			h := in.Holders[0]
			require.True(t, strings.HasPrefix(h.Owner, "h:"+c.ID()+":"), h.Owner)
			require.Equal(t, int64(2), h.Holds)
			require.Equal(t, c.ID(), h.ClientID)
			require.Nil(t, h.Client, "no record without WithClientInfo")
			require.Greater(t, h.TTL, time.Duration(0))
			require.LessOrEqual(t, h.TTL, rlock.DefaultWatchdogTimeout)
			require.WithinDuration(t, in.ServerTime, h.Since, time.Minute, "the grant time read from the token")
			require.False(t, in.Contended)

			// A waiter of another Client: it subscribes, and its refusal marks the lock.
			got := parkedAcquire(t, func(ctx context.Context) error { return c2.Mutex(name).Lock(ctx) })
			in = waitInfo(t, c, name, "a subscribed, refused waiter", func(in rlock.Info) bool {
				return in.Subscribers == 1 && in.Contended
			})
			require.Empty(t, in.Waiters, "a Mutex's waiters are not recorded")
			require.NoError(t, m.Unlock(ctx))
			require.NoError(t, m.Unlock(ctx))
			require.NoError(t, await(t, got, 20*time.Second, "the waiter"))
			in = waitInfo(t, c, name, "the waiter as holder", func(in rlock.Info) bool { return len(in.Holders) == 1 && in.Holders[0].ClientID == c2.ID() })
			require.Greater(t, in.Token, token)
		})

		t.Run("context owner", func(t *testing.T) {
			name := base + "-owner"
			octx := rlock.WithOwner(ctx, "job-7")
			require.NoError(t, c.Mutex(name).Lock(octx))
			in, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			require.Len(t, in.Holders, 1)
			require.Equal(t, "u:job-7", in.Holders[0].Owner)
			require.Empty(t, in.Holders[0].ClientID)
			nctx := c2.WithNewOwner(ctx)
			require.NoError(t, c2.Mutex(name+"-new").Lock(nctx))
			in, err = c.Inspect(ctx, name+"-new")
			require.NoError(t, err)
			require.Equal(t, c2.ID(), in.Holders[0].ClientID, "WithNewOwner's ids name their Client")
		})

		t.Run("spin", func(t *testing.T) {
			name := base + "-spin"
			require.NoError(t, c.SpinMutex(name).Lock(ctx))
			in, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			require.Equal(t, rlock.KindMutex, in.Kind, "a spin lock is a Mutex in Redis")
			require.Len(t, in.Holders, 1)
		})

		t.Run("fair", func(t *testing.T) {
			name := base + "-fair"
			f := c.FairMutex(name)
			require.NoError(t, f.Lock(ctx))
			w1 := c2.FairMutex(name)
			got1 := parkedAcquire(t, func(ctx context.Context) error { return w1.Lock(ctx) })
			in := waitInfo(t, c, name, "one queued waiter", func(in rlock.Info) bool { return len(in.Waiters) == 1 })
			got2 := parkedAcquire(t, func(ctx context.Context) error { return c2.FairMutex(name).Lock(ctx) })
			in = waitInfo(t, c, name, "two queued waiters", func(in rlock.Info) bool { return len(in.Waiters) == 2 })
			require.Equal(t, rlock.KindFairMutex, in.Kind)
			require.Len(t, in.Holders, 1)
			require.Equal(t, c.ID(), in.Holders[0].ClientID)
			for i, w := range in.Waiters {
				require.Equal(t, c2.ID(), w.ClientID)
				require.GreaterOrEqual(t, w.Age, time.Duration(0))
				require.False(t, w.Since.IsZero())
				require.Greater(t, w.Expires, time.Duration(0))
				require.LessOrEqual(t, w.Expires, rlock.DefaultWaiterTimeout+time.Second, "a refresh may land between the reads")
				if i > 0 {
					require.False(t, w.Since.Before(in.Waiters[i-1].Since), "oldest first")
				}
			}
			require.NoError(t, f.Unlock(ctx))
			require.NoError(t, await(t, got1, 20*time.Second, "the head of the queue"))
			in = waitInfo(t, c, name, "the head as holder", func(in rlock.Info) bool { return len(in.Waiters) == 1 && len(in.Holders) == 1 })
			require.Equal(t, c2.ID(), in.Holders[0].ClientID)
			require.NoError(t, w1.Unlock(ctx))
			require.NoError(t, await(t, got2, 20*time.Second, "the second waiter"))
		})

		t.Run("rwmutex", func(t *testing.T) {
			name := base + "-rw"
			r1, r2 := c.RWMutex(name), c.RWMutex(name)
			require.NoError(t, r1.RLock(ctx))
			require.NoError(t, r1.RLock(ctx))
			require.NoError(t, r2.RLock(ctx))
			got := parkedAcquire(t, func(ctx context.Context) error { return c2.RWMutex(name).Lock(ctx) })
			in := waitInfo(t, c, name, "a waiting writer", func(in rlock.Info) bool { return len(in.Waiters) == 1 })
			require.Equal(t, rlock.KindRWMutex, in.Kind)
			require.Len(t, in.Holders, 2)
			counts := []int64{in.Holders[0].Holds, in.Holders[1].Holds}
			slices.Sort(counts)
			require.Equal(t, []int64{1, 2}, counts)
			for _, h := range in.Holders {
				require.Equal(t, "read", h.Mode)
				require.True(t, h.Since.IsZero(), "read holds carry no token")
				require.Greater(t, h.TTL, time.Duration(0))
			}
			w := in.Waiters[0]
			require.Equal(t, "write", w.Mode)
			require.Equal(t, c2.ID(), w.ClientID)
			require.Zero(t, w.Age, "a writer's arrival is not recorded")
			require.Greater(t, w.Expires, time.Duration(0))
			require.Zero(t, in.Token)
			require.NoError(t, r1.RUnlock(ctx))
			require.NoError(t, r1.RUnlock(ctx))
			require.NoError(t, r2.RUnlock(ctx))
			require.NoError(t, await(t, got, 20*time.Second, "the writer"))
			in, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			require.Len(t, in.Holders, 1)
			require.Equal(t, "write", in.Holders[0].Mode)
			require.Equal(t, int64(1), in.Holders[0].Holds)
			require.Positive(t, in.Token)
			require.Empty(t, in.Waiters)
		})

		t.Run("semaphore", func(t *testing.T) {
			name := base + "-sem"
			s := c.Semaphore(name)
			ok, err := s.TrySetPermits(ctx, 3)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, s.Acquire(ctx, 1))
			in, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			require.Equal(t, rlock.KindSemaphore, in.Kind, "its request log tells it from a latch")
			require.Equal(t, int64(2), in.Count)
			require.Less(t, in.TTL, time.Duration(0), "no expiry")
		})

		t.Run("permits", func(t *testing.T) {
			name := base + "-psem"
			p := c.PermitSemaphore(name)
			ok, err := p.TrySetPermits(ctx, 2)
			require.NoError(t, err)
			require.True(t, ok)
			permit, err := p.Acquire(ctx, time.Minute)
			require.NoError(t, err)
			in, err := c.Inspect(ctx, name)
			require.NoError(t, err)
			require.Equal(t, rlock.KindPermitSemaphore, in.Kind)
			require.Equal(t, int64(2), in.Count)
			require.Len(t, in.Holders, 1)
			require.Equal(t, permit.ID, in.Holders[0].Owner)
			require.Equal(t, "permit", in.Holders[0].Mode)
			require.Equal(t, c.ID(), in.Holders[0].ClientID)
			require.Greater(t, in.Holders[0].TTL, 30*time.Second)
		})

		t.Run("latch", func(t *testing.T) {
			name := base + "-latch"
			l := c.CountDownLatch(name)
			ok, err := l.TrySetCount(ctx, 3)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, l.CountDown(ctx))
			got := parkedAcquire(t, func(ctx context.Context) error { return c2.CountDownLatch(name).Await(ctx) })
			in := waitInfo(t, c, name, "a subscribed waiter", func(in rlock.Info) bool { return in.Subscribers == 1 })
			require.Equal(t, rlock.KindCount, in.Kind, "a latch looks like a semaphore")
			require.Equal(t, int64(2), in.Count)
			require.NoError(t, l.CountDown(ctx))
			require.NoError(t, l.CountDown(ctx))
			require.NoError(t, await(t, got, 20*time.Second, "the latch's waiter"))
		})

		t.Run("wrong type", func(t *testing.T) {
			name := base + "-list"
			key := c.Mutex(name).Key()
			_, err := b.do(t, "RPUSH", key, "x")
			require.NoError(t, err)
			in, err := c.Inspect(ctx, name)
			require.ErrorIs(t, err, rlock.ErrWrongType)
			require.Equal(t, "list", in.Type)
			require.Equal(t, key, in.Key)
		})
	})
}

// Inspect refuses bad input with ErrInvalid and a closed Client with ErrClosed, and never
// panics on a nil Client.
func TestInspect_invalid(t *testing.T) {
	var nilClient *rlock.Client
	_, err := nilClient.Inspect(bg, "x")
	require.ErrorIs(t, err, rlock.ErrInvalid)
	for _, err := range nilClient.List(bg, "") {
		require.ErrorIs(t, err, rlock.ErrInvalid)
	}
	_, rc := redistest.Miniredis(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	_, err = c.Inspect(bg, "")
	require.ErrorIs(t, err, rlock.ErrInvalid)
	require.NoError(t, c.Close())
	_, err = c.Inspect(bg, "x")
	require.ErrorIs(t, err, rlock.ErrClosed)
	n := 0
	for _, err := range c.List(bg, "*") {
		require.ErrorIs(t, err, rlock.ErrClosed)
		n++
	}
	require.Equal(t, 1, n)
}

// A Client made WithClientInfo keeps a record that Inspect shows beside the owner ids it
// made; the record expires by itself (three watchdog timeouts), and Close stops its writer.
func TestWithClientInfo_inspectShowsTheHolder(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		info := rlock.ClientInfo{App: "billing", Version: "v1.4.2", Host: "host-a", PID: 4121}
		c := b.client(t, rlock.WithClientInfo(info))
		plain := b.client(t)
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		in := waitInfo(t, plain, name, "the holder's record", func(in rlock.Info) bool {
			return len(in.Holders) == 1 && in.Holders[0].Client != nil
		})
		got := in.Holders[0].Client
		require.Equal(t, c.ID(), got.ID)
		require.Equal(t, "billing", got.App)
		require.Equal(t, "v1.4.2", got.Version)
		require.Equal(t, "host-a", got.Host)
		require.Equal(t, 4121, got.PID)
		require.WithinDuration(t, time.Now(), got.Started, time.Minute)

		ttl, err := b.do(t, "PTTL", rlock.DefaultKeyPrefix+"client:"+c.ID())
		require.NoError(t, err)
		ms, _ := ttl.AsInt64()
		require.Greater(t, ms, int64(0))
		require.LessOrEqual(t, ms, (3 * rlock.DefaultWatchdogTimeout).Milliseconds())
		require.NoError(t, m.Unlock(bg))
	})
}

// WithClientInfo fills what it is not told from the process, and refuses what it cannot
// keep with ErrInvalid.
func TestWithClientInfo_defaultsAndInvalid(t *testing.T) {
	d := rlock.DefaultClientInfo()
	require.NotZero(t, d.PID)
	require.NotEmpty(t, d.App)
	_, rc := redistest.Miniredis(t)
	_, err := rlock.New(rc, rlock.WithClientInfo(rlock.ClientInfo{PID: -1}))
	require.ErrorIs(t, err, rlock.ErrInvalid)
	_, err = rlock.New(rc, rlock.WithClientInfo(rlock.ClientInfo{App: strings.Repeat("a", 257)}))
	require.ErrorIs(t, err, rlock.ErrInvalid)

	c, err := rlock.New(rc, rlock.WithClientInfo(rlock.ClientInfo{App: "x"}), rlock.WithKeyPrefix("ci:"))
	require.NoError(t, err)
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := rc.Do(bg, rc.B().Get().Key("ci:client:"+c.ID()).Build()).ToString()
		if err == nil {
			require.Contains(t, v, `"app":"x"`)
			require.Contains(t, v, `"host":"`+d.Host+`"`, "the host from the process")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record written: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// List yields every name under the prefix that matches the pattern, of every kind, once,
// names with their own hash tag and escaped braces included, and free locks that only have
// waiters recorded; it skips fences and Client records, and stops when the loop breaks.
func TestList(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		prefix := "ls" + strings.ReplaceAll(redistest.Name(t), "/", "-") + ":"
		c := b.client(t, rlock.WithKeyPrefix(prefix), rlock.WithClientInfo(rlock.ClientInfo{}))
		ctx := bg
		names := []string{"inv:1", "inv:2", "{user42}:cart", "a}b{c", "100%", "inv:[x]"}
		for _, n := range names {
			require.NoError(t, c.Mutex(n).Lock(ctx))
		}
		ok, err := c.Semaphore("sem").TrySetPermits(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = c.CountDownLatch("latch").TrySetCount(ctx, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, c.RWMutex("rw").RLock(ctx))
		freed := c.Mutex("freed")
		require.NoError(t, freed.Lock(ctx)) // leaves a fence only
		require.NoError(t, freed.Unlock(ctx))
		// A free fair lock whose queue still holds a (dead) place.
		_, err = b.do(t, "ZADD", c.FairMutex("queued").Key()+":queue", "1", "h:x")
		require.NoError(t, err)

		list := func(pattern string) []string {
			var got []string
			for n, err := range c.List(ctx, pattern) {
				require.NoError(t, err)
				got = append(got, n)
			}
			slices.Sort(got)
			return got
		}
		all := append(slices.Clone(names), "sem", "latch", "rw", "queued")
		slices.Sort(all)
		require.Equal(t, all, list(""))
		require.Equal(t, all, list("*"))
		require.Equal(t, []string{"inv:1", "inv:2", "inv:[x]"}, list("inv:*"))
		require.Equal(t, []string{"inv:1"}, list("inv:[1]"))
		require.Equal(t, []string{"inv:[x]"}, list(`inv:\[*`))
		require.Equal(t, []string{"{user42}:cart"}, list("{user42}*"))
		require.Equal(t, []string{"a}b{c"}, list("a}*"))
		require.Equal(t, []string{"100%"}, list("1?0%"))
		require.Empty(t, list("nothing*"))

		n := 0
		for range c.List(ctx, "") {
			n++
			break
		}
		require.Equal(t, 1, n)
	})
}

// Inspect and List work on a Redis Cluster: List walks every master once (rueidis's Nodes
// also lists replicas), and Inspect counts the subscribers of the name's sharded channel on
// its slot's master.
func TestInspect_cluster(t *testing.T) {
	skipShortCluster(t)
	cl := startCluster(t)
	rc := cl.Client(t)
	c, err := rlock.New(rc)
	require.NoError(t, err)
	defer c.Close()
	c2, err := rlock.New(rc)
	require.NoError(t, err)
	defer c2.Close()
	base := redistest.Name(t)
	var names []string
	masters := map[string]bool{}
	for i := 0; len(masters) < 3 || len(names) < 12; i++ {
		n := base + "-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		names = append(names, n)
		masters[cl.MasterOf(t, c.Mutex(n).Key()).Addr()] = true
		require.NoError(t, c.Mutex(n).Lock(bg))
	}
	var got []string
	for n, err := range c.List(bg, base+"-*") {
		require.NoError(t, err)
		got = append(got, n)
	}
	slices.Sort(got)
	slices.Sort(names)
	require.Equal(t, names, got, "every name once, from every master")

	fair := base + "-fair"
	f := c.FairMutex(fair)
	require.NoError(t, f.Lock(bg))
	w := parkedAcquire(t, func(ctx context.Context) error { return c2.FairMutex(fair).Lock(ctx) })
	in := waitInfo(t, c, fair, "a queued, subscribed waiter", func(in rlock.Info) bool {
		return len(in.Waiters) == 1 && in.Subscribers == 1
	})
	require.Equal(t, rlock.KindFairMutex, in.Kind)
	require.Equal(t, c.ID(), in.Holders[0].ClientID)
	require.Equal(t, c2.ID(), in.Waiters[0].ClientID)
	require.Equal(t, int64(1), cl.MasterOf(t, f.Key()).ShardNumSub(t, f.Key()+":released"))
	require.NoError(t, f.Unlock(bg))
	require.NoError(t, await(t, w, 20*time.Second, "the waiter"))

	// Classic pub/sub on a Cluster: a subscriber is counted by the node it is connected
	// to, whichever that is: Inspect asks every node.
	cc1, err := rlock.New(rc, rlock.WithPubSub(rlock.PubSubClassic))
	require.NoError(t, err)
	defer cc1.Close()
	cc2, err := rlock.New(rc, rlock.WithPubSub(rlock.PubSubClassic))
	require.NoError(t, err)
	defer cc2.Close()
	classic := base + "-classic"
	cm := cc1.Mutex(classic)
	require.NoError(t, cm.Lock(bg))
	cw := parkedAcquire(t, func(ctx context.Context) error { return cc2.Mutex(classic).Lock(ctx) })
	in = waitInfo(t, cc1, classic, "a subscribed waiter", func(in rlock.Info) bool { return in.Subscribers == 1 && in.Contended })
	require.Equal(t, cc1.ID(), in.Holders[0].ClientID)
	require.NoError(t, cm.Unlock(bg))
	require.NoError(t, await(t, cw, 20*time.Second, "the classic waiter"))
}

// Inspect and List only read: on a server holding every kind of primitive, with waiters,
// they send only read-only commands (no script), and the locks' holders and waiters go on
// undisturbed.
func TestInspect_readsOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, c2 := b.client(t), b.client(t)
		base := redistest.Name(t)
		ctx := bg
		fm := c.FairMutex(base + "-fair")
		require.NoError(t, fm.Lock(ctx))
		got := parkedAcquire(t, func(ctx context.Context) error { return c2.FairMutex(base + "-fair").Lock(ctx) })
		waitInfo(t, c, base+"-fair", "a queued waiter", func(in rlock.Info) bool { return len(in.Waiters) == 1 })
		rw := c.RWMutex(base + "-rw")
		require.NoError(t, rw.RLock(ctx))
		_, err := c.Semaphore(base+"-sem").TrySetPermits(ctx, 1)
		require.NoError(t, err)
		_, err = c.PermitSemaphore(base+"-psem").TrySetPermits(ctx, 1)
		require.NoError(t, err)
		_, err = c.CountDownLatch(base+"-latch").TrySetCount(ctx, 1)
		require.NoError(t, err)

		// The commands the inspector sends (a PUBSUB with its subcommand).
		var mu sync.Mutex
		sent := map[string]int{}
		rec := &hookClient{Client: b.rueidis(t), every: func(cmds [][]string, _ bool) {
			mu.Lock()
			defer mu.Unlock()
			for _, args := range cmds {
				name := strings.ToUpper(args[0])
				if name == "PUBSUB" && len(args) > 1 {
					name += " " + strings.ToUpper(args[1])
				}
				sent[name]++
			}
		}}
		ins, err := rlock.New(rec)
		require.NoError(t, err)
		defer ins.Close()
		n := 0
		for name, err := range ins.List(ctx, base+"*") {
			require.NoError(t, err)
			_, err := ins.Inspect(ctx, name)
			require.NoError(t, err)
			n++
		}
		require.Equal(t, 5, n)
		readOnly := map[string]bool{"TYPE": true, "PTTL": true, "HGETALL": true, "GET": true, "ZRANGE": true,
			"EXISTS": true, "TIME": true, "PUBSUB NUMSUB": true, "SCAN": true}
		mu.Lock()
		require.Contains(t, sent, "SCAN")
		require.Contains(t, sent, "HGETALL")
		for cmd := range sent {
			require.True(t, readOnly[cmd], "the inspector sent %s", cmd)
		}
		mu.Unlock()
		require.NoError(t, fm.Unlock(ctx))
		require.NoError(t, await(t, got, 20*time.Second, "the fair waiter"))
		require.NoError(t, rw.RUnlock(ctx))
	})
}

// The rule InspectACLRule gives lets a user inspect and list, and nothing else; a user
// with ACLRule alone may not SCAN, and List says so with ErrNoPermission.
func TestInspectACLRule(t *testing.T) {
	srv := redistest.Start(t)
	// ACLRule allows a locker's Client record (a SET under the prefix).
	owner := aclUser(t, srv, "locker", "", rlock.WithClientInfo(rlock.ClientInfo{App: "billing"}))
	name := redistest.Name(t)
	require.NoError(t, owner.Mutex(name).Lock(bg))
	require.NoError(t, owner.RWMutex(name+"-rw").RLock(bg))

	args := append([]string{"ACL", "SETUSER", "inspector", "reset", "on", ">pw"}, inspectACLRule(t, "")...)
	srv.Do(t, args...)
	ins := dialAs(t, srv, "inspector", "pw")
	in := waitInfo(t, ins, name, "the holder's record", func(in rlock.Info) bool {
		return len(in.Holders) == 1 && in.Holders[0].Client != nil
	})
	require.Equal(t, "billing", in.Holders[0].Client.App)
	in, err := ins.Inspect(bg, name+"-rw")
	require.NoError(t, err)
	require.Equal(t, rlock.KindRWMutex, in.Kind)
	var got []string
	for n, err := range ins.List(bg, "") {
		require.NoError(t, err)
		got = append(got, n)
	}
	require.ElementsMatch(t, []string{name, name + "-rw"}, got)
	_, err = ins.Mutex(name).ForceUnlock(bg)
	require.ErrorIs(t, err, rlock.ErrNoPermission, "an inspector changes nothing")

	for _, err := range owner.List(bg, "") {
		require.ErrorIs(t, err, rlock.ErrNoPermission)
		require.Contains(t, err.Error(), "SCAN")
	}
	// The operator's rule of InspectACLRule's doc: ACLRule's, and the inspector's commands.
	op := append([]string{"ACL", "SETUSER", "operator", "reset", "on", ">pw"}, aclRule(t, "")...)
	op = append(op, "+scan", "+hgetall", "+zrange", "+time", "+exists", "+pubsub|numsub", "+pubsub|shardnumsub")
	srv.Do(t, op...)
	opc := dialAs(t, srv, "operator", "pw")
	_, err = opc.Inspect(bg, name)
	require.NoError(t, err)
	freed, err := opc.FairMutex(name).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, freed)
}

// dialAs returns a Client that logs in to srv as user, closed at cleanup.
func dialAs(t *testing.T, srv *redistest.Server, user, pw string) *rlock.Client {
	t.Helper()
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: pw})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ForceUnlockSeen frees a lock only while it is held as the Info seen shows it: a holder
// not seen, or another tenure (fencing token) of the same owner, leaves it alone with
// ErrConflict; holds seen that ended meanwhile are no change; a lock gone is (false, nil).
func TestClient_ForceUnlockSeen(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		a, c := b.client(t), b.client(t)
		inspect := func(name string) rlock.Info {
			t.Helper()
			in, err := a.Inspect(bg, name)
			require.NoError(t, err)
			return in
		}

		// Mutex: another owner took it since, then the owner seen took it again.
		name := redistest.Name(t)
		ma, mc := a.Mutex(name), c.Mutex(name)
		require.NoError(t, ma.Lock(bg))
		seen := inspect(name)
		require.NoError(t, ma.Unlock(bg))
		require.NoError(t, mc.Lock(bg))
		freed, err := a.ForceUnlockSeen(bg, seen)
		require.ErrorIs(t, err, rlock.ErrConflict)
		require.False(t, freed)
		require.NoError(t, mc.Err(bg), "a holder not seen keeps the lock")
		require.NoError(t, mc.Unlock(bg))
		require.NoError(t, ma.Lock(bg))
		_, err = a.ForceUnlockSeen(bg, seen)
		require.ErrorIs(t, err, rlock.ErrConflict, "the owner seen, in another tenure")
		require.NoError(t, ma.Err(bg))
		seen = inspect(name)
		freed, err = a.ForceUnlockSeen(bg, seen)
		require.NoError(t, err)
		require.True(t, freed)
		require.Equal(t, rlock.KindNone, inspect(name).Kind)
		freed, err = a.ForceUnlockSeen(bg, seen)
		require.NoError(t, err)
		require.False(t, freed, "nothing left to free")

		// FairMutex: as a Mutex.
		fa, fc := a.FairMutex(name+"-fair"), c.FairMutex(name+"-fair")
		require.NoError(t, fa.Lock(bg))
		seen = inspect(name + "-fair") // KindMutex while nobody queues
		require.NoError(t, fa.Unlock(bg))
		require.NoError(t, fc.Lock(bg))
		_, err = a.ForceUnlockSeen(bg, seen)
		require.ErrorIs(t, err, rlock.ErrConflict)
		freed, err = a.ForceUnlockSeen(bg, inspect(name+"-fair"))
		require.NoError(t, err)
		require.True(t, freed)

		// RWMutex: a reader not seen; a reader seen that left; the writer in another tenure.
		rw := name + "-rw"
		ra, rc := a.RWMutex(rw), c.RWMutex(rw)
		require.NoError(t, ra.RLock(bg))
		seen = inspect(rw)
		require.NoError(t, rc.RLock(bg))
		_, err = a.ForceUnlockSeen(bg, seen)
		require.ErrorIs(t, err, rlock.ErrConflict, "a reader not seen")
		both := inspect(rw)
		require.Len(t, both.Holders, 2)
		require.NoError(t, ra.RUnlock(bg))
		freed, err = a.ForceUnlockSeen(bg, both)
		require.NoError(t, err, "a reader seen that left is no change")
		require.True(t, freed)
		require.Equal(t, rlock.KindNone, inspect(rw).Kind)
		require.NoError(t, ra.Lock(bg))
		seen = inspect(rw)
		require.NoError(t, ra.Unlock(bg))
		require.NoError(t, ra.Lock(bg))
		_, err = a.ForceUnlockSeen(bg, seen)
		require.ErrorIs(t, err, rlock.ErrConflict, "the writer seen, in another tenure")
		freed, err = a.ForceUnlockSeen(bg, inspect(rw))
		require.NoError(t, err)
		require.True(t, freed)

		// Bad input: nothing sent, nothing freed.
		require.NoError(t, mc.Lock(bg))
		seen = inspect(name)
		for what, in := range map[string]rlock.Info{
			"no name":      {Kind: rlock.KindMutex, Key: seen.Key},
			"not a lock":   {Name: name, Key: seen.Key, Kind: rlock.KindSemaphore},
			"no kind":      {Name: name, Key: seen.Key},
			"another key":  {Name: name, Key: "other:" + seen.Key, Kind: rlock.KindMutex, Token: seen.Token, Holders: seen.Holders},
			"another name": {Name: name + "x", Key: seen.Key, Kind: rlock.KindMutex, Token: seen.Token, Holders: seen.Holders},
		} {
			freed, err := a.ForceUnlockSeen(bg, in)
			require.ErrorIs(t, err, rlock.ErrInvalid, what)
			require.False(t, freed, what)
		}
		var nilCtx context.Context
		_, err = a.ForceUnlockSeen(nilCtx, seen)
		require.ErrorIs(t, err, rlock.ErrInvalid)
		require.NoError(t, mc.Err(bg), "bad input freed nothing")
		require.NoError(t, mc.Unlock(bg))
	})
}

// List walks the keyspace once per node, with one SCAN MATCH for both forms of key (names
// wrapped in relock's tag and names with a tag of their own), and still yields each name
// once, with the default prefix and with the empty one, where every key of one form begins
// as a key of the other may. (It walked twice, once per form.)
func TestList_oneWalk(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		for _, prefix := range []string{rlock.DefaultKeyPrefix, ""} {
			// The walks of the keyspace: SCAN calls from cursor 0.
			var walks atomic.Int64
			rec := &hookClient{Client: b.rueidis(t), every: func(cmds [][]string, multi bool) {
				if args := cmds[0]; !multi && strings.EqualFold(args[0], "SCAN") && args[1] == "0" {
					walks.Add(1)
				}
			}}
			c, err := rlock.New(rec, rlock.WithKeyPrefix(prefix))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			names := []string{"inv:1", "{user42}:cart", "a}b{c", "100%", "{u}x", "x{"}
			var held []*rlock.Mutex
			for _, n := range names {
				m := c.Mutex(n)
				require.NoError(t, m.Lock(bg))
				held = append(held, m)
			}
			for _, tc := range []struct {
				pattern string
				want    []string
			}{
				{"", names},
				{"inv:*", []string{"inv:1"}},
				{"{user42}*", []string{"{user42}:cart"}},
				{"a}*", []string{"a}b{c"}},
				{"x{*", []string{"x{"}},
				{"100%", []string{"100%"}},
			} {
				walks.Store(0)
				var got []string
				for n, err := range c.List(bg, tc.pattern) {
					require.NoError(t, err)
					got = append(got, n)
				}
				require.ElementsMatch(t, tc.want, got, "prefix %q pattern %q", prefix, tc.pattern)
				require.EqualValues(t, 1, walks.Load(), "prefix %q pattern %q: walks of the keyspace (SCAN 0)", prefix, tc.pattern)
			}
			for _, m := range held { // the next prefix's walk must not meet these
				require.NoError(t, m.Unlock(bg))
			}
		}
	})
}
