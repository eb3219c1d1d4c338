package relockotel_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	relockotel "github.com/relock-go/relock/otel"
	"github.com/relock-go/relock/rlock"
)

// An Observer on a MeterProvider, passed to a Client: a lock taken, re-entered and given
// back shows as two grants (one a re-entry) and one tenure ended by unlock.
func ExampleObserver() {
	if err := observeOneLock(); err != nil {
		fmt.Println("error:", err)
	}
	// Unordered output:
	// relock.acquire.grants reentered=false: 1
	// relock.acquire.grants reentered=true: 1
	// relock.hold.duration end_cause=unlock: 1 tenure
}

func observeOneLock() error {
	mr, err := miniredis.Run() // stands in for your Redis
	if err != nil {
		return err
	}
	defer mr.Close()

	reader := sdkmetric.NewManualReader() // in production: a periodic reader and an exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	obs, err := relockotel.Observer(relockotel.WithMeterProvider(mp)) // spans: the global TracerProvider
	if err != nil {
		return err
	}
	c, err := rlock.Dial(rueidis.ClientOption{
		InitAddress:       []string{mr.Addr()},
		AlwaysRESP2:       true, // miniredis only
		ForceSingleClient: true, // miniredis only
	}, rlock.WithObserver(obs))
	if err != nil {
		return err
	}
	defer c.Close()

	ctx := context.Background()
	m := c.Mutex("invoice:42")
	for range 2 { // the second Lock re-enters
		if err := m.Lock(ctx); err != nil {
			return err
		}
	}
	for range 2 {
		if err := m.Unlock(ctx); err != nil {
			return err
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch mt.Name {
			case relockotel.MetricGrants:
				sum, _ := mt.Data.(metricdata.Sum[int64])
				for _, p := range sum.DataPoints {
					re, _ := p.Attributes.Value(relockotel.AttrReentered)
					fmt.Printf("%s reentered=%v: %d\n", mt.Name, re.AsBool(), p.Value)
				}
			case relockotel.MetricHoldDuration:
				h, _ := mt.Data.(metricdata.Histogram[float64])
				for _, p := range h.DataPoints {
					cause, _ := p.Attributes.Value(relockotel.AttrEndCause)
					fmt.Printf("%s end_cause=%s: %d tenure\n", mt.Name, cause.AsString(), p.Count)
				}
			}
		}
	}
	return nil
}
