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

// scriptHook intercepts one call of one of relock's scripts, named by its file name without
// .lua ("acquire", "release", "renew", "fair_acquire", ...: lua.Script.Name). call sends the
// script on for real, at most once: the hook may call it at once, later (from another
// goroutine: the command is not sent until then), or never (a reply that never comes, a
// refused dial), and answer what it likes.
type scriptHook func(ctx context.Context, script string, call func() rueidis.RedisResult) rueidis.RedisResult

// hookClient is the one fault-injecting rueidis client of the tests that act on the
// scripts' sends and replies (hardening, review, protocol): every call of one of relock's
// scripts goes through its hook (none: straight on); every other command goes straight on.
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
	script := scriptOf(cmd) // read before the command is sent (rueidis may recycle it)
	f := h.hook.Load()
	if script == "" || f == nil {
		return h.Client.Do(ctx, cmd)
	}
	return (*f)(ctx, script, func() rueidis.RedisResult { return h.Client.Do(ctx, cmd) })
}

// DoMulti sends a pipeline that holds a script as one Do per command, each through the hook.
func (h *hookClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	hooked := false
	for _, cmd := range cmds {
		hooked = hooked || scriptOf(cmd) != ""
	}
	if !hooked || h.hook.Load() == nil {
		return h.Client.DoMulti(ctx, cmds...)
	}
	out := make([]rueidis.RedisResult, len(cmds))
	for i, cmd := range cmds {
		out[i] = h.Do(ctx, cmd)
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

// scriptOf is the name of the script cmd runs (EVALSHA or EVAL), or "".
func scriptOf(cmd rueidis.Completed) string {
	args := cmd.Commands()
	if len(args) < 2 {
		return ""
	}
	switch strings.ToUpper(args[0]) {
	case "EVALSHA", "EVAL":
		return scriptNames[args[1]]
	}
	return ""
}
