package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer echoes every line back until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends a line and reads it back, with a deadline.
func roundTrip(c net.Conn, r *bufio.Reader, deadline time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(deadline))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("garbled echo: " + line)
	}
	return time.Since(start), nil
}

func TestNew_refusesNonLoopbackTarget(t *testing.T) {
	for _, target := range []string{"10.0.0.1:6379", "example.com:6379", "nonsense"} {
		if p, err := New(target); err == nil {
			_ = p.Close()
			t.Errorf("New(%q) accepted a non-loopback target", target)
		}
	}
}

func TestProxy_forwards(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	for i := 0; i < 10; i++ {
		if _, err := roundTrip(c, r, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if p.Accepted() != 1 || p.Open() != 1 {
		t.Fatalf("accepted %d open %d, want 1 and 1", p.Accepted(), p.Open())
	}
}

func TestProxy_latency(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	p.SetLatency(40*time.Millisecond, 60*time.Millisecond)
	d, err := roundTrip(c, r, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Two directions, each delayed 40-60ms.
	if d < 80*time.Millisecond {
		t.Fatalf("round trip took %v, want >= 80ms", d)
	}
	p.SetLatency(0, 0)
	for i := 0; i < 3; i++ { // chunks queued under latency drain, then it is fast again
		if _, err := roundTrip(c, r, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func TestProxy_latencyKeepsOrder(t *testing.T) {
	p := newProxy(t, echoServer(t))
	p.SetLatency(0, 20*time.Millisecond)
	c, r := dial(t, p.Addr())
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	const n = 50
	go func() {
		for i := 0; i < n; i++ {
			_, _ = c.Write([]byte{byte('a' + i%26), '\n'})
			time.Sleep(time.Millisecond)
		}
	}()
	for i := 0; i < n; i++ {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line[0] != byte('a'+i%26) {
			t.Fatalf("line %d is %q: reordered", i, line)
		}
	}
}

func TestProxy_blackhole(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetBlackhole(true)
	_, err := roundTrip(c, r, 150*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("under blackhole: got %v, want a timeout", err)
	}
	if p.Open() != 1 {
		t.Fatalf("the blackhole closed the connection")
	}
	p.SetBlackhole(false)
	c2, r2 := dial(t, p.Addr()) // the old connection's stream lost bytes: use a new one
	if _, err := roundTrip(c2, r2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestProxy_resetAll(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c1, r1 := dial(t, p.Addr())
	c2, r2 := dial(t, p.Addr())
	for _, cr := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if _, err := roundTrip(cr.c, cr.r, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.ResetAll(); n != 2 {
		t.Fatalf("reset %d connections, want 2", n)
	}
	if _, err := roundTrip(c1, r1, 5*time.Second); err == nil {
		t.Fatal("a reset connection still works")
	}
	c3, r3 := dial(t, p.Addr())
	if _, err := roundTrip(c3, r3, 5*time.Second); err != nil {
		t.Fatalf("a new connection after reset: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Open() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want 1", p.Open())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestProxy_closeEndsEverything(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p.Addr())
	p.SetLatency(100*time.Millisecond, 100*time.Millisecond)
	_, _ = c.Write([]byte("queued\n"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, r, 2*time.Second); err == nil {
		t.Fatal("connection works after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("still accepting after Close")
	}
	_ = p.Close() // idempotent
}
