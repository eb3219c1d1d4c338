package relockotel_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	relockotel "github.com/relock-go/relock/otel"
	"github.com/relock-go/relock/rlock"
)

// rig is an Observer on a ManualReader and a SpanRecorder.
type rig struct {
	obs    *rlock.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newRig(t *testing.T, opts ...relockotel.Option) *rig {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := relockotel.Observer(append([]relockotel.Option{
		relockotel.WithMeterProvider(mp), relockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatalf("Observer: %v", err)
	}
	return &rig{obs: obs, reader: reader, spans: sr, tp: tp}
}

// hist is one histogram point: its count and sum.
type hist struct {
	Count uint64
	Sum   float64
}

// snapshot is what the reader collected, by metric name and then by attribute set (encoded
// as "k=v,k=v", sorted by key): an int64 for sums, a hist for histograms.
type snapshot map[string]map[string]any

// meta is a metric's unit and instrument, as collected.
type meta struct {
	Unit string
	Kind string // "histogram", "counter" or "updown"
}

func (r *rig) collect(t *testing.T) (snapshot, map[string]meta) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	snap, metas := snapshot{}, map[string]meta{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != relockotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, relockotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			pts := map[string]any{}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				metas[m.Name] = meta{m.Unit, "histogram"}
				for _, p := range d.DataPoints {
					pts[enc(p.Attributes)] = hist{p.Count, p.Sum}
				}
			case metricdata.Sum[int64]:
				kind := "updown"
				if d.IsMonotonic {
					kind = "counter"
				}
				metas[m.Name] = meta{m.Unit, kind}
				for _, p := range d.DataPoints {
					pts[enc(p.Attributes)] = p.Value
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
			snap[m.Name] = pts
		}
	}
	return snap, metas
}

func enc(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// expect compares got with want, metric by metric and point by point; a metric absent from
// want must be absent from got.
func expect(t *testing.T, got, want snapshot) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if !equalPoints(got[name], want[name]) {
			t.Errorf("%s:\n got %s\nwant %s", name, show(got[name]), show(want[name]))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected metric %s: %s", name, show(got[name]))
		}
	}
}

func equalPoints(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if a[k] != v {
			return false
		}
	}
	return true
}

func show(pts map[string]any) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(pts)) {
		fmt.Fprintf(&b, "\n   {%s}: %+v", k, pts[k])
	}
	return b.String()
}

// acquire plays one acquisition through the Observer's hooks and returns the Done
// context's parent (what AcquireStart returned).
func (r *rig) acquire(ctx context.Context, s rlock.AcquireStartInfo, d rlock.AcquireDoneInfo) context.Context {
	ctx = r.obs.AcquireStart(ctx, s)
	d.AcquireStartInfo = s
	r.obs.AcquireDone(ctx, d)
	return ctx
}

func (r *rig) release(ctx context.Context, s rlock.ReleaseStartInfo, d rlock.ReleaseDoneInfo) {
	ctx = r.obs.ReleaseStart(ctx, s)
	d.ReleaseStartInfo = s
	r.obs.ReleaseDone(ctx, d)
}
