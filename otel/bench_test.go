package relockotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/relock-go/relock/internal/redistest"
	relockotel "github.com/relock-go/relock/otel"
	"github.com/relock-go/relock/rlock"
)

// BenchmarkObserver_cycle is the Observer's cost for one uncontended Lock+Unlock cycle
// (AcquireStart, AcquireDone, ReleaseStart, HoldEnd, ReleaseDone), hooks called directly:
// with the SDK's metrics and spans not sampled, with spans sampled, and on no-op providers.
func BenchmarkObserver_cycle(b *testing.B) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer unsampled.Shutdown(context.Background())
	defer sampled.Shutdown(context.Background())
	for _, c := range []struct {
		name string
		opts []relockotel.Option
	}{
		{"sdk-metrics,unsampled", []relockotel.Option{relockotel.WithMeterProvider(mp), relockotel.WithTracerProvider(unsampled)}},
		{"sdk-metrics,sampled", []relockotel.Option{relockotel.WithMeterProvider(mp), relockotel.WithTracerProvider(sampled)}},
		{"noop", []relockotel.Option{relockotel.WithMeterProvider(noop.NewMeterProvider()), relockotel.WithTracerProvider(unsampled)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			obs, err := relockotel.Observer(c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			s := rlock.AcquireStartInfo{Kind: rlock.KindMutex, Name: "bench", Owner: "o", Wait: -1}
			d := rlock.AcquireDoneInfo{AcquireStartInfo: s, Outcome: rlock.OutcomeAcquired, Took: time.Millisecond, Attempts: 1, Token: 1}
			rs := rlock.ReleaseStartInfo{Kind: rlock.KindMutex, Name: "bench", Owner: "o"}
			rd := rlock.ReleaseDoneInfo{ReleaseStartInfo: rs, Took: time.Millisecond, Freed: true}
			he := rlock.HoldEndInfo{Kind: rlock.KindMutex, Name: "bench", Owner: "o", Held: time.Millisecond, Cause: rlock.EndUnlocked}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				obs.AcquireDone(obs.AcquireStart(ctx, s), d)
				rctx := obs.ReleaseStart(ctx, rs)
				obs.HoldEnd(he)
				obs.ReleaseDone(rctx, rd)
			}
		})
	}
}

// BenchmarkMutex_cycle is an uncontended Lock+Unlock on a real redis-server, without an
// Observer and with relockotel's on the SDK (spans not sampled): the Observer's share of a
// real cycle.
func BenchmarkMutex_cycle(b *testing.B) {
	srv := redistest.Start(b)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer tp.Shutdown(context.Background())
	obs, err := relockotel.Observer(relockotel.WithMeterProvider(mp), relockotel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts []rlock.Option
	}{{"none", nil}, {"relockotel", []rlock.Option{rlock.WithObserver(obs)}}} {
		b.Run(c.name, func(b *testing.B) {
			cl, err := rlock.New(srv.Client(b), c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			m := cl.Mutex(redistest.Name(b))
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
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
