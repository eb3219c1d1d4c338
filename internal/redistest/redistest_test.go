package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustString(t *testing.T, msg rueidis.RedisMessage) string {
	t.Helper()
	s, err := msg.ToString()
	if err != nil {
		t.Fatalf("ToString: %v", err)
	}
	return s
}

func TestStartPing(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") || s.Port() <= 0 {
		t.Fatalf("bad addr %q port %d", s.Addr(), s.Port())
	}
	if got := mustString(t, s.Do(t, "PING")); got != "PONG" {
		t.Fatalf("admin PING = %q", got)
	}
	c := s.Client(t)
	got, err := c.Do(ctxT(t, 5*time.Second), c.B().Ping().Build()).ToString()
	if err != nil || got != "PONG" {
		t.Fatalf("client PING = %q, %v", got, err)
	}
	// A Redis error reply is returned, not fatal.
	if msg := s.Do(t, "NOSUCHCOMMAND"); msg.Error() == nil {
		t.Fatalf("expected a Redis error for an unknown command")
	}
	if !s.Running() {
		t.Fatalf("Running() = false")
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "2mb"))
	msg := s.Do(t, "CONFIG", "GET", "maxmemory")
	m, err := msg.AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	if m["maxmemory"] != "2097152" {
		t.Fatalf("maxmemory = %q", m["maxmemory"])
	}
}

func TestStopRestartAOFKeepsKey(t *testing.T) {
	t.Parallel()
	s := Start(t, WithAOF())
	key := Name(t)
	c := s.Client(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Set().Key(key).Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Stop(t)
	if s.Running() {
		t.Fatalf("Running() after Stop")
	}
	s.Restart(t)
	if got := mustString(t, s.Do(t, "GET", key)); got != "v" {
		t.Fatalf("GET after Stop/Restart with AOF = %q", got)
	}
	// The client created before the stop reconnects by itself.
	got, err := c.Do(ctxT(t, 5*time.Second), c.B().Get().Key(key).Build()).ToString()
	if err != nil || got != "v" {
		t.Fatalf("old client GET after restart = %q, %v", got, err)
	}

	// Kill (no graceful shutdown) also keeps it with appendfsync always.
	s.Do(t, "SET", key, "v2")
	s.Kill(t)
	s.Restart(t)
	if got := mustString(t, s.Do(t, "GET", key)); got != "v2" {
		t.Fatalf("GET after Kill/Restart with AOF = %q", got)
	}
}

func TestStopRestartWithoutAOFLosesKey(t *testing.T) {
	t.Parallel()
	s := Start(t)
	key := Name(t)
	port := s.Port()
	s.Do(t, "SET", key, "v")
	s.Stop(t)
	s.Restart(t)
	if s.Port() != port {
		t.Fatalf("port changed: %d -> %d", port, s.Port())
	}
	if msg := s.Do(t, "GET", key); !msg.IsNil() {
		t.Fatalf("GET after restart without AOF = %v, want nil", msg)
	}
	s.Do(t, "SET", key, "v")
	s.Kill(t)
	s.Restart(t)
	if msg := s.Do(t, "GET", key); !msg.IsNil() {
		t.Fatalf("GET after kill/restart without AOF = %v, want nil", msg)
	}
}

func TestKillClientErrorsThenRecovers(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	key := Name(t)
	if err := c.Do(ctxT(t, 5*time.Second), c.B().Set().Key(key).Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.Kill(t)
	err := c.Do(ctxT(t, 2*time.Second), c.B().Set().Key(key).Value("2").Build()).Error()
	if err == nil {
		t.Fatalf("SET on a killed server succeeded")
	}
	if rueidis.IsRedisNil(err) {
		t.Fatalf("unexpected nil")
	}
	t.Logf("rueidis error while killed: %v", err)
	s.Restart(t)
	WaitFor(t, 5*time.Second, "client to reconnect", func() bool {
		return c.Do(ctxT(t, time.Second), c.B().Set().Key(key).Value("3").Build()).Error() == nil
	})
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	key := Name(t)
	s.Pause(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	err := c.Do(ctx, c.B().Set().Key(key).Value("x").Build()).Error()
	cancel()
	if err == nil {
		t.Fatalf("SET succeeded while paused")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("SET while paused returned %v (not DeadlineExceeded)", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("timeout took %v", el)
	}
	s.Resume(t)
	WaitFor(t, 5*time.Second, "SET after resume", func() bool {
		return c.Do(ctxT(t, time.Second), c.B().Set().Key(key).Value("y").Build()).Error() == nil
	})
	if got := mustString(t, s.Do(t, "GET", key)); got != "y" {
		t.Fatalf("GET = %q", got)
	}
}

// A test that ends while the server is paused must still clean up: the
// client cleanup resumes the server before rueidis' Close.
func TestCleanupWhilePaused(t *testing.T) {
	t.Parallel()
	var s *Server
	t.Run("inner", func(t *testing.T) {
		s = Start(t)
		c := s.Client(t)
		s.Do(t, "SET", Name(t), "1")
		_ = c
		s.Pause(t)
	})
	if s.Running() {
		t.Fatalf("server still running after its test's cleanup")
	}
}

func TestCommandStats(t *testing.T) {
	t.Parallel()
	s := Start(t)
	c := s.Client(t)
	key := Name(t)
	ctx := ctxT(t, 5*time.Second)
	if err := c.Do(ctx, c.B().Set().Key(key).Value("a").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s.ResetStats(t)
	stats := s.CommandStats(t)
	if stats["set"] != 0 {
		t.Fatalf("set after reset = %d, stats %v", stats["set"], stats)
	}
	if err := c.Do(ctx, c.B().Set().Key(key).Value("b").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Eval().Script("return 1").Numkeys(0).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	stats = s.CommandStats(t)
	if stats["set"] != 1 || stats["eval"] != 1 {
		t.Fatalf("stats = %v, want set=1 eval=1", stats)
	}
	if stats["info"] < 1 {
		t.Fatalf("info not counted: %v", stats)
	}
}

func TestParseCommandStats(t *testing.T) {
	in := "txt:# Commandstats\r\ncmdstat_SET:calls=3,usec=2,usec_per_call=0.67,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=10,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(in)
	if err != nil {
		t.Fatal(err)
	}
	if got["set"] != 3 || got["config|resetstat"] != 1 || len(got) != 2 {
		t.Fatalf("got %v", got)
	}
	if _, err := parseCommandStats("cmdstat_x:usec=1"); err == nil {
		t.Fatalf("expected error for a line without calls")
	}
}

func TestMiniredis(t *testing.T) {
	t.Parallel()
	mr, c := Miniredis(t)
	key := Name(t)
	ctx := ctxT(t, 5*time.Second)
	if err := c.Do(ctx, c.B().Set().Key(key).Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if got, err := mr.Get(key); err != nil || got != "v" {
		t.Fatalf("miniredis Get = %q, %v", got, err)
	}
	// Multi-key across hash slots must work (single, non-cluster client).
	k2 := Name(t)
	if err := c.Do(ctx, c.B().Mset().KeyValue().KeyValue(key, "1").KeyValue(k2, "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

func TestReplicaOf(t *testing.T) {
	t.Parallel()
	master := Start(t)
	replica := Start(t, WithReplicaOf(master))
	key := Name(t)
	master.Do(t, "SET", key, "replicated")
	WaitFor(t, 10*time.Second, "key to replicate", func() bool {
		msg := replica.Do(t, "GET", key)
		s, err := msg.ToString()
		return err == nil && s == "replicated"
	})
	info := mustString(t, replica.Do(t, "INFO", "replication"))
	if !strings.Contains(info, "role:slave") {
		t.Fatalf("replica INFO replication: %s", info)
	}
}

func TestName(t *testing.T) {
	t.Run("sub test/with {braces}", func(t *testing.T) {
		a, b := Name(t), Name(t)
		if a == b {
			t.Fatalf("names not unique: %q", a)
		}
		if strings.ContainsAny(a, " /{}") || !strings.HasPrefix(a, "TestName_sub_test_with__braces_-") {
			t.Fatalf("bad name %q", a)
		}
	})
}

func TestStartedTwiceDistinctPorts(t *testing.T) {
	t.Parallel()
	a, b := Start(t), Start(t)
	if a.Port() == b.Port() {
		t.Fatalf("same port %d", a.Port())
	}
}

// fakeTB records Fatal/Skip instead of ending the real test. Its Fatalf and
// Skipf end the calling goroutine, so it must be used via runFake.
type fakeTB struct {
	testing.TB // nil: any method not overridden below would panic
	t          *testing.T
	mu         sync.Mutex
	fatal      string
	skipped    string
	failed     bool
	cleanups   []func()
}

func (f *fakeTB) Helper()      {}
func (f *fakeTB) Name() string { return f.t.Name() }
func (f *fakeTB) Logf(format string, args ...any) {
	f.t.Logf("fakeTB: "+format, args...)
}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	f.failed = true
	f.mu.Unlock()
	f.t.Logf("fakeTB error: "+format, args...)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal = fmt.Sprintf(format, args...)
	f.failed = true
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}
func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}
func (f *fakeTB) Cleanup(fn func()) {
	f.mu.Lock()
	f.cleanups = append(f.cleanups, fn)
	f.mu.Unlock()
}

// runFake runs fn with a fakeTB in its own goroutine, then its cleanups (LIFO).
func runFake(t *testing.T, fn func(tb testing.TB)) *fakeTB {
	t.Helper()
	f := &fakeTB{t: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	return f
}

func TestStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	f := runFake(t, func(tb testing.TB) {
		Start(tb, WithArgs("--no-such-directive", "1"))
		t.Errorf("Start returned despite a bad argument")
	})
	if !strings.Contains(f.fatal, "Bad directive") || !strings.Contains(f.fatal, "redis log tail") {
		t.Fatalf("fatal message does not quote the log:\n%s", f.fatal)
	}
	t.Logf("fatal message:\n%s", f.fatal)
}

func TestNoBinarySkipsOrFailsInCI(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CI", "")
	f := runFake(t, func(tb testing.TB) { Start(tb) })
	if f.skipped == "" || f.fatal != "" || !strings.Contains(f.skipped, "redis-server") {
		t.Fatalf("without CI: skipped=%q fatal=%q", f.skipped, f.fatal)
	}
	t.Setenv("CI", "true")
	f = runFake(t, func(tb testing.TB) { Start(tb) })
	if f.fatal == "" || f.skipped != "" || !strings.Contains(f.fatal, "CI") {
		t.Fatalf("with CI: skipped=%q fatal=%q", f.skipped, f.fatal)
	}
}

func TestLaunchDetectsPortInUse(t *testing.T) {
	t.Parallel()
	s := Start(t)
	other := Start(t)
	// Point a copy of s's config at other's port: the bind fails.
	busy := &Server{bin: s.bin, dir: t.TempDir(), cfg: s.cfg, port: other.Port(), addr: other.Addr()}
	busy.logPath = busy.dir + "/redis.log"
	busy.outPath = busy.dir + "/redis.stdout"
	p, err := busy.launch()
	if err == nil {
		_ = p.kill()
		t.Fatalf("launch on a busy port succeeded")
	}
	if !isPortInUse(err) {
		t.Fatalf("error not classified as port in use: %v", err)
	}
}

func TestRestartWaitsForBusyPort(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Kill(t)
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("grab the port: %v", err)
	}
	timer := time.AfterFunc(700*time.Millisecond, func() { l.Close() })
	defer timer.Stop()
	start := time.Now()
	s.Restart(t)
	if el := time.Since(start); el < 600*time.Millisecond {
		t.Fatalf("Restart returned after %v while the port was busy", el)
	}
	if got := mustString(t, s.Do(t, "PING")); got != "PONG" {
		t.Fatalf("PING = %q", got)
	}
}
