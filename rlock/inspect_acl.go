package rlock

import (
	"slices"
	"strings"
)

// inspectCommands are the commands [Client.Inspect] and [Client.List] send, all read-only:
// Inspect's reads of a name's keys (TYPE, PTTL, HGETALL, GET, ZRANGE, EXISTS), the server's
// clock (TIME), the subscribers of its channels (PUBSUB NUMSUB, or SHARDNUMSUB with sharded
// pub/sub), the Client records (GET); List's SCAN and EXISTS, and on a Cluster CLUSTER SLOTS
// to find the masters (rueidis also reads the slot map, with CLUSTER SLOTS or SHARDS, and
// pings).
var inspectCommands = []string{
	"type", "pttl", "hgetall", "get", "zrange", "exists", "time",
	"pubsub|numsub", "pubsub|shardnumsub", "scan",
	"cluster|slots", "cluster|shards", "ping", "select",
}

// InspectACLRule returns the Redis ACL rules that allow a user what [Client.Inspect] and
// [Client.List] do with the keys of key prefix prefix (DefaultKeyPrefix when empty), and
// nothing else: read access to the keys (%R~, Redis 7) that [ACLRule] covers, and the
// read-only commands they send, named one by one. Give it to ACL SETUSER after the user's
// name, its "on" and its password, e.g.
//
//	ACL SETUSER inspector reset on >secret <InspectACLRule("relock:")>
//
// Like ACLRule it starts with resetkeys, resetchannels and -@all, replacing what the user
// could do before. Two things it cannot narrow: SCAN, a command without keys, returns the
// names of every key of the database, whatever the key patterns (List keeps those under the
// prefix); and PUBSUB NUMSUB counts the subscribers of any channel.
//
// An inspecting user cannot change anything. To force locks free as well (the relock CLI's
// force-unlock, which runs relock's force scripts after an Inspect), give the user ACLRule's
// rule followed by the commands of this one, e.g.
//
//	ACL SETUSER operator reset on >secret <ACLRule("relock:")> +scan +hgetall +zrange +time +exists +pubsub|numsub +pubsub|shardnumsub
//
// A command that a user's rules refuse makes Inspect and List return an error wrapping
// [ErrNoPermission] that names the command.
//
// It refuses the prefixes ACLRule refuses (whitespace, control characters, quotes, braces,
// invalid UTF-8), with an error wrapping [ErrInvalid] and no rule ("").
func InspectACLRule(prefix string) (string, error) {
	p, err := aclPrefix(prefix)
	if err != nil {
		return "", err
	}
	rules := []string{"resetkeys", "resetchannels", "%R~{" + p + "*", "%R~" + p + "*", "-@all"}
	cmds := slices.Clone(inspectCommands)
	slices.Sort(cmds)
	for _, c := range cmds {
		rules = append(rules, "+"+c)
	}
	return strings.Join(rules, " "), nil
}
