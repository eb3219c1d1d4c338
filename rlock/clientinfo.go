package rlock

import (
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/redis/rueidis"
)

// ClientInfo describes a [Client] to those who inspect its locks: [WithClientInfo] makes the
// Client keep it in Redis, and [Client.Inspect] shows it beside the owner ids the Client
// made ([HolderInfo.Client]), so that an operator reads "held by billing on host-a pid 4121"
// instead of a uuid.
type ClientInfo struct {
	// ID is the Client's id ([Client.ID]); Inspect sets it, WithClientInfo ignores it.
	ID string
	// App and Version name the program, Host and PID the process.
	App, Version, Host string
	PID                int
	// Started is when the Client was made (set by New; WithClientInfo ignores it).
	Started time.Time
}

// DefaultClientInfo describes the running process: its host name (os.Hostname), its pid,
// the last element of its main package's path as App ("billing" for
// example.com/billing/cmd/billing; the executable's base name when the binary carries no
// main package path, as with go run file.go) and its main module's version (debug.ReadBuildInfo; "(devel)" for a
// binary built inside its module).
func DefaultClientInfo() ClientInfo {
	info := ClientInfo{PID: os.Getpid()}
	info.Host, _ = os.Hostname()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Path != "" && bi.Path != "command-line-arguments" { // go run file.go's
			info.App = path.Base(bi.Path)
		}
		info.Version = bi.Main.Version
	}
	if info.App == "" {
		if exe, err := os.Executable(); err == nil {
			info.App = filepath.Base(exe)
		}
	}
	return info
}

// maxClientInfoField bounds each text of a ClientInfo: the record stays small.
const maxClientInfoField = 256

// WithClientInfo makes the Client describe itself in Redis, so that [Client.Inspect] (and
// the relock CLI) show who holds or waits for a lock. Fields of info left empty (0 for the
// PID) are taken from [DefaultClientInfo]; its ID and Started are the Client's own.
//
// The record is one string key, <key prefix>client:<Client id> (under the prefix, so that
// [ACLRule]'s key pattern covers it), holding a small JSON object. It lives three watchdog
// timeouts ([WithWatchdogTimeout]) and the Client writes it again every watchdog timeout, so
// it outlives every lease the Client's holds had, and disappears within three watchdog
// timeouts of the Client's Close or crash. With it, New starts one goroutine that writes the
// record at once and then once per watchdog timeout (a SET ... PX, a command ACLRule allows),
// until Close, which waits for it; a write that fails (Redis unreachable, refused) is tried
// again at the next interval, and no lock depends on it.
//
// It is off by default: a Client sends nothing of its own accord beyond what its holds
// need (the watchdog's renewals, the subscription), and the record tells whoever can read
// the keyspace the host, pid and program of every Client. Turn it on where operators
// inspect locks; the cost is one write per watchdog timeout per Client.
//
// New returns an error wrapping [ErrInvalid] for a text longer than 256 bytes or a
// negative PID.
func WithClientInfo(info ClientInfo) Option {
	return optionFunc(func(o *options) {
		d := DefaultClientInfo()
		if info.App == "" {
			info.App = d.App
		}
		if info.Version == "" {
			info.Version = d.Version
		}
		if info.Host == "" {
			info.Host = d.Host
		}
		if info.PID == 0 {
			info.PID = d.PID
		}
		info.ID, info.Started = "", time.Time{}
		o.clientInfo = &info
	})
}

// validateClientInfo checks WithClientInfo's info.
func validateClientInfo(info *ClientInfo) error {
	if info == nil {
		return nil
	}
	for _, f := range []struct{ name, v string }{{"app", info.App}, {"version", info.Version}, {"host", info.Host}} {
		if len(f.v) > maxClientInfoField {
			return invalid("client info %s is %d bytes long, above %d", f.name, len(f.v), maxClientInfoField)
		}
	}
	if info.PID < 0 {
		return invalid("client info pid %d is negative", info.PID)
	}
	return nil
}

// clientRecord is a ClientInfo as its record keeps it.
type clientRecord struct {
	App     string `json:"app,omitempty"`
	Version string `json:"version,omitempty"`
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid,omitempty"`
	Started int64  `json:"started"` // Unix milliseconds
}

// clientInfoKey is the key of the record of the Client with id id under prefix.
func clientInfoKey(prefix, id string) string { return prefix + "client:" + id }

// startClientInfo starts the goroutine that keeps the Client's record (WithClientInfo), if
// asked for; Close ends it (c.life) and waits for it (c.bg).
func (c *Client) startClientInfo() {
	info := c.opts.clientInfo
	if info == nil {
		return
	}
	rec, _ := json.Marshal(clientRecord{App: info.App, Version: info.Version, Host: info.Host,
		PID: info.PID, Started: time.Now().UnixMilli()})
	key, every := clientInfoKey(c.opts.prefix, c.id), c.opts.watchdogTimeout
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-c.life.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(c.life, c.opts.cleanupTimeout)
			_ = c.rc.Do(ctx, c.rc.B().Set().Key(key).Value(string(rec)).PxMilliseconds((3 * every).Milliseconds()).Build()).Error()
			cancel()
			t.Reset(every)
		}
	}()
}

// clientIDOf returns the Client id an owner id (or a permit id) shows: "h:<id>:<n>",
// "u:<id>:<n>" (WithNewOwner), "<id>.<n>" (a permit); "" for any other.
func clientIDOf(owner string) string {
	const n = 32 // a uuid's hex digits
	rest := owner
	sep := byte('.')
	if len(owner) > 2 && (owner[:2] == "h:" || owner[:2] == "u:") {
		rest, sep = owner[2:], ':'
	}
	if len(rest) < n+2 || rest[n] != sep {
		return ""
	}
	for i := 0; i < n; i++ {
		if ch := rest[i]; !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f') {
			return ""
		}
	}
	for i := n + 1; i < len(rest); i++ {
		if ch := rest[i]; ch < '0' || ch > '9' {
			return ""
		}
	}
	return rest[:n]
}

// describeOwners sets the ClientID of every holder and waiter of in, and their Client from
// the records those Clients keep (one pipelined GET per Client).
func (c *Client) describeOwners(ctx context.Context, in *Info) error {
	var ids []string
	seen := map[string]int{}
	note := func(owner string) string {
		id := clientIDOf(owner)
		if _, ok := seen[id]; id != "" && !ok {
			seen[id] = len(ids)
			ids = append(ids, id)
		}
		return id
	}
	for i := range in.Holders {
		in.Holders[i].ClientID = note(in.Holders[i].Owner)
	}
	for i := range in.Waiters {
		in.Waiters[i].ClientID = note(in.Waiters[i].Owner)
	}
	if len(ids) == 0 {
		return nil
	}
	cmds := make(rueidis.Commands, len(ids))
	for i, id := range ids {
		cmds[i] = c.rc.B().Get().Key(clientInfoKey(c.opts.prefix, id)).Build()
	}
	infos := make([]*ClientInfo, len(ids))
	for i, res := range c.rc.DoMulti(ctx, cmds...) {
		v, err := res.ToString()
		if rueidis.IsRedisNil(err) || wrongType(err) {
			continue
		} else if err != nil {
			return err
		}
		var r clientRecord
		if json.Unmarshal([]byte(v), &r) != nil {
			continue // not a record relock wrote: no description
		}
		infos[i] = &ClientInfo{ID: ids[i], App: r.App, Version: r.Version, Host: r.Host, PID: r.PID, Started: time.UnixMilli(r.Started)}
	}
	for i := range in.Holders {
		if id := in.Holders[i].ClientID; id != "" {
			in.Holders[i].Client = infos[seen[id]]
		}
	}
	for i := range in.Waiters {
		if id := in.Waiters[i].ClientID; id != "" {
			in.Waiters[i].Client = infos[seen[id]]
		}
	}
	return nil
}
