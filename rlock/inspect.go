package rlock

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/internal/fastform"
)

// Info is what Redis knows of one name, read by [Client.Inspect] at [Info.ServerTime].
//
// It is read with one pipeline of commands, not one atomic snapshot: a change that Redis
// applies between two of them (a grant, a release) can show, for instance, a waiter that has
// just become the holder in both lists. Every duration is measured by the Redis server's
// clock.
type Info struct {
	Name string // as given to Inspect
	Key  string // the key that holds the primitive's state (Mutex.Key and its kin)
	Kind Kind
	// Type is the Redis type of Key: "none", "hash", "string", or another type (then
	// Inspect's error wraps [ErrWrongType]). A Mutex's hash left by a fast grant's ghost (see
	// Holders) is a free lock: "none". A Mutex taken by a fast grant may be a "string" (the
	// grant's form, "~<owner> <seq>", until a script makes it a hash), read as the hash
	// form: Kind Mutex, its owner's one hold.
	Type string
	// TTL is Key's remaining time to live: a lock's lease (the longest lease in force for a
	// read-write lock), renewed by its holder's watchdog; 0 when Key does not exist, and
	// negative (-1ns) when Key has no expiry (a semaphore or latch without a TTL).
	TTL time.Duration
	// Token is the fencing token of the current holder (the write holder of a read-write
	// lock), 0 when there is none, or when Redis does not know it yet: a Mutex taken by a
	// fast grant (docs/DESIGN.md section 5), until the holder's next call on it (a re-entry,
	// its first renewal, at two thirds of the watchdog timeout by default) writes it.
	// LastToken is the name's last token (its fence key), 0 when the fence has expired or was
	// never written.
	Token, LastToken int64
	// Holders are the holds in force: one per owner of a lock (one per owner and mode for a
	// read-write lock: the write hold first, then the most holds first), one per permit of
	// a permit semaphore; none for a Semaphore or a latch (KindSemaphore, KindCount), whose
	// holders Redis does not record (only Count). Holds whose own lease has ended, which the
	// next call on the lock drops, are left out. A Mutex taken by a fast grant shows its owner with one hold and
	// no Since (Token 0); a fast grant whose sequence number the fence records as spent is
	// a ghost (its owner had gone when Redis applied it), shown as no hold: the lock is free,
	// and the next script that writes it deletes it.
	Holders []HolderInfo
	// Waiters are the waiters Redis records, oldest first: a fair lock's queue, a read-write
	// lock's waiting writers (readers are not recorded). Other kinds' waiters wait on the
	// release channel only: see Subscribers and Contended.
	Waiters []WaiterInfo
	// Contended reports, for a Mutex or FairMutex, that a waiter was refused during the
	// current holder's tenure (its release will publish).
	Contended bool
	// Count is a semaphore's available permits, a permit semaphore's permits in total, a
	// latch's count; 0 for locks.
	Count int64
	// Subscribers is how many connections listen on the name's release channel: one per
	// Client that has a waiter on it, or had one within the subscription linger
	// ([WithSubscriptionLinger]). ReadSubscribers is the same for a read-write lock's
	// waiting readers' channel.
	Subscribers, ReadSubscribers int64
	// ServerTime is the Redis server's clock when the reads were made (on a Cluster, the
	// clock of any of its nodes).
	ServerTime time.Time

	// fast is the token field of a Mutex held in the fast form ("~<owner> <seq>"), which
	// ForceUnlockSeen sends as the token seen (force_release.lua); "" otherwise.
	fast string
}

// HolderInfo is one hold in [Info.Holders].
type HolderInfo struct {
	// Owner is the owner id as Redis keeps it: "h:<client id>:<n>" for a handle's own,
	// "u:<id>" for a context owner ([WithOwner]), or a permit's id for a permit semaphore.
	Owner string
	// Mode is "write" or "read" for a read-write lock, "permit" for a permit semaphore, ""
	// for the other locks.
	Mode string
	// Holds is the owner's hold count (its reentrancy depth); 1 for a permit.
	Holds int64
	// TTL is the hold's remaining lease (for a Mutex or FairMutex, the key's).
	TTL time.Duration
	// Since is when the hold was granted, read from its fencing token (a fresh grant's token
	// is the server's clock in microseconds, up to a second earlier for a Mutex or SpinMutex,
	// whose counter counts grants for a second after it read the clock ([lua.CounterTTL]),
	// unless the clock went back); zero for holds without a token (read holds, permits) or
	// whose token Redis does not know yet (a Mutex's fast grant: see [Info.Token]).
	Since time.Time
	// ClientID is the id of the [Client] that made the owner id ([Client.ID]), when the id
	// shows it: every handle's own owner, an owner made by [Client.WithNewOwner], every
	// permit. "" for another context owner.
	ClientID string
	// Client describes that Client, when it keeps a record ([WithClientInfo]) that has not
	// expired; nil otherwise.
	Client *ClientInfo
}

// WaiterInfo is one waiter in [Info.Waiters].
type WaiterInfo struct {
	Owner string // as in [HolderInfo.Owner]
	// Mode is "write" for a read-write lock's waiting writer, "" for a fair lock's waiter.
	Mode string
	// Since is when the waiter joined a fair lock's queue (server time), and Age how long
	// ago that was (never negative: 0 when the clock that dated the arrival reads ahead of
	// the one Inspect read, as another node's may on a Cluster); both zero for a waiting
	// writer, whose arrival Redis does not record.
	Since time.Time
	Age   time.Duration
	// Expires is how long the waiter's place (its claim, for a writer) lives unless the
	// waiter refreshes it, as it does every third of the waiter timeout while it waits.
	Expires  time.Duration
	ClientID string      // as in [HolderInfo.ClientID]
	Client   *ClientInfo // as in [HolderInfo.Client]
}

// Inspect reads what Redis knows of the primitive called name, whatever its kind (the
// [Client]'s key prefix and pub/sub mode apply): its kind, holders and hold counts, lease,
// fencing tokens, recorded waiters and their ages, and the subscribers of its channels.
// Owners of Clients that keep a record ([WithClientInfo]) are described by it.
//
// Inspect only reads: it runs no script, takes no lock, and leaves nothing in the Client's
// table of holds, so it neither blocks nor slows the primitive's users. It costs one
// pipeline of read-only commands (TYPE, PTTL, HGETALL, GET, ZRANGE, EXISTS, TIME, PUBSUB
// NUMSUB or SHARDNUMSUB; with classic pub/sub on a Cluster, a NUMSUB per node besides), and
// a second of one GET per Client record when owners show their Client. The commands it needs
// beside [ACLRule]'s are given by [InspectACLRule].
//
// A name that holds nothing is no error: Info.Kind is [KindNone]. Errors:
//  1. an empty name, a nil context (or one [WithOwner] made from a nil parent), or a nil or
//     zero Client: an error wrapping [ErrInvalid];
//  2. a closed Client: [ErrClosed];
//  3. Key holds a value that no relock primitive makes (a list, a hash without a lock's
//     fields, a string that is not an integer): an error wrapping [ErrWrongType], with
//     Info's Name, Key and Type set, and its Kind empty;
//  4. a command refused for want of ACL rights: an error wrapping [ErrNoPermission] that
//     names it;
//  5. ctx's error, or the connection's, wrapped, with a zero Info.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	if err := c.usable(); err != nil {
		return Info{}, err
	}
	if err := ctxError(ctx); err != nil {
		return Info{}, err
	}
	if name == "" {
		return Info{}, invalid("empty name")
	}
	if c.isClosed() {
		return Info{}, ErrClosed
	}
	in, err := c.inspect(ctx, name)
	if err != nil {
		return in, classify("inspect", name, err)
	}
	return in, nil
}

// ForceUnlockSeen frees the lock that seen describes, as [Client.Inspect] returned it, only
// if it is still held as seen: every hold in force is a hold of seen.Holders (its owner, in
// its mode), and the holder that has a fencing token (a Mutex's or FairMutex's, a read-write
// lock's write holder) has seen.Token (a Mutex seen in a fast grant's form, Token 0, only in
// that very form, which the Info keeps unexported: an Info made otherwise, decoded or built by
// hand, does not free it, ErrConflict). The check and the force are one script, so a tool
// that shows an operator the holders and asks for a confirmation frees no holder it did not
// show. A hold of seen that ended meanwhile is no change (freeing fewer holders than shown
// frees none that was not); read holds carry no token, so an owner's read hold taken again
// since counts as seen.
//
// It is otherwise [FairMutex.ForceUnlock] for a seen.Kind of [KindMutex] or [KindFairMutex]
// (every waiter of every Client is woken: those of a Mutex and a SpinMutex wake to it too),
// and [RWMutex.ForceUnlock] for [KindRWMutex]. It reports whether there was a lock to free:
// false, with a nil error, when the lock's key is gone. Errors:
//  1. a nil context (or one [WithOwner] made from a nil parent), a nil or zero Client, seen.Name empty, seen.Kind another kind, or
//     seen.Key not this Client's key of seen.Name (an Info of a Client with another key
//     prefix): an error wrapping [ErrInvalid], and nothing sent;
//  2. a hold in force that seen does not show, or another fencing token: an error wrapping
//     [ErrConflict]; nothing is changed;
//  3. the key holds another type or kind: an error wrapping [ErrWrongType]; nothing changed;
//  4. [ErrClosed], an error wrapping [ErrNoPermission], or ctx's or the connection's error,
//     as ForceUnlock; after ctx's or the connection's error, whether the lock was freed is
//     unknown (Inspect tells).
func (c *Client) ForceUnlockSeen(ctx context.Context, seen Info) (bool, error) {
	if err := c.usable(); err != nil {
		return false, err
	}
	if err := ctxError(ctx); err != nil {
		return false, err
	}
	if seen.Name == "" {
		return false, invalid("force unlock: the Info seen has no name")
	}
	if key := c.lockKeys(seen.Name).lock; seen.Key != key {
		return false, invalid("force unlock %q: the Info seen is of key %q, not this Client's %q", seen.Name, seen.Key, key)
	}
	token := strconv.FormatInt(seen.Token, 10)
	if seen.fast != "" {
		// A fast form's token as seen is its token field (force_release.lua): so a fast
		// tenure begun since, even the same owner's, is not freed as the one seen.
		token = seen.fast
	}
	switch seen.Kind {
	case KindMutex, KindFairMutex:
		args := []string{token}
		for _, h := range seen.Holders {
			args = append(args, h.Owner)
		}
		return c.FairMutex(seen.Name).mutex().force(ctx, args)
	case KindRWMutex:
		args := []string{token}
		for _, h := range seen.Holders {
			f := h.Owner
			if h.Mode != "write" {
				f = "r:" + h.Owner
			}
			args = append(args, f)
		}
		return c.RWMutex(seen.Name).force(ctx, args)
	}
	return false, invalid("force unlock %q: a %s is not a lock that can be freed as seen", seen.Name, seen.Kind)
}

func (c *Client) inspect(ctx context.Context, name string) (Info, error) {
	k := c.lockKeys(name)
	lock := k.lock
	in := Info{Name: name, Key: lock}
	queue, alive := fairKeys(k)
	leases, writers := rwKeys(k)
	_, readCh := rwChannels(k)
	rc := c.rc
	// One pipeline reads every key a kind may have (a read of a key of another type is a
	// WRONGTYPE reply, ignored), and the subscribers where one node answers for them.
	cmds := rueidis.Commands{
		rc.B().Time().Build(),                                                // 0
		rc.B().Type().Key(lock).Build(),                                      // 1
		rc.B().Pttl().Key(lock).Build(),                                      // 2
		rc.B().Get().Key(k.fence).Build(),                                    // 3
		rc.B().Zrange().Key(queue).Min("0").Max("-1").Withscores().Build(),   // 4
		rc.B().Zrange().Key(alive).Min("0").Max("-1").Withscores().Build(),   // 5
		rc.B().Zrange().Key(leases).Min("0").Max("-1").Withscores().Build(),  // 6
		rc.B().Zrange().Key(writers).Min("0").Max("-1").Withscores().Build(), // 7
		rc.B().Exists().Key(lock + ":log").Build(),                           // 8
		rc.B().Hgetall().Key(lock).Build(),                                   // 9
		rc.B().Get().Key(lock).Build(),                                       // 10
	}
	chans := []string{k.channel, readCh}
	perNode := c.pubMark != "S" && rc.Mode() == rueidis.ClientModeCluster
	switch {
	case c.pubMark == "S":
		cmds = append(cmds, rc.B().PubsubShardnumsub().Channel(chans...).Build()) // 11
	case !perNode:
		cmds = append(cmds, rc.B().PubsubNumsub().Channel(chans...).Build()) // 11
	}
	res := rc.DoMulti(ctx, cmds...)
	now, err := serverTime(res[0])
	if err != nil {
		return Info{}, err
	}
	in.ServerTime = now
	nowMs := now.UnixMilli()
	if in.Type, err = res[1].ToString(); err != nil {
		return Info{}, err
	}
	pttl, err := res[2].AsInt64()
	if err != nil {
		return Info{}, err
	}
	in.TTL = pttlDuration(pttl)
	fence, err := res[3].ToString()
	if err == nil {
		// The token, then for a while the spent request ids (lib_fence.lua).
		last := fence
		if i := strings.IndexByte(last, '/'); i >= 0 {
			last = last[:i]
		}
		in.LastToken, _ = strconv.ParseInt(last, 10, 64)
	} else if !rueidis.IsRedisNil(err) && !wrongType(err) {
		return Info{}, err
	}
	zs := make([][]rueidis.ZScore, 4)
	for i := range zs {
		z, err := res[4+i].AsZScores()
		if err != nil && !wrongType(err) {
			return Info{}, err
		}
		zs[i] = z
	}
	qz, az, lz, wz := zs[0], zs[1], zs[2], zs[3]
	hasLog, err := res[8].AsInt64()
	if err != nil {
		return Info{}, err
	}
	fields, err := res[9].AsStrMap()
	if err != nil && !wrongType(err) {
		return Info{}, err
	}
	str, err := res[10].ToString()
	if err != nil && !wrongType(err) && !rueidis.IsRedisNil(err) {
		return Info{}, err
	}
	if in.Type == "string" && wrongType(err) && len(fields) > 0 {
		// A fast form written as a string that a script made its hash form between the
		// reads: as if read after.
		in.Type = "hash"
	}
	if in.Type == "hash" && len(fields) == 0 || in.Type == "string" && err != nil {
		in.Type = "none" // deleted (or replaced) between the reads: as if read after
	}
	// A fast form written as a string (the fast grant's SET: "~<owner> <seq>") is read as its
	// hash form, {token: value}; Type stays "string".
	fastStr := false
	if in.Type == "string" {
		if f, ok := fastform.FromString(str); ok {
			fields, fastStr = f, true
		}
	}
	if (in.Type == "hash" || fastStr) && fastform.Ghost(fields, fence, nowMs) {
		in.Type = "none" // a fast grant's ghost: a free lock (docs/DESIGN.md section 5)
	}

	switch in.Type {
	case "none":
		in.TTL = 0
		switch {
		case len(qz) > 0:
			in.Kind = KindFairMutex
		case len(wz) > 0:
			in.Kind = KindRWMutex
		default:
			in.Kind = KindNone
		}
	case "hash", "string":
		switch {
		case in.Type == "string" && !fastStr:
			n, perr := strconv.ParseInt(str, 10, 64)
			if perr != nil {
				return in, errorf("a string that is not a count: %w", ErrWrongType)
			}
			in.Count = n
			in.Kind = KindCount
			if hasLog == 1 || n < 1 {
				in.Kind = KindSemaphore
			}
		case fields["mode"] != "":
			in.Kind = KindRWMutex
			readRW(&in, fields, lz, nowMs)
		case fields["permits"] != "":
			in.Kind = KindPermitSemaphore
			in.Count, _ = strconv.ParseInt(fields["permits"], 10, 64)
			for _, z := range lz {
				if ttl := time.Duration(int64(z.Score)-nowMs) * time.Millisecond; ttl > 0 {
					in.Holders = append(in.Holders, HolderInfo{Owner: z.Member, Mode: "permit", Holds: 1, TTL: ttl})
				}
			}
		default:
			in.Kind = KindMutex
			if len(qz) > 0 || len(az) > 0 {
				in.Kind = KindFairMutex
			}
			if !readMutex(&in, fields) {
				in.Kind = "" // not relock's, as error 3 of Inspect says
				return in, errorf("hash without a lock's fields: %w", ErrWrongType)
			}
		}
	default:
		return in, errorf("a %s: %w", in.Type, ErrWrongType)
	}

	if in.Kind == KindFairMutex || in.Kind == KindMutex {
		life := make(map[string]float64, len(az))
		for _, z := range az {
			life[z.Member] = z.Score
		}
		for _, z := range qz {
			end, ok := life[z.Member]
			if !ok || int64(end) <= nowMs {
				continue // a dead place: the next attempt purges it
			}
			since := time.UnixMicro(int64(z.Score))
			in.Waiters = append(in.Waiters, WaiterInfo{Owner: z.Member, Since: since, Age: max(now.Sub(since), 0),
				Expires: time.Duration(int64(end)-nowMs) * time.Millisecond})
		}
	}
	if in.Kind == KindRWMutex {
		for _, z := range wz {
			if end := int64(z.Score); end > nowMs {
				in.Waiters = append(in.Waiters, WaiterInfo{Owner: z.Member, Mode: "write", Expires: time.Duration(end-nowMs) * time.Millisecond})
			}
		}
	}
	var subs []rueidis.RedisResult
	if perNode {
		for _, n := range rc.Nodes() {
			subs = append(subs, n.Do(ctx, n.B().PubsubNumsub().Channel(chans...).Build()))
		}
	} else {
		subs = res[11:]
	}
	if err := in.countSubscribers(subs, chans); err != nil {
		return Info{}, err
	}
	return in, c.describeOwners(ctx, &in)
}

// readMutex fills in the holder of a Mutex or FairMutex from its hash; false when the hash
// has no field a lock writes. A fast form (docs/DESIGN.md section 5, token "~<owner> <seq>")
// is its owner's one hold, unless the owner's count field says otherwise, with Token 0 (not
// known to Redis) and no Since; in.fast keeps the token field for ForceUnlockSeen.
func readMutex(in *Info, fields map[string]string) bool {
	ok := false
	if o, _, fast := fastform.Holder(fields); fast {
		in.Holders = append(in.Holders, HolderInfo{Owner: o, Holds: 1, TTL: in.TTL})
	}
	for f, v := range fields {
		switch {
		case f == "token":
			if _, _, fast := fastform.Parse(v); fast {
				in.fast = v
			} else {
				in.Token, _ = strconv.ParseInt(v, 10, 64)
			}
			ok = true
		case f == "w":
			in.Contended, ok = true, true
		case isOwnerField(f):
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			in.Holders = append(in.Holders, HolderInfo{Owner: f, Holds: n, TTL: in.TTL})
			ok = true
		case strings.HasPrefix(f, "q:"):
			ok = true
		}
	}
	if in.Token > 0 {
		for i := range in.Holders {
			in.Holders[i].Since = tokenTime(in.Token)
		}
	}
	return ok
}

// readRW fills in the live holds of a read-write lock from its hash and leases zset.
func readRW(in *Info, fields map[string]string, leases []rueidis.ZScore, nowMs int64) {
	end := make(map[string]int64, len(leases))
	for _, z := range leases {
		end[z.Member] = int64(z.Score)
	}
	writer := fields["writer"]
	add := func(field, owner, mode string) {
		e, ok := end[field]
		if !ok || e <= nowMs {
			return
		}
		n, err := strconv.ParseInt(fields[field], 10, 64)
		if err != nil || n < 1 {
			return
		}
		h := HolderInfo{Owner: owner, Mode: mode, Holds: n, TTL: time.Duration(e-nowMs) * time.Millisecond}
		if mode == "write" {
			in.Token, _ = strconv.ParseInt(fields["token"], 10, 64)
			h.Since = tokenTime(in.Token)
		}
		in.Holders = append(in.Holders, h)
	}
	if writer != "" && fields["mode"] == "write" {
		add(writer, writer, "write")
	}
	for f := range fields {
		if o, ok := strings.CutPrefix(f, "r:"); ok && isOwnerField(o) {
			add(f, o, "read")
		}
	}
	sortHolders(in.Holders)
}

// isOwnerField reports whether f is an owner id as relock writes it.
func isOwnerField(f string) bool {
	return strings.HasPrefix(f, "h:") || strings.HasPrefix(f, "u:")
}

// sortHolders puts the write hold first, then the most holds, then by owner: a stable
// order for readers.
func sortHolders(hs []HolderInfo) {
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && holderLess(hs[j], hs[j-1]); j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

func holderLess(a, b HolderInfo) bool {
	if (a.Mode == "write") != (b.Mode == "write") {
		return a.Mode == "write"
	}
	if a.Holds != b.Holds {
		return a.Holds > b.Holds
	}
	return a.Owner < b.Owner
}

// tokenTime is the grant time a fencing token records (the server's clock in µs), or the
// zero time when token cannot be one (before 2001 or after 2200).
func tokenTime(token int64) time.Time {
	const lo, hi = 978307200 * 1e6, 7258118400 * 1e6
	if token < lo || token > hi {
		return time.Time{}
	}
	return time.UnixMicro(token)
}

// countSubscribers adds up the replies to PUBSUB NUMSUB or SHARDNUMSUB of chans (the
// release channel, then the read-write lock's readers' channel): one reply from the server,
// or from the channel's master with sharded pub/sub; with classic pub/sub on a Cluster, one
// per node (a classic subscriber is counted only by the node it is connected to).
func (in *Info) countSubscribers(replies []rueidis.RedisResult, chans []string) error {
	counts := make([]int64, len(chans))
	for _, res := range replies {
		arr, err := res.ToArray()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(arr); i += 2 {
			ch, _ := arr[i].ToString()
			n, _ := arr[i+1].AsInt64()
			for j, want := range chans {
				if ch == want {
					counts[j] += n
				}
			}
		}
	}
	in.Subscribers = counts[0]
	if in.Kind == KindRWMutex {
		in.ReadSubscribers = counts[1]
	}
	return nil
}

// serverTime parses a TIME reply.
func serverTime(res rueidis.RedisResult) (time.Time, error) {
	v, err := res.AsStrSlice()
	if err != nil {
		return time.Time{}, err
	}
	if len(v) != 2 {
		return time.Time{}, errorf("malformed TIME reply")
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, errorf("malformed TIME reply %q", v)
	}
	return time.Unix(sec, usec*1000), nil
}

// pttlDuration turns a PTTL reply into Info.TTL: 0 for no key, -1ns for no expiry.
func pttlDuration(ms int64) time.Duration {
	switch {
	case ms == -2:
		return 0
	case ms < 0:
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// wrongType reports whether err is Redis's WRONGTYPE reply.
func wrongType(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(re.Error(), "WRONGTYPE")
}
