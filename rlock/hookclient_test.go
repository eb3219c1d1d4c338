package rlock_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// scriptHook intercepts one call of one of relock's scripts, cmd (its script's name and
// arguments). call sends the command on for real, under the caller's ctx, at most once (it
// or cmd.sendWith): the hook may call it at once, later (from another goroutine: the
// command is not sent until then), or never (a reply that never comes, a refused dial),
// and answer what it likes.
type scriptHook func(ctx context.Context, cmd hookCall, call func() rueidis.RedisResult) rueidis.RedisResult

// hookCall is what a scriptHook learns of a script call, read before anything is sent
// (rueidis recycles a command once sent).
type hookCall struct {
	// script is the script's name: its file name without .lua ("acquire", "release",
	// "renew", "fair_acquire", ...: lua.Script.Name).
	script string
	// args is a copy of the command's words after the script's SHA1 or text: the number of
	// keys, the keys, then the arguments.
	args []string
	// multi: the call came in a DoMulti pipeline (it is sent on as a Do of its own).
	multi bool
	// sendWith sends the command on for real under ctx instead of the caller's (for a send
	// made after the caller's ctx may have ended). The command is sent at most once: by
	// call or by sendWith, not both.
	sendWith func(ctx context.Context) rueidis.RedisResult
}

// hookClient is the one fault-injecting rueidis client of the tests that act on the
// scripts' sends and replies (hardening, review, protocol, model): every call of one of
// relock's scripts goes through its hook (none: straight on); every other command goes
// straight on.
type hookClient struct {
	rueidis.Client
	hook atomic.Pointer[scriptHook]
}

// set installs f as the hook (nil: none).
func (h *hookClient) set(f scriptHook) {
	if f == nil {
		h.hook.Store(nil)
		return
	}
	h.hook.Store(&f)
}

func (h *hookClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return h.do(ctx, cmd, false)
}

func (h *hookClient) do(ctx context.Context, cmd rueidis.Completed, multi bool) rueidis.RedisResult {
	f := h.hook.Load()
	if f == nil {
		return h.Client.Do(ctx, cmd)
	}
	// Read before the command is sent: rueidis recycles a sent command.
	script, args := scriptOf(cmd)
	if script == "" {
		return h.Client.Do(ctx, cmd)
	}
	send := func(ctx context.Context) rueidis.RedisResult { return h.Client.Do(ctx, cmd) }
	c := hookCall{script: script, args: args, multi: multi, sendWith: send}
	return (*f)(ctx, c, func() rueidis.RedisResult { return send(ctx) })
}

// DoMulti sends a pipeline that holds a script as one Do per command, each through the hook
// (hookCall.multi set).
func (h *hookClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	hooked := false
	for _, cmd := range cmds {
		hooked = hooked || isRelockScript(cmd)
	}
	if !hooked || h.hook.Load() == nil {
		return h.Client.DoMulti(ctx, cmds...)
	}
	out := make([]rueidis.RedisResult, len(cmds))
	for i, cmd := range cmds {
		out[i] = h.do(ctx, cmd, true)
	}
	return out
}

// scriptNames maps the SHA1 of both forms of every script (plain, and with its "#!lua flags"
// shebang), and both texts (for EVAL), to the script's name.
var scriptNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range lua.All() {
		flagged := sha1.Sum([]byte(s.Source()))
		m[s.PlainSHA1()] = s.Name()
		m[hex.EncodeToString(flagged[:])] = s.Name()
		m[s.Source()] = s.Name()
		m[s.PlainSource()] = s.Name()
	}
	return m
}()

// scriptOf is the name of the script cmd runs (EVALSHA or EVAL), or "", and a copy of the
// command's words after the script's SHA1 or text.
func scriptOf(cmd rueidis.Completed) (string, []string) {
	if !isRelockScript(cmd) {
		return "", nil
	}
	words := cmd.Commands()
	return scriptNames[words[1]], append([]string(nil), words[2:]...)
}

// isRelockScript reports whether cmd runs one of relock's scripts (EVALSHA or EVAL).
func isRelockScript(cmd rueidis.Completed) bool {
	words := cmd.Commands()
	if len(words) < 2 {
		return false
	}
	switch strings.ToUpper(words[0]) {
	case "EVALSHA", "EVAL":
		return scriptNames[words[1]] != ""
	}
	return false
}
