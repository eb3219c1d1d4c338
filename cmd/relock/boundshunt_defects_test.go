package main

// Defects of bad input found by the boundshunt survey (bounds_hunt_test.go). Each failed at
// 115c23d.

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/rlock"
)

// A lock name is any bytes. The text output quotes a name that is not printable text (and
// its owners), but prints its key raw: a newline in the name splits the key line.
func TestBoundsHunt_textKeyLineQuoted(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	name := "a\nb"
	require.NoError(t, c.Mutex(name).Lock(bg))
	out, _, code := relock(t, "", "inspect", "--url", "redis://"+srv.Addr(), name)
	require.Equal(t, exitOK, code)
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		require.NotEqual(t, "b}", line, "a line of the output is the key's tail:\n%s", out)
	}
}

// --json writes names (and keys, owners) as JSON strings, and encoding/json turns every byte
// that is not UTF-8 into U+FFFD: two names that differ in such bytes print the same, and the
// name printed is not the lock's (inspect or force-unlock of it finds nothing).
func TestBoundsHunt_jsonNonUTF8Name(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	name := "\xff\xfe"
	require.NoError(t, c.Mutex(name).Lock(bg))
	out, _, code := relock(t, "", "inspect", "--json", "--url", "redis://"+srv.Addr(), name)
	require.Equal(t, exitOK, code)
	var v struct {
		Name string `json:"name"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, name, v.Name, "the name --json shows")
}
