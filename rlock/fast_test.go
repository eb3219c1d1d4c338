package rlock_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// tokenField is the lock hash's token field, or the lock's string value (the fast grant's
// string form), "" when absent.
func tokenField(t *testing.T, b *backend, key string) string {
	t.Helper()
	v, err := b.do(t, "HGET", key, "token")
	if err != nil {
		if v, err = b.do(t, "GET", key); err != nil {
			return ""
		}
	}
	s, _ := v.ToString()
	return s
}

// TestFastGrant_formAndConversion: a handle's Lock on a name it locked uncontended a moment
// before is a fast grant (the transaction; the lock in the fast form, its token field
// '~<owner> <seq>'); its re-entry converts it to the full form with the tenure's token, which
// the Client reported; the two Unlocks free it. A handle's first Lock, and a Lock after one that
// was refused, are scripts.
func TestFastGrant_formAndConversion(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		var transactions atomic.Int32
		hc := &hookClient{Client: b.rueidis(t), every: func(cmds [][]string, multi bool) {
			if multi && strings.EqualFold(cmds[0][0], "MULTI") {
				transactions.Add(1)
			}
		}}
		c, err := rlock.New(hc)
		require.NoError(t, err)
		defer c.Close()
		name := redistest.Name(t)
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		require.Zero(t, transactions.Load(), "a handle's first Lock is a script")
		require.False(t, strings.HasPrefix(tokenField(t, b, m.Key()), "~"))
		require.NoError(t, m.Unlock(bg))

		require.NoError(t, m.Lock(bg))
		require.EqualValues(t, 1, transactions.Load(), "the second is a fast grant")
		f := tokenField(t, b, m.Key())
		require.True(t, strings.HasPrefix(f, "~h:"), "the fast form: %q", f)
		tok, err := m.Token(bg)
		require.NoError(t, err)
		require.Greater(t, tok, int64(1)<<40, "a token seeded from the clock")

		require.NoError(t, m.Lock(bg)) // re-entry: converts
		require.Equal(t, strconv.FormatInt(tok, 10), tokenField(t, b, m.Key()), "converted with the tenure's token")
		require.NoError(t, m.Unlock(bg))
		require.True(t, b.exists(t, m.Key()))
		require.NoError(t, m.Unlock(bg))
		require.False(t, b.exists(t, m.Key()))

		// Refused: the next Lock of the handle is a script again.
		other := b.client(t).Mutex(name)
		require.NoError(t, m.Lock(bg))
		require.EqualValues(t, 2, transactions.Load())
		require.NoError(t, m.Unlock(bg))
		require.NoError(t, other.Lock(bg))
		ok, err := m.TryLock(bg, 0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		require.EqualValues(t, 3, transactions.Load(), "the refused attempt was a fast grant's")
		require.NoError(t, other.Unlock(bg))
		require.NoError(t, m.Lock(bg))
		require.EqualValues(t, 3, transactions.Load(), "after a refusal, a script")
		require.NoError(t, m.Unlock(bg))
	})
}

// TestFastGrant_lateTransactionAfterItsReplay: a fast grant whose caller gave up while the
// transaction waited to be written is resolved by a replay of acquire.lua (the same number),
// and the transaction reaches Redis only afterwards. Whatever the replay found (fresh: the free
// lock, taken and given back; refused: another owner's, given back since), the transaction's
// fast form is a ghost, its number spent: the lock is free for everyone at once.
func TestFastGrant_lateTransactionAfterItsReplay(t *testing.T) {
	for _, sc := range []string{"fresh", "refused"} {
		t.Run(sc, func(t *testing.T) {
			eachBackend(t, func(t *testing.T, b *backend) {
				replayed := make(chan rlock.ReplayInfo, 8)
				hc := keepSend(b.rueidis(t))
				var transactions atomic.Int32
				hc.every = func(cmds [][]string, multi bool) {
					if multi && strings.EqualFold(cmds[0][0], "MULTI") {
						transactions.Add(1)
					}
				}
				c, err := rlock.New(hc, rlock.WithObserver(&rlock.Observer{
					Replay: func(e rlock.ReplayInfo) {
						if e.Op == "acquire" && e.Err == nil {
							replayed <- e
						}
					},
				}))
				require.NoError(t, err)
				defer c.Close()
				name := redistest.Name(t)
				m := c.Mutex(name)
				require.NoError(t, m.Lock(bg))
				require.NoError(t, m.Unlock(bg))
				other := b.client(t).Mutex(name)
				if sc == "refused" {
					require.NoError(t, other.Lock(bg))
				}

				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				hc.cancel = cancel
				hc.armed.Store(true)
				ok, err := m.TryLock(ctx, time.Minute, 0)
				require.False(t, ok)
				require.ErrorIs(t, err, context.Canceled)
				require.EqualValues(t, 1, transactions.Load(), "the first send was a fast grant")
				select {
				case <-replayed:
				case <-time.After(10 * time.Second):
					t.Fatal("the acquire was not resolved by a replay")
				}
				if sc == "refused" {
					require.NoError(t, other.Unlock(bg))
				}
				require.Eventually(t, func() bool { return !b.exists(t, m.Key()) }, 10*time.Second, 10*time.Millisecond,
					"the replay's grant given back")

				hc.deliver(t) // the transaction arrives last
				require.True(t, strings.HasPrefix(tokenField(t, b, m.Key()), "~"), "the transaction wrote a ghost")

				// The lock is free for everyone at once: another owner's acquire clears the ghost.
				ok, err = other.TryLock(bg, 0, 0)
				require.NoError(t, err)
				require.True(t, ok, "another owner takes the lock the ghost stands in")
				require.NoError(t, other.Unlock(bg))
				require.False(t, b.exists(t, m.Key()))
			})
		})
	}
}
