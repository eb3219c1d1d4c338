package rlock

import (
	"strings"

	"github.com/relock-go/relock/internal/hashslot"
)

// lockKeys are the Redis keys and channel of one lock name. All share one hash tag, so on
// Redis Cluster they live in one slot.
type lockKeys struct {
	lock, fence, channel string
	released             string // prefix of the release records (releaseRecord)
	forced               string // the forced record (force_release.lua, release.lua)
	pub                  string // channel as the scripts take it (Client.pubArg)
}

// releaseRecord is the key of the record that a release script sent under request id req
// leaves when it gives back an owner's last hold (KEYS[2] of release.lua and its kin), so
// that a replay of that request is answered truly. One short-lived string key per final
// release, in the lock's hash slot: no other release can overwrite or evict it.
func (k lockKeys) releaseRecord(req string) string { return k.released + ":" + req }

// keysFor derives a lock's keys from the prefix (brace-free) and the name.
//
// A name that carries a Redis hash tag of its own ("{user42}:cart") keeps it: the keys are
// prefix+name+":lock" plus suffixes, so the lock shares the slot of the user's other
// "{user42}" keys. Any other name is wrapped in a tag of its own, "{"+prefix+name+"}", with
// '%', '{' and '}' percent-escaped, so that a stray brace can never split the keys across
// slots (a name like "}x" would otherwise yield the empty tag "{}", which Redis ignores).
// The two shapes cannot collide: wrapped keys end their base with '}', tagged ones with
// ":lock".
func keysFor(prefix, name string) lockKeys {
	var base string
	if hasHashTag(name) {
		base = prefix + name + ":lock"
	} else {
		base = "{" + prefix + escapeBraces(name) + "}"
	}
	return lockKeys{lock: base, fence: base + ":fence", channel: base + ":released", released: base + ":rel", forced: base + ":forced"}
}

// hasHashTag reports whether Redis would hash s by a tag: a '{' followed later by a '}'
// with at least one byte between them.
func hasHashTag(s string) bool {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(s[i+1:], '}')
	return j > 0
}

var braceEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

func escapeBraces(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	return braceEscaper.Replace(s)
}

// slot is the Redis Cluster slot of key.
func slot(key string) uint16 { return hashslot.Of(key) }
