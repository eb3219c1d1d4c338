package main

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/relock-go/relock/rlock"
)

// lib is one library in one configuration.
type lib struct {
	name    string // as in the CSV's lib column
	config  string // what the configuration is, for the README
	renewal string // how held locks are kept alive in the held scenario
	open    func(addr string, o openOpts) (instance, error)
}

// openOpts are the scenario's demands on an instance.
type openOpts struct {
	lease time.Duration // > 0: the lease of held locks, renewed while held (held scenario)
}

// instance is an open client of a library: one per process in real life.
type instance interface {
	handle(key string) handle
	// renewPeriod is how often a held lock is renewed under opts.lease.
	renewPeriod(lease time.Duration) time.Duration
	close()
}

// handle is one owner's lock on one key (a mutex object, or the key for libraries without
// one). It is used by one goroutine at a time.
type handle interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
	held() bool // the lock is still ours (held scenario, checked after the hold)
}

var libs = []lib{
	{
		name:    "relock",
		config:  "rlock.Dial(rueidis.ClientOption{InitAddress}), as the README shows: relock makes its rueidis client with DisableCache (no client-side-caching invalidation hook, so rueidis keeps a lone request on its synchronous path: no goroutine hand-over per call) and closes it on Close; relock options default (pub/sub wake-up, watchdog)",
		renewal: "built-in watchdog: one goroutine per Client, batched renew scripts",
		open:    openRelockDial,
	},
	{
		name:    "relock-new",
		config:  "rlock.New(rueidis.NewClient(rueidis.ClientOption{InitAddress})): a user's rueidis client with every default, client-side caching on (which keeps every connection in rueidis's background mode: each request crosses a writer and a reader goroutine); relock options default",
		renewal: "built-in watchdog: one goroutine per Client, batched renew scripts",
		open:    openRelockNew,
	},
	{
		name:    "relock-nocancel",
		config:  "relock as \"relock\", each Lock given context.WithoutCancel(ctx): a context that cannot end, so that Lock sends on the caller's goroutine, without the hand-over to a goroutine of its own that bounds a cancellable Lock by its context's end (README guarantee 6; the peers give no such bound): what that bound costs, in the same run",
		renewal: "built-in watchdog: one goroutine per Client, batched renew scripts",
		open:    openRelockNoCancel,
	},
	{
		name:    "redsync-default",
		config:  "redsync v4 on a go-redis v9 pool, default options: 32 tries, 50-250 ms random retry delay, 8 s expiry",
		renewal: "none built in: one goroutine per lock calling ExtendContext (user code)",
		open:    openRedsync(false),
	},
	{
		name:    "redsync-tuned",
		config:  "redsync: WithRetryDelay(1ms), unlimited tries; go-redis PoolSize 128",
		renewal: "none built in: one goroutine per lock calling ExtendContext (user code)",
		open:    openRedsync(true),
	},
	{
		name:    "redislock-default",
		config:  "bsm/redislock: LinearBackoff(100ms) retry (the README's example; the library's own default is NoRetry, which never waits), 30 s TTL",
		renewal: "none built in: one goroutine per lock calling Refresh (user code)",
		open:    openRedislock(false),
	},
	{
		name:    "redislock-tuned",
		config:  "bsm/redislock: LinearBackoff(1ms); go-redis PoolSize 128",
		renewal: "none built in: one goroutine per lock calling Refresh (user code)",
		open:    openRedislock(true),
	},
	{
		name:    "rueidislock-default",
		config:  "rueidislock defaults: KeyMajority 2 (3 keys per lock), client-side-caching invalidations wake waiters, 5 s validity",
		renewal: "built in: goroutines per key (3 per lock) extending at validity/2",
		open:    openRueidislock(false),
	},
	{
		name:    "rueidislock-tuned",
		config:  "rueidislock: KeyMajority 1 (1 key per lock), NoLoopTracking",
		renewal: "built in: one goroutine per lock extending at validity/2",
		open:    openRueidislock(true),
	},
}

// ---------------------------------------------------------------------------------------
// relock

type relockInst struct {
	rc rueidis.Client // the caller's client (rlock.New), nil when the Client owns it (rlock.Dial)
	c  *rlock.Client
	// noCancel: Lock is given context.WithoutCancel(ctx) (relock-nocancel).
	noCancel bool
}

func relockOpts(o openOpts) []rlock.Option {
	var opts []rlock.Option
	if o.lease > 0 {
		opts = append(opts, rlock.WithWatchdogTimeout(o.lease))
	}
	return opts
}

// openRelockDial is the README's way: rlock.Dial makes the rueidis client (DisableCache
// set) and its Close closes it. DialCtxFn only wraps the connection to count commands.
func openRelockDial(addr string, o openOpts) (instance, error) {
	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: rueidisDial}, relockOpts(o)...)
	if err != nil {
		return nil, err
	}
	return &relockInst{c: c}, nil
}

// openRelockNew is a user who hands rlock.New a rueidis client made with every default.
func openRelockNew(addr string, o openOpts) (instance, error) {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: rueidisDial})
	if err != nil {
		return nil, err
	}
	c, err := rlock.New(rc, relockOpts(o)...)
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &relockInst{rc: rc, c: c}, nil
}

// openRelockNoCancel is openRelockDial whose handles lock with a context that cannot end.
func openRelockNoCancel(addr string, o openOpts) (instance, error) {
	inst, err := openRelockDial(addr, o)
	if err != nil {
		return nil, err
	}
	inst.(*relockInst).noCancel = true
	return inst, nil
}

func (i *relockInst) handle(key string) handle {
	return relockHandle{m: i.c.Mutex(key), noCancel: i.noCancel}
}
func (i *relockInst) renewPeriod(lease time.Duration) time.Duration {
	return time.Duration(float64(lease) * rlock.DefaultRenewFraction)
}
func (i *relockInst) close() {
	_ = i.c.Close() // closes the rueidis client too when rlock.Dial made it
	if i.rc != nil {
		i.rc.Close()
	}
}

type relockHandle struct {
	m        *rlock.Mutex
	noCancel bool
}

func (h relockHandle) lock(ctx context.Context) error {
	if h.noCancel {
		return h.m.Lock(context.WithoutCancel(ctx))
	}
	return h.m.Lock(ctx)
}
func (h relockHandle) unlock(ctx context.Context) error { return h.m.Unlock(ctx) }
func (h relockHandle) held() bool                       { return h.m.Err(context.Background()) == nil }

// ---------------------------------------------------------------------------------------
// manual renewal, for libraries without a watchdog: what a user writes.

type renewLoop struct {
	stop chan struct{}
	done chan struct{}
	lost atomic.Bool
}

func startRenew(period time.Duration, extend func(context.Context) error) *renewLoop {
	r := &renewLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), period)
				err := extend(ctx)
				cancel()
				if err != nil {
					r.lost.Store(true)
					return
				}
			}
		}
	}()
	return r
}

func (r *renewLoop) end() {
	if r != nil {
		close(r.stop)
		<-r.done
	}
}

// ---------------------------------------------------------------------------------------
// redsync + go-redis v9

type redsyncInst struct {
	rdb   *goredis.Client
	rs    *redsync.Redsync
	opts  []redsync.Option
	lease time.Duration
}

func openRedsync(tuned bool) func(string, openOpts) (instance, error) {
	return func(addr string, o openOpts) (instance, error) {
		ro := &goredis.Options{Addr: addr, Dialer: goredisDial}
		var opts []redsync.Option
		if tuned {
			ro.PoolSize = 128
			opts = append(opts, redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32))
		}
		if o.lease > 0 {
			opts = append(opts, redsync.WithExpiry(o.lease))
		}
		rdb := goredis.NewClient(ro)
		return &redsyncInst{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb)), opts: opts, lease: o.lease}, nil
	}
}

func (i *redsyncInst) handle(key string) handle {
	return &redsyncHandle{i: i, m: i.rs.NewMutex(key, i.opts...)}
}
func (i *redsyncInst) renewPeriod(lease time.Duration) time.Duration { return lease / 2 }
func (i *redsyncInst) close()                                        { _ = i.rdb.Close() }

type redsyncHandle struct {
	i *redsyncInst
	m *redsync.Mutex
	r *renewLoop
}

func (h *redsyncHandle) lock(ctx context.Context) error {
	if err := h.m.LockContext(ctx); err != nil {
		return err
	}
	if h.i.lease > 0 {
		h.r = startRenew(h.i.lease/2, func(ctx context.Context) error {
			ok, err := h.m.ExtendContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: extend failed")
			}
			return err
		})
	}
	return nil
}

func (h *redsyncHandle) unlock(ctx context.Context) error {
	h.r.end()
	h.r = nil
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock: not held")
	}
	return err
}

func (h *redsyncHandle) held() bool {
	return (h.r == nil || !h.r.lost.Load()) && time.Now().Before(h.m.Until())
}

// ---------------------------------------------------------------------------------------
// bsm/redislock + go-redis v9

type redislockInst struct {
	rdb   *goredis.Client
	c     *redislock.Client
	retry redislock.RetryStrategy
	ttl   time.Duration
	renew bool
}

func openRedislock(tuned bool) func(string, openOpts) (instance, error) {
	return func(addr string, o openOpts) (instance, error) {
		ro := &goredis.Options{Addr: addr, Dialer: goredisDial}
		retry := redislock.LinearBackoff(100 * time.Millisecond)
		if tuned {
			ro.PoolSize = 128
			retry = redislock.LinearBackoff(time.Millisecond)
		}
		rdb := goredis.NewClient(ro)
		i := &redislockInst{rdb: rdb, c: redislock.New(rdb), retry: retry, ttl: 30 * time.Second}
		if o.lease > 0 {
			i.ttl, i.renew = o.lease, true
		}
		return i, nil
	}
}

func (i *redislockInst) handle(key string) handle                      { return &redislockHandle{i: i, key: key} }
func (i *redislockInst) renewPeriod(lease time.Duration) time.Duration { return lease / 2 }
func (i *redislockInst) close()                                        { _ = i.rdb.Close() }

type redislockHandle struct {
	i   *redislockInst
	key string
	l   *redislock.Lock
	r   *renewLoop
}

func (h *redislockHandle) lock(ctx context.Context) error {
	l, err := h.i.c.Obtain(ctx, h.key, h.i.ttl, &redislock.Options{RetryStrategy: h.i.retry})
	if err != nil {
		return err
	}
	h.l = l
	if h.i.renew {
		h.r = startRenew(h.i.ttl/2, func(ctx context.Context) error {
			return l.Refresh(ctx, h.i.ttl, nil)
		})
	}
	return nil
}

func (h *redislockHandle) unlock(ctx context.Context) error {
	h.r.end()
	h.r = nil
	l := h.l
	h.l = nil
	if l == nil {
		return errors.New("redislock: not held")
	}
	return l.Release(ctx)
}

func (h *redislockHandle) held() bool { return h.l != nil && (h.r == nil || !h.r.lost.Load()) }

// ---------------------------------------------------------------------------------------
// rueidislock (same rueidis version as relock)

type rueidislockInst struct {
	l rueidislock.Locker
}

func openRueidislock(tuned bool) func(string, openOpts) (instance, error) {
	return func(addr string, o openOpts) (instance, error) {
		lo := rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: rueidisDial},
			KeyValidity:  o.lease,
		}
		if tuned {
			lo.KeyMajority = 1
			lo.NoLoopTracking = true
		}
		l, err := rueidislock.NewLocker(lo)
		if err != nil {
			return nil, err
		}
		return &rueidislockInst{l: l}, nil
	}
}

func (i *rueidislockInst) handle(key string) handle { return &rueidislockHandle{i: i, key: key} }
func (i *rueidislockInst) renewPeriod(lease time.Duration) time.Duration {
	return lease / 2
}
func (i *rueidislockInst) close() { i.l.Close() }

type rueidislockHandle struct {
	i      *rueidislockInst
	key    string
	ctx    context.Context
	cancel context.CancelFunc
}

func (h *rueidislockHandle) lock(ctx context.Context) error {
	// The hold lives as long as the returned context: it ends with ctx or with cancel.
	lctx, cancel, err := h.i.l.WithContext(ctx, h.key)
	if err != nil {
		return err
	}
	h.ctx, h.cancel = lctx, cancel
	return nil
}

func (h *rueidislockHandle) unlock(context.Context) error {
	if h.cancel == nil {
		return errors.New("rueidislock: not held")
	}
	lost := h.ctx.Err() != nil
	h.cancel()
	h.ctx, h.cancel = nil, nil
	if lost {
		return errors.New("rueidislock: lock was lost before unlock")
	}
	return nil
}

func (h *rueidislockHandle) held() bool { return h.ctx != nil && h.ctx.Err() == nil }
