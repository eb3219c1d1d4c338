package rlock

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// noPermissionError is classify's error for re, Redis refusing a command for want of ACL
// rights, in operation op on the lock called name: it wraps [ErrNoPermission], names the
// operation, the lock and, when Redis's message lets it be found, the command refused (and
// the script that called it), and keeps the message:
//
//	rlock: unlock "x": no permission: release script's PEXPIRE refused (ERR The user executing the script can't run this command or subcommand script: <sha>, on @user_script:90.)
func noPermissionError(op, name string, re *rueidis.RedisError) error {
	msg := re.Error()
	if what := refused(msg); what != "" {
		return errorf("%s %q: %w: %s refused (%s)", op, name, ErrNoPermission, what, msg)
	}
	return errorf("%s %q: %w (%s)", op, name, ErrNoPermission, msg)
}

// refusal is re, Redis refusing a renewal for want of ACL rights, shown with the command
// refused and the script that called it named when Redis's message lets them be found
// ("renew script's HMGET refused (<message>)"); it wraps re.
func refusal(re *rueidis.RedisError) error {
	what := refused(re.Error())
	if what == "" {
		return re
	}
	return &refusalError{what: what, re: re}
}

type refusalError struct {
	what string
	re   *rueidis.RedisError
}

func (e *refusalError) Error() string { return e.what + " refused (" + e.re.Error() + ")" }
func (e *refusalError) Unwrap() error { return e.re }

// refused names what Redis refused in msg, an error reply for want of ACL rights: "<script>
// script's <COMMAND>" for a call inside one of relock's scripts, and "<COMMAND>" for a command
// sent alone, or "" when msg says neither.
//
// Inside a script, Redis 7.0 does not name the command ("The user executing the script can't
// run this command or subcommand"), but it names the script by its SHA1 and the line where it
// failed, and [lua.CommandAt] knows the command each line of each script calls. A command
// sent alone, or a script's call on a server that names it, is refused with "... the
// '<command>' command".
func refused(msg string) string {
	named := ""
	if m := commandRE.FindStringSubmatch(msg); m != nil {
		named = strings.ToUpper(m[1])
	}
	m := scriptLineRE.FindStringSubmatch(msg)
	if m == nil {
		return named
	}
	line, err := strconv.Atoi(m[2])
	if err != nil {
		return named
	}
	script, cmd, ok := lua.CommandAt(m[1], line)
	switch {
	case ok:
		return script + " script's " + strings.ToUpper(cmd)
	case named != "":
		return named
	case script != "":
		return script + " script's call"
	}
	return ""
}

var (
	// scriptLineRE finds the SHA1 of the failed script and the line of the failure in an
	// error reply: "script: <sha>, on @user_script:<line>." (Redis 7), "(call to f_<sha>):
	// @user_script:<line>: ..." (Redis 6).
	scriptLineRE = regexp.MustCompile(`(?:script: |f_)([0-9a-fA-F]{40})\b[^@]*@user_script: ?(\d+)`)
	// commandRE finds the command named by a NOPERM reply: "... to run the '<command>' command".
	commandRE = regexp.MustCompile(`'([A-Za-z|_-]+)' command`)
)
