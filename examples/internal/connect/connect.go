// Package connect gives the example programs a Redis to lock on.
//
// When the environment variable REDIS_ADDR is set (host:port), [Connect] returns a rueidis
// client to that server. Otherwise it starts an embedded Redis (miniredis) on a free
// loopback port and returns a client to it, so that every example runs with no setup:
//
//	go run ./examples/quickstart                            # embedded miniredis
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/quickstart  # a real Redis
//
// Two things are needed to make miniredis behave like a real server for relock:
//
//   - the rueidis client must not use RESP3 client-side caching nor cluster discovery
//     (miniredis answers CLUSTER SLOTS, which would make rueidis think it is a cluster):
//     DisableCache, AlwaysRESP2 and ForceSingleClient are set;
//   - miniredis's clock only moves when told to, so keys would never expire: a goroutine
//     advances it with real time every couple of milliseconds, so that lock leases run out
//     as they do on a real server.
//
// The function Connect returns closes the rueidis client, then stops that goroutine and
// the embedded server. Close the relock Client before calling it.
package connect

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// EnvAddr is the environment variable that names a real Redis server to use.
const EnvAddr = "REDIS_ADDR"

// clockTick is how often the embedded server's clock is moved on.
const clockTick = 2 * time.Millisecond

// Connect returns a rueidis client to the Redis at $REDIS_ADDR, or to an embedded miniredis
// when that variable is unset or empty, and a function that closes the client and
// everything Connect started ([Describe] says which server it is, for printing).
func Connect() (rueidis.Client, func(), error) {
	if addr := os.Getenv(EnvAddr); addr != "" {
		// Configured as rlock.Dial configures its own: client-side caching off.
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return nil, nil, fmt.Errorf("connect to Redis at %s: %w", addr, err)
		}
		return rc, rc.Close, nil
	}

	mr, err := miniredis.Run()
	if err != nil {
		return nil, nil, fmt.Errorf("start embedded miniredis: %w", err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{mr.Addr()},
		DisableCache:      true, // miniredis has no client-side caching (RESP3 tracking)
		AlwaysRESP2:       true,
		ForceSingleClient: true, // miniredis answers CLUSTER SLOTS: never treat it as a cluster
	})
	if err != nil {
		mr.Close()
		return nil, nil, fmt.Errorf("connect to embedded miniredis: %w", err)
	}

	// Keep miniredis's clock moving with real time, so that leases expire.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(clockTick)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	}()

	var once sync.Once
	closeAll := func() {
		once.Do(func() {
			rc.Close()
			close(stop)
			wg.Wait()
			mr.Close()
		})
	}
	return rc, closeAll, nil
}

// Describe says which Redis [Connect] uses, for the examples to print.
func Describe() string {
	if addr := os.Getenv(EnvAddr); addr != "" {
		return "Redis at " + addr + " ($" + EnvAddr + ")"
	}
	return "embedded miniredis (set $" + EnvAddr + " to use a real server)"
}
