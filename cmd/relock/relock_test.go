package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/ with the output of this run")

var bg = context.Background()

// relock runs the command line args with stdin and returns its output and exit code.
func relock(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(bg, args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// normalise replaces what changes from run to run (Client ids, owner counters, fencing
// tokens, times, durations, ports) by placeholders, and the alignment that their widths
// move by two spaces.
func normalise(s string) string {
	for _, r := range []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`[0-9a-f]{32}(:|\.)\d+`), "<id>$1<n>"},
		{regexp.MustCompile(`[0-9a-f]{32}`), "<id>"},
		{regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?( UTC|Z|[+-]\d{2}:\d{2})?`), "<time>"},
		{regexp.MustCompile(`\b\d{16,}\b`), "<token>"},
		{regexp.MustCompile(`\b(\d+h)?(\d+m)?\d+(\.\d+)?(ms|s)\b`), "<dur>"},
		{regexp.MustCompile(`"(\w+_ms)":\d+`), `"$1":<ms>`},
		{regexp.MustCompile(`127\.0\.0\.1:\d+`), "127.0.0.1:<port>"},
		{regexp.MustCompile(`  +`), "  "},
	} {
		s = r.re.ReplaceAllString(s, r.with)
	}
	return s
}

// golden compares got, normalised, with testdata/name.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = normalise(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/relock -update to write the golden files")
	require.Equal(t, string(want), got, "output of %s differs from %s", name, path)
}

// fixture is a scripted state: two Clients that describe themselves, holding and waiting
// for one primitive of every kind.
type fixture struct {
	url              string
	billing, worker  *rlock.Client
	names            []string
	waiting          []chan error
	cancel           context.CancelFunc
	mutexOfBilling   *rlock.Mutex
	billingHoldsFair *rlock.FairMutex
}

// script makes the fixture's state on rc (url reaches the same Redis).
func script(t *testing.T, rc rueidis.Client, url string) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(bg)
	f := &fixture{url: url, cancel: cancel}
	var err error
	f.billing, err = rlock.New(rc, rlock.WithClientInfo(rlock.ClientInfo{App: "billing", Version: "v1.4.2", Host: "host-a", PID: 4121}))
	require.NoError(t, err)
	f.worker, err = rlock.New(rc, rlock.WithClientInfo(rlock.ClientInfo{App: "worker", Version: "v0.9.0", Host: "host-b", PID: 77}))
	require.NoError(t, err)
	t.Cleanup(func() {
		cancel()
		for _, w := range f.waiting {
			<-w
		}
		_ = f.worker.Close()
		_ = f.billing.Close()
	})
	park := func(name string, fn func(ctx context.Context) error, until func(rlock.Info) bool) {
		t.Helper()
		got := make(chan error, 1)
		f.waiting = append(f.waiting, got)
		go func() { got <- fn(ctx) }()
		f.until(t, name, until)
	}

	// invoice:42: a Mutex that billing holds twice, a worker waits for.
	m := f.billing.Mutex("invoice:42")
	require.NoError(t, m.Lock(ctx))
	require.NoError(t, m.Lock(ctx))
	park("invoice:42", func(ctx context.Context) error { return f.worker.Mutex("invoice:42").Lock(ctx) },
		func(in rlock.Info) bool { return in.Subscribers == 1 && in.Contended })
	f.mutexOfBilling = m

	// report: a FairMutex that billing holds, two of the worker's queue for.
	fm := f.billing.FairMutex("report")
	require.NoError(t, fm.Lock(ctx))
	for i := 1; i <= 2; i++ {
		park("report", func(ctx context.Context) error { return f.worker.FairMutex("report").Lock(ctx) },
			func(in rlock.Info) bool { return len(in.Waiters) == i && in.Subscribers == 1 })
	}
	f.billingHoldsFair = fm

	// config: an RWMutex that billing reads twice and the worker once, while a writer of
	// the worker waits.
	r1 := f.billing.RWMutex("config")
	require.NoError(t, r1.RLock(ctx))
	require.NoError(t, r1.RLock(ctx))
	require.NoError(t, f.worker.RWMutex("config").RLock(ctx))
	park("config", func(ctx context.Context) error { return f.worker.RWMutex("config").Lock(ctx) },
		func(in rlock.Info) bool { return len(in.Waiters) == 1 && in.Subscribers == 1 })

	// deploy: a SpinMutex held by a context owner of the worker's.
	require.NoError(t, f.worker.SpinMutex("deploy").Lock(rlock.WithOwner(ctx, "job-7")))

	// pool: a Semaphore of 3 permits, one taken.
	s := f.billing.Semaphore("pool")
	ok, err := s.TrySetPermits(ctx, 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.Acquire(ctx, 1))

	// slots: a PermitSemaphore of 2 permits, one taken by billing.
	p := f.billing.PermitSemaphore("slots")
	ok, err = p.TrySetPermits(ctx, 2)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = p.Acquire(ctx, time.Minute)
	require.NoError(t, err)

	// ready: a CountDownLatch at 2, that the worker awaits.
	l := f.billing.CountDownLatch("ready")
	ok, err = l.TrySetCount(ctx, 2)
	require.NoError(t, err)
	require.True(t, ok)
	park("ready", func(ctx context.Context) error { return f.worker.CountDownLatch("ready").Await(ctx) },
		func(in rlock.Info) bool { return in.Subscribers == 1 })

	f.names = []string{"invoice:42", "report", "config", "deploy", "pool", "slots", "ready"}
	// Every Client's record is written (its writer starts at New).
	for _, n := range []string{"invoice:42", "report"} {
		f.until(t, n, func(in rlock.Info) bool {
			for _, h := range in.Holders {
				if h.Client == nil {
					return false
				}
			}
			for _, w := range in.Waiters {
				if w.Client == nil {
					return false
				}
			}
			return true
		})
	}
	return f
}

// until polls Inspect of name until cond holds, failing t after a generous bound.
func (f *fixture) until(t *testing.T, name string, cond func(rlock.Info) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		in, err := f.billing.Inspect(bg, name)
		require.NoError(t, err)
		if cond(in) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached the state scripted: %+v", name, in)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// relock inspect and relock list show the holders, waiters, leases and subscribers of
// every primitive of the family (golden files, for a scripted state), as text and JSON.
func TestRelock_inspectAndListGolden(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	f := script(t, srv.Client(t), url)
	for _, n := range f.names {
		out, errOut, code := relock(t, "", "inspect", "--url", url, n)
		require.Equal(t, exitOK, code, "inspect %s: %s", n, errOut)
		golden(t, "inspect-"+strings.ReplaceAll(n, ":", "-"), out)
	}
	out, errOut, code := relock(t, "", "inspect", "--json", "--url", url, "invoice:42")
	require.Equal(t, exitOK, code, errOut)
	golden(t, "inspect-invoice-42-json", out)

	out, errOut, code = relock(t, "", "list", "--url", url)
	require.Equal(t, exitOK, code, errOut)
	golden(t, "list", sortedLines(out))
	out, _, code = relock(t, "", "list", "--url", url, "inv*")
	require.Equal(t, exitOK, code)
	golden(t, "list-inv", out)
	out, _, code = relock(t, "", "list", "--url", url, "--json", "re*")
	require.Equal(t, exitOK, code)
	golden(t, "list-re-json", sortedLines(out))

	out, _, code = relock(t, "", "inspect", "--url", url, "nothing-here")
	require.Equal(t, exitNothing, code)
	golden(t, "inspect-none", out)
}

// sortedLines sorts the lines of out after its first (a header, when there is one: JSON
// lines all start with '{').
func sortedLines(out string) string {
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	from := 1
	if strings.HasPrefix(lines[0], "{") {
		from = 0
	}
	slices.Sort(lines[from:])
	return strings.Join(lines, "\n") + "\n"
}

// relock force-unlock asks first (and frees nothing unless told yes), then frees the lock
// whoever holds it, says what it freed, and wakes its waiters: the worker's waiter gets the
// lock.
func TestRelock_forceUnlockWakesWaiters(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	f := script(t, srv.Client(t), url)

	out, prompt, code := relock(t, "n\n", "force-unlock", "--url", url, "invoice:42")
	require.Equal(t, exitAborted, code)
	golden(t, "force-unlock-declined", prompt+out)
	require.NoError(t, f.mutexOfBilling.Err(bg), "still held")

	out, prompt, code = relock(t, "y\n", "force-unlock", "--url", url, "invoice:42")
	require.Equal(t, exitOK, code, prompt)
	require.Contains(t, prompt, "[y/N]")
	golden(t, "force-unlock", out)
	select {
	case err := <-f.waiting[0]:
		require.NoError(t, err, "the waiter of invoice:42 took the lock")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter of invoice:42 was not woken")
	}
	f.waiting[0] <- nil // for the cleanup
	f.until(t, "invoice:42", func(in rlock.Info) bool {
		return len(in.Holders) == 1 && in.Holders[0].ClientID == f.worker.ID()
	})

	// A read-write lock: its waiting writer is woken.
	out, errOut, code := relock(t, "", "force-unlock", "--yes", "--url", url, "config")
	require.Equal(t, exitOK, code, errOut)
	golden(t, "force-unlock-config", out)
	select {
	case err := <-f.waiting[3]:
		require.NoError(t, err, "the writer of config took the lock")
	case <-time.After(20 * time.Second):
		t.Fatal("the writer of config was not woken")
	}
	f.waiting[3] <- nil

	// A fair lock: the head of its queue is woken and takes it.
	_, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, "report")
	require.Equal(t, exitOK, code, errOut)
	select {
	case err := <-f.waiting[1]:
		require.NoError(t, err, "the head of report's queue took the lock")
	case <-time.After(20 * time.Second):
		t.Fatal("the head of report's queue was not woken")
	}
	f.waiting[1] <- nil

	out, _, code = relock(t, "", "force-unlock", "--yes", "--url", url, "nothing-here")
	require.Equal(t, exitNothing, code)
	require.Contains(t, out, "not held")
	_, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, "pool")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "not a lock")
}

// relock watch shows the lock again every interval, and stops after --count refreshes or
// when its context ends.
func TestRelock_watch(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	script(t, srv.Client(t), url)
	out, errOut, code := relock(t, "", "watch", "--url", url, "--interval", "10ms", "--count", "3", "report")
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, 3, strings.Count(normalise(out), "name  report\n"), out)
	single, _, _ := relock(t, "", "inspect", "--url", url, "report")
	require.Equal(t, normalise(single+"\n"+single+"\n"+single), normalise(out), "frames are inspect's output, one blank line apart")

	ctx, cancel := context.WithCancel(bg)
	done := make(chan int, 1)
	w := &firstWrite{wrote: make(chan struct{})}
	go func() {
		done <- run(ctx, []string{"watch", "--url", url, "--interval", "5ms", "report"}, strings.NewReader(""), w, w)
	}()
	select {
	case <-w.wrote:
	case <-time.After(20 * time.Second):
		t.Fatal("watch showed nothing")
	}
	cancel()
	select {
	case code := <-done:
		require.Equal(t, exitOK, code, "Ctrl-C ends a watch")
	case <-time.After(20 * time.Second):
		t.Fatal("watch did not stop with its context")
	}
}

// firstWrite is a writer that tells of its first write.
type firstWrite struct {
	once  sync.Once
	wrote chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.wrote) })
	return len(p), nil
}

// Bad usage exits 2 with a message, a Redis that cannot be reached 1, a refused command 1
// with ErrNoPermission's message naming it.
func TestRelock_usageAndFailures(t *testing.T) {
	// A dial that fails leaves a topology refresh of rueidis's sleeping for up to a second.
	t.Cleanup(redistest.WaitRueidisGoroutines)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"inspect"},
		{"inspect", "a", "b"},
		{"inspect", ""},
		{"list", "a", "b"},
		{"watch", "--interval", "0s", "x"},
		{"watch", "--count", "-1", "x"},
		{"inspect", "--url", "://nope", "x"},
		{"inspect", "--pubsub", "loud", "x"},
		{"inspect", "--timeout", "0s", "x"},
		{"inspect", "--no-such-flag", "x"},
		{"force-unlock", "--url", "redis://127.0.0.1:1", "--prefix", "{", "x"},
	} {
		_, errOut, code := relock(t, "", args...)
		require.Equal(t, exitUsage, code, "%q: %s", args, errOut)
		require.NotEmpty(t, errOut, "%q", args)
	}
	out, _, code := relock(t, "", "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "relock force-unlock")

	_, errOut, code := relock(t, "", "inspect", "--url", "redis://127.0.0.1:1", "--timeout", "5s", "x")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "dial")

	srv := redistest.Start(t)
	rule, err := rlock.InspectACLRule("")
	require.NoError(t, err)
	args := append([]string{"ACL", "SETUSER", "inspector", "reset", "on", ">pw"}, strings.Fields(rule)...)
	srv.Do(t, args...)
	url := "redis://inspector:pw@" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex("held")
	require.NoError(t, m.Lock(bg))
	_, errOut, code = relock(t, "", "inspect", "--url", url, "held")
	require.Equal(t, exitOK, code, errOut)
	_, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, "held")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "no permission")
	require.NoError(t, m.Err(bg), "an inspector frees nothing")
}

// relock inspect and list work on a Redis Cluster (every master is walked; the subscribers
// of a sharded channel are counted on its master).
func TestRelock_cluster(t *testing.T) {
	if testing.Short() {
		t.Skip("long: a real 3-master, 3-replica Redis Cluster (run without -short)")
	}
	// Last: a topology refresh that a closed client of the command scheduled, or that the
	// nodes' end set off, finishes before goleak looks.
	t.Cleanup(redistest.WaitRueidisGoroutines)
	cl := redistest.StartCluster(t)
	url := "redis://" + cl.Addrs()[0]
	f := script(t, cl.Client(t), url)
	for _, n := range []string{"invoice:42", "report", "config"} {
		out, errOut, code := relock(t, "", "inspect", "--url", url, n)
		require.Equal(t, exitOK, code, "inspect %s: %s", n, errOut)
		golden(t, "inspect-"+strings.ReplaceAll(n, ":", "-"), out)
	}
	out, errOut, code := relock(t, "", "list", "--url", url)
	require.Equal(t, exitOK, code, errOut)
	golden(t, "list", sortedLines(out))
	require.Len(t, f.names, 7)
}

// Texts from Redis (names, owner ids, Client records) reach the terminal quoted when they
// hold spaces or unprintable characters, so that none can forge a column or an escape
// sequence; a key of another type under the prefix is shown for what it is.
func TestRelock_hostileTexts(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t), rlock.WithClientInfo(rlock.ClientInfo{App: "evil\x1b[2J", Host: "a b"}))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Mutex("x\x1b]0;pwned\x07").Lock(rlock.WithOwner(bg, "job\r\nforged")))
	m := c.Mutex("y")
	require.NoError(t, m.Lock(bg))
	srv.Do(t, "RPUSH", "{relock:z}", "v")
	deadline := time.Now().Add(20 * time.Second)
	for {
		in, err := c.Inspect(bg, "y")
		require.NoError(t, err)
		if in.Holders[0].Client != nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "no Client record")
		time.Sleep(5 * time.Millisecond)
	}
	out, errOut, code := relock(t, "", "list", "--url", url)
	require.Equal(t, exitOK, code, errOut)
	out2, errOut, code := relock(t, "", "inspect", "--url", url, "y")
	require.Equal(t, exitOK, code, errOut)
	for _, o := range []string{out, out2} {
		require.NotContains(t, o, "\x1b")
		require.NotContains(t, o, "\r")
		require.NotContains(t, o, "\x07")
	}
	require.Contains(t, out, `"x\x1b]0;pwned\a"`)
	require.Contains(t, out, `"u:job\r\nforged"`)
	require.Contains(t, out, "not relock's: a list")
	require.Contains(t, out2, `"evil\x1b[2J"`)
	require.Contains(t, out2, ` on "a b"`)
}

// --url takes what rueidis.ParseURL takes: TLS (rediss://, verified against --cacert) and
// Sentinel (?master_set=).
func TestRelock_urls(t *testing.T) {
	t.Cleanup(redistest.WaitRueidisGoroutines) // as in TestRelock_usageAndFailures
	tlsSrv := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{}))
	c, err := rlock.New(tlsSrv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex("over-tls")
	require.NoError(t, m.Lock(bg))
	url := "rediss://" + tlsSrv.Addr()
	out, errOut, code := relock(t, "", "inspect", "--url", url, "--cacert", tlsSrv.TLS().CAFile, "over-tls")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "holders           1")
	_, errOut, code = relock(t, "", "inspect", "--url", url, "--timeout", "5s", "over-tls")
	require.Equal(t, exitFailed, code, "the server's certificate is not signed by a system root")
	require.Contains(t, errOut, "certificate")
	_, _, code = relock(t, "", "inspect", "--url", "redis://"+tlsSrv.Addr(), "--cacert", tlsSrv.TLS().CAFile, "x")
	require.Equal(t, exitUsage, code, "--cacert without TLS")

	if testing.Short() {
		return
	}
	master := redistest.Start(t)
	sentinel := redistest.Start(t, redistest.WithSentinel(master, "relock"))
	mc, err := rlock.New(master.Client(t))
	require.NoError(t, err)
	defer mc.Close()
	sm := mc.Mutex("via-sentinel")
	require.NoError(t, sm.Lock(bg))
	out, errOut, code = relock(t, "", "inspect", "--url", "redis://"+sentinel.Addr()+"?master_set=relock", "via-sentinel")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "holders           1")
}
