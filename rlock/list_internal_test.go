package rlock

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// globMatch agrees with Redis's stringmatchlen on the cases of its own test suite that
// names can meet.
func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "abc", true},
		{"a*", "abc", true},
		{"a*", "bac", false},
		{"*c", "abc", true},
		{"a*c", "ac", true},
		{"a**c", "abbc", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"[abc]x", "bx", true},
		{"[abc]x", "dx", false},
		{"[^abc]x", "dx", true},
		{"[^abc]x", "ax", false},
		{"[a-c]", "b", true},
		{"[c-a]", "b", true}, // Redis swaps reversed ranges
		{"[a-c]", "d", false},
		{`[\]]`, "]", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{`\[x]`, "[x]", true},
		{"[abc", "a", true}, // an unclosed class ends with the pattern
		{"[abc", "ab", false},
		{"inv:*", "inv:42", true},
		{"inv:*", "invoice", false},
		{"", "", true},
		{"", "a", false},
	} {
		require.Equal(t, tc.want, globMatch(tc.pattern, tc.s), "%q ~ %q", tc.pattern, tc.s)
	}
}

// nameOfKey finds the name behind each key List looks for, whatever the name and prefix
// (the empty prefix included, where both forms of key begin alike), and no name behind the
// other keys.
func TestNameOfKey(t *testing.T) {
	for _, prefix := range []string{DefaultKeyPrefix, "", "a*b:"} {
		c := &Client{opts: options{prefix: prefix}}
		for _, name := range []string{"x", "inv:42", "{user42}:cart", "a}b{c", "100%", "%7B", "}", "{", "{}", "x:lock", "{u}:lock:queue"} {
			k := keysFor(prefix, name)
			for _, sfx := range []string{"", ":queue", ":writers"} {
				got, gotSfx, _, ok := c.nameOfKey(k.lock + sfx)
				require.True(t, ok, "prefix %q name %q suffix %q: key %q", prefix, name, sfx, k.lock+sfx)
				require.Equal(t, name, got, "key %q", k.lock+sfx)
				require.Equal(t, sfx, gotSfx)
			}
			for _, other := range []string{k.fence, k.forced, k.lock + ":alive", k.lock + ":leases", k.lock + ":log"} {
				if got, sfx, _, ok := c.nameOfKey(other); ok && sfx == "" {
					t.Fatalf("prefix %q: key %q taken for the state key of %q", prefix, other, got)
				}
			}
		}
		_, _, _, ok := c.nameOfKey(clientInfoKey(prefix, "0123456789abcdef0123456789abcdef"))
		require.False(t, ok, "a Client record is no name")
	}
}

// clientIDOf reads the Client id from the owner ids and permit ids relock makes, and from
// nothing else.
func TestClientIDOf(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef"
	require.Equal(t, id, clientIDOf("h:"+id+":7"))
	require.Equal(t, id, clientIDOf("u:"+id+":12"))
	require.Equal(t, id, clientIDOf(id+".3"))
	for _, o := range []string{"u:job-7", "h:" + id, "h:" + id + ":", "h:" + id + ":x", "u:" + id[:31] + "g:1", id + ":3", "x:" + id + ":1", ""} {
		require.Empty(t, clientIDOf(o), o)
	}
}
