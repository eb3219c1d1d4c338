package rlock

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/redis/rueidis"
)

// DialContext is [Dial] bounded by ctx: the connections it makes at once are dialled under
// ctx, and when ctx ends first it returns an error wrapping ctx's cause (the client being
// made is closed when its dial returns; rueidis's own timeouts, opt.Dialer.Timeout and
// opt.ConnWriteTimeout, bound that). ctx bounds only the making: the connections rueidis
// makes later are dialled as opt says.
//
// DialContext returns an error wrapping [ErrInvalid] for a nil ctx or an invalid option
// (nothing is dialled), ctx's cause when ctx ends first, or rueidis's error when it cannot
// connect or authenticate.
func DialContext(ctx context.Context, opt rueidis.ClientOption, opts ...Option) (*Client, error) {
	if ctx == nil {
		return nil, invalid("nil context")
	}
	if _, err := buildOptions(opts); err != nil {
		return nil, err // before anything is dialled
	}
	if ctx.Err() != nil {
		return nil, errorf("dial: %w", context.Cause(ctx))
	}
	opt.DisableCache = true
	returned := make(chan struct{}) // closed when DialContext returns
	base, legacy := opt.DialCtxFn, opt.DialFn
	opt.DialCtxFn = func(dctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		select {
		case <-returned: // a later dial of rueidis's own
		default:
			var cancel context.CancelFunc
			dctx, cancel = context.WithCancel(dctx)
			stop := context.AfterFunc(ctx, cancel)
			defer func() {
				stop()
				cancel()
			}()
		}
		switch {
		case base != nil:
			return base(dctx, addr, d, cfg)
		case legacy != nil:
			return legacy(addr, d, cfg)
		case cfg != nil:
			td := tls.Dialer{NetDialer: d, Config: cfg}
			return td.DialContext(dctx, "tcp", addr)
		}
		return d.DialContext(dctx, "tcp", addr)
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
		go func() {
			if m := <-ch; m.rc != nil {
				m.rc.Close()
			}
		}()
		return nil, errorf("dial: %w", context.Cause(ctx))
	}
	if m.err != nil {
		return nil, errorf("dial: %w", m.err)
	}
	c, err := New(m.rc, opts...)
	if err != nil {
		m.rc.Close()
		return nil, err
	}
	c.owned = true
	return c, nil
}
