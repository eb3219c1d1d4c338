// Package fastform reads a plain lock's fast form as the scripts do (lua/lib_fast.lua,
// docs/DESIGN.md section 5, "The fast form"), for the Go readers of a lock hash: rlock's
// IsLocked, TTL, HoldCount and Inspect, and the tests that check Redis's state.
//
// A lock hash whose token field is "~<owner> <seq>" says that <owner> holds one hold, that
// its last applied operation is <seq>, and that Redis does not know the tenure's fencing
// token (a reader says 0). The owner's own count field, when present, rules over it. A fast
// form whose <seq> the lock's fence records as spent is a ghost: a free lock.
package fastform

import (
	"strconv"
	"strings"
)

// Mark is the byte that starts a fast form's token field.
const Mark = '~'

// Parse returns the owner and the sequence number of token field tok when it is a fast form
// exactly as rlock writes it (lua/lib_fastpattern.lua's fastPattern, '^~(h:%S+) (%x+%.%d+)$'): "~", a
// handle owner's id ("h:" and no whitespace), one space, a sequence number (hex digits, ".",
// decimal digits). Anything else that starts with "~" is a user's value, not a lock.
func Parse(tok string) (owner, seq string, ok bool) {
	if len(tok) == 0 || tok[0] != Mark {
		return "", "", false
	}
	rest := tok[1:]
	i := strings.IndexAny(rest, luaSpace)
	if i <= 0 || rest[i] != ' ' {
		return "", "", false
	}
	owner, seq = rest[:i], rest[i+1:]
	if len(owner) <= 2 || owner[:2] != "h:" || !isSeq(seq) {
		return "", "", false
	}
	return owner, seq, true
}

// isSeq reports whether s is Lua's '^%x+%.%d+$': hex digits, a dot, decimal digits.
func isSeq(s string) bool {
	dot := strings.IndexByte(s, '.')
	if dot <= 0 || dot == len(s)-1 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == dot:
		case i < dot && (c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'):
		case i > dot && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

// luaSpace is Lua's %s class (C's isspace).
const luaSpace = " \t\n\v\f\r"

// Holder returns the owner and sequence number of a lock hash's fast form, given the hash's
// fields, when its token field is one and the owner has no count field of its own: then the
// form alone says that the owner holds one hold (with a count field, the owner's holds are
// that field's, as in the full form).
func Holder(fields map[string]string) (owner, seq string, ok bool) {
	owner, seq, ok = Parse(fields["token"])
	if !ok {
		return "", "", false
	}
	if _, has := fields[owner]; has {
		return "", "", false
	}
	return owner, seq, true
}

// Spent reports whether fence value v (the lock's fence key: "<token>" then spent records
// "/<seq>/<until ms>"..., lib_fence.lua) records seq as spent at server time nowMs: a
// record of it that lives past nowMs (lib_fence.lua's fenceSpent). A value that is not a
// fence value ("" for an absent fence) records nothing.
func Spent(v, seq string, nowMs int64) bool {
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	if i == 0 {
		return false
	}
	spent := false
	for rest := v[i:]; rest != ""; {
		// '/' id '/' digits, as lib_fence.lua's splitFence reads it: every byte in a record.
		if rest[0] != '/' {
			return false
		}
		j := strings.IndexByte(rest[1:], '/')
		if j <= 0 {
			return false
		}
		id := rest[1 : 1+j]
		rest = rest[2+j:]
		k := 0
		for k < len(rest) && rest[k] >= '0' && rest[k] <= '9' {
			k++
		}
		if k == 0 {
			return false
		}
		until, err := strconv.ParseFloat(rest[:k], 64)
		if err == nil && id == seq && until > float64(nowMs) {
			spent = true
		}
		rest = rest[k:]
	}
	return spent
}

// Ghost reports whether a lock hash (its fields) is a fast form whose sequence number fence
// value v records as spent at server time nowMs: a free lock.
func Ghost(fields map[string]string, v string, nowMs int64) bool {
	_, seq, ok := Holder(fields)
	return ok && Spent(v, seq, nowMs)
}

// Count returns the holds owner has in a Mutex's (or FairMutex's, SpinMutex's) lock hash,
// given its fields, its fence's value v and the server time nowMs: its count field, else 1
// when the hash is its live fast form, else 0.
func Count(fields map[string]string, owner, v string, nowMs int64) int64 {
	if s, ok := fields[owner]; ok {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	if o, seq, ok := Holder(fields); ok && o == owner && !Spent(v, seq, nowMs) {
		return 1
	}
	return 0
}

// FromString returns the fields of the hash form of a lock key's string value v when it is a
// fast form written as a string (the fast grant's SET lock "~<owner> <seq>" NX PX <lease>):
// a fast form (Parse) is the hash whose only field is token = v, as lib_fast.lua's fastHash
// converts it. Another string (a user's value, even one that starts with Mark) is none: nil,
// false.
func FromString(v string) (map[string]string, bool) {
	if _, _, ok := Parse(v); !ok {
		return nil, false
	}
	return map[string]string{"token": v}, true
}
