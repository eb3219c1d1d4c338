package fastform

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/relock-go/relock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestParse: the fast form as lib_fast.lua's fastForm matches it ('^~(h:%S+) (%x+%.%d+)$').
func TestParse(t *testing.T) {
	for _, c := range []struct {
		tok, owner, seq string
		ok              bool
	}{
		{"~h:abc 7.3", "h:abc", "7.3", true},
		{"~h:abc:2 c1.99", "h:abc:2", "c1.99", true},
		{"1733300000000000", "", "", false},
		{"", "", "", false},
		{"~", "", "", false},
		{"~h:abc", "", "", false},
		{"~h:abc ", "", "", false},
		{"~ 7.3", "", "", false},
		{"~h:abc  7.3", "", "", false},
		{"~h:abc 7.3 x", "", "", false},
		{"~h:abc\t7.3", "", "", false},
		{"~h:abc 7.3\n", "", "", false},
		{"x~h:abc 7.3", "", "", false},
		// Only what rlock writes: a handle owner's id, a '<hex>.<n>' sequence number (a
		// user's string that starts with '~' is not a lock).
		{"~hello world", "", "", false},
		{"~u:ctx 1.1", "", "", false},
		{"~h: 1.1", "", "", false},
		{"~h:abc 7", "", "", false},
		{"~h:abc .3", "", "", false},
		{"~h:abc 7.", "", "", false},
		{"~h:abc 7.3.1", "", "", false},
		{"~h:abc g1.3", "", "", false},
		{"~h:abc 7.3x", "", "", false},
		{"~h:abc 7.x", "", "", false},
		{"~h:a:1 AbC9.10", "h:a:1", "AbC9.10", true},
	} {
		o, s, ok := Parse(c.tok)
		if o != c.owner || s != c.seq || ok != c.ok {
			t.Errorf("Parse(%q) = %q, %q, %v; want %q, %q, %v", c.tok, o, s, ok, c.owner, c.seq, c.ok)
		}
	}
}

// TestSpent: a live record of the number spends it; a record that ran out, another number's,
// or a value that is not a fence value (lib_fence.lua's splitFence) does not.
func TestSpent(t *testing.T) {
	const now = 1000
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"", false},
		{"17", false},
		{"17/7.3/1001", true},
		{"17/7.3/1000", false}, // ran out
		{"17/1.1/5000/7.3/1001/2.2/9", true},
		{"17/1.1/5000", false},
		{"/7.3/1001", false},    // no token
		{"17/7.3/1001x", false}, // not a fence value
		{"17/7.3/1001/", false}, // a record cut short
		{"17//1001", false},     // an empty id
		{"17/7.3/", false},      // no until
		{"x17/7.3/1001", false}, // not a token
		{"17/7.3/99999999999999999999999", true},
	} {
		if got := Spent(c.v, "7.3", now); got != c.want {
			t.Errorf("Spent(%q, 7.3, %d) = %v, want %v", c.v, now, got, c.want)
		}
	}
}

// TestCount: the owner's count field rules; else its live fast form is one hold; a ghost (its
// number spent) and another owner's form are none.
func TestCount(t *testing.T) {
	fast := map[string]string{"token": "~h:a 7.3", "w": "1", "q:u:x": "9.1"}
	spent := "17/7.3/2000"
	if n := Count(fast, "h:a", "", 1000); n != 1 {
		t.Errorf("the fast form's owner: %d, want 1", n)
	}
	if n := Count(fast, "h:b", "", 1000); n != 0 {
		t.Errorf("another owner: %d, want 0", n)
	}
	if n := Count(fast, "h:a", spent, 1000); n != 0 || !Ghost(fast, spent, 1000) {
		t.Errorf("a ghost: %d (ghost %v), want 0, a ghost", n, Ghost(fast, spent, 1000))
	}
	if Ghost(fast, spent, 3000) || Ghost(fast, "", 1000) {
		t.Error("a ghost without a live record of its number")
	}
	own := map[string]string{"token": "~h:a 7.3", "h:a": "2"}
	if n := Count(own, "h:a", spent, 1000); n != 2 || Ghost(own, spent, 1000) {
		t.Errorf("the owner's count field: %d (ghost %v), want 2, held", n, Ghost(own, spent, 1000))
	}
	full := map[string]string{"token": "1733300000000000", "h:a": "3", "q:h:a": "7.4"}
	if n := Count(full, "h:a", spent, 1000); n != 3 || Ghost(full, spent, 1000) {
		t.Errorf("the full form: %d, want 3", n)
	}
}

// TestLuaAgrees: Parse and Spent answer as lib_fast.lua's fastForm and lib_fence.lua's
// fenceSpent do, on a real server, for every case of TestParse and TestSpent and more.
func TestLuaAgrees(t *testing.T) {
	var src strings.Builder
	for _, lib := range []string{"lib_clock", "lib_spent", "lib_fence", "lib_fastpattern", "lib_fast"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "lua", lib+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
		src.WriteByte('\n')
	}
	src.WriteString(`
if ARGV[1] == 'parse' then
  local o, s = fastForm(ARGV[2])
  if not o then return {} end
  return {o, s}
end
if ARGV[2] == '' then redis.call('del', KEYS[1]) else redis.call('set', KEYS[1], ARGV[2]) end
return fenceSpent(KEYS[1], ARGV[3], tonumber(ARGV[4])) and 1 or 0
`)
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	eval := func(args ...string) rueidis.RedisResult {
		return c.Do(ctx, c.B().Eval().Script(src.String()).Numkeys(1).Key("{ff}:fence").Arg(args...).Build())
	}
	toks := []string{"~h:abc 7.3", "~h:abc:2 c1.99", "1733300000000000", "", "~", "~h:abc", "~h:abc ", "~ 7.3",
		"~h:abc  7.3", "~h:abc 7.3 x", "~h:abc\t7.3", "~h:abc 7.3\n", "x~h:abc 7.3", "~\v 1", "~a\f1", "~a 1\r", "~~ ~",
		"~hello world", "~u:ctx 1.1", "~h: 1.1", "~h:abc 7", "~h:abc .3", "~h:abc 7.", "~h:abc 7.3.1", "~h:abc g1.3",
		"~h:abc 7.3x", "~h:abc 7.x", "~h:a:1 AbC9.10", "~h:a 1.1\n", "~h:a\v 1.1", "~h:\x01 1.1"}
	for _, tok := range toks {
		v, err := eval("parse", tok).AsStrSlice()
		if err != nil {
			t.Fatalf("parse %q: %v", tok, err)
		}
		o, s, ok := Parse(tok)
		if ok != (len(v) == 2) || ok && (v[0] != o || v[1] != s) {
			t.Errorf("Parse(%q) = %q, %q, %v; Lua: %q", tok, o, s, ok, v)
		}
	}
	for _, fence := range []string{"", "17", "17/7.3/1001", "17/7.3/1000", "17/1.1/5000/7.3/1001/2.2/9", "17/1.1/5000",
		"/7.3/1001", "17/7.3/1001x", "17/7.3/1001/", "17//1001", "17/7.3/", "x17/7.3/1001", "17/7.3/99999999999999999999999",
		"17/a/b/1001", "17/7.3/1001/7.3/5", "17/7.3/5/7.3/1001", "17 /7.3/1001"} {
		n, err := eval("spent", fence, "7.3", "1000").AsInt64()
		if err != nil {
			t.Fatalf("spent %q: %v", fence, err)
		}
		if got := Spent(fence, "7.3", 1000); got != (n == 1) {
			t.Errorf("Spent(%q) = %v; Lua: %d", fence, got, n)
		}
	}
}

// TestFromString: a string that is a fast form (Parse) is the hash form {token: v}
// (lib_fast.lua's fastHash); another string, even one that starts with '~', is not.
func TestFromString(t *testing.T) {
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{"~h:abc:1 c1.7", true},
		{"~bad", false},
		{"~hello world", false},
		{"", false},
		{"hello", false},
		{"12", false},
		{" ~h:a 1", false},
	} {
		f, ok := FromString(c.v)
		if ok != c.ok || ok && (len(f) != 1 || f["token"] != c.v) || !ok && f != nil {
			t.Errorf("FromString(%q) = %v, %v; want ok %v", c.v, f, ok, c.ok)
		}
	}
	f, _ := FromString("~h:a 7.3")
	if n := Count(f, "h:a", "17/7.3/2000", 1000); n != 0 {
		t.Errorf("a string ghost's owner: %d holds, want 0", n)
	}
	if n := Count(f, "h:a", "", 1000); n != 1 {
		t.Errorf("a string fast form's owner: %d holds, want 1", n)
	}
}
