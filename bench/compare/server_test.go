package main

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
)

// A port taken by another server between the harness's pick and its redis-server's bind
// (servers start in parallel) must not give two servers one address: the harness checks that
// the process answering is its own, and tries another port.
func TestStartServer_portTakenMeanwhile(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	ctx := context.Background()
	a, err := startServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.stop()
	_, aPort, _ := net.SplitHostPort(a.addr)
	taken, _ := strconv.Atoi(aPort)
	orig := freePort
	picks := 0
	freePort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken, nil // another server's, as a race would leave it
		}
		return orig()
	}
	defer func() { freePort = orig }()
	b, err := startServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	if b.addr == a.addr {
		t.Fatalf("two servers on one address %s", a.addr)
	}
	if picks != 2 {
		t.Fatalf("ports picked: %d, want 2", picks)
	}
}
