package lua_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/redistest"
	"github.com/relock-go/relock/lua"
)

// forms are a script's texts as sent, by SHA1: the plain one, and the flagged one when it has
// a shebang.
func forms(s *lua.Script) map[string]string {
	out := map[string]string{s.PlainSHA1(): s.PlainSource()}
	if s.HasFlags() {
		sum := sha1.Sum([]byte(s.Source()))
		out[hex.EncodeToString(sum[:])] = s.Source()
	}
	return out
}

var lineCall = regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z|]+)'`)

// TestCommandAt_eachLine: CommandAt answers, for every line of every form of every script,
// the command the line calls, and nothing for the other lines or an unknown SHA1.
func TestCommandAt_eachLine(t *testing.T) {
	for _, s := range lua.All() {
		for sha, text := range forms(s) {
			lines := strings.Split(text, "\n")
			for i, l := range lines {
				want := ""
				if m := lineCall.FindStringSubmatch(l); m != nil {
					want = strings.ToLower(m[1])
				}
				script, cmd, ok := lua.CommandAt(sha, i+1)
				if script != s.Name() || cmd != want || ok != (want != "") {
					t.Errorf("%s line %d %q: CommandAt = %q %q %v, want %q %q", s.Name(), i+1, l, script, cmd, ok, s.Name(), want)
				}
			}
			if script, _, ok := lua.CommandAt(sha, len(lines)+1); script != s.Name() || ok {
				t.Errorf("%s: a line past the end: %q %v", s.Name(), script, ok)
			}
		}
	}
	if script, cmd, ok := lua.CommandAt(strings.Repeat("0", 40), 1); script != "" || cmd != "" || ok {
		t.Errorf("an unknown script: %q %q %v", script, cmd, ok)
	}
}

// TestScripts_refusalsNamed keeps CommandAt exact: no line calls two different commands, and
// a script that raises a refusal again after undoing what it wrote (error) does so on the
// line of the refused call (lib_refusal.lua).
func TestScripts_refusalsNamed(t *testing.T) {
	raise := regexp.MustCompile(`\berror\(`)
	idiom := regexp.MustCompile(`^\s*(local )?\w+ = redis\.pcall\('[a-z]+'.*\) if (refused\(\w+\)|type\(\w+\) == 'table' and \w+\.err) then (\w+\(\)\.)?\w+\([^()]*\) error\(\w+\) end$`)
	// A hash read made with redis.pcall to meet a string (a fast form's, lib_fast.lua) on its
	// WRONGTYPE error raises any other error again at once.
	passOn := regexp.MustCompile(`^\s*local (\w+) = redis\.pcall\('[a-z]+'.*\) if type\((\w+)\) == 'table' and \w+\.err and string\.sub\(\w+\.err, 1, 10\) ~= 'WRONGTYPE ' then error\(\w+\) end$`)
	for _, s := range lua.All() {
		for i, l := range strings.Split(s.PlainSource(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "--") {
				continue
			}
			seen := map[string]bool{}
			for _, m := range lineCall.FindAllStringSubmatch(l, -1) {
				seen[strings.ToLower(m[1])] = true
			}
			if len(seen) > 1 {
				t.Errorf("%s line %d calls %d commands: %s", s.Name(), i+1, len(seen), l)
			}
			if raise.MatchString(l) && !idiom.MatchString(l) && !passOn.MatchString(l) {
				t.Errorf("%s line %d raises an error off the line of its call: %s", s.Name(), i+1, l)
			}
		}
	}
}

// TestCommandAt_redis: Redis numbers the lines of each form as CommandAt does: a user without
// one command runs scripts, flagged and plain, that fail on it, at a redis.call and at a
// redis.pcall whose refusal is raised again after an undo.
func TestCommandAt_redis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	at := regexp.MustCompile(`script: ([0-9a-f]{40}), on @user_script:(\d+)\.`)
	user := func(without string) rueidis.Client {
		srv.Do(t, "ACL", "SETUSER", "no"+without, "reset", "on", ">pw", "~*", "&*", "+@all", "-"+without)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: "no" + without, Password: "pw", DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	for _, c := range []struct {
		s          *lua.Script
		without    string
		setup      [][]string
		keys, args []string
	}{
		// A fresh grant: HSET is refused at its call, PEXPIRE after the lock was written
		// (the grant is taken back).
		{lua.Acquire, "hset", nil, []string{"{c}1", "{c}1:fence"}, []string{"1000", "o", "r1"}},
		{lua.Acquire, "pexpire", nil, []string{"{c}2", "{c}2:fence"}, []string{"1000", "o", "r1"}},
		// The last hold given back (a flagged script).
		{lua.Release, "del", [][]string{{"HSET", "{c}3", "o", "1"}, {"PEXPIRE", "{c}3", "10000"}}, []string{"{c}3", "{c}3:rel"}, []string{"o", "r2", "", ""}},
		// A request log written, then its expiry refused (a flagged script).
		{lua.SemRelease, "pexpire", nil, []string{"{c}4", "{c}4:log", "{c}4:logx"}, []string{"1", "r3", "10000", "{c}4:ch", "0"}},
	} {
		for _, flags := range []bool{true, false} {
			for _, cmd := range c.setup {
				srv.Do(t, cmd...)
			}
			err := c.s.Lua(flags).Exec(ctx, user(c.without), c.keys, c.args).Error()
			m := at.FindStringSubmatch(errText(err))
			if m == nil {
				t.Errorf("%s (flags %v) without %s: %v, want a refusal naming the script and line", c.s.Name(), flags, c.without, err)
				continue
			}
			line, _ := strconv.Atoi(m[2])
			script, cmd, ok := lua.CommandAt(m[1], line)
			if script != c.s.Name() || cmd != c.without || !ok {
				t.Errorf("%s (flags %v) without %s: CommandAt(%s, %d) = %q %q %v (%v)", c.s.Name(), flags, c.without, m[1], line, script, cmd, ok, err)
			}
			for _, k := range c.keys {
				if msg := srv.Do(t, "PTTL", k); func() bool { n, _ := msg.AsInt64(); return n == -1 }() {
					t.Errorf("%s (flags %v) without %s: %s left without an expiry", c.s.Name(), flags, c.without, k)
				}
			}
			srv.Do(t, append([]string{"DEL"}, c.keys...)...)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
