package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/chaos/internal/worker"
	"github.com/relock-go/relock/internal/fastform"
	"github.com/relock-go/relock/internal/faultproxy"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// names returns n lock names unique to t.
func names(t *testing.T, n int) []string {
	base := redistest.Name(t)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", base, i)
	}
	return out
}

// every runs f every period in a goroutine until stop is closed, at most max times; it
// returns a function that stops it and returns how many times f ran.
func every(period time.Duration, max int, f func()) func() int {
	stop := make(chan struct{})
	var n atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for i := 0; i < max; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
				f()
				n.Add(1)
			}
		}
	}()
	return func() int { close(stop); wg.Wait(); return int(n.Load()) }
}

// spuriousNotHeld counts the Unlocks that said ErrNotHeld although their holder had not been
// told of any loss before it called Unlock.
func spuriousNotHeld(ops []worker.Op, lost []worker.Lost) int {
	toldAt := map[string]int64{}
	for _, l := range lost {
		toldAt[secKey(l.Owner, l.Token)] = l.At
	}
	n := 0
	for _, o := range ops {
		if o.Kind == "release" && o.Out == worker.OutNotHeld {
			if at, ok := toldAt[secKey(o.Owner, o.Token)]; !ok || at > o.Call {
				n++
			}
		}
	}
	return n
}

// errorsIn counts the operations of the history whose outcome was an error, and gives a
// few distinct error texts (lock names cut out).
func errorsIn(ops []worker.Op) (noop, unknown int, samples []string) {
	seen := map[string]int{}
	for _, o := range ops {
		switch o.Out {
		case worker.OutNoop:
			noop++
		case worker.OutUnknown:
			unknown++
		default:
			continue
		}
		seen[errClass(o.Err)]++
	}
	for e, n := range seen {
		if len(samples) < 4 {
			samples = append(samples, fmt.Sprintf("%dx %s", n, e))
		}
	}
	return
}

// errClass cuts the quoted lock names and ports out of an error text.
func errClass(s string) string {
	for {
		i := strings.Index(s, `"`)
		if i < 0 {
			break
		}
		j := strings.Index(s[i+1:], `"`)
		if j < 0 {
			break
		}
		s = s[:i] + "<name>" + s[i+1+j+1:]
	}
	if i := strings.Index(s, "127.0.0.1:"); i >= 0 {
		s = s[:i] + "127.0.0.1" + strings.TrimLeft(s[i+len("127.0.0.1:"):], "0123456789")
	}
	return s
}

func TestNoFault(t *testing.T) {
	srv := redistest.Start(t)
	r := newRun(t)
	ns := names(t, 2)
	result(t, row{order: "0", fault: "none (baseline): 4 goroutine Clients + 2 processes x 2 Clients, 2 names",
		expected: "no violation, counter exact, history linearizable (strict mutex model)"})
	var procs []*proc
	for i := 0; i < 2; i++ {
		procs = append(procs, r.spawn(srv.Addr(), "-names", strings.Join(ns, ","), "-iters", "30", "-workers", "2", "-wait", "10s"))
	}
	var clients []*rlock.Client
	for i := 0; i < 4; i++ {
		clients = append(clients, relock(t, srv, srv.Addr()))
	}
	r.goroutines(clients, worker.Config{Names: ns, Iters: 30, Wait: 10 * time.Second, Work: 200 * time.Microsecond})
	for _, p := range procs {
		p.wait(60 * time.Second)
	}
	rep := r.verify(false)
	ops, _ := r.rec.snapshot()
	if noop, unknown, s := errorsIn(ops); noop+unknown > 0 {
		t.Errorf("%d errors and %d unknown outcomes without a fault: %v", noop, unknown, s)
	}
	if rep.Sections != 4*30+2*2*30 {
		t.Errorf("%d critical sections, want %d (every TryLock with a 10s wait should succeed)", rep.Sections, 4*30+2*2*30)
	}
	setOutcome(t, fmt.Sprintf("%d sections, 0 violations, linearizable", rep.Sections))
}

// setOutcome sets the measured outcome of t's row.
func setOutcome(t *testing.T, outcome string) { setRow(t, func(r *row) { r.outcome = outcome }) }

func TestFault7_scriptFlushMidRun(t *testing.T) {
	srv := redistest.Start(t)
	r := newRun(t)
	ns := names(t, 2)
	result(t, row{order: "7", fault: "`SCRIPT FLUSH` every 20 ms during a contended run (goroutines + 1 process)",
		expected: "everything keeps working: no error, no violation"})
	p := r.spawn(srv.Addr(), "-names", strings.Join(ns, ","), "-iters", "40", "-workers", "2", "-wait", "10s")
	var clients []*rlock.Client
	for i := 0; i < 3; i++ {
		// Renewed every 250ms, each renewal with about 640ms to be confirmed (300ms at the
		// default fraction left under 100ms: a stall of that much on a loaded machine is a
		// loss the row would put down to SCRIPT FLUSH).
		clients = append(clients, relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(time.Second), rlock.WithRenewFraction(0.25)))
	}
	stop := every(20*time.Millisecond, 2000, func() { srv.Do(t, "SCRIPT", "FLUSH") })
	r.goroutines(clients, worker.Config{Names: ns, Iters: 40, Wait: 10 * time.Second, Work: time.Millisecond})
	p.wait(60 * time.Second)
	flushes := stop()
	rep := r.verify(false)
	ops, _ := r.rec.snapshot()
	noop, unknown, s := errorsIn(ops)
	if noop+unknown > 0 {
		t.Errorf("%d errors and %d unknown outcomes: %v", noop, unknown, s)
	}
	if rep.Lost > 0 {
		t.Errorf("%d locks lost (renewals must survive SCRIPT FLUSH)", rep.Lost)
	}
	if flushes < 5 {
		t.Errorf("only %d flushes happened during the run", flushes)
	}
	setOutcome(t, fmt.Sprintf("%d flushes, %d sections, 0 errors, 0 losses, 0 violations", flushes, rep.Sections))
}

// lossAfter makes a holder, runs sabotage on its key behind its back, and measures how long
// its loss notice took. It then checks that the lock is never silently taken back.
func lossAfter(t *testing.T, sabotage func(srv *redistest.Server, key string)) (time.Duration, time.Duration) {
	srv := redistest.Start(t)
	const lease = 900 * time.Millisecond
	interval := renewInterval(lease) // one renewal interval
	holderC := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
	otherC := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
	name := redistest.Name(t)
	m := holderC.Mutex(name)
	if err := m.Lock(bg); err != nil {
		t.Fatal(err)
	}
	tok, _ := m.Token(bg)
	hctx, cancel := m.HoldContext(bg)
	defer cancel()
	sabotage(srv, m.Key())
	at := time.Now()
	select {
	case <-hctx.Done():
	case <-time.After(10 * lease):
		t.Fatalf("no loss notice %v after the lock was taken from behind", 10*lease)
	}
	took := time.Since(at)
	if !errors.Is(context.Cause(hctx), rlock.ErrLockLost) {
		t.Fatalf("hold ended with %v, want ErrLockLost", context.Cause(hctx))
	}
	if took > interval+300*time.Millisecond {
		t.Errorf("loss notice took %v, more than one renewal interval (%v) + 300ms", took, interval)
	}
	// Never silently re-acquired: the renewal did not bring the key back, the owner's Lock
	// is refused until it unlocked, and Unlock says ErrNotHeld.
	if lockHeld(t, srv, m.Key()) {
		t.Errorf("the lock key exists again after the loss")
	}
	if err := m.Lock(bg); !errors.Is(err, rlock.ErrLockLost) {
		t.Errorf("Lock after a loss, before Unlock: %v, want ErrLockLost", err)
	}
	other := otherC.Mutex(name)
	if ok, err := other.TryLock(bg, 0, 0); !ok || err != nil {
		t.Fatalf("another owner cannot take the lost lock: %v %v", ok, err)
	}
	tok2, _ := other.Token(bg)
	if tok2 <= tok {
		t.Errorf("token %d after %d", tok2, tok)
	}
	if err := m.Unlock(bg); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("Unlock of the lost hold: %v, want ErrNotHeld", err)
	}
	if n, _ := other.HoldCount(bg); n != 1 {
		t.Errorf("the old holder's Unlock touched the new holder's hold: count %d", n)
	}
	// Now the old owner may lock again, and waits for the new holder like anyone.
	if ok, err := m.TryLock(bg, 0, 0); ok || err != nil {
		t.Errorf("old owner TryLock while another holds: %v %v", ok, err)
	}
	if err := other.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	return took, interval
}

// lockHeld reports whether the lock hash at key holds the lock as relock's readers read it:
// the key exists and is not a fast grant's ghost (a fast form whose sequence number the
// fence records as spent: a free lock, which stays until its lease ends or the next script
// deletes it; docs/DESIGN.md section 5, internal/fastform). A fast form written as a string
// (the fast grant's SET: "~<owner> <seq>") is read as its hash form, {token: value}. A key of
// another type is held.
func lockHeld(t *testing.T, srv *redistest.Server, key string) bool {
	t.Helper()
	h, f, tm := srv.Do(t, "HGETALL", key), srv.Do(t, "GET", key+":fence"), srv.Do(t, "TIME")
	fields, err := h.AsStrMap()
	if err != nil {
		g := srv.Do(t, "GET", key)
		if g.IsNil() {
			return false // gone meanwhile
		}
		v, serr := g.ToString()
		str, ok := fastform.FromString(v)
		if serr != nil || !ok {
			return true // not a hash, nor a string fast form (or a hash by now: held)
		}
		fields = str
	}
	if len(fields) == 0 {
		return false
	}
	fence, _ := f.ToString()
	now, err := tm.AsStrSlice()
	if err != nil || len(now) != 2 {
		t.Fatalf("TIME: %v %v", now, err)
	}
	sec, _ := strconv.ParseInt(now[0], 10, 64)
	usec, _ := strconv.ParseInt(now[1], 10, 64)
	return !fastform.Ghost(fields, fence, sec*1000+usec/1000)
}

func mustInt(t *testing.T, msg interface{ AsInt64() (int64, error) }) int64 {
	t.Helper()
	n, err := msg.AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestFault7b_pexpireBehindTheHolder(t *testing.T) {
	result(t, row{order: "7b", fault: "`PEXPIRE <lock> 1` behind the holder's back (a server clock jump)",
		expected: "loss notice within one renewal interval; no silent re-acquire; Unlock says ErrNotHeld"})
	took, interval := lossAfter(t, func(srv *redistest.Server, key string) {
		if n := srv.Do(t, "PEXPIRE", key, "1"); mustInt(t, &n) != 1 {
			t.Fatal("PEXPIRE found no lock")
		}
	})
	setOutcome(t, fmt.Sprintf("notice after %v (renewal interval %v); key not recreated; old owner refused until Unlock", took.Round(time.Millisecond), interval))
}

func TestFault7b_externalDel(t *testing.T) {
	result(t, row{order: "7b", fault: "external `DEL <lock>`",
		expected: "loss notice within one renewal interval; no silent re-acquire; Unlock says ErrNotHeld"})
	took, interval := lossAfter(t, func(srv *redistest.Server, key string) {
		if n := srv.Do(t, "DEL", key); mustInt(t, &n) != 1 {
			t.Fatal("DEL found no lock")
		}
	})
	setOutcome(t, fmt.Sprintf("notice after %v (renewal interval %v); key not recreated; old owner refused until Unlock", took.Round(time.Millisecond), interval))
}

func TestFault5_clientKill(t *testing.T) {
	for _, tc := range []struct {
		name, types string
		filters     [][]string
		kind        string // the lock (worker.Config.Kind)
	}{
		{"allConnections", "every client connection (`CLIENT KILL TYPE normal` and `TYPE pubsub`)", [][]string{{"TYPE", "normal"}, {"TYPE", "pubsub"}}, ""},
		{"pubsubOnly", "the pub/sub connections alone (`CLIENT KILL TYPE pubsub`)", [][]string{{"TYPE", "pubsub"}}, ""},
		{"fairAllConnections", "FairMutex: every client connection", [][]string{{"TYPE", "normal"}, {"TYPE", "pubsub"}}, "fair"},
		{"rwAllConnections", "RWMutex (write side): every client connection", [][]string{{"TYPE", "normal"}, {"TYPE", "pubsub"}}, "rw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			r := newRun(t)
			ns := names(t, 2)
			owners := "3 Clients x 2 owners, so that releases hand off within a Client"
			if tc.kind != "" {
				owners = "3 Clients x 2 owners"
			}
			result(t, row{order: "5", fault: tc.types + " killed every 40 ms during a contended run (" + owners + ", + 1 process)",
				expected: "no waiter hangs, no hold counted twice by a retried script, no goroutine leak, no violation"})
			args := []string{"-names", strings.Join(ns, ","), "-iters", "40", "-workers", "2", "-wait", "30s"}
			if tc.kind != "" {
				args = append(args, "-kind", tc.kind)
			}
			p := r.spawn(srv.Addr(), args...)
			var clients []*rlock.Client
			for i := 0; i < 3; i++ {
				clients = append(clients, relock(t, srv, srv.Addr()))
			}
			var killed atomic.Int64
			i := 0
			stop := every(40*time.Millisecond, 3000, func() {
				f := tc.filters[i%len(tc.filters)]
				i++
				n := srv.Do(t, append([]string{"CLIENT", "KILL"}, f...)...)
				if k, err := n.AsInt64(); err == nil {
					killed.Add(k)
				}
			})
			r.goroutinesEach(clients, 2, worker.Config{Names: ns, Iters: 20, Wait: 30 * time.Second, Work: time.Millisecond, Kind: tc.kind})
			p.wait(2 * time.Minute)
			kills := stop()
			ops, lost := r.rec.snapshot()
			var rep report
			spurious := spuriousNotHeld(ops, lost)
			if spurious == 0 {
				rep = r.verify(false)
			} else {
				// Known bug (TestRegression_releaseReplayAfterHandOff): the history then has an
				// Unlock that said ErrNotHeld for a hold it released, which no lock model
				// allows. Check the rest.
				rep = check(r.res, ops, lost)
				t.Logf("checker: %s", rep)
				if rep.violations() > 0 {
					t.Errorf("mutual exclusion violated: %s", rep)
				}
			}
			noop, unknown, samples := errorsIn(ops)
			if w := maxWait(ops); w > 10*time.Second {
				t.Errorf("an acquire waited %v: a waiter slept on a dead subscription", w)
			}
			// Every hold was given back exactly once: no key is left (a hold counted twice by a
			// replayed acquire would leave the lock held after the last Unlock).
			if unknown == 0 {
				for _, n := range ns {
					key := clients[0].Mutex(n).Key()
					if lockHeld(t, srv, key) {
						v := srv.Do(t, "HGETALL", key)
						t.Errorf("lock %s still exists after every holder unlocked: %v", n, v.String())
					}
				}
			}
			if killed.Load() == 0 {
				t.Errorf("CLIENT KILL killed nothing in %d rounds", kills)
			}
			t.Logf("%d rounds killed %d connections; %d errors (%v), %d unknown", kills, killed.Load(), noop, samples, unknown)
			setOutcome(t, fmt.Sprintf("%d connections killed; %d sections; %d acquire errors reported (no effect), %d unknown; longest wait %v; no key left; 0 violations",
				killed.Load(), rep.Sections, noop, unknown, maxWait(ops).Round(time.Millisecond)))
			if spurious > 0 {
				setRow(t, func(r *row) {
					r.status = "known bug"
					r.outcome += fmt.Sprintf("; but %d Unlock(s) said ErrNotHeld for a hold they had released (TestRegression_releaseReplayAfterHandOff), so the history is not linearizable", spurious)
				})
				t.Skipf("known bug: %d Unlock(s) whose reply was lost to CLIENT KILL were replayed after a hand-off and answered ErrNotHeld (see TestRegression_releaseReplayAfterHandOff); no exclusion violation", spurious)
			}
		})
	}
}

// pauseRedis pauses the server for d, by SIGSTOP or by CLIENT PAUSE, and returns when it
// answers again.
func pauseRedis(t *testing.T, srv *redistest.Server, how string, d time.Duration) {
	switch how {
	case "SIGSTOP":
		srv.Pause(t)
		time.Sleep(d) // the fault's length, not a wait for an event
		srv.Resume(t)
	case "CLIENT PAUSE":
		if m := srv.Do(t, "CLIENT", "PAUSE", fmt.Sprint(d.Milliseconds()), "ALL"); m.Error() != nil {
			t.Fatal(m.Error())
		}
		time.Sleep(d)
	}
}

func TestFault2_redisPaused(t *testing.T) {
	if testing.Short() {
		t.Skip("long: pauses Redis four times past or within the lease, ~10 s (run without -short)")
	}
	for _, how := range []string{"SIGSTOP", "CLIENT PAUSE"} {
		t.Run(strings.ReplaceAll(how, " ", "_")+"/shorterThanLease", func(t *testing.T) {
			result(t, row{order: "2", fault: "Redis paused (" + how + ") 0.5 s, lease 1.5 s, a holder and a waiter",
				expected: "holder keeps its lock, the waiter waits and then gets it, nobody errors"})
			srv := redistest.Start(t)
			const lease = 1500 * time.Millisecond
			a := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
			b := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
			name := redistest.Name(t)
			ma, mb := a.Mutex(name), b.Mutex(name)
			if err := ma.Lock(bg); err != nil {
				t.Fatal(err)
			}
			hctx, cancel := ma.HoldContext(bg)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				ok, err := mb.TryLock(bg, 30*time.Second, 0)
				if err == nil && !ok {
					err = errors.New("wait ran out")
				}
				got <- err
			}()
			pauseRedis(t, srv, how, 500*time.Millisecond)
			// Two renewal intervals later the holder still holds.
			renewal := renewInterval(lease)
			timer := time.NewTimer(2*renewal + 200*time.Millisecond)
			select {
			case <-hctx.Done():
				t.Fatalf("holder lost its lock to a pause shorter than its lease: %v", context.Cause(hctx))
			case err := <-got:
				t.Fatalf("the waiter returned while the lock was held: %v", err)
			case <-timer.C:
			}
			if err := ma.Err(bg); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			if err := ma.Unlock(bg); err != nil {
				t.Fatalf("holder's Unlock: %v", err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("waiter: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the waiter did not get the lock 10s after the release")
			}
			handoff := time.Since(sent)
			if err := mb.Unlock(bg); err != nil {
				t.Fatal(err)
			}
			setOutcome(t, fmt.Sprintf("holder kept it across 2 renewals; waiter got it %v after the release; no error", handoff.Round(time.Millisecond)))
		})
		t.Run(strings.ReplaceAll(how, " ", "_")+"/longerThanLease", func(t *testing.T) {
			result(t, row{order: "2", fault: "Redis paused (" + how + ") 2.5 s, lease 1 s, a holder and a waiter",
				expected: "holder told of the loss (by its own clock, while Redis is silent) before anyone else can hold it; Unlock says ErrNotHeld"})
			srv := redistest.Start(t)
			const lease = time.Second
			a := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
			b := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
			name := redistest.Name(t)
			ma, mb := a.Mutex(name), b.Mutex(name)
			if err := ma.Lock(bg); err != nil {
				t.Fatal(err)
			}
			tokA, _ := ma.Token(bg)
			hctx, cancel := ma.HoldContext(bg)
			defer cancel()
			var toldAt atomic.Int64
			stopWatch := context.AfterFunc(hctx, func() { toldAt.Store(worker.Mono()) })
			defer stopWatch()
			got := make(chan int64, 1)
			var lateGrant atomic.Value // the error of a late grant (known bug), if any
			go func() {
				defer func() { got <- worker.Mono() }()
				for i := 0; i < 3; i++ {
					ok, err := mb.TryLock(bg, 30*time.Second, 0)
					if ok {
						return
					}
					if err != nil && errors.Is(mb.Err(bg), rlock.ErrLockLost) {
						// Known bug (see TestRegression_lateGrant): a grant whose reply came after
						// its lease poisons the handle. Clear it and wait again.
						lateGrant.Store(err)
						_ = mb.Unlock(bg)
						continue
					}
					t.Errorf("waiter: %v %v", ok, err)
					return
				}
			}()
			pauseStart := time.Now()
			pauseRedis(t, srv, how, 2500*time.Millisecond)
			var bAt int64
			select {
			case bAt = <-got:
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter did not get the lock")
			}
			if !errors.Is(context.Cause(hctx), rlock.ErrLockLost) {
				t.Fatalf("holder not told: %v", context.Cause(hctx))
			}
			told := toldAt.Load()
			if told == 0 || told > bAt {
				t.Errorf("the waiter held the lock before the old holder was told (told %d, waiter %d)", told, bAt)
			}
			if err := ma.Unlock(bg); !errors.Is(err, rlock.ErrNotHeld) {
				t.Errorf("old holder's Unlock: %v, want ErrNotHeld", err)
			}
			tokB, _ := mb.Token(bg)
			if tokB <= tokA {
				t.Errorf("token %d after %d", tokB, tokA)
			}
			if err := mb.Unlock(bg); err != nil {
				t.Fatal(err)
			}
			setOutcome(t, fmt.Sprintf("holder told %v before the waiter held it; Unlock ErrNotHeld; token %d -> %d (pause began %v before the waiter got it)",
				time.Duration(bAt-told).Round(time.Millisecond), tokA, tokB, time.Since(pauseStart).Round(100*time.Millisecond)))
			if err, _ := lateGrant.Load().(error); err != nil {
				setRow(t, func(r *row) {
					r.status = "known bug"
					r.outcome += "; but the waiter's TryLock, sent during the pause, failed with a late grant (known bug: TestRegression_lateGrant)"
				})
				t.Skipf("known bug: the waiter's acquire, sent while Redis was paused, was granted after its lease had run out by the client's clock: TryLock returned %q instead of waiting on, left a ghost hold and poisoned the handle (see TestRegression_lateGrant); everything else held", err)
			}
		})
	}
}

func TestFault6_latency(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a contended run through a proxy adding 100-400 ms round trips, ~10 s (run without -short)")
	}
	result(t, row{order: "6", fault: "latency 50-200 ms each way through the proxy (RTT 100-400 ms), lease 1.5 s; 3 goroutine Clients + 1 process via the proxy, 1 direct",
		expected: "lease math stays safe (validity counted from send time): no violation"})
	srv := redistest.Start(t)
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	px.SetLatency(50*time.Millisecond, 200*time.Millisecond)
	r := newRun(t)
	ns := names(t, 2)
	p := r.spawn(px.Addr(), "-names", strings.Join(ns, ","), "-iters", "6", "-wait", "20s", "-watchdog", "1500ms", "-work", "5ms")
	var clients []*rlock.Client
	for i := 0; i < 3; i++ {
		clients = append(clients, relock(t, srv, px.Addr(), rlock.WithWatchdogTimeout(1500*time.Millisecond)))
	}
	clients = append(clients, relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(1500*time.Millisecond)))
	r.goroutines(clients, worker.Config{Names: ns, Iters: 6, Wait: 20 * time.Second, Work: 5 * time.Millisecond})
	p.wait(2 * time.Minute)
	ops, _ := r.rec.snapshot()
	rep := r.verify(true)
	noop, unknown, samples := errorsIn(ops)
	t.Logf("%d errors (%v), %d unknown", noop, samples, unknown)
	setOutcome(t, fmt.Sprintf("%d sections, %d losses (conservative), %d errors, %d unknown; 0 violations, linearizable", rep.Sections, rep.Lost, noop, unknown))
}

func TestFault1_holderProcessPaused(t *testing.T) {
	result(t, row{order: "1", fault: "holder process SIGSTOPped inside its critical section, past its lease (1 s)",
		expected: "another acquires after the lease; on SIGCONT the old holder's loss notice fires, its Unlock says ErrNotHeld, its late write carries a stale token the resource refuses"})
	srv := redistest.Start(t)
	r := newRun(t)
	name := redistest.Name(t)
	a := r.spawn(srv.Addr(), "-names", name, "-iters", "1", "-work", "1500ms", "-watchdog", "1s")
	var inside [2]string
	select {
	case inside = <-a.inside:
	case <-time.After(20 * time.Second):
		t.Fatal("the contender never entered its critical section")
	}
	a.stop()
	stoppedAt := time.Now()
	b := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(time.Second))
	if n := worker.Run(bg, b, worker.Config{Names: []string{name}, Iters: 1, Wait: 20 * time.Second}, r.res, r.rec); n != 1 {
		t.Fatalf("nobody else acquired the paused holder's lock")
	}
	took := time.Since(stoppedAt)
	a.cont()
	a.wait(30 * time.Second)
	ops, lost := r.rec.snapshot()
	rep := r.verify(true)
	var aRel *worker.Op
	var aLost *worker.Lost
	for i, o := range ops {
		if o.Kind == "release" && fmt.Sprint(o.Token) == inside[1] {
			aRel = &ops[i]
		}
	}
	for i, l := range lost {
		if fmt.Sprint(l.Token) == inside[1] {
			aLost = &lost[i]
		}
	}
	switch {
	case aLost == nil:
		t.Errorf("the paused holder was never told of its loss")
	case aRel == nil:
		t.Errorf("the paused holder did not unlock")
	case aRel.Out != worker.OutNotHeld:
		t.Errorf("the paused holder's Unlock: %s %s, want ErrNotHeld", aRel.Out, aRel.Err)
	}
	if rep.Rejected != 1 {
		t.Errorf("%d stale writes refused, want exactly the paused holder's", rep.Rejected)
	}
	outcome := fmt.Sprintf("other holder in after %v; old holder told, Unlock ErrNotHeld, stale write refused; counter exact", took.Round(10*time.Millisecond))
	setOutcome(t, outcome)
	if aRel != nil && !aRel.LostBeforeWrite {
		setRow(t, func(r *row) {
			r.status = "known bug"
			r.outcome += "; but the holder could still write before its loss notice fired"
		})
		t.Skip("known bug: after SIGCONT the holder's HoldContext was not yet cancelled when it wrote: the loss notice is delivered by the watchdog goroutine, and neither Err nor HoldContext checks the lease deadline synchronously; the fencing token saved the resource")
	}
}

func TestFault3_restartWithoutPersistence(t *testing.T) {
	result(t, row{order: "3", fault: "Redis killed and restarted without persistence while a lock is held (lease 1 s)",
		expected: "the holder learns of the loss at its next renewal; its Unlock says ErrNotHeld"})
	srv := redistest.Start(t)
	const lease = time.Second
	interval := renewInterval(lease)
	a := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
	b := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
	name := redistest.Name(t)
	ma, mb := a.Mutex(name), b.Mutex(name)
	res := newResource()
	if err := ma.Lock(bg); err != nil {
		t.Fatal(err)
	}
	tokA, _ := ma.Token(bg)
	v, _ := res.Read(name, "a", tokA)
	res.Write(name, "a", tokA, v+1)
	hctx, cancel := ma.HoldContext(bg)
	defer cancel()
	srv.Kill(t)
	srv.Restart(t)
	restarted := time.Now()
	// Another owner takes the lock at once on the empty server.
	var ok bool
	redistest.WaitFor(t, 10*time.Second, "another owner to get the lock on the restarted server", func() bool {
		ok, _ = mb.TryLock(bg, 0, 0)
		return ok
	})
	toldBefore := hctx.Err() != nil
	tokB, _ := mb.Token(bg)
	select {
	case <-hctx.Done():
	case <-time.After(interval + 5*time.Second):
		t.Fatal("the holder was never told its lock vanished with the restart")
	}
	told := time.Since(restarted)
	if !errors.Is(context.Cause(hctx), rlock.ErrLockLost) {
		t.Fatalf("hold ended with %v", context.Cause(hctx))
	}
	if err := ma.Unlock(bg); !errors.Is(err, rlock.ErrNotHeld) {
		t.Errorf("old holder's Unlock: %v, want ErrNotHeld", err)
	}
	// The fencing counter was lost with the data; tokens follow the server's clock, so they
	// should still rise.
	_, fresh := res.Read(name, "b", tokB)
	if err := mb.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	outcome := fmt.Sprintf("holder told %v after the restart; Unlock ErrNotHeld; the fence was lost with the data: token %d -> %d", told.Round(time.Millisecond), tokA, tokB)
	switch {
	case tokB <= tokA && fresh:
		outcome += ", a token repeated: the fenced resource cannot tell the two holders apart"
	case !fresh:
		outcome += ", the fenced resource refused the new holder"
	default:
		outcome += ", yet tokens kept rising (they follow the server's clock): the fenced resource tells the holders apart"
	}
	if !toldBefore {
		outcome += "; another owner held the lock before the old holder was told (no Redis lock can prevent this without persistence)"
	}
	setOutcome(t, outcome)
	setRow(t, func(r *row) {
		r.status = "limitation (documented)"
		r.expected += "; no two holders act at once without one of them told: NOT met, see measured"
	})
}

func TestFault4_restartWithAOFAlways(t *testing.T) {
	if testing.Short() {
		t.Skip("long: kills and restarts Redis with AOF under 2 s leases (run without -short)")
	}
	result(t, row{order: "4", fault: "Redis killed (SIGKILL) and restarted with `appendfsync always` while a lock is held and a waiter waits (lease 2 s)",
		expected: "the held lock survives, renewals continue, the waiter still wakes at the release, tokens keep rising"})
	srv := redistest.Start(t, redistest.WithAOF())
	const lease = 2 * time.Second
	interval := renewInterval(lease)
	a := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
	b := relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(lease))
	name := redistest.Name(t)
	ma, mb := a.Mutex(name), b.Mutex(name)
	if err := ma.Lock(bg); err != nil {
		t.Fatal(err)
	}
	tokA, _ := ma.Token(bg)
	hctx, cancel := ma.HoldContext(bg)
	defer cancel()
	got := make(chan error, 1)
	var waitErr atomic.Value // a transient error that ended the waiter's wait (known bug)
	go func() {
		for i := 0; ; i++ {
			ok, err := mb.TryLock(bg, 30*time.Second, 0)
			if err != nil && i < 50 && !errors.Is(err, rlock.ErrClosed) {
				// Known bug (see the skip below): a refused dial during the restart ends the
				// wait with an error. Wait again, as a caller would have to.
				waitErr.CompareAndSwap(nil, err)
				time.Sleep(100 * time.Millisecond) // bounded: 50 tries
				continue
			}
			if err == nil && !ok {
				err = errors.New("wait ran out")
			}
			got <- err
			return
		}
	}()
	redistest.WaitFor(t, 10*time.Second, "the waiter to subscribe", func() bool {
		m := srv.Do(t, "PUBSUB", "NUMSUB", ma.Key()+":released")
		arr, _ := m.ToArray()
		return len(arr) == 2 && mustInt(t, &arr[1]) > 0
	})
	srv.Kill(t)
	srv.Restart(t)
	timer := time.NewTimer(2*interval + 300*time.Millisecond) // two renewals after the restart
	defer timer.Stop()
	select {
	case <-hctx.Done():
		t.Fatalf("the holder lost a lock that survived the restart: %v", context.Cause(hctx))
	case err := <-got:
		t.Fatalf("the waiter returned while the lock was held: %v", err)
	case <-timer.C:
	}
	if n, err := ma.HoldCount(bg); n != 1 || err != nil {
		t.Fatalf("hold count after restart: %d %v", n, err)
	}
	ttl, _ := ma.TTL(bg)
	if ttl < lease/4 {
		t.Errorf("TTL %v after two renewal intervals: renewals did not continue", ttl)
	}
	redistest.WaitFor(t, 10*time.Second, "the waiter to subscribe again", func() bool {
		m := srv.Do(t, "PUBSUB", "NUMSUB", ma.Key()+":released")
		arr, _ := m.ToArray()
		return len(arr) == 2 && mustInt(t, &arr[1]) > 0
	})
	released := time.Now()
	if err := ma.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not wake")
	}
	handoff := time.Since(released)
	if handoff > lease/2 {
		t.Errorf("hand-off took %v: the waiter woke by its timer, not by the release message", handoff)
	}
	tokB, _ := mb.Token(bg)
	if tokB <= tokA {
		t.Errorf("token %d after %d across an AOF restart", tokB, tokA)
	}
	if err := mb.Unlock(bg); err != nil {
		t.Fatal(err)
	}
	setOutcome(t, fmt.Sprintf("lock kept across the restart (TTL %v after 2 renewal intervals); waiter woke %v after the release; token %d -> %d",
		ttl.Round(10*time.Millisecond), handoff.Round(time.Millisecond), tokA, tokB))
	if err, _ := waitErr.Load().(error); err != nil {
		setRow(t, func(r *row) {
			r.status = "known bug"
			r.outcome += fmt.Sprintf("; but the waiter's TryLock(wait 30s) ended at the restart with %q and had to be called again", err)
		})
		t.Skipf("known bug: a waiter's TryLock with a 30s wait returned %q while Redis restarted (a refused dial is treated as definitive and ends the wait); the holder's renewals ride the same restart out; everything else held", err)
	}
}

// renewInterval is the time between two renewals of a lease.
func renewInterval(lease time.Duration) time.Duration {
	f := float64(rlock.DefaultRenewFraction)
	return time.Duration(float64(lease) * f)
}

func TestFault7c_pauseLongerThanReadTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("long: four 1.5 s pauses of Redis (run without -short)")
	}
	result(t, row{order: "7c", fault: "Redis paused 1.5 s, longer than the client's read timeout (300 ms), with warm connections, while 4 owners acquire, re-enter and release",
		expected: "no script takes effect twice: hold counts and tokens prove it"})
	srv := redistest.Start(t)
	rc := srv.Client(t, func(o *rueidis.ClientOption) { o.ConnWriteTimeout = 300 * time.Millisecond })
	c, err := rlock.New(rc, rlock.WithWatchdogTimeout(10*time.Second), rlock.WithCleanupTimeout(15*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ns := names(t, 4)
	ms := make([]*rlock.Mutex, len(ns))
	for i, n := range ns {
		ms[i] = c.Mutex(n)
		if err := ms[i].Lock(bg); err != nil { // warm: scripts loaded, connections open
			t.Fatal(err)
		}
		if err := ms[i].Unlock(bg); err != nil {
			t.Fatal(err)
		}
	}
	// fence is the name's last token, or 0 once the fence's counter ran out (a plain lock's
	// counter lives lua.CounterTTL after it read the clock).
	fence := func(m *rlock.Mutex) int64 {
		v := srv.Do(t, "GET", m.Key()+":fence")
		s, err := v.ToString()
		if rueidis.IsRedisNil(err) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		// The token, then for a while the request ids replays spent (lib_fence.lua).
		tok, _, _ := strings.Cut(s, "/")
		n, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := make([]int64, len(ms))
	for i, m := range ms {
		before[i] = fence(m)
	}
	// during pauses Redis while every owner runs step, and checks no step failed.
	during := func(what string, step func(m *rlock.Mutex) error) {
		t.Helper()
		srv.Pause(t)
		errs := make(chan error, len(ms))
		for _, m := range ms {
			go func() { errs <- step(m) }()
		}
		time.Sleep(1500 * time.Millisecond) // the fault's length
		srv.Resume(t)
		for range ms {
			select {
			case err := <-errs:
				if err != nil {
					t.Errorf("%s across the pause: %v", what, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not return 30s after Redis resumed", what)
			}
		}
	}
	holds := func(want int) {
		t.Helper()
		for _, m := range ms {
			if n, err := m.HoldCount(bg); n != want || err != nil {
				t.Errorf("%s: hold count %d (%v), want %d", m.Name(), n, err, want)
			}
		}
	}
	during("fresh Lock", func(m *rlock.Mutex) error { return m.Lock(bg) })
	holds(1)
	granted := make([]int64, len(ms))
	for i, m := range ms {
		granted[i], _ = m.Token(bg)
		// The replays of the fresh Lock issued no other grant: the fence holds its token (read
		// within the counter's life, unless this machine stalled past it).
		if got := fence(m); got != 0 && got != granted[i] {
			t.Errorf("%s: fence at %d after one fresh acquisition (token %d): another grant was issued", m.Name(), got, granted[i])
		} else if got == 0 {
			t.Logf("%s: the fence's counter ran out before it was read: not checked", m.Name())
		}
	}
	during("re-entrant Lock", func(m *rlock.Mutex) error { return m.Lock(bg) })
	holds(2)
	during("Unlock of a re-entry", func(m *rlock.Mutex) error { return m.Unlock(bg) })
	holds(1)
	during("last Unlock", func(m *rlock.Mutex) error { return m.Unlock(bg) })
	for i, m := range ms {
		if lockHeld(t, srv, m.Key()) {
			t.Errorf("%s still locked after its last Unlock", m.Name())
		}
		// Tokens follow the server's clock, so they are not counted one by one: the token the
		// owner got is above the one before, and re-entries and replays issued no other (the
		// fence, unless its counter ran out over the pauses, still holds the owner's).
		if granted[i] <= before[i] {
			t.Errorf("%s: token %d after %d", m.Name(), granted[i], before[i])
		}
		if got := fence(m); got != 0 && got != granted[i] {
			t.Errorf("%s: fence at %d after one fresh acquisition (token %d, before %d): another grant was issued", m.Name(), got, granted[i], before[i])
		}
		if err := m.Err(bg); !errors.Is(err, rlock.ErrNotHeld) || errors.Is(err, rlock.ErrLockLost) {
			t.Errorf("%s: Err %v, want plain ErrNotHeld", m.Name(), err)
		}
	}
	setOutcome(t, fmt.Sprintf("4 pauses x %d owners: hold counts exactly 1, 2, 1, 0; exactly one token per fresh grant", len(ms)))
}

// envInt reads a positive integer from the environment, or returns def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestFault9_mixedSoak is the soak: 8 processes x 4 Clients for 60 s (15 s without
// RELOCK_FULL or RELOCK_CHAOS_RESULTS). Its history is
// too large for porcupine (which checks the smaller runs); the checker still proves exclusion,
// rising tokens and an exact counter. Scale it with RELOCK_CHAOS_SOAK_SECONDS, _PROCS and
// _WORKERS (e.g. 20, 4, 2 for a quick run that porcupine also checks; bounded at 600 s).
func TestFault9_mixedSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("long: the mixed soak, 60 s of 8 processes under random faults (run without -short)")
	}
	// 60 s in a full run (RELOCK_FULL=1, as .ci/run sets it) and when the results table is
	// written (RELOCK_CHAOS_RESULTS); 15 s in the README's plain go test ./..., which must stay
	// within 5 minutes on 2 cores.
	soak := 15
	if fullChaos() {
		soak = 60
	}
	var (
		procs    = min(envInt("RELOCK_CHAOS_SOAK_PROCS", 8), 16)
		workers  = min(envInt("RELOCK_CHAOS_SOAK_WORKERS", 4), 8)
		duration = time.Duration(min(envInt("RELOCK_CHAOS_SOAK_SECONDS", soak), 600)) * time.Second
	)
	result(t, row{order: "9", fault: fmt.Sprintf("mixed soak, %v: %d processes x %d Clients (Mutex, FairMutex and SpinMutex in turn, on the same names) + 2 goroutine Clients x 3 owners (direct hand-offs between them) on 4 names, lease 1 s; at random every ~0.5 s: SIGSTOP of a process 1.5 s (1), CLIENT KILL (5), SCRIPT FLUSH (7)", duration, procs, workers),
		expected: "violations 0, tokens monotonic, counter exact, history linearizable (checked by porcupine up to 40,000 operations)"})
	srv := redistest.Start(t)
	r := newRun(t)
	ns := names(t, 4)
	var ps []*proc
	for i := 0; i < procs; i++ {
		ps = append(ps, r.spawn(srv.Addr(), "-kind", []string{"mutex", "fair", "spin"}[i%3], "-names", strings.Join(ns, ","), "-iters", "100000", "-workers", fmt.Sprint(workers),
			"-duration", duration.String(), "-wait", "5s", "-work", "2ms", "-watchdog", "1s"))
	}
	clients := []*rlock.Client{
		relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(time.Second)),
		relock(t, srv, srv.Addr(), rlock.WithWatchdogTimeout(time.Second)),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.goroutinesEach(clients, 3, worker.Config{Names: ns, Iters: 100000, Deadline: time.Now().Add(duration), Wait: 5 * time.Second, Work: 2 * time.Millisecond})
	}()
	counts := map[string]int{}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	end := time.Now().Add(duration - 2*time.Second)
	for i := 0; i < 2000 && time.Now().Before(end); i++ {
		time.Sleep(time.Duration(300+rng.IntN(400)) * time.Millisecond) // spacing between faults
		switch rng.IntN(4) {
		case 0:
			p := ps[rng.IntN(len(ps))]
			p.stop()
			time.Sleep(1500 * time.Millisecond) // the pause's length
			p.cont()
			counts["SIGSTOP"]++
		case 1:
			srv.Do(t, "CLIENT", "KILL", "TYPE", "normal")
			counts["CLIENT KILL normal"]++
		case 2:
			srv.Do(t, "CLIENT", "KILL", "TYPE", "pubsub")
			counts["CLIENT KILL pubsub"]++
		case 3:
			srv.Do(t, "SCRIPT", "FLUSH")
			counts["SCRIPT FLUSH"]++
		}
	}
	for _, p := range ps {
		p.wait(2 * time.Minute)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("goroutine contenders did not finish")
	}
	ops, _ := r.rec.snapshot()
	rep := r.verify(true)
	noop, unknown, samples := errorsIn(ops)
	t.Logf("faults %v; %d operations; %d errors (%v), %d unknown", counts, len(ops), noop, samples, unknown)
	if rep.Sections < 100 {
		t.Errorf("only %d critical sections in the soak", rep.Sections)
	}
	setRow(t, func(r *row) {
		r.outcome += fmt.Sprintf("faults %v; %d operations, %d sections, %d stale writes refused, %d losses told, %d acquire errors %v, %d unknown; 0 violations, counter exact, %s",
			counts, len(ops), rep.Sections, rep.Rejected, rep.Lost, noop, samples, unknown, rep.Linear)
	})
}

// replicated starts a master and a replica of it that replicates through a fault proxy (so
// the replication stream can be cut), and waits until the replica is in sync.
func replicated(t *testing.T) (master, replica *redistest.Server, link *faultproxy.Proxy) {
	master = redistest.Start(t)
	replica = redistest.Start(t)
	link, err := faultproxy.New(master.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = link.Close() })
	host, port, _ := strings.Cut(link.Addr(), ":")
	if m := replica.Do(t, "REPLICAOF", host, port); m.Error() != nil {
		t.Fatal(m.Error())
	}
	master.WaitReplicaOnline(t, 15*time.Second)
	return master, replica, link
}

// promote kills the master and makes the replica a master.
func promote(t *testing.T, master, replica *redistest.Server) {
	master.Kill(t)
	if m := replica.Do(t, "REPLICAOF", "NO", "ONE"); m.Error() != nil {
		t.Fatal(m.Error())
	}
}

func TestFault8_replicaPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("long: multi-node topology: a master and a replica, promoted (run without -short)")
	}
	t.Run("async", func(t *testing.T) {
		result(t, row{order: "8", fault: "master killed right after a grant its replica has not received (replication stream blackholed); replica promoted (`REPLICAOF NO ONE`)",
			expected: "shows the loss async replication allows (documented, not promised)"})
		master, replica, link := replicated(t)
		const lease = 2 * time.Second
		a := relock(t, master, master.Addr(), rlock.WithWatchdogTimeout(lease))
		b := relock(t, replica, replica.Addr(), rlock.WithWatchdogTimeout(lease))
		name := redistest.Name(t)
		ma, mb := a.Mutex(name), b.Mutex(name)
		link.SetBlackhole(true) // the replication stream is cut: the replica lags
		if err := ma.Lock(bg); err != nil {
			t.Fatal(err)
		}
		tokA, _ := ma.Token(bg)
		hctx, cancel := ma.HoldContext(bg)
		defer cancel()
		master.Kill(t)
		if m := replica.Do(t, "REPLICAOF", "NO", "ONE"); m.Error() != nil {
			t.Fatal(m.Error())
		}
		ok, err := mb.TryLock(bg, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		aHeld := hctx.Err() == nil
		tokB, _ := mb.Token(bg)
		if !ok || !aHeld {
			t.Fatalf("expected the promoted replica to grant the lock while the old holder still believes it holds it: granted %v, old holder holds %v", ok, aHeld)
		}
		select { // the old holder is told when its lease runs out unconfirmed
		case <-hctx.Done():
		case <-time.After(lease + 5*time.Second):
			t.Fatal("the old holder was never told")
		}
		_ = mb.Unlock(bg)
		tokens := fmt.Sprintf("tokens %d -> %d (rising: a fenced resource refuses the old holder)", tokA, tokB)
		if tokB <= tokA {
			tokens = fmt.Sprintf("tokens %d -> %d (repeated)", tokA, tokB)
		}
		setOutcome(t, "lock lost: the new master granted it while the old holder held it untold; "+tokens+"; old holder told only at its lease end")
		setRow(t, func(r *row) { r.status = "limitation (documented)" })
	})
	t.Run("replicaAck", func(t *testing.T) {
		result(t, row{order: "8", fault: "same, with `WithReplicaAck(1, 200ms)`: stalled replica, then a healthy one and failover",
			expected: "no unacknowledged grant; an acknowledged lock survives the promotion and tokens keep rising"})
		master, replica, link := replicated(t)
		const lease = 2 * time.Second
		a := relock(t, master, master.Addr(), rlock.WithWatchdogTimeout(lease), rlock.WithReplicaAck(1, 200*time.Millisecond))
		b := relock(t, replica, replica.Addr(), rlock.WithWatchdogTimeout(lease))
		name := redistest.Name(t)
		ma, mb := a.Mutex(name), b.Mutex(name)
		// Stalled replica: the grant is refused and given back.
		link.SetBlackhole(true)
		ok, err := ma.TryLock(bg, 0, 0)
		if ok || !errors.Is(err, rlock.ErrNoReplicaAck) {
			t.Fatalf("grant with a stalled replica: %v %v, want ErrNoReplicaAck", ok, err)
		}
		if e := master.Do(t, "EXISTS", ma.Key()); mustInt(t, &e) != 0 {
			t.Fatal("the unacknowledged grant was left on the master")
		}
		link.SetBlackhole(false)
		link.ResetAll() // the stream lost bytes: the replica reconnects and resyncs
		redistest.WaitFor(t, 15*time.Second, "the replica to resync", func() bool {
			msg := master.Do(t, "INFO", "replication")
			s, _ := msg.ToString()
			return strings.Contains(s, "connected_slaves:1") && strings.Contains(s, "state=online")
		})
		// Healthy replica: the grant is acknowledged, so the promoted replica has it.
		if err := ma.Lock(bg); err != nil {
			t.Fatal(err)
		}
		tokA, _ := ma.Token(bg)
		promote(t, master, replica)
		ok, err = mb.TryLock(bg, 0, 0)
		if ok || err != nil {
			t.Fatalf("the promoted replica granted an acknowledged lock to another owner: %v %v", ok, err)
		}
		// After the old holder's lease runs out (it cannot renew on the dead master) the new
		// master grants it, with a higher token.
		ok, err = mb.TryLock(bg, lease+5*time.Second, 0)
		if !ok || err != nil {
			t.Fatalf("the lock never freed on the new master: %v %v", ok, err)
		}
		if ma.Err(bg) == nil {
			t.Error("the old holder still believes it holds the lock after the new master granted it")
		}
		tokB, _ := mb.Token(bg)
		if tokB <= tokA {
			t.Errorf("token %d after %d across the failover", tokB, tokA)
		}
		_ = mb.Unlock(bg)
		setOutcome(t, fmt.Sprintf("stalled replica: ErrNoReplicaAck, nothing left; acknowledged lock kept by the promoted replica until its lease ran out; tokens %d -> %d", tokA, tokB))
	})
}
