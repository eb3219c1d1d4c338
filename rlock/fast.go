package rlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// The fast grant (docs/DESIGN.md section 5, "The fast form"): a handle owner's fresh acquire
// of a plain lock that its handle took uncontended within the fence counter's life
// (lua.CounterTTL) is sent as a transaction, not a script:
//
//	MULTI; SET lock "~<owner> <seq>" NX PX <lease>; INCR fence; EXEC
//
// which costs Redis about half the acquire script. SET NX writes nothing on a key that exists,
// of any type (another owner's lock, another primitive of the same name, a user's value), and
// sets the expiry only on the key it makes. The lock is then held in the fast form
// until the owner's next script on it: a re-entry converts it (acquire.lua's ARGV[6], the
// tenure's token), and its last Unlock gives it back by fast_release.lua. Every other case
// goes to acquire.lua under the same sequence number, which reads the fast form: a grant
// whose INCR gave no token (a fence missing, or holding spent records), a refusal (the lock
// is held: the script answers with the holder's lease and marks the lock for a waiter), a
// server that refuses the transaction. A send whose outcome is unknown is replayed as
// acquire.lua's replay, as any acquire's.

// seedFloor is the largest fence counter that the scripts read as not seeded from the
// server's clock (lib_fence.lua): a fast grant's INCR of a missing fence counts from 1.
const seedFloor = 1 << 40

// fastEligible reports whether an attempt of m for owner h (within: the tenure it re-enters,
// nil for a fresh acquire; waiting: the caller waited already) goes as a fast grant.
func (m *Mutex) fastEligible(h *hold, within *tenure, waiting bool) bool {
	return within == nil && !waiting && m.v.fast && m.c.opts.ackReplicas == 0 &&
		!isContextOwner(h.owner) && !m.c.fastOff.Load() &&
		(time.Now().UnixNano() < m.fastUntil.Load() || m.c.fastAlways.Load())
}

// fastGranted records that m's handle took the lock uncontended at sent (its next fresh
// acquire within the fence counter's life may go as a fast grant), or, with ok false, that
// an attempt was refused (the next ones go as scripts until one is uncontended again).
func (m *Mutex) fastGranted(sent time.Time, ok bool) {
	if !m.v.fast {
		return
	}
	if ok {
		m.fastUntil.Store(sent.Add(lua.CounterTTL).UnixNano())
	} else if m.fastUntil.Load() != 0 {
		m.fastUntil.Store(0)
	}
}

// fastRecord notes what a grant recorded for an attempt (within, waiting: as attempt's; vals:
// the grant; form: the fast form the attempt sent, "" when a script; isFast: the grant was
// the transaction's) means for fast grants: the tenure a fast grant began is in that form, a
// re-entry's script
// converted the tenure it joined (recorded by attempt before grant), and an uncontended fresh
// grant lets the handle's next fresh acquires go fast. h.op must be held, or the grant handed
// it to its orphans' give-back: a fresh fast grant has no orphans (one hold), so a tenure is
// written here only under h.op.
func (m *Mutex) fastRecord(h *hold, within *tenure, waiting bool, vals []int64, sent time.Time, isFast bool, form string) {
	if !m.v.fast {
		return
	}
	if within != nil {
		return // the re-entry's conversion is recorded before the grant (Mutex.attempt)
	}
	if isFast {
		h.mu.Lock()
		if t := h.cur; t != nil && t.token == vals[1] {
			t.fast = form
		}
		h.mu.Unlock()
	}
	if !waiting {
		m.fastGranted(sent, true)
	}
}

// execFast sends an acquire (keys {lock, fence}, args {lease, owner, seq[, mark]} as
// acquire.lua's first send takes them) as the fast grant's transaction, and answers as
// acquire.lua does. fast reports that the lock is held in the fast form (the grant's token is
// INCR's answer). When the transaction's answer is not a grant with a token, acquire.lua goes
// at once under the same sequence number (its answer is returned). An error is the
// transaction's (then nothing was applied, or its outcome is unknown: a replay of acquire.lua
// resolves it) or the script's.
//
// value is the token field the transaction writes, '~<owner> <seq>' (newFastRequest); its
// SET's PX is args[0], the lease in milliseconds as the script takes it. cmds is memory of
// the caller's for the four commands (it allocates none). pub is the lock's release channel
// as the scripts take it: a give-back of the form (below) tells the waiters that marked it.
func (c *Client) execFast(ctx context.Context, s *lua.Script, keys, args []string, value, pub string, cmds *[4]rueidis.Completed, buf []int64) (vals []int64, fast bool, err error) {
	rc := c.rc
	*cmds = [4]rueidis.Completed{
		rc.B().Multi().Build(),
		rc.B().Arbitrary("SET").Keys(keys[0]).Args(value, "NX", "PX", args[0]).Build(),
		rc.B().Incr().Key(keys[1]).Build(),
		rc.B().Exec().Build(),
	}
	res := rc.DoMulti(ctx, cmds[:]...)
	exec := res[len(res)-1]
	if err := exec.Error(); err != nil {
		if _, isReply := rueidis.IsRedisErr(err); !isReply {
			return nil, false, err // no answer: its outcome is unknown
		}
	}
	for i := range res[:len(res)-1] {
		// MULTI refused (an ACL without it: the commands after it ran one by one, or were
		// refused), or a command refused as it was queued (EXEC then aborts): acquire.lua
		// below reads what they left, and this Client sends no fast grant again.
		if e, ok := rueidis.IsRedisErr(res[i].Error()); ok && strings.HasPrefix(e.Error(), "NOPERM") {
			c.fastOff.Store(true)
		}
	}
	wrote := false // the transaction may have written the fast form
	if arr, err := exec.ToArray(); err == nil && len(arr) == 2 {
		set := arr[0].Error() == nil // OK; nil when the key exists
		wrote = set
		tok, terr := arr[1].AsInt64()
		if set && terr == nil && tok > seedFloor {
			return append(buf[:0], 1, tok, 1), true, nil
		}
		if !set && terr == nil && tok <= seedFloor {
			// Refused, and the INCR made the fence (it was missing): the script's refusal
			// gives it an expiry (acquire.lua's ARGV[7]).
			a := make([]string, 6, 7)
			copy(a, args)
			args = append(a, "s")
		}
	}
	vals, _, err = c.execAcquire(ctx, s, keys, args, buf)
	if err != nil && wrote && transient(err) {
		// The script that was to convert the form the transaction wrote did not run (a
		// refused dial, a reply such as BUSY or LOADING): the lock is held for the owner all
		// the same. Unknown, so that the replay of the same number converts it (or finds it
		// spent); taken for a failure that applied nothing, it left the form held for nobody
		// until its lease ran out (TestFastGrant_followUpRefusedLeavesNoHold). (The
		// script's own error, a fence of another type, undoes the form itself; an outcome
		// already unknown is replayed anyway.)
		err = errorf("%w: %w", ErrUnknownOutcome, err)
	}
	var re *rueidis.RedisError
	if err != nil && wrote && errors.As(err, &re) && !transient(err) && !answers(re) {
		// Redis declined to run the script (OOM on a server that filled meanwhile, a
		// refused command), which wrote nothing: the transaction's form is held for nobody.
		// It is given back at once by fast_release.lua (which runs on a full server), if it
		// is still this one; if that fails too, it expires with its lease (the call's error is
		// the script's all the same). Before, it was always left to its lease
		// (TestFastGrant_followUpDeclinedLeavesNoHold).
		cctx, cancel := c.cleanupCtx(ctx)
		_ = c.execServed(cctx, lua.FastRelease, keys[:1], []string{args[1], args[2], pub}).Error()
		cancel()
	}
	return vals, false, err
}
