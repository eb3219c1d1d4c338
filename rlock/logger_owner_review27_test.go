package rlock_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The events of the semaphores and the latch act for no owner (Owner ""): WithLogger's lines
// for them carry no owner attribute. They carried owner=#811c9dc5, the hash of "", the same
// for every semaphore, latch and Client: a reader took it for one context owner and went
// looking for it (review27).
func TestReview27_WithLogger_noOwnerForSemaphores(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		l, lb := newTestLogger(slog.LevelDebug)
		lc := loseReplies(b.rueidis(t))
		c, err := rlock.New(lc, rlock.WithLogger(l))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		name := redistest.Name(t)

		s := c.Semaphore(name + "-sem")
		ok, err := s.TrySetPermits(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		lc.drop.Store(1)
		require.NoError(t, s.Acquire(bg, 1))
		latch := c.CountDownLatch(name + "-latch")
		ok, err = latch.TrySetCount(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		lc.drop.Store(1)
		require.NoError(t, latch.CountDown(bg))

		lines := lb.lines()
		require.Len(t, lines, 2, "%q", lines)
		require.Regexp(t, `^level=DEBUG msg="relock: request replayed" kind=semaphore name=\S+-sem op=acquire sends=2$`, lines[0])
		require.Regexp(t, `^level=DEBUG msg="relock: request replayed" kind=latch name=\S+-latch op=count_down sends=2$`, lines[1])
		for _, line := range lines {
			require.False(t, strings.Contains(line, "owner="), "%s", line)
		}
	})
}
