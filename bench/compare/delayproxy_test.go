package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// TestDelayProxy: every round trip through the proxy takes at least its rtt, replies come
// back whole and in order, and forwarding allocates nothing per round trip (so that
// allocs_per_op of the uncontended-rtt rows is the library's); close ends every connection
// (goleak, in TestMain, checks its goroutines are gone).
func TestDelayProxy(t *testing.T) {
	if os.Getenv("REDIS_ADDR") == "" {
		if _, err := exec.LookPath("redis-server"); err != nil {
			t.Skip("no redis-server on PATH and no REDIS_ADDR")
		}
	}
	srv, err := startServer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	const rtt = 2 * time.Millisecond
	p, err := newDelayProxy(srv.addr, rtt)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := []byte("*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n*1\r\n$4\r\nPING\r\n")
	want := "$3\r\nabc\r\n+PONG\r\n"
	buf := make([]byte, 64)
	var slowest time.Duration
	roundTrip := func() {
		start := time.Now()
		_ = c.SetDeadline(start.Add(10 * time.Second))
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		got := 0
		for got < len(want) {
			n, err := c.Read(buf[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		if string(buf[:got]) != want {
			t.Fatalf("reply %q, want %q", buf[:got], want)
		}
		d := time.Since(start)
		if d < rtt {
			t.Fatalf("round trip took %v through a proxy adding %v", d, rtt)
		}
		slowest = max(slowest, d)
	}
	for range 5 { // warm-up: the first Read's and timer's one-time allocations
		roundTrip()
	}
	// testing.AllocsPerRun rounds down; count the process's allocations over 100 round
	// trips: a proxy that allocated once per chunk would make 200.
	const n = 100
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		roundTrip()
	}
	runtime.ReadMemStats(&after)
	if allocs := after.Mallocs - before.Mallocs; allocs > n/10 {
		t.Errorf("%d allocations in %d round trips through the proxy, want about none", allocs, n)
	}
	t.Logf("slowest round trip %v (proxy adds %v)", slowest, rtt)
	p.close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Fatal("connection still open after the proxy's close")
	}
}
