package redistest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Silent is a TCP server that accepts connections and never answers: a client's handshake
// (HELLO) on it waits until the client's own timeout, or until [Silent.Close] closes the
// connection.
type Silent struct {
	ln    net.Listener
	done  chan struct{} // closed when the accept loop has returned
	once  sync.Once
	mu    sync.Mutex
	conns []net.Conn // accepted; guarded by mu
}

// StartSilent starts a Silent server on a free loopback port. It is closed at tb's cleanup.
func StartSilent(tb testing.TB) *Silent {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: silent server: %v", err)
	}
	s := &Silent{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	tb.Cleanup(s.Close)
	return s
}

// Addr is the server's host:port.
func (s *Silent) Addr() string { return s.ln.Addr().String() }

// Close stops accepting and closes every connection accepted: a handshake waiting on one
// fails then. It returns once the accept loop has ended; a second call does nothing.
func (s *Silent) Close() {
	s.once.Do(func() {
		s.ln.Close()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
}

// DialSwitch dials, for a rueidis client, the address asked for until [DialSwitch.Divert],
// and another address (a [Silent] server's, say) after. Use it as the client's
// ClientOption.DialCtxFn, or take a whole option from [DialSwitch.Option].
type DialSwitch struct {
	to       string
	diverted atomic.Bool
	dials    atomic.Int64
	began    chan struct{} // a diverted dial began (capacity 16, sent without blocking)
}

// NewDialSwitch returns a DialSwitch whose diverted dials go to the address to.
func NewDialSwitch(to string) *DialSwitch {
	return &DialSwitch{to: to, began: make(chan struct{}, 16)}
}

// Dial is a rueidis ClientOption.DialCtxFn.
func (d *DialSwitch) Dial(ctx context.Context, addr string, nd *net.Dialer, _ *tls.Config) (net.Conn, error) {
	d.dials.Add(1)
	if d.diverted.Load() {
		select {
		case d.began <- struct{}{}:
		default:
		}
		addr = d.to
	}
	return nd.DialContext(ctx, "tcp", addr)
}

// Dials is the number of dials begun.
func (d *DialSwitch) Dials() int64 { return d.dials.Load() }

// Option is a client option to addr that dials through d: a single client whose requests
// share one connection (PipelineMultiplex -1), dialled when the client is made, so that
// every later dial is a subscription's (or a dedicated connection's); dials time out after
// 20 s. The caller adds the rest (DisableCache, ConnWriteTimeout).
func (d *DialSwitch) Option(addr string) rueidis.ClientOption {
	return rueidis.ClientOption{
		InitAddress:       []string{addr},
		ForceSingleClient: true,
		PipelineMultiplex: -1,
		Dialer:            net.Dialer{Timeout: 20 * time.Second},
		DialCtxFn:         d.Dial,
	}
}

// RedialSubscriptions diverts d's later dials, kills srv's pub/sub connections, and waits
// up to 20 s for a diverted dial to begin (a client subscribed through d dials again); it
// fails tb when none does.
func (d *DialSwitch) RedialSubscriptions(tb testing.TB, srv *Server) {
	tb.Helper()
	d.diverted.Store(true)
	srv.Do(tb, "CLIENT", "KILL", "TYPE", "pubsub")
	select {
	case <-d.began:
	case <-time.After(20 * time.Second):
		tb.Fatal("redistest: the subscription connection was not dialled again")
	}
}
