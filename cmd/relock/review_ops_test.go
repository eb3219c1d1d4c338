package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// promptWriter signals once the confirmation question has been written.
type promptWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	asked  chan struct{}
	closed bool
}

func (w *promptWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.closed && strings.Contains(w.buf.String(), "[y/N]") {
		w.closed = true
		close(w.asked)
	}
	return len(p), nil
}

// TestReviewOps_forceUnlockFreesAHolderItNeverShowed: DEFECT. `relock force-unlock NAME`
// shows the holders it read, asks for confirmation, and then forces whatever holds the lock
// when the operator answers, which may be minutes later: if the holder it showed released
// meanwhile and another owner took the lock, the new owner's tenure is destroyed without
// ever having been shown, and stdout then claims it "freed ... held by:" the old holder.
// The confirmation confirms nothing. Expected: force only the tenure shown (compare the
// fencing token / owner in the force script), or re-read after the answer and refuse
// ("changed meanwhile") when the holders differ.
func TestReviewOps_forceUnlockFreesAHolderItNeverShowed(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	a, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer a.Close()
	b, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer b.Close()
	ma, mb := a.Mutex("job"), b.Mutex("job")
	require.NoError(t, ma.Lock(bg))

	pr, pw := io.Pipe()
	stderr := &promptWriter{asked: make(chan struct{})}
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(bg, []string{"force-unlock", "--url", url, "--timeout", "20s", "job"}, pr, &stdout, stderr)
	}()
	select {
	case <-stderr.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no confirmation question")
	}
	// While the operator reads the question, the holder shown finishes and another takes it.
	require.NoError(t, ma.Unlock(bg))
	require.NoError(t, mb.Lock(bg))
	_, _ = pw.Write([]byte("y\n"))
	got := <-code
	t.Logf("exit %d\nstderr:\n%s\nstdout:\n%s", got, stderr.buf.String(), stdout.String())
	in, err := b.Inspect(bg, "job")
	require.NoError(t, err)
	require.Len(t, in.Holders, 1, "force-unlock destroyed a tenure (client %s) it never showed nor was confirmed for; it reported freeing client %s's", b.ID(), a.ID())
	require.Equal(t, b.ID(), in.Holders[0].ClientID)
}

// TestReviewOps_forceUnlockConfirmationCountsAgainstTimeout: DEFECT. force-unlock starts its
// --timeout (default 10s, documented as the bound "of each command's work") before it asks
// the question, so the time the operator takes to read the holders and answer is spent from
// it: an operator who answers "y" after more than 10s gets "context deadline exceeded" and
// exit 1, and nothing is freed. Expected: the deadline covers the reads and the force, not
// the wait for the answer (start a fresh context after the answer).
func TestReviewOps_forceUnlockConfirmationCountsAgainstTimeout(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	a, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer a.Close()
	require.NoError(t, a.Mutex("job").Lock(bg))
	pr, pw := io.Pipe()
	stderr := &promptWriter{asked: make(chan struct{})}
	var stdout bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(bg, []string{"force-unlock", "--url", url, "--timeout", "1s", "job"}, pr, &stdout, stderr)
	}()
	select {
	case <-stderr.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("no confirmation question")
	}
	time.Sleep(1500 * time.Millisecond) // the operator reads the holders (1.5 x --timeout)
	_, _ = pw.Write([]byte("y\n"))
	got := <-code
	require.Equal(t, exitOK, got, "confirmed force-unlock failed:\n%s", stderr.buf.String())
}

// TestReviewOps_forceUnlockJSONPrintsText: DEFECT. With --json, stdout is documented as
// machine-readable ("one JSON object"), but force-unlock prints plain English on stdout
// when there is nothing to free ("... is not held: nothing to free"), when the lock was
// freed meanwhile, and when the answer was no: a script that decodes stdout fails exactly in
// the cases it must tell apart. Expected: a JSON object in every outcome (e.g. {"name":...,
// "kind":...,"freed":[]}), the prose on stderr.
func TestReviewOps_forceUnlockJSONPrintsText(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	out, errOut, code := relock(t, "", "force-unlock", "--json", "--yes", "--url", url, "free-lock")
	require.Equal(t, exitNothing, code, errOut)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v), "force-unlock --json wrote non-JSON to stdout: %q", out)
}

// TestReviewOps_badURLEchoesPassword: DEFECT. A --url (or $RELOCK_URL) that net/url cannot
// parse is echoed whole in the error, password included, to stderr (terminal scrollback,
// CI logs, a ticket's paste). Expected: the password redacted, as url.URL.Redacted does.
func TestReviewOps_badURLEchoesPassword(t *testing.T) {
	_, errOut, code := relock(t, "", "list", "--url", "redis://ops:s3cret@[::1")
	require.Equal(t, exitUsage, code)
	require.NotContains(t, errOut, "s3cret")
}

// TestForceUnlock_holderChangedBeforeTheForce: the holder shown releases and another owner
// takes the lock in the instant between the last read and the force (a hook of the command
// runs there): force-unlock frees nothing, says so and exits non-zero, with --yes and after
// a confirmation alike. (It re-read the holders after the confirmation, but the force freed
// whoever held the lock when it ran: the new owner's tenure, never shown.)
func TestForceUnlock_holderChangedBeforeTheForce(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	a, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer a.Close()
	b, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer b.Close()
	for _, tc := range []struct {
		kind  string
		stdin string
		args  []string
	}{
		{"mutex", "", []string{"--yes"}},
		{"mutex", "y\n", nil},
		{"rw", "", []string{"--yes"}},
		{"rw", "y\n", nil},
	} {
		t.Run(tc.kind+"/"+map[bool]string{true: "yes", false: "confirmed"}[tc.stdin == ""], func(t *testing.T) {
			name := redistest.Name(t)
			var lockA, unlockA, lockB, unlockB func(context.Context) error
			if tc.kind == "mutex" {
				ma, mb := a.Mutex(name), b.Mutex(name)
				lockA, unlockA, lockB, unlockB = ma.Lock, ma.Unlock, mb.Lock, mb.Unlock
			} else {
				ra, rb := a.RWMutex(name), b.RWMutex(name)
				lockA, unlockA, lockB, unlockB = ra.Lock, ra.Unlock, rb.Lock, rb.Unlock
			}
			require.NoError(t, lockA(bg))
			hooked := false
			testHookBeforeForce = func() {
				hooked = true
				require.NoError(t, unlockA(bg))
				require.NoError(t, lockB(bg))
			}
			defer func() { testHookBeforeForce = nil }()
			args := append([]string{"force-unlock", "--url", url}, tc.args...)
			out, errOut, code := relock(t, tc.stdin, append(args, name)...)
			require.True(t, hooked, "the force was not reached: exit %d\n%s%s", code, errOut, out)
			in, err := b.Inspect(bg, name)
			require.NoError(t, err)
			require.Len(t, in.Holders, 1, "force-unlock freed a holder it never showed: exit %d\n%s%s", code, errOut, out)
			require.Equal(t, b.ID(), in.Holders[0].ClientID)
			require.Equal(t, exitAborted, code, "stdout: %s\nstderr: %s", out, errOut)
			require.Contains(t, out, "changed hands")
			require.Contains(t, out, "nothing freed")
			require.NoError(t, unlockB(bg))
		})
	}
}

// TestList_timeoutPerName: --timeout bounds each name's inspection, not the whole walk: a
// walk that takes longer than --timeout in all (a hook makes each name take 1.2s of a 2s
// --timeout) lists every name; --walk-timeout bounds the whole walk when asked. (list gave
// the whole walk one --timeout: a keyspace whose names took longer in all failed.)
func TestList_timeoutPerName(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	names := []string{"walk-a", "walk-b"}
	for _, n := range names {
		require.NoError(t, c.Mutex(n).Lock(bg))
	}
	testHookListName = func(context.Context, string) { time.Sleep(1200 * time.Millisecond) }
	defer func() { testHookListName = nil }()
	out, errOut, code := relock(t, "", "list", "--url", url, "--timeout", "2s", "walk-*")
	require.Equal(t, exitOK, code, "stdout: %s\nstderr: %s", out, errOut)
	for _, n := range names {
		require.Contains(t, out, n)
	}

	out, errOut, code = relock(t, "", "list", "--url", url, "--timeout", "2s", "--walk-timeout", "1s", "walk-*")
	require.Equal(t, exitFailed, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Contains(t, errOut, "deadline exceeded")

	_, errOut, code = relock(t, "", "list", "--url", url, "--walk-timeout", "-1s")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--walk-timeout -1s is negative")
}
