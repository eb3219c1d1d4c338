package rlock

import (
	"errors"
	"sort"
	"strings"

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
// to expire with its lease: the Client stops renewing it and the holder is told. [ACLRule]
// gives the rights relock needs.
var ErrNoPermission = errors.New("rlock: no permission")

// clientCommands are the commands relock sends itself, beside its scripts: the scripts
// (EVALSHA, and EVAL when the server lost them), the reads of IsLocked, HoldCount, TTL and the
// latch and semaphore getters, the lease touch and WAIT of WithReplicaAck, the SET and GET of
// a RedLock's duplicate-server check, and the pub/sub
// connections' SUBSCRIBE and UNSUBSCRIBE (SSUBSCRIBE and SUNSUBSCRIBE, and CLUSTER SLOTS to
// find a channel's node, with sharded pub/sub on a Cluster: WithPubSub), and the SET of a
// Client's record (WithClientInfo). rueidis adds PING (health checks), SELECT for
// a database other than 0, and, on a Cluster, reads of the slot map; HELLO and AUTH are always
// allowed.
var clientCommands = []string{
	"evalsha", "eval", "type", "get", "set", "hget", "pttl", "pexpire", "wait",
	"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe", "ping", "cluster|slots", "cluster|shards",
	"select", // a database other than 0 (rueidis's SelectDB, a URL's /n)
	"set",    // a Client's record (WithClientInfo), under the prefix
}

// ACLRule returns the Redis ACL rules that allow a user what relock does with the keys and
// channels of key prefix prefix ([WithKeyPrefix]; DefaultKeyPrefix when empty), and nothing
// else: its keys and channels, and the commands relock and its scripts run, named one by one.
// Give it to ACL SETUSER after the user's name, its "on" and its password, e.g.
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
// The commands run inside the scripts are Redis's to check (Redis applies the user's ACL to
// them): a call that the rule does not allow fails the script, and the relock call that sent
// it returns an error wrapping [ErrNoPermission].
func ACLRule(prefix string) string {
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	p := aclEscape(prefix)
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
	return strings.Join(rules, " ")
}

// aclEscape escapes the glob characters of an ACL key or channel pattern.
func aclEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
