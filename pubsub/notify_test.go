package pubsub

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// notices records what WithNotify tells.
type notices struct {
	mu  sync.Mutex
	got []notice
}

func (n *notices) option() Option {
	return WithNotify(func(channel string, up bool, err error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.got = append(n.got, notice{channel: channel, up: up, err: err})
	})
}

func (n *notices) all() []notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]notice(nil), n.got...)
}

// A broken connection is told once per channel with waiters (down, with why), and once per
// channel again when Redis confirms it anew (up); the first subscription, a lingering
// channel without waiters, and Close tell nothing.
func TestNotifyDownThenUp(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, e *env) {
		n := &notices{}
		s := e.newSub(n.option(), WithLinger(waitTimeout))
		a, b, idle := name(t), name(t), name(t)
		wa := watchLive(t, s, a)
		watchLive(t, s, b)
		wi := watchLive(t, s, idle)
		wi.Close() // lingers, subscribed, with no waiter
		require.Empty(t, n.all(), "a first subscription is no change")

		e.dropPubSub()
		waitLive(t, s, wa, a)
		waitFor(t, "both channels up again", func() bool { return len(n.all()) == 4 })
		got := n.all()
		down, up := map[string]bool{}, map[string]bool{}
		for i, x := range got {
			if x.up {
				require.NoError(t, x.err)
				require.True(t, down[x.channel], "notice %d: up after down", i)
				up[x.channel] = true
			} else {
				require.Error(t, x.err)
				require.False(t, up[x.channel])
				down[x.channel] = true
			}
		}
		require.Equal(t, map[string]bool{a: true, b: true}, down)
		require.Equal(t, map[string]bool{a: true, b: true}, up)

		s.Close()
		require.Len(t, n.all(), 4, "nothing told as the Subscriber closes")
	})
}
