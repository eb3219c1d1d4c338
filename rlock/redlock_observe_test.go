package rlock_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A RedLock reports its calls to the Observer of the first of its Clients that has one
// (one Observer on every Client hears each call once); its instances' holds are not
// reported on their own.
func TestObserver_redLock(t *testing.T) {
	for _, backend := range []string{"miniredis", "redis"} {
		t.Run(backend, func(t *testing.T) {
			var addrs []string
			if backend == "redis" {
				addrs = addrsOf(redServers(t, 3))
			} else {
				for range 3 {
					addrs = append(addrs, miniredis.RunT(t).Addr())
				}
			}
			r := &recorder{}
			cs := redClients(t, addrs, rlock.WithObserver(r.observer()))
			name := redistest.Name(t)
			rl := rlock.NewRedLock(name, cs)
			require.NoError(t, rl.Lock(bg))
			tok, err := rl.Token(bg)
			require.NoError(t, err)
			require.NoError(t, rl.Lock(bg))
			other := rlock.NewRedLock(name, cs)
			ok, err := other.TryLock(bg, 0, time.Second)
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, rl.Unlock(bg))
			require.NoError(t, rl.Unlock(bg))
			require.ErrorIs(t, rl.Unlock(bg), rlock.ErrNotHeld)
			ev := r.take()
			var calls []string
			for _, e := range ev {
				if s := short(e); s != "" {
					calls = append(calls, s)
				}
			}
			require.Equal(t, []string{
				"AS red_lock", "AD red_lock acquired a=0 tok",
				"AS red_lock", "AD red_lock acquired a=0 reentered tok",
				"AS red_lock", "AD red_lock busy a=0",
				"RS red_lock", "RD red_lock", "RS red_lock", "RD red_lock freed", "RS red_lock", "RD red_lock err",
			}, calls)
			require.Equal(t, rlock.AcquireStartInfo{Kind: rlock.KindRedLock, Name: name, Owner: ev[0].(rlock.AcquireStartInfo).Owner, Wait: -1}, ev[0])
			require.Equal(t, tok, ev[1].(rlock.AcquireDoneInfo).Token)
		})
	}
}
