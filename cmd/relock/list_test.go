package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// TestList_slowNameDoesNotStall: the inspection of one name blocks (a hook, inside the
// name's --timeout bound, waits for its end): list shows that name as not inspected, still
// lists every other name, tells the timeout on stderr and exits 1, as text and as JSON (one
// {"name","error"} object for it). A Ctrl-C or --walk-timeout during a name's inspection
// still ends the walk. (The first name that ran out of --timeout failed the whole listing:
// the names after it were never shown.)
func TestList_slowNameDoesNotStall(t *testing.T) {
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	base := redistest.Name(t)
	var names []string
	for _, n := range []string{"a", "b", "c", "d"} {
		name := base + "-" + n
		m := c.Mutex(name)
		require.NoError(t, m.Lock(bg))
		defer func() { require.NoError(t, m.Unlock(bg)) }()
		names = append(names, name)
	}
	var mu sync.Mutex
	slow := ""
	testHookListName = func(ctx context.Context, name string) {
		mu.Lock()
		if slow == "" {
			slow = name // the first name found: every other comes after it
		}
		blocked := name == slow
		mu.Unlock()
		if blocked {
			<-ctx.Done()
		}
	}
	defer func() { testHookListName = nil }()

	for _, asJSON := range []bool{false, true} {
		slow = ""
		args := []string{"list", "--url", url, "--timeout", "300ms", base + "-*"}
		if asJSON {
			args = append(args, "--json")
		}
		start := time.Now()
		out, errOut, code := relock(t, "", args...)
		took := time.Since(start)
		require.Equal(t, exitFailed, code, "json %v: stdout: %s\nstderr: %s", asJSON, out, errOut)
		require.Contains(t, errOut, "not inspected within --timeout 300ms")
		require.Contains(t, errOut, slow)
		require.Less(t, took, 10*time.Second, "json %v", asJSON)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if !asJSON {
			require.Len(t, lines, 1+len(names), "a header and a line per name:\n%s", out)
			for _, n := range names {
				var line string
				for _, l := range lines {
					if strings.HasPrefix(l, n+" ") {
						line = l
					}
				}
				require.NotEmpty(t, line, "%s not listed:\n%s", n, out)
				if n == slow {
					require.Contains(t, line, "not inspected within --timeout 300ms")
				} else {
					require.Contains(t, line, "mutex")
				}
			}
			continue
		}
		require.Len(t, lines, len(names), "a JSON object per name:\n%s", out)
		got := map[string]map[string]any{}
		for _, l := range lines {
			var v map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &v), l)
			got[v["name"].(string)] = v
		}
		for _, n := range names {
			require.Contains(t, got, n)
			if n == slow {
				require.Equal(t, "not inspected within --timeout 300ms", got[n]["error"])
			} else {
				require.Equal(t, "mutex", got[n]["kind"])
			}
		}
	}

	// The walk's own bound, met while a name is being inspected, ends the walk.
	slow = ""
	out, errOut, code := relock(t, "", "list", "--url", url, "--timeout", "5s", "--walk-timeout", "300ms", base+"-*")
	require.Equal(t, exitFailed, code, "stdout: %s\nstderr: %s", out, errOut)
	require.Contains(t, errOut, "deadline exceeded")
	require.NotContains(t, errOut, "not inspected")
}
