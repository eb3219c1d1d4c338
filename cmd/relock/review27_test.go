package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestReview27_interruptAtThePrompt: force-unlock's question waits for the operator's answer,
// and Ctrl-C (or SIGTERM: main's context) ends that wait: nothing is freed, "not confirmed"
// is said, exit code 4. Before, the answer was read with no regard to the context: main
// catches SIGINT and SIGTERM for that context, so the command ignored both and sat at the
// prompt until standard input gave a line or closed.
func TestReview27_interruptAtThePrompt(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex("held")
	require.NoError(t, m.Lock(bg))

	pr, pw := io.Pipe() // an operator who never answers
	defer pw.Close()
	stderr := &promptWriter{asked: make(chan struct{})}
	var stdout bytes.Buffer
	ctx, interrupt := context.WithCancel(bg)
	defer interrupt()
	code := make(chan int, 1)
	go func() { code <- run(ctx, []string{"force-unlock", "--url", url, "held"}, pr, &stdout, stderr) }()
	select {
	case <-stderr.asked:
	case <-time.After(20 * time.Second):
		t.Fatal("never asked")
	}
	interrupt() // Ctrl-C
	select {
	case got := <-code:
		require.Equal(t, exitAborted, got, stdout.String())
	case <-time.After(20 * time.Second):
		t.Fatal("Ctrl-C did not end the question: force-unlock still waits for an answer")
	}
	require.Contains(t, stdout.String(), "not confirmed: nothing freed")
	require.NoError(t, m.Err(bg), "nothing freed")
}

// TestReview27_usageHidesTheEnvPassword: the flags' usage, printed for -h and for every bad
// flag, does not show the password of $RELOCK_URL; the URL still reaches the server. Before,
// --url's default was $RELOCK_URL itself, printed whole: `relock inspect --bogus x` put the
// password on stderr (and in whatever log or chat the error was pasted into).
func TestReview27_usageHidesTheEnvPassword(t *testing.T) {
	t.Cleanup(redistest.WaitRueidisGoroutines) // the dial that fails below
	t.Setenv(envURL, "redis://admin:s3cret-pw@127.0.0.1:1")
	for _, args := range [][]string{{"inspect", "--bogus", "x"}, {"inspect", "-h"}, {"list", "--timeout", "x"}, {"force-unlock", "-help"}} {
		_, errOut, _ := relock(t, "", args...)
		require.Contains(t, errOut, "-url", "%q: the usage was printed", args)
		require.NotContains(t, errOut, "s3cret-pw", "%q", args)
	}
	// The URL is still the one the environment gives.
	_, errOut, code := relock(t, "", "inspect", "--timeout", "5s", "x")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "127.0.0.1:1")
	require.NotContains(t, errOut, "s3cret-pw")
}

// TestReview27_listForeignHash: relock list shows a key under the prefix that is a hash no
// relock primitive makes as "not relock's: a hash" (with --json, kind ""), as it does a list;
// inspect refuses it (exit 1). Before, list showed it as a free mutex.
func TestReview27_listForeignHash(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	srv.Do(t, "HSET", "{relock:foreign}", "colour", "blue")
	out, errOut, code := relock(t, "", "list", "--url", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, "not relock's: a hash")
	require.NotContains(t, out, "mutex")
	out, errOut, code = relock(t, "", "list", "--json", "--url", url)
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, out, `"kind":"","type":"hash"`)
	_, errOut, code = relock(t, "", "inspect", "--url", url, "foreign")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "not a lock")
}

// TestReview27_semaphoreHoldersNotShownAsNone: a Semaphore's holders are not recorded in
// Redis (only the count of available permits is), so inspect and list do not show it with
// "0" holders: a semaphore whose every permit is taken read as one nobody held. inspect says
// "not recorded" and shows the count as "available", list shows "?" (as for the waiters);
// a permit semaphore whose permits were lowered below its live permits shows 0 available,
// not a negative number.
func TestReview27_semaphoreHoldersNotShownAsNone(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	s := c.Semaphore("busy")
	ok, err := s.TrySetPermits(bg, 2)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.Acquire(bg, 2)) // every permit taken
	p := c.PermitSemaphore("over")
	ok, err = p.TrySetPermits(bg, 2)
	require.NoError(t, err)
	require.True(t, ok)
	for range 2 {
		_, err := p.Acquire(bg, time.Minute)
		require.NoError(t, err)
	}
	require.NoError(t, p.AddPermits(bg, -1)) // 1 permit, 2 live

	out, errOut, code := relock(t, "", "inspect", "--url", url, "busy")
	require.Equal(t, exitOK, code, errOut)
	got := normalise(out)
	require.Contains(t, got, "\navailable  0\n")
	require.NotContains(t, got, "holders  0")
	require.Contains(t, got, "holders  not recorded in Redis for a semaphore")

	out, errOut, code = relock(t, "", "inspect", "--url", url, "over")
	require.Equal(t, exitOK, code, errOut)
	got = normalise(out)
	require.Contains(t, got, "\npermits  1\navailable  0\n")
	require.Contains(t, got, "holders  2\n")

	out, errOut, code = relock(t, "", "list", "--url", url, "busy")
	require.Equal(t, exitOK, code, errOut)
	require.Contains(t, normalise(out), "busy  semaphore  none  ?  ?  -\n")
}

// TestReview27_listEndsClearly: a list that --walk-timeout or Ctrl-C ends says so (the listing
// is incomplete), exit code 1, instead of blaming the name being inspected at that moment.
// Before, it said `relock: rlock: inspect "<name>": context deadline exceeded` (or `context
// canceled`), which reads as that name's fault, or as --timeout's.
func TestReview27_listEndsClearly(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	srv.Do(t, "SET", "{relock:a}", "3")
	testHookListName = func(ctx context.Context, name string) { <-ctx.Done() }
	defer func() { testHookListName = nil }()

	_, errOut, code := relock(t, "", "list", "--url", url, "--walk-timeout", "200ms")
	require.Equal(t, exitFailed, code, errOut)
	require.Contains(t, errOut, "--walk-timeout 200ms reached: the listing is incomplete")
	require.NotContains(t, errOut, `inspect "a"`)

	ctx, interrupt := context.WithCancel(bg)
	defer interrupt()
	testHookListName = func(ictx context.Context, name string) { interrupt(); <-ictx.Done() } // Ctrl-C
	var stdout, stderr bytes.Buffer
	code = run(ctx, []string{"list", "--url", url}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, exitFailed, code, stderr.String())
	require.Contains(t, stderr.String(), "interrupted: the listing is incomplete")
	require.NotContains(t, stderr.String(), `inspect "a"`)
}
