package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestReview28_urlTrailingSlash: --url takes "redis://host:port/" (a trailing slash, as many
// tools print URLs) as database 0, with or without a query after it; a path that is not a
// database number is still refused with a clear error (exit 2). Before, the trailing slash was
// refused: `relock: --url: redis: invalid database number: ""`.
func TestReview28_urlTrailingSlash(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Mutex("held").Lock(bg))
	for _, url := range []string{
		"redis://" + srv.Addr() + "/",
		"redis://" + srv.Addr() + "/?dial_timeout=5s",
		"redis://" + srv.Addr() + "/0",
	} {
		out, errOut, code := relock(t, "", "inspect", "--url", url, "held")
		require.Equal(t, exitOK, code, "%s: %s", url, errOut)
		require.Contains(t, out, "holders           1", url)
	}
	for _, bad := range []struct{ url, says string }{
		{"redis://" + srv.Addr() + "/x", `invalid database number: "x"`},
		{"redis://" + srv.Addr() + "//", "invalid URL path"},
		{"redis://" + srv.Addr() + "/0/1", "invalid URL path"},
	} {
		_, errOut, code := relock(t, "", "inspect", "--url", bad.url, "held")
		require.Equal(t, exitUsage, code, "%s: %s", bad.url, errOut)
		require.Contains(t, errOut, bad.says, bad.url)
	}
}

// TestReview28_doubleDashEndsFlags: after "--" every argument is NAME (or PATTERN), as Go's
// flag package and POSIX utilities read it, even one that looks like a flag: a lock named
// "--json" or "-x" can be inspected and freed. Flags before "--" still apply, wherever the
// other arguments are; a "--" that is a flag's value is that value. Before, the flags were
// parsed again after each argument, so `relock inspect -- --json` took --json for the flag
// and said "inspect takes one NAME, got 0 arguments" (exit 2).
func TestReview28_doubleDashEndsFlags(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	for _, n := range []string{"--json", "-x", "--"} {
		require.NoError(t, c.Mutex(n).Lock(bg))
	}
	out, errOut, code := relock(t, "", "inspect", "--url", url, "--", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "name              --json\n")
	out, errOut, code = relock(t, "", "inspect", "--json", "--url", url, "--", "-x")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `{"name":"-x",`)
	out, errOut, code = relock(t, "", "inspect", "--url", url, "--", "--")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "name              --\n")
	out, errOut, code = relock(t, "", "list", "--url", url, "--", "-x*")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "\n-x ")
	require.NotContains(t, out, "--json")
	// Every argument after "--", not only the first: two NAMEs are one too many, and the
	// second is no flag.
	out, errOut, code = relock(t, "", "inspect", "--url", url, "--", "-x", "--json")
	require.Equal(t, exitUsage, code, out+errOut)
	require.Contains(t, errOut, "got 2 arguments")
	require.Empty(t, out)
	out, errOut, code = relock(t, "", "list", "--url", url, "--", "-x*", "--walk-timeout", "1s")
	require.Equal(t, exitUsage, code, out+errOut)
	require.Contains(t, errOut, "got 3 arguments")

	// "--" as a flag's value is the value, and ends nothing.
	_, errOut, code = relock(t, "", "inspect", "--prefix", "--", "--url", url, "x")
	require.Equal(t, exitNothing, code, errOut)
	// Extra arguments after "--" are still too many.
	_, errOut, code = relock(t, "", "inspect", "--url", url, "a", "--", "--json")
	require.Equal(t, exitUsage, code, errOut)
	require.Contains(t, errOut, "got 2 arguments")

	out, errOut, code = relock(t, "", "force-unlock", "--yes", "--url", url, "--", "--json")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "freed --json (mutex")
	for n, want := range map[string]int{"--json": 0, "-x": 1, "--": 1} {
		in, err := c.Inspect(bg, n)
		require.NoError(t, err)
		require.Len(t, in.Holders, want, "%s: only --json freed", n)
	}
}

// TestReview28_redissToAPlainServer: a rediss:// URL pointed at a plain (non-TLS) Redis,
// which never answers the TLS handshake (it reads the ClientHello as the start of a command
// and waits for its end), fails with a message that says so, exit code 1 (Redis
// unreachable), in no more time than before: at --timeout, or at the URL's dial timeout when
// that comes first. Before, it said only "relock: rlock: dial: context deadline exceeded".
func TestReview28_redissToAPlainServer(t *testing.T) {
	t.Cleanup(redistest.WaitRueidisGoroutines) // the dials that fail below
	srv := redistest.Start(t)
	for _, c := range []struct {
		url, timeout string
		bound        time.Duration // what ends the wait: --timeout, or the URL's dial_timeout
	}{
		{"rediss://" + srv.Addr(), "1s", time.Second},
		{"rediss://" + srv.Addr() + "/?dial_timeout=1s", "60s", time.Second},
	} {
		start := time.Now()
		_, errOut, code := relock(t, "", "inspect", "--url", c.url, "--timeout", c.timeout, "x")
		took := time.Since(start)
		t.Logf("%s --timeout %s: %v, exit %d: %s", c.url, c.timeout, took, code, errOut)
		require.Equal(t, exitFailed, code, "%s: %s", c.url, errOut)
		require.Contains(t, errOut, "no answer to the TLS handshake from "+srv.Addr(), c.url)
		require.Contains(t, errOut, "the server may not speak TLS", c.url)
		require.Less(t, took, c.bound+5*time.Second, "%s: waited longer than its bound", c.url)
	}

	// A TLS server that answers, with a certificate that is refused, is not said to be silent.
	tlsSrv := redistest.Start(t, redistest.WithTLS(redistest.TLSOptions{}))
	_, errOut, code := relock(t, "", "inspect", "--url", "rediss://"+tlsSrv.Addr(), "--timeout", "5s", "x")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "certificate")
	require.NotContains(t, errOut, "no answer")

	if testing.Short() {
		return
	}
	// Through a Sentinel, whose own connections a rediss:// URL leaves plain: the master it
	// names is the one that does not answer.
	sentinel := redistest.Start(t, redistest.WithSentinel(srv, "relock"))
	_, errOut, code = relock(t, "", "inspect", "--url", "rediss://"+sentinel.Addr()+"?master_set=relock", "--timeout", "2s", "x")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "no answer to the TLS handshake from "+srv.Addr(), errOut)
	require.NotContains(t, errOut, sentinel.Addr())
}

// TestReview28_jsonTokenUnknown: --json tells a holder whose fencing token Redis does not know
// yet (a Mutex taken by a fast grant, docs/DESIGN.md section 5) from no token: "token" is
// null for the first, 0 for a name with no token holder (free, or held for reading only),
// and the token otherwise, in inspect's, list's and watch's objects alike. Before, it was 0
// for both, as if the lock had no tenure token: the text output said "unknown" meanwhile.
func TestReview28_jsonTokenUnknown(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	// A fast grant's form, written by hand as TestRelock_fastForm does.
	srv.Do(t, "SET", c.Mutex("fast").Key(), "~h:"+c.ID()+":1 c1.7", "PX", "30000")
	require.NoError(t, c.Mutex("slow").Lock(bg))
	require.NoError(t, c.RWMutex("read").RLock(bg))

	token := func(out string) any {
		t.Helper()
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		tok, ok := v["token"]
		require.True(t, ok, "no token field: %s", out)
		return tok
	}
	for name, want := range map[string]any{"fast": nil, "slow": "a number > 0", "read": 0.0, "free": 0.0} {
		for _, cmd := range [][]string{{"inspect"}, {"list"}, {"watch", "--count", "1"}} {
			args := append(append([]string{}, cmd...), "--json", "--url", url, name)
			out, errOut, code := relock(t, "", args...)
			if name == "free" && cmd[0] == "list" {
				require.Empty(t, out) // no such key
				continue
			}
			require.Contains(t, []int{exitOK, exitNothing}, code, "%q: %s", args, errOut)
			got := token(out)
			if want == "a number > 0" {
				require.Greater(t, got, 0.0, "%q: %s", args, out)
				continue
			}
			require.Equal(t, want, got, "%q: %s", args, out)
		}
	}
}

// TestReview28_lockWithNoHolderIsNothingThere: inspect of a lock that nobody holds exits 3
// (nothing there: "a name that holds nothing", as force-unlock of it does: "not held") also
// when Redis keeps something of it besides: a fair lock's queue with no holder, a read-write
// lock's waiting-writer marker, a read-write lock's hash whose holds' leases have all ended,
// a lock's hash with no owner. What is there (the waiters) is still shown, as text and JSON.
// A semaphore with no permit taken is there (its permits are): exit 0. Before, each of these
// locks exited 0, as if held.
func TestReview28_lockWithNoHolderIsNothingThere(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	msg := srv.Do(t, "TIME")
	tm, err := msg.AsStrSlice()
	require.NoError(t, err)
	sec, _ := strconv.ParseInt(tm[0], 10, 64)
	usec, _ := strconv.ParseInt(tm[1], 10, 64)
	nowMs := sec*1000 + usec/1000
	later, earlier := fmt.Sprint(nowMs+60000), fmt.Sprint(nowMs-1000)
	waiter := "h:" + c.ID() + ":9"

	fair := c.FairMutex("queued").Key() // a queue, no holder
	srv.Do(t, "ZADD", fair+":queue", fmt.Sprint(sec*1000000+usec), waiter)
	srv.Do(t, "ZADD", fair+":alive", later, waiter)
	marked := c.RWMutex("marked").Key() // a waiting writer's marker, no hash
	srv.Do(t, "ZADD", marked+":writers", later, waiter)
	ended := c.RWMutex("ended").Key() // a reader whose lease has ended, not yet dropped
	srv.Do(t, "HSET", ended, "mode", "read", "r:"+waiter, "1")
	srv.Do(t, "PEXPIRE", ended, "60000")
	srv.Do(t, "ZADD", ended+":leases", earlier, "r:"+waiter)
	bare := c.Mutex("bare").Key() // a lock's hash with no owner
	srv.Do(t, "HSET", bare, "w", "1")
	srv.Do(t, "PEXPIRE", bare, "60000")

	for _, n := range []struct {
		name, kind string
		waiters    int
	}{{"queued", "fair_mutex", 1}, {"marked", "rw_mutex", 1}, {"ended", "rw_mutex", 0}, {"bare", "mutex", -1}} {
		out, errOut, code := relock(t, "", "inspect", "--url", url, n.name)
		require.Equal(t, exitNothing, code, "%s: %s%s", n.name, out, errOut)
		got := normalise(out)
		require.Contains(t, got, "kind  "+n.kind+"\n", n.name)
		require.Contains(t, got, "holders  0\n", n.name)
		if n.waiters >= 0 { // a mutex's are not recorded
			require.Contains(t, got, fmt.Sprintf("waiters  %d\n", n.waiters), n.name)
		}
		out, errOut, code = relock(t, "", "inspect", "--json", "--url", url, n.name)
		require.Equal(t, exitNothing, code, "%s: %s%s", n.name, out, errOut)
		require.Contains(t, out, `"holders":[]`, n.name)
		_, _, code = relock(t, "", "force-unlock", "--yes", "--url", url, n.name)
		require.Equal(t, exitNothing, code, "%s: force-unlock says not held too", n.name)
	}

	s := c.PermitSemaphore("idle")
	ok, err := s.TrySetPermits(bg, 2)
	require.NoError(t, err)
	require.True(t, ok)
	out, errOut, code := relock(t, "", "inspect", "--url", url, "idle")
	require.Equal(t, exitOK, code, out+errOut)
	require.Contains(t, normalise(out), "holders  0\n")
}
