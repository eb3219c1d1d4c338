// Command leader runs a periodic job on exactly one of several replicas, and exports
// relock's metrics to stdout through the OpenTelemetry module.
//
// Three replicas (three relock Clients, as three processes would have) run the same leader
// loop, [Leader.Run]: take the lock "jobs:report", run the job every 200ms while it is held, step
// down when it is lost, and give it back on shutdown. The demo then
//
//  1. lets replica-1 lead, then starts the two others, which wait;
//  2. deletes the lock's key behind the leader's back: its watchdog finds the lock gone at
//     the next renewal, the job's context is cancelled with cause rlock.ErrLockLost, the
//     leader steps down, and a replica takes over (the fencing token rises);
//  3. shuts the new leader down: it gives the lock back, and a waiting replica, woken by the
//     release, takes over at once rather than after a lease runs out (the replicas are
//     separate Clients, so the metrics count no hand-off: relock.handed_off is true only
//     for a release passed to a waiter of the same Client);
//  4. stops everything and prints the metrics: relock's, recorded by relockotel.Observer,
//     and the job's own counter, through the stdout exporter
//     (go.opentelemetry.io/otel/exporters/stdout/stdoutmetric) with a compact encoder.
//
// Which replica takes over is up to Redis (the first waiter to get the lock), so that part
// of the output varies between runs; the counts do not.
//
//	cd otel && go run ./examples/leader
//
// It runs on an embedded miniredis, or on the Redis at $REDIS_URL or $REDIS_ADDR.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	relockotel "github.com/relock-go/relock/otel"
	"github.com/relock-go/relock/rlock"
)

const (
	lockName = "examples:leader:jobs:report"
	period   = 200 * time.Millisecond
	replicas = 3
	// ceiling bounds every wait of the demo: reached only if something is wrong.
	ceiling = 30 * time.Second
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

// event is what the replicas tell the demo, which prints them in the order received.
type event struct {
	replica int
	kind    string // "leads", "run", "steps down"
	term    Term
	run     int
}

func run(out io.Writer) error {
	opt, stop, desc, err := redisOptions()
	if err != nil {
		return err
	}
	defer stop() // last: after every Client's Close
	fmt.Fprintln(out, "using", desc)

	// The metrics pipeline: a MeterProvider whose reader exports to stdout. Its interval is
	// long: the demo exports once, at Shutdown.
	exp, err := stdoutmetric.New(stdoutmetric.WithEncoder(lineEncoder{out}), stdoutmetric.WithoutTimestamps())
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))))
	defer mp.Shutdown(context.Background()) // a second Shutdown (after the export below) is a no-op error

	// One lock name, fixed: safe to carry as a metric attribute (see WithNameAttribute).
	obs, err := relockotel.Observer(relockotel.WithMeterProvider(mp), relockotel.WithNameAttribute(true))
	if err != nil {
		return err
	}
	runs, err := mp.Meter("leader-example").Int64Counter("job.runs", metric.WithUnit("{run}"),
		metric.WithDescription("Runs of the periodic job."))
	if err != nil {
		return err
	}

	events := make(chan event, 256)
	var wg sync.WaitGroup
	var clients []*rlock.Client
	cancels := make([]context.CancelFunc, replicas+1)
	defer func() {
		for _, cancel := range cancels[1:] {
			if cancel != nil {
				cancel()
			}
		}
		wg.Wait()
		for _, c := range clients {
			c.Close()
		}
	}()
	errs := make(chan error, replicas)
	start := func(i int) error {
		// A short watchdog timeout makes the loss in part 2 show within a second.
		c, err := rlock.Dial(opt, rlock.WithWatchdogTimeout(time.Second), rlock.WithObserver(obs))
		if err != nil {
			return err
		}
		clients = append(clients, c)
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		n := 0 // runs in this term; Job and the notices run on the Leader's goroutine
		l := &Leader{
			Mutex:  c.Mutex(lockName),
			Period: period,
			Job: func(ctx context.Context) error {
				n++
				runs.Add(ctx, 1, metric.WithAttributes(attribute.Int("replica", i)))
				events <- event{replica: i, kind: "run", run: n}
				return nil
			},
			// Longer than the watchdog timeout: the waiting replicas, woken by their timers
			// (a deleted key publishes no release), get the lock first.
			RetryAfterLoss: 2 * time.Second,
			Started: func(t Term) {
				n = 0
				events <- event{replica: i, kind: "leads", term: t}
			},
			Ended: func(t Term) { events <- event{replica: i, kind: "steps down", term: t} },
		}
		wg.Go(func() {
			if err := l.Run(ctx); err != nil {
				errs <- fmt.Errorf("replica-%d: %w", i, err)
			}
		})
		return nil
	}
	report := func(e event) {
		switch e.kind {
		case "leads":
			fmt.Fprintf(out, "replica-%d leads (fencing token %d)\n", e.replica, e.term.Token)
		case "run":
			fmt.Fprintf(out, "replica-%d: job run #%d\n", e.replica, e.run)
		case "steps down":
			why := "shutdown"
			if errors.Is(e.term.Cause, rlock.ErrLockLost) {
				why = "lock lost: " + e.term.Cause.Error()
			}
			fmt.Fprintf(out, "replica-%d steps down (%s)\n", e.replica, why)
		}
	}
	// until prints events until one matches, and returns it.
	until := func(match func(event) bool) (event, error) {
		timeout := time.After(ceiling)
		for {
			select {
			case e := <-events:
				report(e)
				if match(e) {
					return e, nil
				}
			case err := <-errs:
				return event{}, err
			case <-timeout:
				return event{}, errors.New("the demo stalled")
			}
		}
	}
	runsBy := func(replica, n int) func(event) bool {
		return func(e event) bool { return e.replica == replica && e.kind == "run" && e.run >= n }
	}
	leads := func(e event) bool { return e.kind == "leads" }

	fmt.Fprintln(out, "\n== 1. replica-1 starts first and leads; two more replicas start and wait")
	if err := start(1); err != nil {
		return err
	}
	if _, err := until(runsBy(1, 2)); err != nil {
		return err
	}
	for i := 2; i <= replicas; i++ {
		if err := start(i); err != nil {
			return err
		}
	}
	if _, err := until(runsBy(1, 4)); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n== 2. the lock's key is deleted behind the leader's back")
	rcOpt := opt
	rcOpt.DisableCache = true
	rc, err := rueidis.NewClient(rcOpt)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := rc.Do(context.Background(), rc.B().Del().Key(clients[0].Mutex(lockName).Key()).Build()).Error(); err != nil {
		return err
	}
	next, err := until(leads)
	if err != nil {
		return err
	}
	if _, err := until(runsBy(next.replica, 2)); err != nil {
		return err
	}

	fmt.Fprintf(out, "\n== 3. replica-%d shuts down and gives the lock back\n", next.replica)
	cancels[next.replica]()
	cancels[next.replica] = nil
	third, err := until(leads)
	if err != nil {
		return err
	}
	if _, err := until(runsBy(third.replica, 2)); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n== 4. every replica shuts down")
	for i, cancel := range cancels[1:] {
		if cancel != nil {
			cancel()
			cancels[i+1] = nil
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for draining := true; draining; {
		select {
		case e := <-events:
			report(e)
		case <-done:
			draining = false
		}
	}
	for len(events) > 0 {
		report(<-events)
	}
	select {
	case err := <-errs:
		return err
	default:
	}
	for _, c := range clients {
		c.Close() // ends the tenures' bookkeeping before the export
	}

	fmt.Fprintln(out, "\n== metrics (stdoutmetric, compact encoder)")
	return mp.Shutdown(context.Background()) // exports once more, then stops the reader
}

// lineEncoder is a stdoutmetric encoder that prints one line per data point (name,
// attributes, value; count and sum for histograms) instead of the exporter's JSON, sorted,
// so that the demo's output reads at a glance.
type lineEncoder struct{ w io.Writer }

// Encode prints v, a *metricdata.ResourceMetrics.
func (e lineEncoder) Encode(v any) error {
	rm, ok := v.(*metricdata.ResourceMetrics)
	if !ok {
		return fmt.Errorf("leader: cannot encode %T", v)
	}
	lines := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					lines[key(m.Name, p.Attributes)] = fmt.Sprintf("%d", p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					lines[key(m.Name, p.Attributes)] = fmt.Sprintf("count=%d sum=%.3f%s", p.Count, p.Sum, m.Unit)
				}
			}
		}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(lines)) {
		fmt.Fprintf(&b, "%-90s %s\n", k, lines[k])
	}
	_, err := io.WriteString(e.w, b.String())
	return err
}

func key(name string, attrs attribute.Set) string {
	return name + "{" + attrs.Encoded(attribute.DefaultEncoder()) + "}"
}
