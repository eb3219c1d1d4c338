// Package connect tells the example programs which Redis to lock on, as a
// [rueidis.ClientOption] they pass to rlock.Dial.
//
// Against a Redis of your own, an example's client creation is one line, and this package
// is not needed at all:
//
//	c, err := rlock.Dial(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
//
// [Options] picks the server from the environment:
//
//   - REDIS_URL, a URL as [rueidis.ParseURL] reads it (redis://user:pass@host:port/0, rediss://
//     for TLS, query parameters such as ?dial_timeout=3s);
//   - else REDIS_ADDR, a host:port;
//   - else an embedded Redis (miniredis) on a free loopback port, so that every example runs
//     with no setup.
//
// REDIS_URL wins when both are set (it says more: credentials, TLS, database). For example:
//
//	go run ./examples/quickstart                                       # embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart             # a real Redis
//	REDIS_URL=rediss://:secret@redis.example:6380/0 go run ./examples/quickstart
//
// Two things make miniredis behave like a real server for relock, and only miniredis needs
// them:
//
//   - its option sets AlwaysRESP2 and ForceSingleClient: miniredis answers CLUSTER SLOTS,
//     which would make rueidis think it is a cluster, and has no RESP3 client-side caching;
//   - miniredis's clock only moves when told to, so keys would never expire: a goroutine
//     advances it with real time every couple of milliseconds, so that lock leases run out
//     as they do on a real server.
//
// The stop function Options returns ends that goroutine and the embedded server. Close every
// relock Client dialled with the option first (deferring stop before Dial does that).
package connect

import (
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// The environment variables that name a real Redis server. EnvURL wins when both are set.
const (
	EnvURL  = "REDIS_URL"  // redis://user:pass@host:port/db, or rediss:// for TLS
	EnvAddr = "REDIS_ADDR" // host:port
)

// clockTick is how often the embedded server's clock is moved on.
const clockTick = 2 * time.Millisecond

// Options returns the client option for the Redis at $REDIS_URL, or else at $REDIS_ADDR, or
// else for an embedded miniredis it starts, and a function that stops what Options started
// (a no-op for a real server; never nil, and safe to call more than once). Each call starts
// its own embedded server. [Describe] says which server Options picks, for printing.
func Options() (rueidis.ClientOption, func(), error) {
	noop := func() {}
	if raw := os.Getenv(EnvURL); raw != "" {
		opt, err := rueidis.ParseURL(raw)
		if err != nil {
			return rueidis.ClientOption{}, noop, fmt.Errorf("$%s: %w", EnvURL, err)
		}
		return opt, noop, nil
	}
	if addr := os.Getenv(EnvAddr); addr != "" {
		return rueidis.ClientOption{InitAddress: []string{addr}}, noop, nil
	}

	mr, err := miniredis.Run()
	if err != nil {
		return rueidis.ClientOption{}, noop, fmt.Errorf("start embedded miniredis: %w", err)
	}
	opt := rueidis.ClientOption{
		InitAddress:       []string{mr.Addr()},
		DisableCache:      true, // miniredis has no client-side caching (rlock.Dial sets it anyway)
		AlwaysRESP2:       true,
		ForceSingleClient: true, // miniredis answers CLUSTER SLOTS: never treat it as a cluster
	}

	// Keep miniredis's clock moving with real time, so that leases expire.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(clockTick)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			mr.Close()
		})
	}
	return opt, stop, nil
}

// Describe says which Redis [Options] uses, for the examples to print. It never prints a
// password.
func Describe() string {
	if raw := os.Getenv(EnvURL); raw != "" {
		shown := "(unparsable URL)"
		if u, err := url.Parse(raw); err == nil {
			shown = u.Redacted()
		}
		s := "Redis at " + shown + " ($" + EnvURL + ")"
		if os.Getenv(EnvAddr) != "" {
			s += "; $" + EnvAddr + " ignored"
		}
		return s
	}
	if addr := os.Getenv(EnvAddr); addr != "" {
		return "Redis at " + addr + " ($" + EnvAddr + ")"
	}
	return "embedded miniredis (set $" + EnvURL + " or $" + EnvAddr + " to use a real server)"
}
