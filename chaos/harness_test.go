package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/relock-go/relock/chaos/internal/worker"
	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

var bg = context.Background()

// run is one chaos run: a resource, a history, and the clients taking part.
type run struct {
	t   *testing.T
	res *resource
	rec *recorder
}

func newRun(t *testing.T) *run {
	return &run{t: t, res: newResource(), rec: &recorder{}}
}

// relock makes a relock Client (its own rueidis client) to addr, closed at cleanup.
func relock(t *testing.T, srv *redistest.Server, addr string, opts ...rlock.Option) *rlock.Client {
	t.Helper()
	rc := srv.Client(t, func(o *rueidis.ClientOption) {
		o.InitAddress = []string{addr}
		o.ConnWriteTimeout = 2 * time.Second
	})
	c, err := rlock.New(rc, opts...)
	if err != nil {
		t.Fatalf("rlock.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// goroutines runs one worker per client concurrently and waits for all (bounded by cfg).
func (r *run) goroutines(clients []*rlock.Client, cfg worker.Config) {
	r.goroutinesEach(clients, 1, cfg)
}

// goroutinesEach is goroutines with perClient workers (owners) on each Client: waiters of
// one Client, so that a release hands the lock to the next one directly.
func (r *run) goroutinesEach(clients []*rlock.Client, perClient int, cfg worker.Config) {
	var wg sync.WaitGroup
	for _, c := range clients {
		for i := 0; i < perClient; i++ {
			wg.Add(1)
			cfg := cfg
			if perClient > 1 {
				cfg.Label = fmt.Sprint(i)
			}
			go func() { defer wg.Done(); worker.Run(bg, c, cfg, r.res, r.rec) }()
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		panic("chaos: goroutine contenders still running after 3 minutes: a waiter hangs")
	}
}

// maxWait is the longest acquire call of the history that returned.
func maxWait(ops []worker.Op) time.Duration {
	var m int64
	for _, o := range ops {
		if o.Kind == "acquire" && o.Out != worker.OutUnknown {
			m = max(m, o.Return-o.Call)
		}
	}
	return time.Duration(m)
}

// verify checks the run and fails t on a violation or a non-linearizable history.
func (r *run) verify(allowExpiry bool) report {
	r.t.Helper()
	ops, lost := r.rec.snapshot()
	rep := check(r.res, ops, lost)
	r.t.Logf("checker: %s", rep)
	if rep.violations() > 0 {
		r.t.Errorf("mutual exclusion violated: %s; history in %s.json", rep, r.dump(nil, porcupine.LinearizationInfo{}, ops, lost))
	}
	rep.Linear = checkLinear(r.t, allowExpiry, ops, func(m *porcupine.Model, info porcupine.LinearizationInfo) string {
		return r.dump(m, info, ops, lost)
	})
	return rep
}

// dump writes the history (and, with a model, porcupine's visualization) to the temporary
// directory and returns the path without extension.
func (r *run) dump(m *porcupine.Model, info porcupine.LinearizationInfo, ops []worker.Op, lost []worker.Lost) string {
	path := filepath.Join(os.TempDir(), "relock-chaos-"+strings.NewReplacer("/", "_", " ", "_").Replace(r.t.Name()))
	if m != nil {
		_ = porcupine.VisualizePath(*m, info, path+".html")
	}
	if b, err := json.Marshal(struct {
		Ops  []worker.Op
		Lost []worker.Lost
	}{ops, lost}); err == nil {
		_ = os.WriteFile(path+".json", b, 0o644)
	}
	return path
}

// maxLinearizable bounds the history given to porcupine: its search grows with the number of
// concurrent operations, and the full-size soak (RELOCK_CHAOS_SOAK_*) exceeds memory.
// maxLinearizablePlain is the bound in the README's plain go test ./... (not fullChaos): the
// 15 s soak's history (about 24,000 operations) went undecided after the whole 15 s budget
// there (at 1fd34e5: a core spent proving nothing, beside rlock's tests, in a run that must
// stay within 5 minutes), while every other history of the suite (1,800 operations at most)
// is decided in milliseconds.
const (
	maxLinearizable      = 40000
	maxLinearizablePlain = 10000
)

// fullChaos reports a full run (RELOCK_FULL, as .ci/run sets it) or one that writes the
// results table (RELOCK_CHAOS_RESULTS).
func fullChaos() bool {
	v := os.Getenv("RELOCK_FULL")
	return v != "" && v != "0" || os.Getenv("RELOCK_CHAOS_RESULTS") != ""
}

// checkerBudget is how long porcupine may search one history: 60 s in a full run
// (RELOCK_FULL, as .ci/run sets it) and when the results table is written, 15 s in the
// README's plain go test ./..., which must stay within 5 minutes on 2 cores (the 15 s soak's
// history of about 23,000 operations went undecided after the whole 60 s).
func checkerBudget() time.Duration {
	if fullChaos() {
		return 60 * time.Second
	}
	return 15 * time.Second
}

// checkLinear checks ops for linearizability against the lock model (with leases that may
// run out when allowExpiry) within checkerBudget, fails t on an Illegal verdict (the history
// and porcupine's visualization written by dump), and returns what a row says of it: checked
// and linearizable, not checked (too long), or not decided (the budget ran out: it proved
// nothing either way; the resource checker still checked every hold).
func checkLinear(t *testing.T, allowExpiry bool, ops []worker.Op, dump func(*porcupine.Model, porcupine.LinearizationInfo) string) string {
	t.Helper()
	limit := maxLinearizable
	if !fullChaos() {
		limit = maxLinearizablePlain
	}
	if len(ops) > limit {
		t.Logf("linearizability not checked: %d operations, beyond the checker's budget of %d", len(ops), limit)
		return "linearizability not checked (history too long)"
	}
	m := lockModel(allowExpiry)
	budget := checkerBudget()
	res, info := porcupine.CheckOperationsVerbose(m.ToModel(), history(ops), budget)
	switch res {
	case porcupine.Unknown:
		t.Logf("linearizability not decided: the checker's %v ran out on %d operations", budget, len(ops))
		return fmt.Sprintf("linearizability not decided (the checker's %v ran out)", budget)
	case porcupine.Illegal:
		model := m.ToModel()
		t.Errorf("history of %d operations is not linearizable against the lock model (expiry allowed: %v); history and visualization in %s.{json,html}", len(ops), allowExpiry, dump(&model, info))
		return "not linearizable"
	}
	return "linearizable"
}

// --- contender processes ---

var contenderBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// contenderPath builds ./internal/contender once per test binary, with -race when the
// tests run with it, into a temp dir removed when the tests end.
func contenderPath(t *testing.T) string {
	t.Helper()
	contenderBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "relock-contender-")
		if err != nil {
			contenderBin.err = err
			return
		}
		contenderBin.dir = dir
		contenderBin.path = filepath.Join(dir, "contender")
		args := []string{"build", "-buildvcs=false", "-o", contenderBin.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		args = append(args, "./internal/contender")
		cmd := exec.Command("go", args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			contenderBin.err = fmt.Errorf("go build contender: %v\n%s", err, out)
		}
	})
	if contenderBin.err != nil {
		t.Fatal(contenderBin.err)
	}
	return contenderBin.path
}

func removeContender() {
	if contenderBin.dir != "" {
		_ = os.RemoveAll(contenderBin.dir)
	}
}

// proc is a contender process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	wmu    sync.Mutex
	inside chan [2]string // name, token of each critical section entered (dropped when full)
	ready  chan struct{}
	exited chan struct{} // closed when stdout ends (the process ended or was killed)
	secs   int
	stderr strings.Builder
}

type procMsg struct {
	T        string       `json:"t"`
	ID       int64        `json:"id"`
	Name     string       `json:"name"`
	Owner    string       `json:"owner"`
	Token    int64        `json:"token"`
	Value    int64        `json:"value"`
	Op       *worker.Op   `json:"op"`
	Lost     *worker.Lost `json:"lost"`
	Sections int          `json:"sections"`
}

// spawn starts a contender process against addr with extra flags; it is killed at cleanup
// if still running.
func (r *run) spawn(addr string, flags ...string) *proc {
	t := r.t
	t.Helper()
	bin := contenderPath(t)
	cmd := exec.Command(bin, append([]string{"-addr", addr}, flags...)...)
	p := &proc{t: t, cmd: cmd, inside: make(chan [2]string, 1024), ready: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = &syncWriter{b: &p.stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var m procMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("contender: bad line %q: %v", sc.Text(), err)
				continue
			}
			switch m.T {
			case "ready":
				close(p.ready)
			case "op":
				r.rec.Op(*m.Op)
			case "lost":
				r.rec.Lost(*m.Lost)
			case "read":
				v, ok := r.res.Read(m.Name, m.Owner, m.Token)
				p.reply(m.ID, ok, v)
			case "write":
				p.reply(m.ID, r.res.Write(m.Name, m.Owner, m.Token, m.Value), 0)
			case "inside":
				select {
				case p.inside <- [2]string{m.Name, fmt.Sprint(m.Token)}:
				default:
				}
			case "exit":
				p.secs = m.Sections
			}
		}
	}()
	go func() { <-p.exited; _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = p.stdin.Close()
		select {
		case <-waited:
		case <-time.After(15 * time.Second):
			t.Errorf("contender pid %d did not end", cmd.Process.Pid)
		}
	})
	select {
	case <-p.ready:
	case <-p.exited:
		t.Fatalf("contender exited before it was ready: %s", p.stderrText())
	case <-time.After(20 * time.Second):
		t.Fatalf("contender not ready after 20s: %s", p.stderrText())
	}
	return p
}

func (p *proc) reply(id int64, ok bool, v int64) {
	b, _ := json.Marshal(struct {
		ID    int64 `json:"id"`
		OK    bool  `json:"ok"`
		Value int64 `json:"value"`
	}{id, ok, v})
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, _ = p.stdin.Write(append(b, '\n'))
}

func (p *proc) stderrText() string {
	if w, ok := p.cmd.Stderr.(*syncWriter); ok {
		return w.String()
	}
	return ""
}

// wait waits for the process to finish on its own.
func (p *proc) wait(d time.Duration) {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		p.t.Fatalf("contender pid %d still running after %v; stderr: %s", p.cmd.Process.Pid, d, p.stderrText())
	}
}

// stop and cont send SIGSTOP and SIGCONT.
func (p *proc) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatalf("SIGSTOP contender: %v", err)
	}
}

func (p *proc) cont() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatalf("SIGCONT contender: %v", err)
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() < 64<<10 {
		w.b.Write(p)
	}
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
