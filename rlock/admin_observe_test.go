package rlock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The administration of the semaphores and the latch (setting, adding, draining, deleting,
// extending a permit) reports no Start or Done: only a replay of a request whose reply was
// lost tells of it (Replay, with its Op). Their acquisitions and releases are reported.
func TestObserver_adminReportsOnlyReplays(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		lc := loseReplies(b.rueidis(t))
		r := &recorder{}
		c, err := rlock.New(lc, rlock.WithObserver(r.observer()))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		name := redistest.Name(t)

		s := c.Semaphore(name + "-sem")
		ok, err := s.TrySetPermits(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, s.AddPermits(bg, 1))
		n, err := s.DrainPermits(bg)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		_, err = s.Delete(bg)
		require.NoError(t, err)

		l := c.CountDownLatch(name + "-latch")
		ok, err = l.TrySetCount(bg, 2)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = l.Delete(bg)
		require.NoError(t, err)
		require.True(t, ok)

		p := c.PermitSemaphore(name + "-psem")
		ok, err = p.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, p.AddPermits(bg, 1))
		permit, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
		require.NoError(t, p.Extend(bg, permit.ID, 2*time.Minute))
		require.NoError(t, p.Release(bg, permit.ID))
		_, err = p.Delete(bg)
		require.NoError(t, err)
		require.Equal(t, []string{"AS permit_semaphore", "AD permit_semaphore acquired a=1", "RS permit_semaphore", "RD permit_semaphore"}, r.calls())

		// A lost reply of an administrative request: its replay is told, and only that.
		ok, err = s.TrySetPermits(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		lc.drop.Store(1) // the next applied script's reply is lost
		require.NoError(t, s.AddPermits(bg, 2))
		got, err := s.AvailablePermits(bg)
		require.NoError(t, err)
		require.Equal(t, 3, got, "applied once")
		ev := r.take()
		require.Equal(t, []string{"RP semaphore add"}, shorts(ev))
		require.Equal(t, rlock.ReplayInfo{Kind: rlock.KindSemaphore, Name: s.Name(), Op: "add", Sends: 2}, ev[0])
	})
}
