package main

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
)

// tlsWatch dials a rediss:// URL's connections as rueidis does (crypto/tls's Dialer: the
// dialer's timeout bounds the TCP dial and the TLS handshake together) and keeps track of
// the TLS handshakes that got no answer: a plain Redis reads a ClientHello as the start of an
// inline command, which its NUL bytes keep from ever ending, and never replies, so the
// handshake lasts until the dial's bound and the dial fails with a bare "context deadline
// exceeded". The watch lets connect say what went wrong instead.
type tlsWatch struct {
	mu         sync.Mutex
	unanswered map[string]int // per address: handshakes begun that no answer ended
}

// dial is a rueidis.ClientOption.DialCtxFn: with a nil cfg (a Sentinel's own connections,
// which a rediss:// URL does not make TLS) a plain TCP connection, as rueidis makes it.
func (w *tlsWatch) dial(ctx context.Context, addr string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
	if cfg == nil {
		return d.DialContext(ctx, "tcp", addr)
	}
	if d.Timeout != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Timeout)
		defer cancel()
	}
	if !d.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Deadline)
		defer cancel()
	}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName == "" { // as crypto/tls infers it
		host := addr
		if i := strings.LastIndex(addr, ":"); i >= 0 {
			host = addr[:i]
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	conn := tls.Client(raw, cfg)
	w.mu.Lock()
	w.unanswered[addr]++
	w.mu.Unlock()
	err = conn.HandshakeContext(ctx)
	if !noAnswer(err) {
		w.mu.Lock()
		w.unanswered[addr]--
		w.mu.Unlock()
	}
	if err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// noAnswer reports whether a handshake's error is that the server said nothing in time (the
// dial's bound, or the dial's context ended): not a completed handshake, not a reply that
// was no TLS or a certificate refused.
func noAnswer(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.As(err, &ne) && ne.Timeout()
}

// silent is the addresses of the handshakes that got no answer (begun and not answered:
// ended by a timeout, or still waiting), in order; none for a nil w (no TLS).
func (w *tlsWatch) silent() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var addrs []string
	for a, n := range w.unanswered {
		if n > 0 {
			addrs = append(addrs, a)
		}
	}
	slices.Sort(addrs)
	return addrs
}
