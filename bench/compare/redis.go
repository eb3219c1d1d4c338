package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// server is the redis-server this run talks to: one this process started on a free
// 127.0.0.1 port, or the one named by REDIS_ADDR.
type server struct {
	addr  string
	cmd   *exec.Cmd
	dir   string
	admin rueidis.Client // not counted: its commands are the harness's, not a library's
}

// startServer starts a redis-server on a free port (or uses REDIS_ADDR's) and waits until it
// answers. The port is found by listening on port 0 and closing: until redis-server binds it,
// another process (another of the harness's servers, started in parallel) may take it, and
// the redis-server then fails to start while the readiness check reaches the other one. So
// a server is taken only once it answers with its own process id; otherwise another port is
// tried (a run of the RedLock comparison once failed with two servers on one address).
func startServer(ctx context.Context) (*server, error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		s := &server{addr: addr}
		if err := s.waitReady(ctx, 0); err != nil {
			return nil, err
		}
		return s, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (install it, or set REDIS_ADDR): %w", err)
	}
	for try := 1; ; try++ {
		s := &server{}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if s.dir, err = os.MkdirTemp("", "relock-compare-"); err != nil {
			return nil, err
		}
		s.addr = "127.0.0.1:" + strconv.Itoa(port)
		s.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--protected-mode", "no",
			"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
			"--maxclients", "10000")
		setPdeathsig(s.cmd)
		if err := s.cmd.Start(); err != nil {
			_ = os.RemoveAll(s.dir)
			return nil, err
		}
		err = s.waitReady(ctx, s.cmd.Process.Pid)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errNotOurs) || try == 5 {
			return nil, err
		}
	}
}

// freePort returns a port that was free a moment ago (a variable: a test makes it answer a
// port in use).
var freePort = func() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

// errNotOurs: the server that answered on a started server's port is another process.
var errNotOurs = errors.New("another process answers on the port")

// waitReady waits until the server at s.addr answers a PING, within 10 s, and makes s.admin.
// pid, when not 0, is the process that must be answering (INFO server's process_id);
// otherwise s is stopped and the error wraps errNotOurs. On an error s is stopped.
func (s *server) waitReady(ctx context.Context, pid int) error {
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A plain dial first: a rueidis client whose dial failed leaves a goroutine
		// sleeping out its reconnect delay (about a second) behind its Close.
		var c net.Conn
		if c, err = net.DialTimeout("tcp", s.addr, time.Second); err == nil {
			_ = c.Close()
			s.admin, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.addr}, DisableCache: true})
		}
		if err == nil {
			err = s.admin.Do(ctx, s.admin.B().Ping().Build()).Error()
			if err == nil {
				if pid == 0 {
					return nil
				}
				var info string
				if info, err = s.admin.Do(ctx, s.admin.B().Info().Section("server").Build()).ToString(); err == nil {
					if strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
						return nil
					}
					err = fmt.Errorf("redis at %s: %w (not pid %d)", s.addr, errNotOurs, pid)
					s.stop()
					return err
				}
			}
			s.admin.Close()
			s.admin = nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return fmt.Errorf("redis at %s not ready: %w", s.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *server) stop() {
	if s.admin != nil {
		s.admin.Close()
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// reset empties the database and zeroes INFO commandstats.
func (s *server) reset(ctx context.Context) error {
	if err := s.admin.Do(ctx, s.admin.B().Flushall().Build()).Error(); err != nil {
		return err
	}
	return s.admin.Do(ctx, s.admin.B().ConfigResetstat().Build()).Error()
}

// cpu is the server's CPU time so far, in seconds (INFO cpu: used_cpu_user + used_cpu_sys).
func (s *server) cpu(ctx context.Context) float64 {
	txt, err := s.admin.Do(ctx, s.admin.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0
	}
	var sum float64
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		for _, k := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
	}
	return sum
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls int64 // executions, the commands scripts run included
	usec  int64 // server time spent in them (a script's includes the commands it ran)
}

// commandStats returns INFO commandstats by command name ("evalsha", "client|setinfo").
// Redis 7 counts the commands a script runs here too (and EVALSHA's usec includes them):
// the calls are the server's work, the client-sent commands are counted on the sockets.
func (s *server) commandStats(ctx context.Context) (map[string]cmdStat, error) {
	txt, err := s.admin.Do(ctx, s.admin.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(f, "usec="); ok {
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = st
	}
	return out, nil
}

// harnessCommand reports whether a command of INFO commandstats (name as Redis spells it
// there) is the harness's or connection set-up rather than a library's lock work, so that
// it is left out of the server calls per cycle:
//   - info: the harness's own snapshots (the INFO that ends a window counts the one that
//     began it, and INFO cpu);
//   - config|*: CONFIG RESETSTAT before every run; flushall: the reset before every run;
//   - hello, client|*: connection set-up (HELLO, CLIENT SETINFO, CLIENT TRACKING), sent when
//     a client connects, not per cycle.
//
// PING is not left out: the two-PING measure runs on its own client before and after the
// round, outside the window, so a PING inside the window is a library's (a health check).
func harnessCommand(name string) bool {
	switch {
	case name == "info", name == "flushall", name == "hello":
		return true
	case strings.HasPrefix(name, "config|"), strings.HasPrefix(name, "client|"):
		return true
	}
	return false
}

// ---------------------------------------------------------------------------------------
// Counting client-sent commands.
//
// Every library under test dials through countingDial, which wraps the connection and
// parses the RESP requests the client writes: each top-level array is one command sent by
// the client. Commands a script runs inside Redis never cross the socket, so they are not
// counted; a client-side-cache hit sends nothing, so it is not counted either; connection
// set-up (HELLO, CLIENT TRACKING, SUBSCRIBE), health-check PINGs and background renewals
// are counted, because the client does send them.

// counter counts client-sent commands, in total and by name.
type counter struct {
	total  atomic.Int64
	mu     sync.Mutex
	byName map[string]*int64 // a pointer, so that counting a known name allocates nothing
}

var sent = &counter{byName: map[string]*int64{}}

// add counts one command named name, lower-casing name in place. It allocates only the
// first time a name is seen, so that the allocations per cycle measured over a window
// (allocs_per_op) are the library's, not the counting's.
func (c *counter) add(name []byte) {
	for i, b := range name {
		if 'A' <= b && b <= 'Z' {
			name[i] = b + 'a' - 'A'
		}
	}
	c.total.Add(1)
	c.mu.Lock()
	n := c.byName[string(name)] // no allocation: the conversion only looks the key up
	if n == nil {
		n = new(int64)
		c.byName[string(name)] = n
	}
	*n++
	c.mu.Unlock()
}

func (c *counter) snapshot() (int64, map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.byName))
	for k, v := range c.byName {
		m[k] = *v
	}
	return c.total.Load(), m
}

// countConn counts the RESP commands written on a connection.
type countConn struct {
	net.Conn
	mu sync.Mutex
	p  respParser
}

func (c *countConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.p.feed(b)
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// respParser is an incremental parser of client requests (arrays of bulk strings).
type respParser struct {
	st    int   // 0 array header, 1 array length, 2 bulk header, 3 bulk length, 4 bulk payload
	num   int64 // number being parsed
	elems int64 // elements left in the current array
	skip  int64 // payload bytes (with CRLF) left in the current bulk
	first bool  // the current bulk is the command name
	name  []byte
}

func (r *respParser) feed(p []byte) {
	for i := 0; i < len(p); {
		c := p[i]
		switch r.st {
		case 0:
			i++
			if c == '*' {
				r.st, r.num = 1, 0
			}
		case 1, 3:
			i++
			switch {
			case c >= '0' && c <= '9':
				r.num = r.num*10 + int64(c-'0')
			case c == '\n' && r.st == 1:
				r.elems, r.first, r.name = r.num, true, r.name[:0]
				r.st = 2
				if r.elems <= 0 {
					r.st = 0
				}
			case c == '\n':
				r.skip, r.st = r.num+2, 4
			}
		case 2:
			i++
			if c == '$' {
				r.st, r.num = 3, 0
			}
		case 4:
			k := min(r.skip, int64(len(p)-i))
			if r.first {
				for _, b := range p[i : i+int(k)] {
					if b != '\r' && b != '\n' && len(r.name) < 32 {
						r.name = append(r.name, b)
					}
				}
			}
			i += int(k)
			r.skip -= k
			if r.skip == 0 {
				if r.first {
					sent.add(r.name)
					r.first = false
				}
				r.elems--
				r.st = 2
				if r.elems == 0 {
					r.st = 0
				}
			}
		}
	}
}

func countingConn(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: c}, nil
}

// rueidisDial is a rueidis ClientOption.DialCtxFn that counts.
func rueidisDial(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
	return countingConn(d.DialContext(ctx, "tcp", dst))
}

// goredisDial is a go-redis Options.Dialer that counts.
func goredisDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return countingConn(d.DialContext(ctx, network, addr))
}
