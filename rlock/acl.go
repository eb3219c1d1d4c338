package rlock

import (
	"errors"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/relock-go/relock/lua"
)

// ErrNoPermission: Redis refused a command, or a command a script called, for want of ACL
// rights (NOPERM). The error names the operation, the lock and the command refused, with the
// script that called it (Redis 7.0's message names neither, but gives the script's SHA1 and
// line, which relock maps to the call), and carries Redis's message:
// `rlock: unlock "x": no permission: release script's DEL refused (...)`. Redis does not roll
// a script back, so relock's scripts make the calls that may be refused before they write, or
// take back what they wrote: a call refused under a rule that lacks commands leaves no key
// without an expiry and no half-made change (at most traces: a fencing token used up, ended
// holds or places purged, a needless wake-up). A refused release or renewal leaves the lock
// to expire with its lease: the Client stops renewing it and the holder is told. The holder's
// later calls that report that loss (Err, an Unlock that gives back what Redis still counts:
// errors wrapping [ErrNotHeld] or [ErrLockLost]) carry the refusal as the loss's cause and so
// match ErrNoPermission too, though they were not refused themselves: check ErrNotHeld and
// ErrLockLost first. [ACLRule] gives the rights relock needs.
var ErrNoPermission = errors.New("rlock: no permission")

// clientCommands are the commands relock sends itself, beside its scripts: the scripts
// (EVALSHA, and EVAL when the server lost them), a fast grant's transaction (MULTI, SET, INCR,
// EXEC: fast.go), the reads of IsLocked, HoldCount, TTL (HGETALL,
// HMGET, PTTL; TYPE, GET, PTTL of a key of another type, a fast form written as a string; GET
// of the fence and TIME on a fast form) and the
// latch and semaphore getters, the lease touch and WAIT of WithReplicaAck, the SET and GET of
// a RedLock's duplicate-server check, and the pub/sub
// connections' SUBSCRIBE and UNSUBSCRIBE (SSUBSCRIBE and SUNSUBSCRIBE, and CLUSTER SLOTS to
// find a channel's node, with sharded pub/sub on a Cluster: WithPubSub), and the SET of a
// Client's record (WithClientInfo). rueidis adds PING (health checks), SELECT for
// a database other than 0, and, on a Cluster, reads of the slot map; HELLO and AUTH are always
// allowed.
var clientCommands = []string{
	"evalsha", "eval", "type", "get", "set", "hgetall", "hmget", "time", "pttl", "pexpire", "wait",
	"multi", "incr", "exec",
	"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "ping", "cluster|slots", "cluster|shards",
	"select", // a database other than 0 (rueidis's SelectDB, a URL's /n)
	"set",    // a Client's record (WithClientInfo), under the prefix
}

// ACLRule returns the Redis ACL rules that allow a user what relock does with the keys and
// channels of key prefix prefix ([WithKeyPrefix]; DefaultKeyPrefix when empty), and nothing
// else: its keys and channels, and the commands relock and its scripts run, named one by one.
// The rules are printed on one line, separated by single spaces. Give them to ACL SETUSER
// after the user's name, its "on" and its password, e.g.
//
//	ACL SETUSER locker reset on >secret <ACLRule("relock:")>
//
// The rule starts with resetkeys and resetchannels and -@all, so it replaces what the user could
// do before: use a user of its own for locks. It allows every key and channel that begins with
// "{" + prefix (the lock's hash tag) or with prefix (names that carry their own hash tag), and
// nothing else, so that users with different prefixes cannot touch each other's locks; glob
// characters in prefix (* ? [ ] \) are escaped. A relock Client made with [Dial] needs nothing
// more (client-side caching, which would need CLIENT TRACKING, is off); a rueidis client made
// otherwise must set DisableCache too, or be given +client|tracking.
//
// A prefix that no printed rule can carry is refused with an error wrapping [ErrInvalid] that
// names the prefix and the character, and no rule (""): one that is not valid UTF-8, or that
// contains
//
//  1. whitespace (unicode.IsSpace): Redis refuses a key or channel pattern with an ASCII
//     space, tab, newline, vertical tab, form feed or carriage return (ACL SETUSER: "Syntax
//     error"), and strings.Fields splits a printed rule at the others too (U+0085, U+00A0...);
//  2. a control character (unicode.IsControl): NUL, which Redis refuses too, and the others,
//     which a terminal does not show or paste as they are;
//  3. a quote, " or ': redis-cli reads it as the start of a quoted argument and refuses the
//     line ("Invalid argument(s)");
//  4. a brace, { or }, which [WithKeyPrefix] refuses too.
//
// Everything else is taken as it is (parentheses, '#', ';', non-ASCII letters): Redis accepts
// it in a pattern, and no pattern of the rule begins with '(', which would start a selector.
//
// The commands run inside the scripts are Redis's to check (Redis applies the user's ACL to
// them): a call that the rule does not allow fails the script, and the relock call that sent
// it returns an error wrapping [ErrNoPermission].
func ACLRule(prefix string) (string, error) {
	p, err := aclPrefix(prefix)
	if err != nil {
		return "", err
	}
	rules := []string{"resetkeys", "resetchannels",
		"~{" + p + "*", "~" + p + "*", "&{" + p + "*", "&" + p + "*", "-@all"}
	cmds := append(append([]string(nil), clientCommands...), lua.Commands()...)
	sort.Strings(cmds)
	last := ""
	for _, c := range cmds {
		if c != last {
			rules = append(rules, "+"+c)
		}
		last = c
	}
	return strings.Join(rules, " "), nil
}

// aclPrefix returns prefix (DefaultKeyPrefix when empty) escaped for an ACL pattern, or an
// error wrapping ErrInvalid when a printed rule cannot carry it (see ACLRule).
func aclPrefix(prefix string) (string, error) {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	if !utf8.ValidString(prefix) {
		return "", invalid("ACL rule: key prefix %q is not valid UTF-8", prefix)
	}
	for _, r := range prefix {
		var what string
		switch {
		case unicode.IsSpace(r):
			what = "whitespace"
		case unicode.IsControl(r):
			what = "a control character"
		case r == '"' || r == '\'':
			what = "a quote"
		case r == '{' || r == '}':
			what = "a brace"
		default:
			continue
		}
		return "", invalid("ACL rule: key prefix %q contains %s (%U), which an ACL rule cannot carry", prefix, what, r)
	}
	return aclEscape(prefix), nil
}

// aclEscape escapes the glob characters of an ACL key or channel pattern.
func aclEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := range len(s) { // bytewise: the glob characters are ASCII, and s may not be UTF-8
		if strings.IndexByte(`*?[]\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
