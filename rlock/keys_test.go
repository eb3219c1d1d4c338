package rlock

import (
	"strings"
	"testing"
)

func TestSlot_matchesRedis(t *testing.T) {
	// Values from CLUSTER KEYSLOT on Redis 7.
	for key, want := range map[string]uint16{"foo": 12182, "{user1000}.following": 3443, "{}x": 10595, "somekey": 11058, "foo{hash_tag}": 2515} {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestKeysFor_oneSlotPerLockAndNoCollisions(t *testing.T) {
	t.Parallel()
	names := []string{
		"plain", "}x", "{", "}", "{}", "{}x", "x{}y}", "{user}:cart", "a{b}c", "a%7Bb", "a{b",
		"a}b", "a%b", "\x00\xff{\x01}", strings.Repeat("n", 1<<20), "{x}", "x", "{x}:lock",
	}
	seen := map[string]string{}
	for _, prefix := range []string{"", "relock:"} {
		clear(seen)
		for _, name := range names {
			k := keysFor(prefix, name)
			s := slot(k.lock)
			if slot(k.fence) != s || slot(k.channel) != s || slot(k.released) != s {
				t.Errorf("prefix %q name %.20q: keys %.40q %.40q %.40q span slots", prefix, name, k.lock, k.fence, k.channel)
			}
			for _, key := range []string{k.lock, k.fence, k.channel, k.released} {
				if other, ok := seen[key]; ok {
					t.Errorf("prefix %q: names %.20q and %.20q share key %.40q", prefix, other, name, key)
				}
				seen[key] = name
			}
		}
	}
	// A name with a hash tag of its own keeps it: the lock lives beside the user's keys.
	if got, want := slot(keysFor("relock:", "{user}:cart").lock), slot("{user}:orders"); got != want {
		t.Errorf("tagged name moved to slot %d, want the tag's slot %d", got, want)
	}
}
