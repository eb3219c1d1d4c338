// Package faultproxy is a small in-process TCP proxy for tests: it sits between a client and
// a server on 127.0.0.1 and injects network faults on demand: latency (fixed or a random
// range, order kept), a blackhole (bytes are swallowed, connections stay open, as in a
// partition), and a reset of every open connection.
//
// It is deliberately tiny (no dependency beyond the standard library) and refuses any
// target that is not a loopback address: test traffic never leaves the machine.
package faultproxy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards every connection accepted on Addr to the target. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	latMin, latMax atomic.Int64 // nanoseconds, per direction
	blackhole      atomic.Bool

	mu     sync.Mutex
	conns  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted atomic.Int64
}

// link is one proxied connection: the client side and the server side.
type link struct {
	client, server net.Conn
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST, like a crashed peer or a middlebox reset
			}
			_ = c.Close()
		}
	})
}

// New listens on a free port of 127.0.0.1 and forwards to target, which must be a loopback
// address ("127.0.0.1:port").
func New(target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("faultproxy: target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Accepted is the number of connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// SetLatency delays every chunk of bytes, in each direction, by a duration drawn uniformly
// from [min, max] (order is kept: a chunk never overtakes the one before it). Zero turns
// latency off. It applies to bytes read from then on.
func (p *Proxy) SetLatency(min, max time.Duration) {
	if max < min {
		max = min
	}
	p.latMin.Store(int64(min))
	p.latMax.Store(int64(max))
}

// SetBlackhole makes the proxy swallow every byte in both directions (on) or forward them
// again (off). Connections stay open and new ones are accepted: clients see timeouts, not
// errors, as in a network partition. Bytes swallowed are lost for good.
func (p *Proxy) SetBlackhole(on bool) { p.blackhole.Store(on) }

// ResetAll closes every open connection with a TCP reset. New connections are accepted as
// usual. It returns how many connections were reset.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}

// Open is the number of connections currently open through the proxy.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, resets every connection and waits for all of the proxy's
// goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient accept error (e.g. too many open files): back off briefly.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.conns[l] = struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		var half sync.WaitGroup
		half.Add(2)
		go func() { defer p.wg.Done(); defer half.Done(); p.pipe(l, s, c) }()
		go func() { defer p.wg.Done(); defer half.Done(); p.pipe(l, c, s) }()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			half.Wait()
			p.mu.Lock()
			delete(p.conns, l)
			p.mu.Unlock()
		}()
	}
}

type chunk struct {
	b  []byte
	at time.Time // deliver no earlier than this
}

// pipe copies src to dst through a delay queue; any error on either side closes the link.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	defer l.close()
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() { // the writer: delivers chunks in order at their due time
		defer close(done)
		defer l.close()
		t := time.NewTimer(time.Hour)
		defer t.Stop()
		for c := range q {
			if d := time.Until(c.at); d > 0 {
				t.Reset(d)
				<-t.C
			}
			if p.blackhole.Load() {
				continue
			}
			if _, err := dst.Write(c.b); err != nil {
				l.close()     // unblocks the reader, which then closes q
				for range q { // drain so the reader never blocks on a dead writer
				}
				return
			}
		}
	}()
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() {
			at := time.Now().Add(p.delay())
			if at.Before(last) {
				at = last
			}
			last = at
			q <- chunk{b: append([]byte(nil), buf[:n]...), at: at}
		}
		if err != nil { // EOF, a reset or a closed link: either way the link ends
			close(q)
			<-done
			return
		}
	}
}

func (p *Proxy) delay() time.Duration {
	lo, hi := p.latMin.Load(), p.latMax.Load()
	if hi <= 0 {
		return 0
	}
	if hi == lo {
		return time.Duration(lo)
	}
	return time.Duration(lo + rand.Int64N(hi-lo+1))
}
