package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// The benchmarks of this file run on a real Redis Cluster of three masters and three
// replicas (redistest.StartCluster), all on this machine. They are long (a cluster takes
// 2-3 s to form; BenchmarkCluster_RenewalRound waits for leases of up to a minute and runs
// about two minutes), so -short skips them. Run them with
//
//	go test -run '^$' -bench 'Cluster_RenewalRound' -v ./bench/    (-v: each round's figures)
//	go test -run '^$' -bench 'Cluster_Throughput' -benchtime 2s -count 10 ./bench/
//
// The figures and the machine they were taken on are in bench/compare/README.md, "Cluster
// scale (issue 11)".

func skipShortCluster(b *testing.B) {
	b.Helper()
	if testing.Short() {
		b.Skip("long: a real Redis Cluster (run without -short)")
	}
}

// throughputGoroutines is the number of goroutines of BenchmarkCluster_Throughput, each with
// a lock name of its own.
const throughputGoroutines = 64

// BenchmarkCluster_Throughput is uncontended Lock+Unlock cycles from 64 goroutines, each on a
// lock name of its own (the names' hash slots spread over the masters), through one Client:
// on one standalone redis-server, on a one-master Redis Cluster (cluster mode on the server
// and in rueidis, every slot on one node) and on the 3-master, 3-replica Cluster. It reports
// cycles/s, scripts per cycle (the masters' INFO commandstats), and the servers' and the
// client's CPU time per cycle: on a machine with few cores they share, these say where the
// cores went. Each deployment is started once, before its sub-benchmark (whose function the
// framework runs several times with growing b.N), and stays up, idle, while the next ones run.
func BenchmarkCluster_Throughput(b *testing.B) {
	skipShortCluster(b)
	names := make([]string, throughputGoroutines)
	for g := range names {
		names[g] = fmt.Sprintf("tp-%d", g)
	}
	srv := redistest.Start(b)
	b.Run("redis=standalone", func(b *testing.B) {
		cycles(b, srv.Client(b), []*redistest.Server{srv}, []*redistest.Server{srv}, names)
	})
	one := startOneNodeCluster(b)
	oneClient, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{one.Addr()}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(oneClient.Close)
	if m := oneClient.Mode(); m != rueidis.ClientModeCluster {
		b.Fatalf("rueidis client to the one-node cluster in mode %v, not cluster", m)
	}
	b.Run("redis=cluster-1-master", func(b *testing.B) {
		cycles(b, oneClient, []*redistest.Server{one}, []*redistest.Server{one}, names)
	})
	cl := redistest.StartCluster(b)
	rc := cl.Client(b)
	masters := cl.Masters(b)
	c, err := rlock.New(rc)
	if err != nil {
		b.Fatal(err)
	}
	per := make(map[*redistest.Server]int)
	for _, n := range names {
		per[cl.MasterOf(b, c.Mutex(n).Key())]++
	}
	_ = c.Close()
	split := make([]string, len(masters))
	for i, m := range masters {
		split[i] = strconv.Itoa(per[m])
	}
	b.Logf("lock names per master of the 3-master cluster: %s", strings.Join(split, "/"))
	b.Run("redis=cluster-3-masters", func(b *testing.B) {
		cycles(b, rc, masters, cl.Nodes(), names)
	})
}

// cycles runs b.N Lock+Unlock cycles shared among one goroutine per name, through one Client
// on rc, and reports cycles/s, the scripts the masters ran per cycle, the CPU time of all the
// deployment's servers (masters and replicas: INFO cpu) per cycle and the CPU time of this
// process (the client: rlock and rueidis) per cycle. The benchmark function runs several
// times with growing b.N on the same servers.
func cycles(b *testing.B, rc rueidis.Client, masters, all []*redistest.Server, names []string) {
	b.Helper()
	c, err := rlock.New(rc)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	ms := make([]*rlock.Mutex, len(names))
	for i, n := range names {
		ms[i] = c.Mutex(n)
		if err := ms[i].Lock(ctx); err != nil { // load the scripts on every master
			b.Fatal(err)
		}
		if err := ms[i].Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	scripts0, redis0, client0 := scriptsOn(b, masters), statsSum(b, all).cpu, processCPU()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for _, m := range ms {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := m.Lock(ctx); err != nil {
					b.Error(err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(b.N) }
	b.ReportMetric(float64(scriptsOn(b, masters)-scripts0)/float64(b.N), "cmds/op")
	b.ReportMetric(us(statsSum(b, all).cpu-redis0), "redis-cpu-us/op")
	if client0 >= 0 {
		b.ReportMetric(us(processCPU()-client0), "client-cpu-us/op")
	}
}

// startOneNodeCluster starts one redis-server in cluster mode, gives it all 16384 slots and
// waits until it reports cluster_state:ok.
func startOneNodeCluster(b *testing.B) *redistest.Server {
	b.Helper()
	srv := redistest.Start(b, redistest.WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	msg := srv.Do(b, "CLUSTER", "ADDSLOTSRANGE", "0", strconv.Itoa(redistest.SlotCount-1))
	if err := msg.Error(); err != nil {
		b.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	redistest.WaitFor(b, 30*time.Second, "the one-node cluster to be ok", func() bool {
		msg := srv.Do(b, "CLUSTER", "INFO")
		s, _ := msg.ToString()
		return strings.Contains(s, "cluster_state:ok")
	})
	return srv
}

// nodeStats is what one node's INFO says of the work done: its scripts (EVAL and EVALSHA
// calls and their usec in INFO commandstats) and its CPU time (INFO cpu, used_cpu_sys +
// used_cpu_user). They are cumulative: a figure is the difference of two readings.
type nodeStats struct {
	scripts, scriptUsec int64
	cpu                 time.Duration
}

func (s nodeStats) sub(o nodeStats) nodeStats {
	return nodeStats{s.scripts - o.scripts, s.scriptUsec - o.scriptUsec, s.cpu - o.cpu}
}

func (s nodeStats) add(o nodeStats) nodeStats {
	return nodeStats{s.scripts + o.scripts, s.scriptUsec + o.scriptUsec, s.cpu + o.cpu}
}

// statsOf reads srv's INFO commandstats and INFO cpu.
func statsOf(b *testing.B, srv *redistest.Server) nodeStats {
	b.Helper()
	var st nodeStats
	for _, section := range []string{"commandstats", "cpu"} {
		msg := srv.Do(b, "INFO", section)
		text, err := msg.ToString()
		if err != nil {
			b.Fatalf("%s: INFO %s: %v", srv.Addr(), section, err)
		}
		for _, line := range strings.Split(strings.TrimPrefix(text, "txt:"), "\n") {
			k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				continue
			}
			switch k {
			case "cmdstat_eval", "cmdstat_evalsha":
				for _, f := range strings.Split(v, ",") {
					name, val, _ := strings.Cut(f, "=")
					n, _ := strconv.ParseInt(val, 10, 64)
					switch name {
					case "calls":
						st.scripts += n
					case "usec":
						st.scriptUsec += n
					}
				}
			case "used_cpu_sys", "used_cpu_user":
				sec, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatalf("%s: INFO cpu: %q: %v", srv.Addr(), line, err)
				}
				st.cpu += time.Duration(sec * float64(time.Second))
			}
		}
	}
	return st
}

// statsSum is statsOf summed over servers.
func statsSum(b *testing.B, servers []*redistest.Server) nodeStats {
	b.Helper()
	var st nodeStats
	for _, s := range servers {
		st = st.add(statsOf(b, s))
	}
	return st
}

// scriptsOn is the scripts (EVAL + EVALSHA calls) the servers ran, cumulative.
func scriptsOn(b *testing.B, servers []*redistest.Server) int64 {
	return statsSum(b, servers).scripts
}

// renewCounter wraps the rueidis client of the Client under test: it counts the calls (Do
// and DoMulti: each is one round trip to each node it reaches; DoMulti reaches the nodes in
// parallel), the scripts they carry, the leases those scripts renew (a renew script's
// arguments are the TTL and one owner per lease), and the time spent in the calls. While a
// gate is set, every call waits for it before it starts (and before it is counted).
type renewCounter struct {
	rueidis.Client
	st *renewStats
}

type renewStats struct {
	gate    atomic.Pointer[chan struct{}]
	blocked atomic.Int64 // unix ns at which the first call held back by the gate came
	calls   atomic.Int64
	scripts atomic.Int64
	leases  atomic.Int64 // renewed (counted when the call returns)
	busy    atomic.Int64 // ns inside calls
	first   atomic.Int64 // unix ns at which the first call since reset started; 0: none yet
	last    atomic.Int64 // unix ns at which the last call ended
}

func (s *renewStats) reset() {
	s.calls.Store(0)
	s.scripts.Store(0)
	s.leases.Store(0)
	s.busy.Store(0)
	s.first.Store(0)
	s.last.Store(0)
}

// begin blocks while a gate is set, then counts a call and returns its start and the
// leases its scripts renew.
func (s *renewStats) begin(cmds ...rueidis.Completed) (time.Time, int64) {
	if g := s.gate.Load(); g != nil {
		s.blocked.CompareAndSwap(0, time.Now().UnixNano())
		<-*g
	}
	s.calls.Add(1)
	var leases int64
	for _, cmd := range cmds {
		args := cmd.Commands() // EVALSHA sha numkeys key... arg...
		if len(args) < 3 || (args[0] != "EVALSHA" && args[0] != "EVAL") {
			continue
		}
		s.scripts.Add(1)
		if nk, err := strconv.Atoi(args[2]); err == nil && len(args) > 4+nk {
			leases += int64(len(args) - 4 - nk) // the TTL, then one owner per lease
		}
	}
	start := time.Now()
	s.first.CompareAndSwap(0, start.UnixNano())
	return start, leases
}

func (s *renewStats) end(start time.Time, leases int64) {
	now := time.Now()
	s.busy.Add(int64(now.Sub(start)))
	s.last.Store(now.UnixNano())
	s.leases.Add(leases)
}

func (c renewCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	start, leases := c.st.begin(cmd)
	defer c.st.end(start, leases)
	return c.Client.Do(ctx, cmd)
}

func (c renewCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	start, leases := c.st.begin(multi...)
	defer c.st.end(start, leases)
	return c.Client.DoMulti(ctx, multi...)
}

// BenchmarkCluster_RenewalRound holds N locks in watchdog mode on the 3-master Cluster (names
// spread over all slots) and measures renewal rounds of all of them, as the watchdog sends
// them. There is no hook to start a round, so the benchmark shapes the first one: the locks
// are taken (64 goroutines), then the rueidis client holds every call back until the last
// lock taken is due for renewal (two thirds of the lease after it was taken), so that the
// whole round is due at once and goes out in back-to-back batches of 512 leases (the
// watchdog's batch size), as after a stall. The second round comes by itself two thirds of a
// lease later. It reports:
//
//   - round-ms: the first round's wall time, from the start of its first call to the end of
//     the call that renewed the N-th lease;
//   - busy-ms/round: the time spent inside the round's calls (one at a time: the watchdog
//     has one renewal goroutine), mean of the two rounds. The second round's wall time is
//     logged, not reported: the batch held back first was taken (and its renewal time set)
//     seconds before the others, so when taking the locks took longer than a twentieth of
//     the lease, the second round comes in two parts with a gap between;
//   - calls/round (Do + DoMulti: a DoMulti is one round trip to each node it reaches, in
//     parallel), scripts/round, and Redis' work: the masters' EVAL/EVALSHA time (INFO
//     commandstats usec) and the masters' and the replicas' CPU (INFO cpu, used_cpu_sys +
//     used_cpu_user, read before and after each round), means of the two rounds.
//
// The lease is long enough for the acquisition and a round to fit in its last third; the
// benchmark fails if a lock was lost. ns/op is a whole iteration (taking the locks, waiting for
// two rounds, releasing them: minutes), so that any -benchtime runs it once: read round-ms.
func BenchmarkCluster_RenewalRound(b *testing.B) {
	skipShortCluster(b)
	for _, tc := range []struct {
		n     int
		lease time.Duration
	}{
		{10_000, 20 * time.Second},
		{100_000, 60 * time.Second},
	} {
		b.Run(fmt.Sprintf("locks=%d", tc.n), func(b *testing.B) {
			cl := redistest.StartCluster(b)
			st := &renewStats{}
			rc := renewCounter{Client: cl.Client(b), st: st}
			c, err := rlock.New(rc, rlock.WithWatchdogTimeout(tc.lease))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			masters := cl.Masters(b)
			warmRenewal(b, cl, rc.Client, masters)
			var replicas []*redistest.Server
			for _, s := range cl.Nodes() {
				isMaster := false
				for _, m := range masters {
					isMaster = isMaster || m == s
				}
				if !isMaster {
					replicas = append(replicas, s)
				}
			}
			var first time.Duration
			var all []round
			for i := 0; i < b.N; i++ {
				rs := renewalRounds(b, c, st, masters, replicas, tc.n, tc.lease, fmt.Sprintf("held%d-%d", tc.n, i))
				first += rs[0].wall
				all = append(all, rs...)
			}
			var sum round
			for _, r := range all {
				sum.busy += r.busy
				sum.calls += r.calls
				sum.scripts += r.scripts
				sum.masters = sum.masters.add(r.masters)
				sum.replicas = sum.replicas.add(r.replicas)
			}
			k := float64(len(all))
			ms := func(d time.Duration, k float64) float64 { return float64(d) / float64(time.Millisecond) / k }
			b.ReportMetric(ms(first, float64(b.N)), "round-ms")
			b.ReportMetric(ms(sum.busy, k), "busy-ms/round")
			b.ReportMetric(float64(sum.calls)/k, "calls/round")
			b.ReportMetric(float64(sum.scripts)/k, "scripts/round")
			b.ReportMetric(ms(time.Duration(sum.masters.scriptUsec)*time.Microsecond, k), "evalsha-ms/round")
			b.ReportMetric(ms(sum.masters.cpu, k), "master-cpu-ms/round")
			b.ReportMetric(ms(sum.replicas.cpu, k), "replica-cpu-ms/round")
		})
	}
}

// warmRenewal has every master load the renew script, so that no round pays for a NOSCRIPT
// and its EVAL: a Client of its own with a 300 ms lease holds a lock on each master until a
// renewal has gone.
func warmRenewal(b *testing.B, cl *redistest.Cluster, rc rueidis.Client, masters []*redistest.Server) {
	b.Helper()
	w, err := rlock.New(rc, rlock.WithWatchdogTimeout(300*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	on := make(map[*redistest.Server]bool)
	var held []*rlock.Mutex
	for i := 0; len(on) < len(masters); i++ {
		m := w.Mutex(fmt.Sprintf("warm-%d", i))
		if s := cl.MasterOf(b, m.Key()); !on[s] {
			on[s] = true
			if err := m.Lock(bg); err != nil {
				b.Fatal(err)
			}
			held = append(held, m)
		}
	}
	time.Sleep(400 * time.Millisecond) // renewed at 200 ms
	for _, m := range held {
		if err := m.Err(bg); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(bg); err != nil {
			b.Fatal(err)
		}
	}
}

// round is one renewal round's figures.
type round struct {
	wall, busy             time.Duration
	calls, scripts, leases int64
	masters, replicas      nodeStats
}

// renewalRounds takes n locks named prefix-j, measures two renewal rounds (the first one
// held back until all of it is due), checks that no lock was lost and releases them.
func renewalRounds(b *testing.B, c *rlock.Client, st *renewStats, masters, replicas []*redistest.Server, n int, lease time.Duration, prefix string) []round {
	b.Helper()
	locks := make([]*rlock.Mutex, n)
	for j := range locks {
		locks[j] = c.Mutex(fmt.Sprintf("%s-%d", prefix, j))
	}
	t0 := time.Now()
	parallel(b, locks, func(m *rlock.Mutex) error { return m.Lock(bg) })
	taken := time.Now()
	b.Logf("%d locks taken in %v", n, taken.Sub(t0).Round(time.Millisecond))

	gate := make(chan struct{})
	st.blocked.Store(0)
	st.gate.Store(&gate)
	time.Sleep(time.Until(taken.Add(lease * 2 / 3).Add(100 * time.Millisecond)))
	var rounds []round
	measure := func(start func()) {
		m0, r0 := statsSum(b, masters), statsSum(b, replicas)
		st.reset()
		start()
		redistest.WaitFor(b, lease/3, "a renewal round", func() bool { return st.leases.Load() >= int64(n) })
		r := round{
			wall:     time.Duration(st.last.Load() - st.first.Load()),
			busy:     time.Duration(st.busy.Load()),
			calls:    st.calls.Load(),
			scripts:  st.scripts.Load(),
			leases:   st.leases.Load(),
			masters:  statsSum(b, masters).sub(m0),
			replicas: statsSum(b, replicas).sub(r0),
		}
		b.Logf("round %d: %d leases in %v (%v in calls): %d calls, %d scripts; masters: %d scripts, %v in scripts, %v CPU; replicas: %v CPU",
			len(rounds)+1, r.leases, r.wall.Round(time.Millisecond), r.busy.Round(time.Millisecond), r.calls, r.scripts,
			r.masters.scripts, time.Duration(r.masters.scriptUsec)*time.Microsecond, r.masters.cpu.Round(time.Millisecond), r.replicas.cpu.Round(time.Millisecond))
		rounds = append(rounds, r)
	}
	measure(func() {
		st.gate.Store(nil)
		close(gate)
	})
	// The second round, by itself: its first batch, the one held back, is due two thirds of
	// a lease after the watchdog sent it, when it came to the gate; the watchdog sends a
	// renewal up to a twentieth of the lease early.
	time.Sleep(time.Until(time.Unix(0, st.blocked.Load()).Add(lease*2/3 - lease/20 - 500*time.Millisecond)))
	measure(func() {})

	for _, m := range locks {
		if err := m.Err(bg); err != nil {
			b.Fatalf("%s: %v (the lease of %v is too short for a round here)", m.Name(), err, lease)
		}
	}
	parallel(b, locks, func(m *rlock.Mutex) error { return m.Unlock(bg) })
	return rounds
}

// parallel runs f on every lock, from 64 goroutines.
func parallel(b *testing.B, locks []*rlock.Mutex, f func(*rlock.Mutex) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for j := next.Add(1) - 1; j < int64(len(locks)); j = next.Add(1) - 1 {
				if err := f(locks[j]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
}
