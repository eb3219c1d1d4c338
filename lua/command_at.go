package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
)

// CommandAt returns the name of the script whose text, as sent to Redis, has SHA1 sha (the
// flagged form's or the plain one's, see [Script.Lua]), and the command (lower case, as
// [Commands] lists it) that the script calls on its line number line. Lines are numbered
// from 1 as Redis numbers them in a script's error (Redis 7: "script: <sha>, on
// @user_script:<line>."): in the flagged form the shebang is line 1, in the plain form the
// line after it. ok is false when sha is none of the scripts (script is then "") or that
// line calls no command.
//
// A script that fails on a command Redis refuses (an ACL without it) fails at the line of the
// call, so this names the refused command. A call made with redis.pcall whose refusal the
// script answers by undoing what it wrote raises the refusal on the line of the pcall (see
// lib_refusal.lua), and no line calls two different commands (a test checks both), so the
// answer is exact.
func CommandAt(sha string, line int) (script, command string, ok bool) {
	idx := lineIndex()
	f, found := idx[strings.ToLower(sha)]
	if !found {
		return "", "", false
	}
	if line < 1 || line > len(f.cmds) || f.cmds[line-1] == "" {
		return f.script, "", false
	}
	return f.script, f.cmds[line-1], true
}

// form is one text of a script as sent: its name and, per line, the command the line calls.
type form struct {
	script string
	cmds   []string // "" for a line that calls none
}

var (
	lineIndexOnce sync.Once
	lineIdx       map[string]form
)

// lineIndex maps the SHA1 of each form of each script to that form's line commands.
func lineIndex() map[string]form {
	lineIndexOnce.Do(func() {
		lineIdx = map[string]form{}
		for _, s := range all {
			texts := []string{s.PlainSource()}
			if s.HasFlags() {
				texts = append(texts, s.src)
			}
			for _, text := range texts {
				sum := sha1.Sum([]byte(text))
				lineIdx[hex.EncodeToString(sum[:])] = form{script: s.name, cmds: lineCommands(text)}
			}
		}
	})
	return lineIdx
}

// lineCommands returns, for each line of src, the command that the line calls (lower case),
// or "" when it calls none. A line that calls two different commands gets the first; a test
// keeps the scripts free of such lines.
func lineCommands(src string) []string {
	lines := strings.Split(src, "\n")
	cmds := make([]string, len(lines))
	for i, l := range lines {
		if m := callRE.FindStringSubmatch(l); m != nil {
			cmds[i] = strings.ToLower(m[1])
		}
	}
	return cmds
}
