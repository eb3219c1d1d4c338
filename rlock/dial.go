package rlock

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// DialContext is [Dial] bounded by ctx: the connections it makes at once are dialled under
// ctx, and when ctx ends first it returns an error wrapping ctx's cause (the client being
// made is closed when its dial returns; rueidis's own timeouts, opt.Dialer.Timeout and
// opt.ConnWriteTimeout, bound that). ctx bounds only the making: the connections rueidis
// makes later are dialled as opt says, and [Client.Close] ends those still being dialled or
// set up.
//
// DialContext returns an error wrapping [ErrInvalid] for a nil ctx (or one [WithOwner] made
// from a nil parent) or an invalid option (nothing is dialled; [PubSubSharded] on a server
// that is not a Cluster is found invalid once dialled, and the rueidis client made is
// closed), ctx's cause when ctx ends first, or rueidis's error when it cannot connect or
// authenticate.
func DialContext(ctx context.Context, opt rueidis.ClientOption, opts ...Option) (*Client, error) {
	if err := ctxError(ctx); err != nil {
		return nil, err
	}
	if _, err := buildOptions(opts); err != nil {
		return nil, err // before anything is dialled
	}
	if ctx.Err() != nil {
		return nil, errorf("dial: %w", context.Cause(ctx))
	}
	opt.DisableCache = true
	returned := make(chan struct{}) // closed when DialContext returns
	guard := newDialGuard(opt)
	base, legacy := opt.DialCtxFn, opt.DialFn
	opt.DialCtxFn = func(dctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		select {
		case <-returned: // a later dial of rueidis's own: Close ends it (dialGuard)
			return guard.dial(dctx, func(dctx context.Context) (net.Conn, error) {
				return dialWith(dctx, base, legacy, addr, d, cfg)
			})
		default:
			var cancel context.CancelFunc
			dctx, cancel = context.WithCancel(dctx)
			stop := context.AfterFunc(ctx, cancel)
			defer func() {
				stop()
				cancel()
			}()
		}
		return dialWith(dctx, base, legacy, addr, d, cfg)
	}
	type made struct {
		rc  rueidis.Client
		err error
	}
	ch := make(chan made, 1)
	go func() {
		rc, err := rueidis.NewClient(opt)
		ch <- made{rc, err}
	}()
	var m made
	select {
	case m = <-ch:
		close(returned)
	case <-ctx.Done():
		close(returned)
		guard.close() // the abandoned client dials nothing more
		go func() {
			if m := <-ch; m.rc != nil {
				m.rc.Close()
			}
		}()
		return nil, errorf("dial: %w", context.Cause(ctx))
	}
	if m.err != nil {
		guard.close()
		return nil, errorf("dial: %w", m.err)
	}
	c, err := New(m.rc, opts...)
	if err != nil {
		guard.close()
		m.rc.Close()
		return nil, err
	}
	c.owned = true
	c.dials = guard
	return c, nil
}

// dialWith dials addr as rueidis would with opt's dial functions (base, else legacy, else
// its own: TLS when cfg is set).
func dialWith(ctx context.Context, base func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error),
	legacy func(string, *net.Dialer, *tls.Config) (net.Conn, error), addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	switch {
	case base != nil:
		return base(ctx, addr, d, cfg)
	case legacy != nil:
		return legacy(addr, d, cfg)
	case cfg != nil:
		td := tls.Dialer{NetDialer: d, Config: cfg}
		return td.DialContext(ctx, "tcp", addr)
	}
	return d.DialContext(ctx, "tcp", addr)
}

// dialGuard lets the Close of a Client made by Dial end the connections its rueidis client
// is dialling, or has dialled and may still be setting up (HELLO, AUTH...: rueidis bounds
// that by the dial and write timeouts, and no cancellation of its reaches it). rueidis
// dials a subscription connection (Dedicate) under a context of its own, so without this,
// Close, which waits for the subscription's goroutine, waited out a server that does not
// answer. A connection stays under guard for the window in which its setup may last, and
// is forgotten after it.
type dialGuard struct {
	ctx    context.Context // ended by close: dials in progress end
	end    context.CancelFunc
	window time.Duration // how long a dialled connection may still be in its setup

	mu     sync.Mutex
	closed bool
	fresh  map[net.Conn]*time.Timer // connections within their window; the timer forgets them
}

func newDialGuard(opt rueidis.ClientOption) *dialGuard {
	dial := opt.Dialer.Timeout
	if dial <= 0 {
		dial = rueidis.DefaultDialTimeout
	}
	write := opt.ConnWriteTimeout
	if write <= 0 {
		write = max(rueidis.DefaultTCPKeepAlive, opt.Dialer.KeepAlive) * 10 // rueidis's default
	}
	g := &dialGuard{window: max(dial, write) + time.Second, fresh: make(map[net.Conn]*time.Timer)}
	g.ctx, g.end = context.WithCancel(context.Background())
	return g
}

// dial runs fn under a context that close also ends, and keeps the connection it makes
// under guard for its window. After close it dials nothing: the error wraps ErrClosed.
func (g *dialGuard) dial(ctx context.Context, fn func(context.Context) (net.Conn, error)) (net.Conn, error) {
	if g.ctx.Err() != nil {
		return nil, errorf("dial: %w", ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.ctx, cancel)
	conn, err := fn(ctx)
	stop()
	cancel()
	if err != nil {
		if g.ctx.Err() != nil {
			return nil, errorf("dial: %w (%w)", ErrClosed, err)
		}
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		conn.Close()
		return nil, errorf("dial: %w", ErrClosed)
	}
	g.fresh[conn] = time.AfterFunc(g.window, func() {
		g.mu.Lock()
		delete(g.fresh, conn)
		g.mu.Unlock()
	})
	return conn, nil
}

// close ends the dials in progress and closes the connections still within their window;
// it dials nothing after. The Client's Close calls it before it waits for the subscription.
func (g *dialGuard) close() {
	g.end()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for conn, t := range g.fresh {
		t.Stop()
		conn.Close()
	}
	clear(g.fresh)
}
