package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// delayProxy sits between the clients and one redis-server on 127.0.0.1 and adds a round
// trip to every request: each chunk of bytes a client writes is handed to Redis rtt after
// the proxy read it (order kept), and Redis's replies go back at once. For a client that
// waits for a reply before its next request (a lock cycle) that is the same as rtt/2 each
// way; the whole of it goes on one direction because the Go runtime serves any timer under
// about 1 ms as about 1.1 ms on Linux (the network poller waits in whole milliseconds), so
// that rtt/2 each way would make a 1 ms round trip about 2.2 ms. What it does make is
// measured in every run: the two-PING samples of the uncontended-rtt rows go through it.
//
// Unlike internal/faultproxy it allocates nothing per chunk (each connection recycles a
// fixed set of buffers), so that the process's allocations per cycle (allocs_per_op) stay
// the library's. Its methods are safe for concurrent use; close ends every connection and
// waits for its goroutines.
type delayProxy struct {
	target string
	rtt    time.Duration
	ln     net.Listener

	mu     sync.Mutex
	conns  map[*delayLink]struct{}
	closed bool
	wg     sync.WaitGroup
}

// delayLink is one proxied connection.
type delayLink struct {
	client, server net.Conn
	once           sync.Once
}

func (l *delayLink) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// delayChunks and delayChunkSize bound what one connection holds in flight: a writer
// further ahead waits for a buffer (back-pressure), as a full socket buffer would make it.
const (
	delayChunks    = 16
	delayChunkSize = 16 << 10
)

// newDelayProxy listens on a free port of 127.0.0.1 and forwards to target, adding rtt (> 0)
// to every request.
func newDelayProxy(target string, rtt time.Duration) (*delayProxy, error) {
	if rtt <= 0 {
		return nil, fmt.Errorf("delay proxy: round trip %v: must be positive", rtt)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("delay proxy: listen: %w", err)
	}
	p := &delayProxy{target: target, rtt: rtt, ln: ln, conns: map[*delayLink]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the address clients dial instead of the target.
func (p *delayProxy) addr() string { return p.ln.Addr().String() }

// close stops listening, closes every connection and waits for every goroutine of the
// proxy to end. It is idempotent.
func (p *delayProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	links := make([]*delayLink, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // a transient error (say, too many open files)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l := &delayLink{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			return
		}
		p.conns[l] = struct{}{}
		p.wg.Add(3)
		p.mu.Unlock()
		type chunk struct {
			b  []byte
			at time.Time // hand to Redis no earlier than this
		}
		q := make(chan chunk, delayChunks)
		free := make(chan []byte, delayChunks)
		for range delayChunks {
			free <- make([]byte, delayChunkSize)
		}
		go func() { // replies: at once
			defer p.wg.Done()
			_, _ = io.Copy(c, s)
			l.close()
		}()
		go func() { // requests: read, stamp, queue
			defer p.wg.Done()
			defer close(q)
			for {
				b := <-free
				n, err := c.Read(b)
				if n > 0 {
					q <- chunk{b[:n], time.Now().Add(p.rtt)}
				}
				if err != nil {
					l.close()
					return
				}
			}
		}()
		go func() { // requests: hand over at their time
			defer p.wg.Done()
			defer func() {
				p.mu.Lock()
				delete(p.conns, l)
				p.mu.Unlock()
			}()
			t := time.NewTimer(time.Hour)
			defer t.Stop()
			for ch := range q {
				if d := time.Until(ch.at); d > 0 {
					t.Reset(d)
					<-t.C
				}
				_, err := s.Write(ch.b)
				free <- ch.b[:cap(ch.b)]
				if err != nil {
					l.close()
					for ch := range q { // let the reader end: it may wait for a buffer
						free <- ch.b[:cap(ch.b)]
					}
					return
				}
			}
			l.close()
		}()
	}
}
