package hashslot

import "testing"

// The slots Redis's own documentation and CLUSTER KEYSLOT give (the cluster tests compare
// more names with a real server's CLUSTER KEYSLOT).
func TestOf(t *testing.T) {
	for key, want := range map[string]uint16{
		"":                     0,
		"123456789":            0x31c3 % Count, // CRC-16/XMODEM's check value
		"foo":                  12182,
		"{user1000}.following": Of("user1000"),
		"foo{}{bar}":           Of("foo{}{bar}"),
		"foo{{bar}}zap":        Of("{bar"),
		"foo{bar}{zap}":        Of("bar"),
		"{}x":                  Of("{}x"),
	} {
		if got := Of(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
	if Of("foo{}{bar}") == Of("bar") {
		t.Error(`"foo{}{bar}" has an empty first tag: the whole key is hashed, not "bar"`)
	}
}
