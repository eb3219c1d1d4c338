package main

// Defects of bad input found by the boundshunt survey (bounds_hunt_test.go). Each failed at
// 115c23d.

import (
	"encoding/base64"
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
//
// Adjusted with the fix (the test asked for "name" to be the exact bytes, which a JSON string
// cannot hold): "name" stays as before, and name_base64 (key_base64, owner_base64) carries the
// exact bytes of a text that is not UTF-8, only then; --base64 takes it back as NAME.
func TestBoundsHunt_jsonNonUTF8Name(t *testing.T) {
	srv := redistest.Start(t)
	c, err := rlock.New(srv.Client(t))
	require.NoError(t, err)
	defer c.Close()
	name := "\xff\xfe"
	m := c.Mutex(name)
	require.NoError(t, m.Lock(bg))
	out, _, code := relock(t, "", "inspect", "--json", "--url", "redis://"+srv.Addr(), name)
	require.Equal(t, exitOK, code)
	var v struct {
		Name       string `json:"name"`
		NameBase64 string `json:"name_base64"`
		KeyBase64  string `json:"key_base64"`
		Holders    []struct {
			OwnerBase64 *string `json:"owner_base64"`
		} `json:"holders"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "\ufffd\ufffd", v.Name, "name: as before")
	got, err := base64.StdEncoding.DecodeString(v.NameBase64)
	require.NoError(t, err)
	require.Equal(t, name, string(got), "the name name_base64 shows")
	got, err = base64.StdEncoding.DecodeString(v.KeyBase64)
	require.NoError(t, err)
	require.Equal(t, m.Key(), string(got), "the key key_base64 shows")
	require.Len(t, v.Holders, 1)
	require.Nil(t, v.Holders[0].OwnerBase64, "a UTF-8 owner id has no owner_base64")

	// Passed back with --base64, the name is the lock's.
	out2, _, code := relock(t, "", "inspect", "--json", "--base64", "--url", "redis://"+srv.Addr(), v.NameBase64)
	require.Equal(t, exitOK, code)
	var v2 struct {
		NameBase64 string `json:"name_base64"`
		Kind       string `json:"kind"`
		Holders    []any  `json:"holders"`
	}
	require.NoError(t, json.Unmarshal([]byte(out2), &v2))
	require.Equal(t, v.NameBase64, v2.NameBase64)
	require.Equal(t, "mutex", v2.Kind)
	require.Len(t, v2.Holders, 1)
	// A UTF-8 name has no _base64 field; a bad --base64 argument is bad usage.
	require.NoError(t, c.Mutex("ok").Lock(bg))
	out, _, code = relock(t, "", "inspect", "--json", "--url", "redis://"+srv.Addr(), "ok")
	require.Equal(t, exitOK, code)
	require.NotContains(t, out, "_base64")
	_, errOut, code := relock(t, "", "inspect", "--base64", "--url", "redis://"+srv.Addr(), "not base64!")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "--base64")
}
