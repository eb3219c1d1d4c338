// Package lua holds relock's Redis scripts, one .lua file per operation, embedded into the
// binary. Each file starts with a header naming its KEYS, ARGV and replies.
//
// A script whose first line is a "#!lua flags=..." shebang (for example allow-oom, so that a
// release still runs on a full server) is offered in two forms: with the flags, for Redis 7
// and later, and without them, for servers that cannot parse the shebang (Redis 6,
// miniredis). The caller picks one with [Script.Lua] and learns which the server takes from
// [IsShebangError].
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

//go:embed *.lua
var files embed.FS

// Script is one embedded Lua script.
type Script struct {
	name    string
	src     string
	sha     string       // SHA1 of the plain form
	fsha    string       // SHA1 of the flagged form ("" when src has no shebang)
	flagged *rueidis.Lua // nil when src has no shebang
	plain   *rueidis.Lua
}

// all is every script, in load order (see All).
var all []*Script

// All returns every embedded script, for checks that apply to each.
func All() []*Script { return append([]*Script(nil), all...) }

func load(name string) *Script {
	b, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic("lua: missing embedded script " + name) // a build defect, not a runtime condition
	}
	s := &Script{name: name, src: include(string(b))}
	plain := s.src
	if strings.HasPrefix(plain, "#!") {
		s.flagged = rueidis.NewLuaScript(s.src)
		fsum := sha1.Sum([]byte(s.src))
		s.fsha = hex.EncodeToString(fsum[:])
		plain = plain[strings.IndexByte(plain, '\n')+1:]
	}
	s.plain = rueidis.NewLuaScript(plain)
	sum := sha1.Sum([]byte(plain))
	s.sha = hex.EncodeToString(sum[:])
	all = append(all, s)
	return s
}

// include replaces each line "--#include NAME" of src with the text of NAME.lua (a library
// of local functions that several scripts share; Redis has no modules for scripts), itself
// with its own includes replaced.
func include(src string) string {
	if !strings.Contains(src, "\n--#include ") {
		return src
	}
	lines := strings.Split(src, "\n")
	for i, l := range lines {
		if name, ok := strings.CutPrefix(l, "--#include "); ok {
			b, err := files.ReadFile(strings.TrimSpace(name) + ".lua")
			if err != nil {
				panic("lua: missing embedded library " + name) // a build defect
			}
			lines[i] = include(strings.TrimRight(string(b), "\n")) // a library may include another
		}
	}
	return strings.Join(lines, "\n")
}

// FenceTTL is how long a lock name's fence (the key holding its last fencing token) lives
// after the last fresh grant of a fair lock, a read-write lock or a RedLock's instance, or
// once it records spent request ids (fenceTTL in lib_fence.lua; a plain lock's counter lives
// [CounterTTL]). Tokens
// do not need it to keep rising: a fresh grant's token is the larger of the last token + 1
// and the server's clock in microseconds, so a fence that expired after a day without a
// grant only matters if the server's clock was set back by more than that day.
const FenceTTL = 24 * time.Hour

// CounterTTL is how long a plain lock's fence counts grants by INCR after it was set from
// the server's clock (counterTTL in lib_fence.lua): then it expires, and the next fresh grant
// sets it from the clock again. So a Mutex's or SpinMutex's token is the server's clock in
// microseconds at its grant to within CounterTTL (it never reads later than the clock did),
// and a name no longer locked leaves no fence behind for long. A fence that holds spent
// request ids lives [FenceTTL].
const CounterTTL = time.Second

// The scripts. Their contracts are in the headers of the .lua files.
var (
	// Acquire takes or re-enters a reentrant lock (acquire.lua).
	Acquire = load("acquire")
	// Release gives back one hold of a reentrant lock (release.lua).
	Release = load("release")
	// Renew extends the leases of many held locks in one call (renew.lua).
	Renew = load("renew")
	// FastRelease gives back the one hold of a handle owner's fast grant still in the fast
	// form (fast_release.lua).
	FastRelease = load("fast_release")
	// ForceRelease frees a lock whoever holds it (force_release.lua).
	ForceRelease = load("force_release")
)

// Name is the script's file name without the .lua suffix.
func (s *Script) Name() string { return s.name }

// Source is the script's text as embedded, shebang included.
func (s *Script) Source() string { return s.src }

// PlainSHA1 is the SHA1 of the plain form, for callers that build their own EVALSHA (to
// pipeline it with other commands); on NOSCRIPT they send [Script.PlainSource] with EVAL.
func (s *Script) PlainSHA1() string { return s.sha }

// PlainSource is the script's text without its shebang line.
func (s *Script) PlainSource() string {
	if s.flagged != nil {
		return s.src[strings.IndexByte(s.src, '\n')+1:]
	}
	return s.src
}

// HasFlags reports whether the script carries a "#!lua flags=..." shebang.
func (s *Script) HasFlags() bool { return s.flagged != nil }

// Lua returns the script to run: with its shebang flags when flags is true and it has any,
// otherwise the plain form.
func (s *Script) Lua(flags bool) *rueidis.Lua {
	if flags && s.flagged != nil {
		return s.flagged
	}
	return s.plain
}

// IsShebangError reports whether err is a server's refusal to compile a script because of
// its "#!" first line, which servers older than Redis 7 and miniredis do not understand.
func IsShebangError(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "compil") && strings.Contains(msg, "'#'")
}

// Commands returns the Redis commands that the scripts call (redis.call and redis.pcall),
// lower case, sorted, each once: what an ACL user needs, beside EVALSHA and EVAL, to run them.
// Scripts name every command they call literally (a test checks it), so the list is complete.
func Commands() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range all {
		for _, m := range callRE.FindAllStringSubmatch(s.src, -1) {
			c := strings.ToLower(m[1])
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

// callRE matches a script's call of a command named literally.
var callRE = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z|]+)'`)
