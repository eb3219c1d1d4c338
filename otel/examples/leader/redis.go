package main

import (
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// redisOptions returns the client option for the Redis at $REDIS_URL, or else at
// $REDIS_ADDR, or else for an embedded miniredis it starts, with a function that stops what
// it started (never nil). It is the core module's examples/internal/connect in short (an
// internal package that this module cannot import): miniredis needs RESP2 and no cluster
// discovery, and its clock moved with real time so that leases expire.
func redisOptions() (rueidis.ClientOption, func(), string, error) {
	noop := func() {}
	if raw := os.Getenv("REDIS_URL"); raw != "" {
		opt, err := rueidis.ParseURL(raw)
		if err != nil {
			return rueidis.ClientOption{}, noop, "", fmt.Errorf("$REDIS_URL: %w", err)
		}
		shown := "(unparsable URL)"
		if u, err := url.Parse(raw); err == nil {
			shown = u.Redacted()
		}
		return opt, noop, "Redis at " + shown, nil
	}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return rueidis.ClientOption{InitAddress: []string{addr}}, noop, "Redis at " + addr, nil
	}
	mr, err := miniredis.Run()
	if err != nil {
		return rueidis.ClientOption{}, noop, "", fmt.Errorf("start embedded miniredis: %w", err)
	}
	opt := rueidis.ClientOption{
		InitAddress:       []string{mr.Addr()},
		DisableCache:      true,
		AlwaysRESP2:       true,
		ForceSingleClient: true,
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
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
	return opt, stop, "embedded miniredis (set $REDIS_URL or $REDIS_ADDR to use a real server)", nil
}
