package bench

import (
	"context"
	"testing"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// noopObserver has every hook set, each doing nothing: the cost of the dispatch and of the
// events themselves, without any work of an Observer's own.
func noopObserver() *rlock.Observer {
	return &rlock.Observer{
		AcquireStart: func(ctx context.Context, _ rlock.AcquireStartInfo) context.Context { return ctx },
		AcquireDone:  func(context.Context, rlock.AcquireDoneInfo) {},
		ReleaseStart: func(ctx context.Context, _ rlock.ReleaseStartInfo) context.Context { return ctx },
		ReleaseDone:  func(context.Context, rlock.ReleaseDoneInfo) {},
		HoldEnd:      func(rlock.HoldEndInfo) {},
		RenewalRound: func(rlock.RenewalRoundInfo) {},
		Replay:       func(rlock.ReplayInfo) {},
		Subscription: func(rlock.SubscriptionInfo) {},
		GiveBack:     func(rlock.GiveBackInfo) {},
	}
}

// BenchmarkMutex_UncontendedObserver is BenchmarkMutex_Uncontended without an Observer
// (observer=none: the path every Client without one takes) and with a no-op Observer
// (observer=noop), side by side: what the hooks cost an uncontended Lock+Unlock.
func BenchmarkMutex_UncontendedObserver(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []rlock.Option
	}{
		{"observer=none", nil},
		{"observer=noop", []rlock.Option{rlock.WithObserver(noopObserver())}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			m := newClient(b, srv, bc.opts...).Mutex("uncontended")
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			if err := m.Lock(ctx); err != nil { // load the scripts
				b.Fatal(err)
			}
			_ = m.Unlock(ctx)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := m.Lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
