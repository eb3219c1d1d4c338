package rlock

import (
	"context"
	"iter"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// listCount is the COUNT hint of List's SCAN calls: how many keys Redis looks at per call.
const listCount = 1000

// List iterates over the names under the Client's key prefix that match pattern, a Redis
// glob pattern over names (* any text, ? one character, [abc] and [^a-z] classes, \ quotes
// the next character; "" matches every name): those of every kind with a state key (held
// locks, semaphores, latches), and free fair and read-write locks that still have waiters
// recorded. A name that only left a fence, a record of a release or a Client record behind
// is not listed. List reads no values: a name whose state key is a free lock still (a Mutex's
// fast grant's ghost, docs/DESIGN.md section 5, until its lease ends or the next script on it
// deletes it) is listed, and [Client.Inspect] shows it free.
//
// It walks the keyspace once with SCAN (never KEYS), on every master of a Cluster in turn,
// and yields names as it finds them, in no particular order. It has SCAN's guarantees: a name
// present from the start to the end of the walk is yielded, one created or deleted meanwhile
// may or may not be, and a name may be yielded twice (when Redis rehashes during the walk).
// Like [Client.Inspect] it only reads and holds no lock. Each SCAN call looks at about 1000
// keys; the walk stops when the loop body breaks or ctx ends.
//
// On error the iterator yields ("", err) once and stops: an error wrapping [ErrInvalid] for a
// nil or zero Client or a nil context (or one [WithOwner] made from a nil parent), [ErrClosed] for a closed one, an error wrapping [ErrNoPermission] when
// the user may not run SCAN (see [InspectACLRule]), ctx's or the connection's error wrapped.
func (c *Client) List(ctx context.Context, pattern string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := c.usable(); err != nil {
			yield("", err)
			return
		}
		if err := ctxError(ctx); err != nil {
			yield("", err)
			return
		}
		if c.isClosed() {
			yield("", ErrClosed)
			return
		}
		if pattern == "" {
			pattern = "*"
		}
		nodes, err := c.scanNodes(ctx)
		if err != nil {
			yield("", classify("list", pattern, err))
			return
		}
		match := listMatch(c.opts.prefix, pattern)
		for _, n := range nodes {
			if err := c.scanNode(ctx, n, match, pattern, yield); err != nil {
				if err != errStopped {
					yield("", classify("list", pattern, err))
				}
				return
			}
		}
	}
}

// listMatch is the SCAN MATCH pattern of List's one walk: it matches the keys of both forms
// of the names that may match pattern, wrapped ({prefix<name>}...) and with a hash tag of
// their own (prefix<name>:lock...), as "*" + prefix + the pattern's literal text + "*". The
// literal text stops at a brace or '%', which the wrapped form escapes (escapeBraces) and
// the other does not. A key that matches without being a name's (the text elsewhere in it)
// is dropped by scanNode, which checks each key (nameOfKey, globMatch): MATCH only spares the
// replies; SCAN looks at every key of the node whatever it matches.
func listMatch(prefix, pattern string) string {
	lit := globLiteralPrefix(pattern)
	if i := strings.IndexAny(lit, "{}%"); i >= 0 {
		lit = lit[:i]
	}
	return "*" + aclEscape(prefix+lit) + "*"
}

// errStopped ends a walk whose consumer broke out of the loop.
var errStopped = errorf("stopped")

// scanNode walks one node's keys that match match and yields the names matching pattern,
// of both forms (nameOfKey tells a key's form, also with an empty prefix, where both
// forms' keys may begin alike).
func (c *Client) scanNode(ctx context.Context, n rueidis.Client, match string, pattern string, yield func(string, error) bool) error {
	var cursor uint64
	for {
		e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(listCount).Build()).AsScanEntry()
		if err != nil {
			return err
		}
		var names, bases []string // names found by a waiters' key: listed when their state key is absent
		for _, key := range e.Elements {
			name, suffix, _, ok := c.nameOfKey(key)
			if !ok || !globMatch(pattern, name) {
				continue
			}
			switch suffix {
			case "":
				if !yield(name, nil) {
					return errStopped
				}
			case ":queue", ":writers":
				names, bases = append(names, name), append(bases, key[:len(key)-len(suffix)])
			}
		}
		if len(names) > 0 {
			cmds := make(rueidis.Commands, len(bases))
			for i, b := range bases {
				cmds[i] = n.B().Exists().Key(b).Build()
			}
			for i, res := range n.DoMulti(ctx, cmds...) {
				x, err := res.AsInt64()
				if err != nil {
					return err
				}
				if x == 0 && !yield(names[i], nil) {
					return errStopped
				}
			}
		}
		if e.Cursor == 0 {
			return nil
		}
		cursor = e.Cursor
	}
}

// nameOfKey returns the name whose key key is under the Client's prefix, with the suffix
// after the name's state key ("" for the state key itself, ":queue" or ":writers" for a
// waiters' key) and whether the name is wrapped in a tag of relock's (keysFor); ok is false
// for any other key (another suffix, a Client record, another application's key).
func (c *Client) nameOfKey(key string) (name, suffix string, wrapped, ok bool) {
	prefix := c.opts.prefix
	if rest, found := strings.CutPrefix(key, "{"+prefix); found {
		// {prefix<escaped name>}<suffix>: the escaped name holds no brace.
		if j := strings.IndexByte(rest, '}'); j > 0 {
			esc, sfx := rest[:j], rest[j+1:]
			name = unescapeBraces(esc)
			if listedSuffix(sfx) && !strings.ContainsRune(esc, '{') && escapeBraces(name) == esc {
				return name, sfx, true, true
			}
		}
	}
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", false, false
	}
	// <prefix><name>:lock<suffix>, the name with a hash tag of its own.
	for _, s := range []string{"", ":queue", ":writers"} {
		if base, ok := strings.CutSuffix(rest, ":lock"+s); ok && hasHashTag(base) {
			return base, s, false, true
		}
	}
	return "", "", false, false
}

// listedSuffix reports whether a key with suffix sfx after its name's state key makes List
// yield the name.
func listedSuffix(sfx string) bool { return sfx == "" || sfx == ":queue" || sfx == ":writers" }

// unescapeBraces undoes escapeBraces.
func unescapeBraces(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	return braceUnescaper.Replace(s)
}

var braceUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// scanNodes returns the nodes to SCAN: the Client's rueidis client, or on a Cluster one
// client per master that serves slots (found by CLUSTER SLOTS: rueidis's Nodes also lists
// replicas). CLUSTER SLOTS is asked of one node, the first of rueidis's in address order
// that answers: a node that does not know its own address (the only node of a cluster, one
// no peer has told it yet) gives its host as "", which stands for the address it was asked
// at, as rueidis reads it.
func (c *Client) scanNodes(ctx context.Context) ([]rueidis.Client, error) {
	if c.rc.Mode() != rueidis.ClientModeCluster {
		return []rueidis.Client{c.rc}, nil
	}
	nodes := c.rc.Nodes()
	addrs := slices.Sorted(maps.Keys(nodes))
	var slots []rueidis.RedisMessage
	var from string
	err := errorf("no node of the cluster is known")
	for _, a := range addrs {
		n := nodes[a]
		slots, err = n.Do(ctx, n.B().ClusterSlots().Build()).ToArray()
		if err == nil {
			from = a
			break
		}
		if _, refused := rueidis.IsRedisErr(err); refused || ctx.Err() != nil {
			return nil, err // every node answers alike (an ACL), or the caller has gone
		}
	}
	if err != nil {
		return nil, err
	}
	var out []rueidis.Client
	seen := map[string]bool{}
	for _, s := range slots {
		r, err := s.ToArray()
		if err != nil || len(r) < 3 {
			return nil, errorf("malformed CLUSTER SLOTS reply")
		}
		m, err := r[2].ToArray()
		if err != nil || len(m) < 2 {
			return nil, errorf("malformed CLUSTER SLOTS reply")
		}
		host, _ := m[0].ToString()
		port, _ := m[1].AsInt64()
		switch host {
		case "":
			host, _, _ = net.SplitHostPort(from) // the node asked, which does not know its address
		case "?":
			return nil, errorf("a master of the cluster has no known endpoint (CLUSTER SLOTS gives \"?\" for it)")
		}
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		if seen[addr] {
			continue
		}
		seen[addr] = true
		n, ok := nodes[addr]
		if !ok {
			return nil, errorf("master %s of the cluster is not among the client's nodes (its slot map is being refreshed: try again)", addr)
		}
		out = append(out, n)
	}
	return out, nil
}

// globLiteralPrefix is the text pattern's matches all begin with: up to its first special
// character.
func globLiteralPrefix(pattern string) string {
	if i := strings.IndexAny(pattern, `*?[\`); i >= 0 {
		return pattern[:i]
	}
	return pattern
}

// globMatch reports whether s matches pattern, as Redis's stringmatchlen does (the glob of
// KEYS, SCAN MATCH and PSUBSCRIBE).
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if globMatch(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			pattern = pattern[1:]
			not := len(pattern) > 0 && pattern[0] == '^'
			if not {
				pattern = pattern[1:]
			}
			match := false
			for {
				if len(pattern) == 0 {
					break // an unclosed class ends with the pattern, as in Redis
				}
				if pattern[0] == '\\' && len(pattern) >= 2 {
					pattern = pattern[1:]
					if pattern[0] == s[0] {
						match = true
					}
				} else if pattern[0] == ']' {
					break
				} else if len(pattern) >= 3 && pattern[1] == '-' {
					lo, hi := pattern[0], pattern[2]
					if lo > hi {
						lo, hi = hi, lo
					}
					if lo <= s[0] && s[0] <= hi {
						match = true
					}
					pattern = pattern[2:]
				} else if pattern[0] == s[0] {
					match = true
				}
				pattern = pattern[1:]
			}
			if not {
				match = !match
			}
			if !match {
				return false
			}
			s = s[1:]
			if len(pattern) == 0 {
				return len(s) == 0
			}
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || pattern[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		pattern = pattern[1:]
	}
	return len(s) == 0
}
