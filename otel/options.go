package relockotel

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures [Observer]. Options are applied in order; a later one of a kind wins.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	nilMP    bool // WithMeterProvider(nil) was given: an error, not the default
	nilTP    bool // WithTracerProvider(nil) was given
	withName bool // the lock name is a metric attribute
}

// WithMeterProvider sets the MeterProvider the metrics are recorded on. The default is the
// global one ([otel.GetMeterProvider]) as it is when [Observer] is called. A nil provider is
// an error from Observer, not the default. To record no metric at all, pass
// [go.opentelemetry.io/otel/metric/noop.NewMeterProvider].
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(o *options) { o.mp, o.nilMP = mp, mp == nil })
}

// WithTracerProvider sets the TracerProvider the spans are started on. The default is the
// global one ([otel.GetTracerProvider]) as it is when [Observer] is called. A nil provider
// is an error from Observer, not the default. To start no span at all, pass
// [go.opentelemetry.io/otel/trace/noop.NewTracerProvider].
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tp, o.nilTP = tp, tp == nil })
}

// WithNameAttribute adds the lock's name as the attribute relock.lock.name
// ([AttrLockName]) to the metrics recorded per lock (all but the renewal and subscription
// metrics). The default is false.
//
// It is off by default because every distinct attribute set is a time series that the SDK
// keeps in memory for as long as the process lives and the backend bills for: a program that
// locks per entity ("invoice:42", "user:7"...) would make one series per entity and per
// instrument, an unbounded number. Turn it on only when the names form a small fixed set
// ("nightly-report", "migrations"). Spans always carry the name: a span is one record, not
// a series.
func WithNameAttribute(on bool) Option {
	return optionFunc(func(o *options) { o.withName = on })
}

func buildOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	if o.mp == nil && !o.nilMP {
		o.mp = otel.GetMeterProvider()
	}
	if o.tp == nil && !o.nilTP {
		o.tp = otel.GetTracerProvider()
	}
	return o
}
