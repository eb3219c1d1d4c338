package chaos

// The rows of this file run on a real Redis Cluster of three masters with one replica each
// (redistest.StartCluster, node timeout 2 s): a slot migrated mid-run with its keys split
// between two nodes, a manual CLUSTER FAILOVER, and a master killed (its replica promoted),
// each under a contended workload of goroutine Clients checked as every other row is.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/chaos/internal/worker"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

const (
	// clusterLease is the watchdog lease of the contending Clients (renewed every 2/3 of it).
	clusterLease = time.Second
	// clusterFixedLease is the fixed lease of the contenders that take one: far longer than
	// any stall a fault causes, so that it never runs out while held.
	clusterFixedLease = 10 * time.Second
	// clusterCleanup is every Client's cleanup timeout, which bounds an Unlock that Redis
	// cannot serve yet (a slot split between two nodes, a failover): longer than each fault.
	clusterCleanup = 15 * time.Second
	// clusterWait is the contenders' TryLock wait: longer than each fault, so that an
	// acquire rides it out.
	clusterWait = 30 * time.Second
	// wakeBound bounds a parked waiter's hand-off after the release. The waiters of the
	// fixed-lease holds would otherwise sleep out a lease of a minute: getting the lock
	// within this bound means a release message (or the loss of the subscription, which
	// wakes every waiter too) woke them.
	wakeBound = 10 * time.Second
	// grantsBound bounds every wait for the workload to make progress.
	grantsBound = time.Minute
)

func skipShortCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
}

// clusterClient makes a relock Client on a rueidis cluster client of its own, closed at
// cleanup (before the rueidis client, whose cleanup redistest registered first).
func clusterClient(t *testing.T, cl *redistest.Cluster, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	rc := cl.Client(t, func(o *rueidis.ClientOption) { o.ConnWriteTimeout = 2 * time.Second })
	c, err := rlock.New(rc, append([]rlock.Option{rlock.WithCleanupTimeout(clusterCleanup)}, opts...)...)
	if err != nil {
		t.Fatalf("rlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// perMaster returns one lock name served by each master, in the order of cl.Masters.
func perMaster(t *testing.T, cl *redistest.Cluster, c *rlock.Client, tag string) []string {
	t.Helper()
	masters := cl.Masters(t)
	out := make([]string, len(masters))
	base, found := redistest.Name(t), 0
	for i := 0; found < len(masters) && i < 1000; i++ {
		name := fmt.Sprintf("%s-%s%d", base, tag, i)
		m := cl.MasterOf(t, c.Mutex(name).Key())
		for j, s := range masters {
			if s == m && out[j] == "" {
				out[j] = name
				found++
			}
		}
	}
	if found < len(masters) {
		t.Fatalf("no names found on all %d masters", len(masters))
	}
	return out
}

// onMaster returns n lock names served by master.
func onMaster(t *testing.T, cl *redistest.Cluster, c *rlock.Client, master *redistest.Server, n int, tag string) []string {
	t.Helper()
	base := redistest.Name(t)
	var out []string
	for i := 0; len(out) < n && i < 1000; i++ {
		name := fmt.Sprintf("%s-%s%d", base, tag, i)
		if cl.MasterOf(t, c.Mutex(name).Key()) == master {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d names on %s, want %d", len(out), master.Addr(), n)
	}
	return out
}

// inSlot returns n lock names whose keys (the Client's prefix) hash to slot.
func inSlot(t *testing.T, c *rlock.Client, slot, n int, tag string) []string {
	t.Helper()
	base := redistest.Name(t)
	var out []string
	for i := 0; len(out) < n && i < 10_000_000; i++ {
		name := fmt.Sprintf("%s-%s%d", base, tag, i)
		if redistest.Slot(c.Mutex(name).Key()) == slot {
			out = append(out, name)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d names in slot %d, want %d", len(out), slot, n)
	}
	return out
}

// errorStat sums the count of error replies of one kind (INFO errorstats, e.g. TRYAGAIN,
// ASK) over the running nodes.
func errorStat(t *testing.T, nodes []*redistest.Server, kind string) int64 {
	t.Helper()
	var n int64
	for _, s := range nodes {
		if !s.Running() {
			continue
		}
		msg := s.Do(t, "INFO", "errorstats")
		text, err := msg.ToString()
		if err != nil {
			t.Fatalf("%s: INFO errorstats: %v", s.Addr(), err)
		}
		for _, line := range strings.Split(strings.TrimPrefix(text, "txt:"), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+kind+":count="); ok {
				k, _ := strconv.ParseInt(v, 10, 64)
				n += k
			}
		}
	}
	return n
}

// clusterRun is a run whose goroutine contenders go on until told to stop, and whose
// history counts the grants made after a mark (tally), so that a test can wait for the
// workload to have made progress after a fault instead of sleeping.
type clusterRun struct {
	*run
	tally *tally
	stop  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

func newClusterRun(t *testing.T) *clusterRun {
	r := newRun(t)
	return &clusterRun{run: r, tally: &tally{recorder: r.rec}, stop: make(chan struct{})}
}

// workers starts n contenders (owners) on c with cfg, labelled label0, label1, ...; they run
// until end. The first call registers end as a cleanup, so that the contenders stop before
// the Clients made earlier are closed.
func (r *clusterRun) workers(c *rlock.Client, label string, n int, cfg worker.Config) {
	r.once.Do(func() { r.t.Cleanup(r.end) })
	cfg.Stop, cfg.Iters = r.stop, 1<<30
	for i := 0; i < n; i++ {
		cfg := cfg
		cfg.Label = fmt.Sprint(label, i)
		r.wg.Add(1)
		go func() { defer r.wg.Done(); worker.Run(bg, c, cfg, r.res, r.tally) }()
	}
}

// end stops the contenders (no attempt starts after it) and waits for them.
func (r *clusterRun) end() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		panic("chaos: cluster contenders still running 3 minutes after the stop: a waiter hangs")
	}
}

// grants waits until each name has had n grants to attempts that began from now on.
func (r *clusterRun) grants(what string, n int, names ...string) {
	r.t.Helper()
	ch := r.tally.arm(n, names)
	select {
	case <-ch:
	case <-time.After(grantsBound):
		r.t.Fatalf("timed out after %v waiting for %s (%d grants of each of %v)", grantsBound, what, n, names)
	}
}

// tally is a worker.Sink that records into a recorder and closes a channel once every
// name it was armed with had its count of grants to attempts called after the arming.
type tally struct {
	*recorder
	mu      sync.Mutex
	mark    int64
	want    map[string]int
	reached chan struct{}
}

func (t *tally) arm(n int, names []string) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mark, t.want, t.reached = worker.Mono(), map[string]int{}, make(chan struct{})
	for _, name := range names {
		t.want[name] = n
	}
	return t.reached
}

func (t *tally) Op(o worker.Op) {
	t.recorder.Op(o)
	if o.Kind != "acquire" || o.Out != worker.OutOK {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.want[o.Name]
	if !ok || o.Call < t.mark {
		return
	}
	if n > 1 {
		t.want[o.Name] = n - 1
		return
	}
	delete(t.want, o.Name)
	if len(t.want) == 0 {
		close(t.reached)
	}
}

// parked is a waiter in TryLock on a lock another owner holds for the whole fault.
type parked struct {
	m    *rlock.Mutex
	done chan struct{}
	err  error
	at   time.Time
}

// park starts a waiter for name on c and waits until it was refused and marked the lock
// (field w of the lock's hash, read on master), which its release then publishes for.
func park(t *testing.T, c *rlock.Client, name string, master *redistest.Server) *parked {
	t.Helper()
	p := &parked{m: c.Mutex(name), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		ok, err := p.m.TryLock(bg, 90*time.Second, 0)
		p.at = time.Now()
		if err == nil && !ok {
			err = errors.New("wait ran out")
		}
		p.err = err
	}()
	redistest.WaitFor(t, 20*time.Second, "a waiter on "+name+" to be refused and mark the lock", func() bool {
		msg := master.Do(t, "HEXISTS", p.m.Key(), "w")
		n, err := msg.AsInt64()
		return err == nil && n == 1
	})
	select {
	case <-p.done:
		t.Fatalf("the waiter on %s returned while the lock was held: %v", name, p.err)
	default:
	}
	return p
}

// handOff unlocks holder and returns how long after its Unlock returned the waiter got the
// lock; it fails t if the waiter does not get it within wakeBound. The waiter then unlocks.
func handOff(t *testing.T, holder *rlock.Mutex, w *parked) time.Duration {
	t.Helper()
	if err := holder.Unlock(bg); err != nil {
		t.Fatalf("Unlock of %s: %v", holder.Name(), err)
	}
	released := time.Now()
	select {
	case <-w.done:
	case <-time.After(wakeBound):
		t.Fatalf("the waiter on %s was not woken %v after the release", holder.Name(), wakeBound)
	}
	if w.err != nil {
		t.Fatalf("the waiter on %s: %v", holder.Name(), w.err)
	}
	if err := w.m.Unlock(bg); err != nil {
		t.Fatalf("the waiter's Unlock of %s: %v", holder.Name(), err)
	}
	return max(w.at.Sub(released), 0)
}

// lockFor takes name on c: in watchdog mode when lease is 0, else with that fixed lease.
func lockFor(t *testing.T, c *rlock.Client, name string, lease time.Duration) *rlock.Mutex {
	t.Helper()
	m := c.Mutex(name)
	if ok, err := m.TryLock(bg, 10*time.Second, lease); !ok || err != nil {
		t.Fatalf("TryLock %s: %v %v", name, ok, err)
	}
	return m
}

// stalls returns the longest acquire that returned and the longest Unlock of the history.
func stalls(ops []worker.Op) (acquire, release time.Duration) {
	var r int64
	for _, o := range ops {
		if o.Kind == "release" {
			r = max(r, o.Return-o.Call)
		}
	}
	return maxWait(ops), time.Duration(r)
}

// lockedLeft returns the names still locked in Redis.
func lockedLeft(t *testing.T, c *rlock.Client, names []string) []string {
	t.Helper()
	var left []string
	for _, n := range names {
		held, err := c.Mutex(n).IsLocked(bg)
		if err != nil {
			t.Errorf("IsLocked %s: %v", n, err)
		}
		if held {
			left = append(left, n)
		}
	}
	return left
}

// checkClean fails t on errors in the history, loss notices, and Unlocks that said ErrNotHeld:
// a fault that loses nothing must cost the callers delay only.
func checkClean(t *testing.T, ops []worker.Op, rep report) {
	t.Helper()
	if noop, unknown, s := errorsIn(ops); noop+unknown > 0 {
		t.Errorf("%d errors and %d unknown outcomes reached the callers: %v", noop, unknown, s)
	}
	if rep.Lost > 0 || rep.NotHeld > 0 {
		t.Errorf("%d holds lost, %d Unlocks said ErrNotHeld: the fault must not take a held lock", rep.Lost, rep.NotHeld)
	}
}

func TestCluster_slotMigration(t *testing.T) {
	skipShortCluster(t)
	const split = 3 * clusterLease
	result(t, row{order: "cluster 1", fault: fmt.Sprintf("Redis Cluster (3 masters + 3 replicas): a slot migrated mid-run. 3 Clients x 2 owners (watchdog, lease %v) and 1 Client x 2 owners (fixed lease %v) contend on 3 names, one per master; 1 Client x 2 owners on the other two names only; 1 Client x 3 owners churns 4 other names of the first name's slot; 3 more locks of that slot are held throughout (2 watchdog, 1 fixed lease of 1 min), with a waiter parked on 2 of them. The slot goes IMPORTING/MIGRATING with 2 lock keys and 2 fences moved and the rest left, for %v (3 leases), then the migration finishes", clusterLease, clusterFixedLease, split),
		expected: "exclusion holds (no overlap, tokens rise, counter exact, linearizable as a strict mutex); held locks kept, renewed through the split; parked waiters woken by the releases on the new node; no error reaches a caller, only delay (TRYAGAIN retried within the wait, Unlock within the cleanup timeout)"})
	cl := redistest.StartCluster(t)
	r := newClusterRun(t)
	wd := watchdogClients(t, cl, 3)
	fixed := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	churner := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	elsewhere := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	holder := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	waiters := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))

	contended := perMaster(t, cl, holder, "c")
	slot := redistest.Slot(holder.Mutex(contended[0]).Key())
	others := inSlot(t, holder, slot, 7, "s")
	churn, held := others[:4], others[4:]
	src := cl.MasterOf(t, holder.Mutex(contended[0]).Key())
	var dst *redistest.Server
	for _, m := range cl.Masters(t) {
		if m != src {
			dst = m
			break
		}
	}

	// Held throughout: h0 with a fixed lease of a minute (its keys move), h1 in watchdog mode
	// (its lock key moves, its fence stays), h2 in watchdog mode (nothing of it moves). The
	// renewal of h1 and h2, one script for the slot, meets TRYAGAIN while they are split.
	h0 := lockFor(t, holder, held[0], time.Minute)
	h1 := lockFor(t, holder, held[1], 0)
	h2 := lockFor(t, holder, held[2], 0)
	w0 := park(t, waiters, held[0], src)
	w1 := park(t, waiters, held[1], src)

	cfg := contend(r, contended, wd, fixed)
	ccfg := cfg
	ccfg.Names = churn
	r.workers(churner, "churn", 3, ccfg)
	// These never wait on the migrating slot: the other masters serve on through the split.
	ocfg := cfg
	ocfg.Names = contended[1:]
	r.workers(elsewhere, "other", 2, ocfg)
	r.grants("the workload to run", 5, append(append([]string{}, contended...), churn...)...)

	masters := cl.Masters(t)
	tryAgain0, ask0 := errorStat(t, masters, "TRYAGAIN"), errorStat(t, masters, "ASK")
	mig := cl.BeginMigration(t, slot, dst)
	began := time.Now()
	fence := func(m *rlock.Mutex) string { return m.Key() + ":fence" }
	mig.MoveKeys(t, h0.Key(), fence(h0), h1.Key(), fence(holder.Mutex(churn[0])))
	// The fault's length: the keys stay split for three leases. Meanwhile no held lock may be
	// lost (each check reads the holder's own state).
	tick := time.NewTicker(clusterLease / 4)
	for time.Since(began) < split {
		<-tick.C
		for _, m := range []*rlock.Mutex{h0, h1, h2} {
			if err := m.Err(bg); err != nil {
				t.Fatalf("%s lost while its slot migrates (%v into the split): %v", m.Name(), time.Since(began).Round(time.Millisecond), err)
			}
		}
	}
	tick.Stop()
	for _, m := range []*rlock.Mutex{h1, h2} {
		// Three leases into the split, a lock still in Redis was renewed through it.
		if ttl, err := m.TTL(bg); err != nil || ttl <= 0 {
			t.Fatalf("%s after %v of split keys: TTL %v, %v (not renewed)", m.Name(), split, ttl, err)
		}
	}
	// Grants during the split, of the migrating slot's contended name and of the others.
	splitGrants, elsewhereGrants := 0, 0
	ops, _ := r.rec.snapshot()
	beganMono := worker.Mono() - int64(time.Since(began))
	for _, o := range ops {
		if o.Kind == "acquire" && o.Out == worker.OutOK && o.Return > beganMono {
			if o.Name == contended[0] {
				splitGrants++
			} else if o.Name == contended[1] || o.Name == contended[2] {
				elsewhereGrants++
			}
		}
	}
	if elsewhereGrants == 0 {
		t.Errorf("no grant on the other masters during the split: the migration of one slot stalled them")
	}
	mig.Finish(t)
	splitFor := time.Since(began)
	if got := cl.MasterOf(t, h0.Key()); got != dst {
		t.Fatalf("slot %d on %s after the migration, want %s", slot, got.Addr(), dst.Addr())
	}
	for _, m := range []*rlock.Mutex{h0, h1, h2} {
		if err := m.Err(bg); err != nil {
			t.Fatalf("%s lost by the migration: %v", m.Name(), err)
		}
	}
	r.grants("the workload to go on after the migration", 20, contended[0])
	r.grants("the churn to go on after the migration", 3, churn...)
	// A lease after the migration, the held locks are still held (renewed on the new node),
	// and their releases there wake the waiters.
	if err := h2.Unlock(bg); err != nil {
		t.Fatalf("Unlock %s after the migration: %v", h2.Name(), err)
	}
	wake0 := handOff(t, h0, w0)
	wake1 := handOff(t, h1, w1)
	tryAgain := errorStat(t, masters, "TRYAGAIN") - tryAgain0
	ask := errorStat(t, masters, "ASK") - ask0
	r.end()

	rep := r.verify(false)
	ops, _ = r.rec.snapshot()
	checkClean(t, ops, rep)
	if left := lockedLeft(t, holder, append(append(append([]string{}, contended...), churn...), held...)); len(left) > 0 {
		t.Errorf("locks still held after every holder unlocked: %v", left)
	}
	if tryAgain == 0 {
		t.Errorf("no TRYAGAIN reply during the migration: the keys were not split as meant")
	}
	acq, rel := stalls(ops)
	t.Logf("split %v; %d TRYAGAIN, %d ASK; %d grants of the migrating name during the split; waiters woken %v, %v after the releases",
		splitFor, tryAgain, ask, splitGrants, wake0, wake1)
	setOutcome(t, fmt.Sprintf("keys split %v; %d holds (%d stale writes refused); during the split %d grants of the migrating slot's name, %d of the other masters' names; 0 losses, 0 errors; %d TRYAGAIN and %d ASK replies served; the 3 held locks kept (TTL renewed through the split) and given back on the new node, parked waiters woken %v and %v after the releases; longest acquire %v, longest Unlock %v; 0 violations, %s",
		splitFor.Round(100*time.Millisecond), rep.Acquired, rep.Rejected, splitGrants, elsewhereGrants, tryAgain, ask, roundMS(wake0), roundMS(wake1),
		acq.Round(time.Millisecond), rel.Round(time.Millisecond), rep.Linear))
}

func TestCluster_manualFailover(t *testing.T) {
	skipShortCluster(t)
	result(t, row{order: "cluster 2", fault: fmt.Sprintf("Redis Cluster: `CLUSTER FAILOVER` (manual, coordinated) of the master of a contended name mid-run. 3 Clients x 2 owners (watchdog, lease %v) and 1 Client x 2 owners (fixed lease %v) contend on 3 names, one per master; 2 more locks on that master held throughout (watchdog, and a fixed lease of 1 min), with a waiter parked on each", clusterLease, clusterFixedLease),
		expected: "exclusion holds (strict mutex: a manual failover loses no write); held locks kept, renewed on the new master; parked waiters woken there by the releases; no error reaches a caller, only delay"})
	cl := redistest.StartCluster(t)
	r := newClusterRun(t)
	wd := watchdogClients(t, cl, 3)
	fixed := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	holder := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	waiters := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))

	contended := perMaster(t, cl, holder, "c")
	master := cl.MasterOf(t, holder.Mutex(contended[0]).Key())
	held := onMaster(t, cl, holder, master, 2, "h")
	h0 := lockFor(t, holder, held[0], time.Minute)
	h1 := lockFor(t, holder, held[1], 0)
	w0 := park(t, waiters, held[0], master)
	w1 := park(t, waiters, held[1], master)

	contend(r, contended, wd, fixed)
	r.grants("the workload to run", 5, contended...)

	began := time.Now()
	promoted := cl.Failover(t, master)
	took := time.Since(began)
	if got := cl.MasterOf(t, h0.Key()); got != promoted {
		t.Fatalf("%s served by %s after the failover, want %s", h0.Name(), got.Addr(), promoted.Addr())
	}
	r.grants("the workload to go on after the failover", 20, contended[0])
	// Two leases after the failover the watchdog lock is still held: renewed on the new master.
	if d := 2*clusterLease - time.Since(began); d > 0 {
		time.Sleep(d) // the rest of a bound: a lock not renewed would be gone by then
	}
	for _, m := range []*rlock.Mutex{h0, h1} {
		if err := m.Err(bg); err != nil {
			t.Fatalf("%s lost by the failover: %v", m.Name(), err)
		}
	}
	if ttl, err := h1.TTL(bg); err != nil || ttl <= 0 {
		t.Fatalf("%s two leases after the failover: TTL %v, %v (not renewed on the new master)", h1.Name(), ttl, err)
	}
	wake0 := handOff(t, h0, w0)
	wake1 := handOff(t, h1, w1)
	r.end()

	rep := r.verify(false)
	ops, _ := r.rec.snapshot()
	checkClean(t, ops, rep)
	if left := lockedLeft(t, holder, append(append([]string{}, contended...), held...)); len(left) > 0 {
		t.Errorf("locks still held after every holder unlocked: %v", left)
	}
	acq, rel := stalls(ops)
	setOutcome(t, fmt.Sprintf("failover done in %v; %d holds (%d stale writes refused), 0 losses, 0 errors; both held locks kept and given back on the new master, parked waiters woken %v and %v after the releases; longest acquire %v, longest Unlock %v; 0 violations, %s",
		took.Round(100*time.Millisecond), rep.Acquired, rep.Rejected, roundMS(wake0), roundMS(wake1),
		acq.Round(time.Millisecond), rel.Round(time.Millisecond), rep.Linear))
}

func TestCluster_masterKilled(t *testing.T) {
	skipShortCluster(t)
	const (
		longLease  = 15 * time.Second // renewed every 3 s (fraction 0.2): 12 s of margin
		shortFixed = 1500 * time.Millisecond
		longFixed  = 30 * time.Second
	)
	result(t, row{order: "cluster 3", fault: fmt.Sprintf("Redis Cluster: the master of a contended name killed (`kill -9`) mid-run, its replica promoted by the cluster (node timeout 2 s). 3 Clients x 2 owners (watchdog, lease %v) contend on 3 names, one per master; on the killed master, locks held throughout: watchdog %v and fixed %v (`WithReplicaAck(1, 500ms)`, a waiter parked on each), watchdog %v and fixed %v", clusterLease, longLease, longFixed, clusterLease, shortFixed),
		expected: "locks whose lease outlasts the outage kept (renewed on the promoted replica, given back there, waiters woken); shorter ones lost and the holder told (ErrLockLost; ErrLeaseExpired for a fixed lease) before the replica is promoted; exclusion holds, but for the documented loss of a grant the replica had not received (asynchronous replication, shown as a limitation if it happens); acquires ride out the outage within their wait"})
	cl := redistest.StartCluster(t)
	r := newClusterRun(t)
	wd := watchdogClients(t, cl, 3)
	long := clusterClient(t, cl, rlock.WithWatchdogTimeout(longLease), rlock.WithRenewFraction(0.2), rlock.WithReplicaAck(1, 500*time.Millisecond))
	short := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))
	waiters := clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease))

	contended := perMaster(t, cl, long, "c")
	master := cl.MasterOf(t, long.Mutex(contended[0]).Key())
	held := onMaster(t, cl, long, master, 4, "h")
	k0 := lockFor(t, long, held[0], 0)
	k1 := lockFor(t, long, held[1], longFixed)
	s0 := lockFor(t, short, held[2], 0)
	w0 := park(t, waiters, held[0], master)
	w1 := park(t, waiters, held[1], master)

	contend(r, contended, wd, nil)
	r.grants("the workload to run", 5, contended...)
	s1 := lockFor(t, short, held[3], shortFixed) // just before the kill: its lease ends in the outage
	s0told := make(chan int64, 1)
	stopWatch := context.AfterFunc(holdCtx(t, s0), func() { s0told <- worker.Mono() })
	defer stopWatch()

	killed := worker.Mono()
	promoted := cl.KillMaster(t, master)
	promotedAt := worker.Mono()
	outage := time.Duration(promotedAt - killed)

	// Lost and told: the short watchdog lease by its own clock, before the replica took over.
	var toldAt int64
	select {
	case toldAt = <-s0told:
	case <-time.After(clusterLease + 5*time.Second):
		t.Fatalf("the holder of %s (lease %v) was not told of its loss %v after the kill", s0.Name(), clusterLease, clusterLease+5*time.Second)
	}
	if err := s0.Err(bg); !errors.Is(err, rlock.ErrLockLost) {
		t.Errorf("%s after the kill: Err %v, want ErrLockLost", s0.Name(), err)
	}
	if toldAt > promotedAt {
		t.Errorf("the holder of %s was told %v after the kill, after the promotion (%v)", s0.Name(), time.Duration(toldAt-killed), outage)
	}
	if err := s1.Err(bg); !errors.Is(err, rlock.ErrLeaseExpired) {
		t.Errorf("%s (fixed lease %v) after the outage: Err %v, want ErrLeaseExpired", s1.Name(), shortFixed, err)
	}
	for _, m := range []*rlock.Mutex{s0, s1} {
		if err := m.Unlock(bg); !errors.Is(err, rlock.ErrNotHeld) {
			t.Errorf("Unlock of the lost %s: %v, want ErrNotHeld", m.Name(), err)
		}
	}
	// Kept: the long watchdog lease is renewed on the promoted replica (its TTL there climbs
	// back above what any copy from before the kill can show).
	redistest.WaitFor(t, longLease/2, k0.Name()+" to be renewed on the promoted replica", func() bool {
		msg := promoted.Do(t, "PTTL", k0.Key())
		ms, err := msg.AsInt64()
		return err == nil && time.Duration(ms)*time.Millisecond > longLease*9/10
	})
	for _, m := range []*rlock.Mutex{k0, k1} {
		if err := m.Err(bg); err != nil {
			t.Fatalf("%s (lease longer than the outage) lost: %v", m.Name(), err)
		}
	}
	r.grants("the workload to go on after the promotion", 20, contended[0])
	wake1 := handOff(t, k1, w1)
	wake0 := handOff(t, k0, w0)
	r.end()

	ops, lost := r.rec.snapshot()
	rep, across := verifyAcross(r.run, ops, lost, killed, promotedAt, contended[0])
	noop, unknown, samples := errorsIn(ops)
	if noop+unknown > 0 {
		t.Errorf("%d errors and %d unknown outcomes reached the callers (their wait and cleanup timeout outlast the outage): %v", noop, unknown, samples)
	}
	acq, rel := stalls(ops)
	if acq > clusterWait {
		t.Errorf("an acquire took %v, more than its wait %v", acq, clusterWait)
	}
	if left := lockedLeft(t, long, append(append([]string{}, contended...), held...)); len(left) > 0 {
		t.Errorf("locks still held after every holder unlocked: %v", left)
	}
	t.Logf("outage %v; told %v after the kill; %d errors (%v), %d unknown; %d overlaps across the failover", outage, time.Duration(toldAt-killed), noop, samples, unknown, across)
	errs := "0 errors"
	if noop+unknown > 0 {
		errs = fmt.Sprintf("%d errors %v, %d unknown outcomes", noop, samples, unknown)
	}
	setOutcome(t, fmt.Sprintf("replica promoted %v after the kill; lease %v lost and told %v after the kill (before the promotion), fixed %v: ErrLeaseExpired, both Unlocks ErrNotHeld; lease %v (renewed on the promoted replica) and fixed %v kept and given back there, parked waiters woken %v and %v after the releases; workload: %d holds (%d stale writes refused), %d loss(es) told, %s; longest acquire %v, longest Unlock %v; %d violations, %s",
		outage.Round(100*time.Millisecond), clusterLease, time.Duration(toldAt-killed).Round(time.Millisecond), shortFixed, longLease, longFixed,
		roundMS(wake1), roundMS(wake0), rep.Acquired, rep.Rejected, rep.Lost, errs,
		acq.Round(time.Millisecond), rel.Round(time.Millisecond), rep.violations()-across, rep.Linear))
	if across > 0 {
		setRow(t, func(r *row) {
			r.status = "limitation (documented)"
			r.outcome += fmt.Sprintf("; %d hold(s) granted before the kill overlapped one granted by the promoted replica, neither holder told yet: the replica had not received the grant (asynchronous replication; see Failover in the guarantees and `WithReplicaAck`)", across)
		})
	}
}

// roundMS rounds d to the millisecond for the table, and says "<1ms" below it.
func roundMS(d time.Duration) string {
	if d < time.Millisecond {
		return "<1ms"
	}
	return d.Round(time.Millisecond).String()
}

// holdCtx is m's HoldContext, cancelled at cleanup.
func holdCtx(t *testing.T, m *rlock.Mutex) context.Context {
	ctx, cancel := m.HoldContext(bg)
	t.Cleanup(cancel)
	return ctx
}

// span is one hold of the history: acquire return to Unlock call, or to the loss notice.
type span struct {
	owner      string
	token      int64
	start, end int64
	told       bool
}

// watchdogClients makes n Clients on cl with the rows' watchdog lease.
func watchdogClients(t *testing.T, cl *redistest.Cluster, n int) []*rlock.Client {
	t.Helper()
	var cs []*rlock.Client
	for i := 0; i < n; i++ {
		cs = append(cs, clusterClient(t, cl, rlock.WithWatchdogTimeout(clusterLease)))
	}
	return cs
}

// contend starts the rows' contended workload on names: two owners per Client of wd in
// watchdog mode and, when fixed is not nil, two of fixed with a fixed lease. It returns the
// workers' configuration, for more workers of the same kind.
func contend(r *clusterRun, names []string, wd []*rlock.Client, fixed *rlock.Client) worker.Config {
	cfg := worker.Config{Names: names, Wait: clusterWait, Work: 2 * time.Millisecond}
	for i, c := range wd {
		r.workers(c, fmt.Sprint("wd", i, "-"), 2, cfg)
	}
	if fixed != nil {
		fcfg := cfg
		fcfg.Lease = clusterFixedLease
		r.workers(fixed, "fixed", 2, fcfg)
	}
	return cfg
}

// untoldOverlaps checks every overlap of two holds of a name that neither holder had been
// told of: one that exempt accepts (a documented limitation of the fault, named what) is
// counted and returned, any other is a violation reported on t.
func untoldOverlaps(t *testing.T, ops []worker.Op, lost []worker.Lost, what string, exempt func(name string, a, b *span) bool) (across int) {
	t.Helper()
	for n, hs := range holdSpans(ops, lost) {
		for i := 1; i < len(hs); i++ {
			for j := 0; j < i; j++ {
				a, b := hs[j], hs[i]
				if b.start >= a.end || a.told || b.told {
					continue
				}
				if exempt(n, a, b) {
					across++
					continue
				}
				t.Errorf("%s: hold of %s (token %d) began while %s (token %d) held it, neither told of a loss, not across the %s", n, b.owner, b.token, a.owner, a.token, what)
			}
		}
	}
	return across
}

// verifyAcross checks a run in which a master was killed at killed and its replica promoted
// at promoted: the resource checks as always, the history against the lock model with
// expiry (leases can run out in the outage), and every overlap of holds that neither holder
// had been told of. Such an overlap is the documented limitation of an asynchronous
// failover, and is counted as such (across), when the earlier hold was granted on the
// killed master before the kill (name is the contended name it served) and the later one
// after the promotion; any other is a violation. It returns the checker's report.
func verifyAcross(r *run, ops []worker.Op, lost []worker.Lost, killed, promoted int64, name string) (report, int) {
	t := r.t
	t.Helper()
	rep := check(r.res, ops, lost)
	t.Logf("checker: %s", rep)
	if rep.Overlaps+rep.TokensBack+rep.CounterOff > 0 {
		t.Errorf("the protected resource saw a violation: %s", rep)
	}
	across := 0
	if rep.HoldOverlaps > 0 {
		across = untoldOverlaps(t, ops, lost, "failover", func(n string, a, b *span) bool {
			return n == name && a.start < killed && b.start > promoted
		})
	}
	rep.Linear = checkLinear(t, true, ops, func(m *porcupine.Model, info porcupine.LinearizationInfo) string {
		return r.dump(m, info, ops, lost)
	})
	return rep, across
}

// holdSpans are the holds of the history by name, in the order they began (as check builds
// them).
func holdSpans(ops []worker.Op, lost []worker.Lost) map[string][]*span {
	lostAt := map[string]int64{}
	for _, l := range lost {
		lostAt[secKey(l.Owner, l.Token)] = l.At
	}
	const never = int64(1) << 62
	open := map[string]*span{}
	by := map[string][]*span{}
	for _, o := range ops {
		k := secKey(o.Owner, o.Token)
		switch {
		case o.Kind == "acquire" && o.Out == worker.OutOK:
			s := &span{owner: o.Owner, token: o.Token, start: o.Return, end: never}
			open[k] = s
			by[o.Name] = append(by[o.Name], s)
		case o.Kind == "release":
			if s := open[k]; s != nil {
				s.end = o.Call
				delete(open, k)
			}
		}
	}
	for _, hs := range by {
		for _, s := range hs {
			if at, ok := lostAt[secKey(s.owner, s.token)]; ok {
				s.told, s.end = true, min(s.end, at)
			}
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
	}
	return by
}
