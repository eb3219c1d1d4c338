// Package redistest provides test helpers that run real redis-server
// processes (and miniredis) on 127.0.0.1 for integration and fault tests.
//
// Every server started with [Start] listens on a free loopback port, keeps its
// data directory and log in a private temp dir, and is killed (and its temp
// dir removed) in tb.Cleanup. Fault injection is done with [Server.Stop],
// [Server.Kill], [Server.Restart], [Server.Pause] and [Server.Resume].
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

const (
	// readyTimeout bounds how long we wait for a started server to answer PING.
	readyTimeout = 10 * time.Second
	// rebindWindow bounds how long Restart retries when the old port is busy.
	rebindWindow = 5 * time.Second
	// startAttempts is how many fresh ports Start tries.
	startAttempts = 5
	// exitTimeout bounds how long we wait for the process to exit after a signal.
	exitTimeout = 15 * time.Second
	// doTimeout bounds a single admin command issued by Do.
	doTimeout = 10 * time.Second
	// probeTimeout bounds a single readiness probe round trip.
	probeTimeout = 500 * time.Millisecond
	// logTailLines is how many log lines are quoted in failure messages.
	logTailLines = 30
)

// config collects the settings applied by Option values.
type config struct {
	aof       bool
	args      []string
	replicaOf *Server
	sentinel  string  // non-empty: run as a Sentinel monitoring monitors under this name
	monitors  *Server // the master a Sentinel monitors
	tls       *TLSOptions
	password  string // --requirepass
}

// Option configures a server started by Start.
type Option func(*config)

// WithAOF enables the append-only file with fsync on every write
// (appendonly yes, appendfsync always), so data written before Stop or Kill
// survives a Restart.
func WithAOF() Option {
	return func(c *config) { c.aof = true }
}

// WithArgs appends extra redis-server command-line arguments, e.g.
// WithArgs("--maxmemory", "2mb"). They are passed after the defaults, so they
// override them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithReplicaOf makes the server a replica of master
// (--replicaof 127.0.0.1 <master port>).
func WithReplicaOf(master *Server) Option {
	return func(c *config) { c.replicaOf = master }
}

// WithSentinel runs the server as a Redis Sentinel (redis-server --sentinel) monitoring
// master under the name name, with a quorum of 1, a master declared down after 1 s of
// silence and a failover timeout of 5 s. Do, Client and Addr work on it as on any server
// (Do sends Sentinel commands, e.g. SENTINEL FAILOVER name).
func WithSentinel(master *Server, name string) Option {
	return func(c *config) { c.sentinel, c.monitors = name, master }
}

// Server is a redis-server child process started by Start.
// Its methods are safe for concurrent use.
type Server struct {
	bin     string
	dir     string
	logPath string // redis --logfile
	outPath string // captured stdout/stderr (config errors are printed there)
	cfg     config
	port    int
	addr    string
	tlsMat  *TLSMaterial // WithTLS: the certificates

	mu     sync.Mutex
	proc   *process // nil when not running
	paused bool
	admin  rueidis.Client // lazily created; nil when not connected
	closed bool           // set by cleanup
}

// process is one run of the redis-server binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result; valid after done is closed
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has already been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits up to d for the process to exit.
func (p *process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// kill SIGCONTs and SIGKILLs the process and reaps it.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	if !p.waitExit(exitTimeout) {
		return fmt.Errorf("redis-server pid %d did not exit %v after SIGKILL", p.pid(), exitTimeout)
	}
	return nil
}

// startError is returned by launch; portInUse marks a retryable bind failure.
type startError struct {
	msg       string
	portInUse bool
}

func (e *startError) Error() string { return e.msg }

func isPortInUse(err error) bool {
	var se *startError
	return errors.As(err, &se) && se.portInUse
}

// StartN starts n independent servers at once (each as Start, with opts) and returns them
// in order. A server that could not start fails the test (Start reported why).
func StartN(tb testing.TB, n int, opts ...Option) []*Server {
	tb.Helper()
	ss := make([]*Server, n)
	var wg sync.WaitGroup
	for i := range ss {
		wg.Add(1)
		go func() { defer wg.Done(); ss[i] = Start(tb, opts...) }()
	}
	wg.Wait()
	for _, s := range ss {
		if s == nil {
			tb.FailNow()
		}
	}
	return ss
}

// Start starts a redis-server child process on a free 127.0.0.1 port, waits until it answers PING,
// and registers tb.Cleanup to kill it and remove its temp dir. When no redis-server binary is on PATH it
// calls tb.Skip with a clear message, unless the environment variable CI is non-empty, in which case it
// calls tb.Fatal (CI must never silently skip).
//
// The server runs with --bind 127.0.0.1 --save "" --appendonly no (unless
// WithAOF) --protected-mode no --enable-debug-command local
// --repl-diskless-sync-delay 0 (replicas sync immediately), its working
// directory and log live in a private temp dir that survives Restart, and
// it is killed automatically if the test binary dies (Linux). With WithTLS
// the port is the --tls-port and there is no plain-text port (--port 0).
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("redistest: redis-server binary not found on PATH (%v); CI is set, so this test must not be skipped: install redis-server (Redis 7)", err)
		}
		tb.Skipf("redistest: skipping: redis-server binary not found on PATH (%v); install Redis 7 to run this test", err)
		return nil
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.replicaOf != nil && cfg.replicaOf.port == 0 {
		tb.Fatalf("redistest: WithReplicaOf: master server is not started")
	}
	if cfg.sentinel != "" && (cfg.monitors == nil || cfg.monitors.port == 0) {
		tb.Fatalf("redistest: WithSentinel: master server is not started")
	}
	if cfg.tls != nil && (cfg.sentinel != "" || cfg.replicaOf != nil) {
		tb.Fatalf("redistest: WithTLS cannot be combined with WithReplicaOf or WithSentinel")
	}
	if m := cfg.replicaOf; m != nil && m.cfg.tls != nil {
		tb.Fatalf("redistest: WithReplicaOf: the master runs WithTLS, which replicas do not support")
	}
	if m := cfg.monitors; cfg.sentinel != "" && m.cfg.tls != nil {
		tb.Fatalf("redistest: WithSentinel: the master runs WithTLS, which Sentinels do not support")
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		tb.Fatalf("redistest: create temp dir: %v", err)
	}
	s := &Server{
		bin:     bin,
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		outPath: filepath.Join(dir, "redis.stdout"),
		cfg:     cfg,
	}
	// Registered before any Client, so it runs after the clients are closed.
	tb.Cleanup(func() { s.cleanup(tb) })
	if cfg.tls != nil {
		if s.tlsMat, err = makeTLS(dir, *cfg.tls); err != nil {
			tb.Fatalf("redistest: make TLS certificates: %v", err)
		}
	}

	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: find a free port: %v", err)
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p, err := s.launch()
		if err == nil {
			s.mu.Lock()
			s.proc = p
			s.mu.Unlock()
			return s
		}
		lastErr = err
		if !isPortInUse(err) {
			break
		}
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// Addr returns the server address, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Port returns the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's data directory (also holding redis.log). It
// survives Stop/Kill/Restart and is removed at cleanup.
func (s *Server) Dir() string { return s.dir }

// Running reports whether the server process is running (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Client returns a new rueidis client to this server, closed in tb.Cleanup
// (which runs before the server's own cleanup). The defaults are
// InitAddress: Addr() and ForceSingleClient: true (skipping the CLUSTER
// probe), plus TLSConfig: TLSConfig() for a server started WithTLS and
// Password: Password() for one started WithPassword; opts may change any field. If the server is paused when the
// cleanup runs, it is resumed first, because rueidis' Close waits for a PING
// reply and would otherwise hang.
func (s *Server) Client(tb testing.TB, opts ...func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	o := rueidis.ClientOption{
		InitAddress:       []string{s.addr},
		ForceSingleClient: true,
		TLSConfig:         s.TLSConfig(),
		Password:          s.cfg.password,
	}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatalf("redistest: new rueidis client to %s: %v", s.addr, err)
	}
	tb.Cleanup(func() {
		s.resumeIfPaused(tb)
		c.Close()
	})
	return c
}

// Do runs one command on a private admin connection and returns the reply,
// which may be a Redis error message: assign it and inspect it with
// msg.Error() (RedisMessage's methods have pointer receivers, so
// s.Do(tb, ...).Error() does not compile). It calls
// tb.Fatal on a transport error or if no reply arrives within 10 s (e.g.
// while the server is paused). The admin connection is not any client the
// test created, but its commands do show up in INFO commandstats. Do not use
// blocking (BLPOP, ...) or pub/sub commands here. The connection speaks RESP3,
// so e.g. INFO returns a verbatim string prefixed with "txt:".
func (s *Server) Do(tb testing.TB, args ...string) rueidis.RedisMessage {
	tb.Helper()
	if len(args) == 0 {
		tb.Fatalf("redistest: Do called without a command")
	}
	c := s.adminClient(tb)
	ctx, cancel := context.WithTimeout(context.Background(), doTimeout)
	defer cancel()
	res := c.Do(ctx, c.B().Arbitrary(args...).Build())
	if err := res.NonRedisError(); err != nil {
		tb.Fatalf("redistest: %s: %q: %v", s.addr, args, err)
	}
	msg, _ := res.ToMessage() // a Redis error reply is returned to the caller
	return msg
}

// Stop shuts the server down gracefully (SIGCONT if paused, then SIGTERM)
// and waits for it to exit. With WithAOF the data survives a Restart;
// without it the data is lost (no RDB snapshot is configured).
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.runningLocked(tb, "Stop")
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	s.paused = false
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.exited() {
		tb.Fatalf("redistest: %s: SIGTERM: %v", s.addr, err)
	}
	if !p.waitExit(exitTimeout) {
		_ = p.kill()
		s.proc = nil
		s.closeAdminLocked()
		tb.Fatalf("redistest: %s: redis-server did not exit %v after SIGTERM; killed it\n%s", s.addr, exitTimeout, s.logTail(0))
	}
	s.proc = nil
	s.closeAdminLocked()
	if p.err != nil {
		tb.Logf("redistest: %s: redis-server exited after SIGTERM with %v", s.addr, p.err)
	}
}

// Kill kills the server with SIGKILL (no shutdown, no final fsync) and
// waits for it to exit. A paused server is killed without being resumed.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.runningLocked(tb, "Kill")
	_ = p.cmd.Process.Kill()
	s.paused = false
	if !p.waitExit(exitTimeout) {
		tb.Fatalf("redistest: %s: redis-server pid %d did not exit %v after SIGKILL", s.addr, p.pid(), exitTimeout)
	}
	s.proc = nil
	// Closing after the process is gone: rueidis' Close sends a PING, which
	// now fails fast instead of waiting for a live server.
	s.closeAdminLocked()
}

// Restart starts the server again on the same port and data dir after Stop
// or Kill (or after it crashed), and waits until it answers PING and has
// finished loading (INFO persistence loading:0). If the port is briefly
// busy it retries binding for a few seconds.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		tb.Fatalf("redistest: %s: Restart after cleanup", s.addr)
	}
	if s.proc != nil {
		if !s.proc.exited() {
			tb.Fatalf("redistest: %s: Restart called while the server is running; call Stop or Kill first", s.addr)
		}
		s.proc = nil // it died on its own
	}
	s.closeAdminLocked()
	deadline := time.Now().Add(rebindWindow)
	for {
		p, err := s.launch()
		if err == nil {
			s.proc = p
			s.paused = false
			return
		}
		if !isPortInUse(err) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restart redis-server on %s: %v", s.addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause freezes the server with SIGSTOP and waits until the kernel reports
// it stopped. Its sockets stay open: clients see timeouts, not errors.
func (s *Server) Pause(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.runningLocked(tb, "Pause")
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("redistest: %s: SIGSTOP: %v", s.addr, err)
	}
	if err := waitStopped(p.pid(), 5*time.Second); err != nil {
		tb.Fatalf("redistest: %s: Pause: %v", s.addr, err)
	}
	s.paused = true
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.runningLocked(tb, "Resume")
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		tb.Fatalf("redistest: %s: SIGCONT: %v", s.addr, err)
	}
	if err := waitContinued(p.pid(), 5*time.Second); err != nil {
		tb.Fatalf("redistest: %s: Resume: %v", s.addr, err)
	}
	s.paused = false
}

// ResetStats runs CONFIG RESETSTAT. Note that the reset command itself
// ("config|resetstat") and the INFO issued by CommandStats are counted
// afterwards.
func (s *Server) ResetStats(tb testing.TB) {
	tb.Helper()
	msg := s.Do(tb, "CONFIG", "RESETSTAT")
	if err := msg.Error(); err != nil {
		tb.Fatalf("redistest: %s: CONFIG RESETSTAT: %v", s.addr, err)
	}
}

// CommandStats parses INFO commandstats into a map from lower-case command
// name ("evalsha", "eval", "publish", "subscribe", "set", ...) to its number
// of calls. Subcommands appear as Redis names them, e.g. "config|resetstat",
// "client|setinfo". Commands issued by Do (and CommandStats' own INFO) are
// included.
func (s *Server) CommandStats(tb testing.TB) map[string]int64 {
	tb.Helper()
	msg := s.Do(tb, "INFO", "commandstats")
	text, err := msg.ToString()
	if err != nil {
		tb.Fatalf("redistest: %s: INFO commandstats: %v", s.addr, err)
	}
	stats, err := parseCommandStats(text)
	if err != nil {
		tb.Fatalf("redistest: %s: %v", s.addr, err)
	}
	return stats
}

// ShardNumSub is PUBSUB SHARDNUMSUB of channel on s: how many of s's clients listen on the
// sharded channel.
func (s *Server) ShardNumSub(tb testing.TB, channel string) int64 {
	tb.Helper()
	msg := s.Do(tb, "PUBSUB", "SHARDNUMSUB", channel)
	vs, err := msg.ToArray()
	if err != nil || len(vs) != 2 {
		tb.Fatalf("redistest: %s: PUBSUB SHARDNUMSUB %s: %v (%d values)", s.addr, channel, err, len(vs))
	}
	n, err := vs[1].AsInt64()
	if err != nil {
		tb.Fatalf("redistest: %s: PUBSUB SHARDNUMSUB %s: %v", s.addr, channel, err)
	}
	return n
}

// parseCommandStats parses the body of INFO commandstats, e.g.
// "cmdstat_set:calls=1,usec=2,usec_per_call=2.00,rejected_calls=0,failed_calls=0".
func parseCommandStats(text string) (map[string]int64, error) {
	text = strings.TrimPrefix(text, "txt:") // RESP3 verbatim string
	stats := make(map[string]int64)
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("malformed commandstats line %q", line)
		}
		found := false
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("malformed calls in commandstats line %q: %v", line, err)
			}
			stats[strings.ToLower(name)] = n
			found = true
		}
		if !found {
			return nil, fmt.Errorf("no calls= in commandstats line %q", line)
		}
	}
	return stats, nil
}

// Miniredis starts miniredis (miniredis.Run) and a rueidis client to it with
// DisableCache: true, AlwaysRESP2: true and ForceSingleClient: true (miniredis
// answers CLUSTER SLOTS, so without it rueidis would build a cluster client
// that rejects multi-key commands spanning hash slots). Both are closed in
// tb.Cleanup, the client first.
func Miniredis(tb testing.TB) (*miniredis.Miniredis, rueidis.Client) {
	tb.Helper()
	// On a port outside the ephemeral range, so that Restart can bind it again.
	mr := miniredis.NewMiniRedis()
	var err error
	for i := 0; i < 5; i++ {
		var port int
		if port, err = freePort(); err != nil {
			break
		}
		if err = mr.StartAddr(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: start miniredis: %v", err)
	}
	tb.Cleanup(mr.Close)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{mr.Addr()},
		DisableCache:      true,
		AlwaysRESP2:       true,
		ForceSingleClient: true,
	})
	if err != nil {
		tb.Fatalf("redistest: new rueidis client to miniredis %s: %v", mr.Addr(), err)
	}
	tb.Cleanup(c.Close)
	return mr, c
}

// Name returns a unique key/lock name for the test: tb.Name() with every
// character other than [A-Za-z0-9._-] replaced by '_' (so no '/', spaces or
// hash-tag braces), plus "-" and 8 random hex digits.
func Name(tb testing.TB) string {
	tb.Helper()
	var b strings.Builder
	for _, r := range tb.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 96 {
			break
		}
	}
	var rnd [4]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatalf("redistest: random suffix: %v", err)
	}
	return b.String() + "-" + hex.EncodeToString(rnd[:])
}

// --- internals ---

// args builds the redis-server command line for the current port.
func (s *Server) args() []string {
	if s.cfg.sentinel != "" {
		// A Sentinel rewrites its configuration file: it gets one of its own, written at
		// each launch (Restart included) with the master to monitor.
		conf := filepath.Join(s.dir, "sentinel.conf")
		name, port := s.cfg.sentinel, strconv.Itoa(s.cfg.monitors.port)
		text := "sentinel monitor " + name + " 127.0.0.1 " + port + " 1\n" +
			"sentinel down-after-milliseconds " + name + " 1000\n" +
			"sentinel failover-timeout " + name + " 5000\n"
		if pw := s.cfg.monitors.cfg.password; pw != "" {
			text += "sentinel auth-pass " + name + " " + pw + "\n"
		}
		_ = os.WriteFile(conf, []byte(text), 0o644)
		a := []string{conf, "--sentinel",
			"--bind", "127.0.0.1",
			"--port", strconv.Itoa(s.port),
			"--dir", s.dir,
			"--protected-mode", "no",
			"--daemonize", "no",
			"--logfile", s.logPath,
		}
		if s.cfg.password != "" {
			a = append(a, "--requirepass", s.cfg.password)
		}
		return append(a, s.cfg.args...)
	}
	a := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(s.port),
	}
	if m := s.tlsMat; m != nil {
		auth := "no"
		if s.cfg.tls.ClientAuth {
			auth = "yes"
		}
		a = []string{
			"--bind", "127.0.0.1",
			"--port", "0",
			"--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", m.CertFile,
			"--tls-key-file", m.KeyFile,
			"--tls-ca-cert-file", m.CAFile,
			"--tls-auth-clients", auth,
		}
	}
	a = append(a,
		"--dir", s.dir,
		"--save", "",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--logfile", s.logPath,
		"--enable-debug-command", "local",
		// Start a replica's full sync at once instead of after the default 5 s.
		"--repl-diskless-sync-delay", "0",
	)
	if s.cfg.password != "" {
		a = append(a, "--requirepass", s.cfg.password)
	}
	if s.cfg.aof {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if m := s.cfg.replicaOf; m != nil {
		a = append(a, "--replicaof", "127.0.0.1", strconv.Itoa(m.port))
		if m.cfg.password != "" {
			a = append(a, "--masterauth", m.cfg.password)
		}
	}
	return append(a, s.cfg.args...)
}

// launch starts one redis-server process and waits until it is ready. On
// failure the process is killed and reaped, and the error quotes the log.
func (s *Server) launch() (*process, error) {
	logOff := fileSize(s.logPath)
	outOff := fileSize(s.outPath)
	out, err := os.OpenFile(s.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", s.outPath, err)
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout = out // an *os.File is passed to the child directly: no copy goroutine
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close()
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	readyErr := s.waitReady(p)
	if readyErr == nil {
		return p, nil
	}
	killErr := p.kill()
	logs := tailFrom(s.logPath, logOff, logTailLines) + tailFrom(s.outPath, outOff, logTailLines)
	msg := fmt.Sprintf("redis-server %s (pid %d): %v", s.addr, p.pid(), readyErr)
	if killErr != nil {
		msg += "; " + killErr.Error()
	}
	if strings.TrimSpace(logs) == "" {
		logs = "(log is empty)\n"
	}
	return nil, &startError{
		msg:       msg + "\n--- redis log tail ---\n" + logs + "--- command: " + s.bin + " " + strings.Join(quoteArgs(s.args()), " "),
		portInUse: strings.Contains(logs, "Address already in use"),
	}
}

// waitReady polls until the process answers PING, reports our own pid in
// INFO server (so we are not fooled by another server that grabbed the port)
// and is not loading. It fails early if the process exits.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(readyTimeout)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("redis-server exited during startup: %v", p.err)
		}
		lastErr = s.probe(p.pid())
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", readyTimeout, lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probe performs one readiness check over a raw connection.
func (s *Server) probe(pid int) error {
	pong, err := s.rawDo(probeTimeout, "PING")
	if err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if pong != "PONG" {
		return fmt.Errorf("PING: unexpected reply %q", pong)
	}
	info, err := s.rawDo(probeTimeout, "INFO", "server", "persistence")
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	fields := parseInfo(info)
	if got := fields["process_id"]; got != strconv.Itoa(pid) {
		return fmt.Errorf("port %d is answered by process_id %q, not by our pid %d", s.port, got, pid)
	}
	if s.cfg.sentinel != "" {
		return nil // a Sentinel loads no data
	}
	if fields["loading"] != "0" {
		return fmt.Errorf("still loading (loading:%s)", fields["loading"])
	}
	return nil
}

// adminClient returns the lazily created admin client.
func (s *Server) adminClient(tb testing.TB) rueidis.Client {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		tb.Fatalf("redistest: %s: Do after cleanup", s.addr)
	}
	if s.proc == nil {
		tb.Fatalf("redistest: %s: Do while the server is stopped; call Restart first", s.addr)
	}
	if s.admin == nil {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress:       []string{s.addr},
			DisableCache:      true,
			ForceSingleClient: true,
			ClientName:        "redistest-admin",
			TLSConfig:         s.adminTLSConfig(),
			Password:          s.cfg.password,
			Dialer:            net.Dialer{Timeout: 5 * time.Second},
			ConnWriteTimeout:  5 * time.Second,
		})
		if err != nil {
			tb.Fatalf("redistest: %s: admin connection: %v", s.addr, err)
		}
		s.admin = c
	}
	return s.admin
}

// closeAdminLocked closes the admin client; the next Do creates a new one.
// It must not be called while the server is paused (Close waits for a PING).
func (s *Server) closeAdminLocked() {
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
}

// runningLocked returns the running process or fails the test.
func (s *Server) runningLocked(tb testing.TB, op string) *process {
	tb.Helper()
	if s.closed {
		tb.Fatalf("redistest: %s: %s after cleanup", s.addr, op)
	}
	if s.proc == nil {
		tb.Fatalf("redistest: %s: %s: server is not running (call Restart first)", s.addr, op)
	}
	if s.proc.exited() {
		p := s.proc
		s.proc = nil
		tb.Fatalf("redistest: %s: %s: redis-server exited unexpectedly (%v)\n%s", s.addr, op, p.err, s.logTail(0))
	}
	return s.proc
}

// resumeIfPaused sends SIGCONT if the server is paused.
func (s *Server) resumeIfPaused(tb testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused && s.proc != nil && !s.proc.exited() {
		_ = s.proc.cmd.Process.Signal(syscall.SIGCONT)
		if err := waitContinued(s.proc.pid(), 5*time.Second); err != nil {
			tb.Errorf("redistest: %s: resume before client close: %v", s.addr, err)
		}
		s.paused = false
	}
}

// cleanup kills the server (SIGCONT first if paused), closes the admin
// connection and removes the temp dir. On test failure it logs the log tail.
func (s *Server) cleanup(tb testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if p := s.proc; p != nil {
		if err := p.kill(); err != nil {
			tb.Errorf("redistest: %s: cleanup: %v", s.addr, err)
		}
		s.proc = nil
		s.paused = false
	}
	s.closeAdminLocked()
	if tb.Failed() {
		tb.Logf("redistest: %s: redis log tail (%s):\n%s", s.addr, s.logPath, s.logTail(0))
	}
	if err := os.RemoveAll(s.dir); err != nil {
		tb.Errorf("redistest: remove %s: %v", s.dir, err)
	}
}

// logTail returns the last log lines written since offset.
func (s *Server) logTail(off int64) string {
	return tailFrom(s.logPath, off, logTailLines) + tailFrom(s.outPath, 0, logTailLines)
}

// freePort returns a free loopback port below the kernel's ephemeral range, so that a
// server restarted on it (Restart, miniredis's Restart) cannot find it taken by the source
// port of some outgoing connection in the meantime, as a port the kernel hands out for ":0"
// can be on a busy machine.
func freePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	var last error
	for i := 0; i < 100; i++ {
		port := 10000 + mrand.IntN(low-10000)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		if err := l.Close(); err != nil {
			return 0, err
		}
		return port, nil
	}
	return 0, fmt.Errorf("no free port below %d: %w", low, last)
}

// rawDo sends one command to the server over a fresh connection (TLS for a server started
// WithTLS, authenticated first for one started WithPassword) and returns a simple or bulk
// string reply. It is used for readiness probes, independent of rueidis, so no client
// goroutines are involved.
func (s *Server) rawDo(timeout time.Duration, args ...string) (string, error) {
	d := &net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if cfg := s.adminTLSConfig(); cfg != nil {
		c, err = tls.DialWithDialer(d, "tcp", s.addr, cfg)
	} else {
		c, err = d.Dial("tcp", s.addr)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	if s.cfg.password != "" {
		if _, err := command(c, r, "AUTH", s.cfg.password); err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
	}
	return command(c, r, args...)
}

// command writes one command to c and reads its reply from r.
func command(c net.Conn, r *bufio.Reader, args ...string) (string, error) {
	var req bytes.Buffer
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(req.Bytes()); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis error: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", errors.New("nil reply")
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// parseInfo parses "key:value" lines of an INFO reply.
func parseInfo(info string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// fileSize returns the size of path, or 0 if it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tailFrom returns the last n lines of path from byte offset off on.
func tailFrom(path string, off int64, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || off >= int64(len(b)) {
		return ""
	}
	b = b[off:]
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	s := strings.Join(lines, "")
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}

// quoteArgs quotes empty or space-containing args for error messages.
func quoteArgs(args []string) []string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return q
}

// WaitFor polls cond every 2 ms until it holds, and fails tb after d. It is for conditions
// that no event signals, such as server-side state; give d generously, since the machines
// that run the tests are shared and noisy.
func WaitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// WaitReplicaOnline waits up to d for s to have one replica connected and in sync (INFO
// replication: connected_slaves:1 and state=online), and fails tb if it does not.
func (s *Server) WaitReplicaOnline(tb testing.TB, d time.Duration) {
	tb.Helper()
	WaitFor(tb, d, "the replica to sync", func() bool {
		msg := s.Do(tb, "INFO", "replication")
		info, _ := msg.ToString()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	})
}
