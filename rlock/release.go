package rlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/relock-go/relock/lua"
)

// The release flow of Mutex and its variants: Unlock (mutex.go) -> unlock -> release (one
// release script, passing the lock to a parked waiter of this Client when there is one:
// handoff.go) -> the hold's view set from Redis's answer; and the give-backs the Client starts
// on its own (giveBackOne, giveBackOrphans).

// giveBackOne gives back one hold of h on behalf of a caller that has gone. If the give-back
// fails, this Client stops counting and renewing the hold (h.abandon): Redis lets it expire
// within its lease; the error is returned (for the observer). h.op must be held.
func (m *Mutex) giveBackOne(ctx context.Context, h *hold) error {
	err := m.release(ctx, h, nil)
	if err != nil && !errors.Is(err, ErrNotHeld) {
		h.abandon()
	}
	return err
}

// gaveBack tells the observer that one hold of h was given back on the Client's own
// initiative for reason (err: how the give-back failed).
func (m *Mutex) gaveBack(h *hold, reason GiveBackReason, err error) {
	if m.c.obs != nil && m.v.obs != "" {
		m.c.gaveBack(m.v.obs, m.name, h.owner, 1, reason, err)
	}
}

// giveBackOrphans gives back at most n holds of owner that this Client let go of, one
// release each, within one cleanup timeout. Each release is conditional in Redis (the
// release script's keep, >= 0): it gives back a hold only while Redis counts more than keep
// holds of this Client's operations (for a handle's owner, the owner's holds; for a context
// owner, this Client's count, lib_seq.lua): so a hold whose give-back Redis applied after all
// is not given back twice, and another Client's hold of a context owner is never taken (even
// a grant given back at once goes with keep 0, see grant). It stops at the first release
// that fails, or that finds nothing more to give back, and returns how many holds it gave
// back and the failure.
func (m *Mutex) giveBackOrphans(ctx context.Context, owner string, keep int, n int64) (int64, error) {
	cctx, cancel := m.c.cleanupCtx(ctx)
	defer cancel()
	var given int64
	for ; given < n; given++ {
		left, _, err := m.sendRelease(cctx, owner, nil, nil, nil, keep)
		if err != nil {
			return given, err
		}
		if left == releaseKept || left < 0 {
			return given, nil // nothing more of this Client's beyond keep, or nothing at all
		}
		if left == 0 {
			return given + 1, nil // the lock is free
		}
	}
	return given, nil
}

// releaseKept is the release scripts' answer to a conditional give-back (keep) that found no
// more than keep holds of the Client's: nothing was written.
const releaseKept = -4

// relTrace is what an observed release learns, for its ReleaseDone.
type relTrace struct{ freed, handedOff bool }

// unlock is Unlock for owner; rt, when not nil, traces it for the observer. failed, when not
// nil, is called with h and the error when the release ran and failed (not when unlock gave
// up before it: a closed Client, h.op busy for the whole cleanup timeout), while h.op is
// still held: no other call of the owner on the lock has run since (a RedLock's give-back
// abandons the hold there, giveBackInst). held, when not nil, is called once h.op is taken
// (or when unlock gives up before): a RedLock's Unlock that leaves its give-backs to the
// background returns only then, so that each is ahead of the owner's next request there.
func (m *Mutex) unlock(ctx context.Context, owner string, rt *relTrace, failed func(h *hold, err error), held func()) error {
	if held != nil {
		// Told once h.op is taken (the give-back is then ahead of any later request of the
		// owner on this lock from this Client), or when unlock gives up before (this
		// deferred call); held is nil once told.
		defer func() {
			if held != nil {
				held()
			}
		}()
	}
	h, err := m.c.ref(m, owner)
	if err != nil {
		return err
	}
	defer m.c.unref(h)
	if !h.tryLockOp() {
		// Another call of this owner on this lock is running (or finishing in the
		// background): wait for it, within one cleanup timeout. The give-back has a cleanup
		// timeout of its own once its turn comes (below: the caller's ctx, as when nothing
		// was waited for). Before, the wait and the give-back shared one: a turn that came
		// late left the give-back a few milliseconds, and a Redis that answered in good
		// time, but not in those, left the outcome unknown and the hold abandoned (the drift
		// hunt in a CI proof, seed 1796514798708505306 trial 10;
		// TestMutex_Unlock_afterWaitingForItsTurnSendsWithAWholeCleanupTimeout).
		// The hold this Unlock gives back is one of the tenure in force now: if that tenure
		// ends meanwhile (its fixed lease runs out, another Unlock gives back its last hold)
		// and another begins (the running call's fresh grant), the caller's hold went with
		// the first, and the new one's holds are not the caller's to give back (seed
		// 13329750963578692308 of the model test).
		t, _ := h.snapshot()
		cctx, cancel := m.c.cleanupCtx(ctx)
		defer cancel()
		if err := h.lockOp(cctx); err != nil {
			// Nothing was sent: the hold is still the caller's (Unlock's godoc, case 4).
			return errorf("unlock %q: the owner's other call on this lock kept it busy for the whole cleanup timeout, nothing given back: %w", m.name, context.Cause(cctx))
		}
		if now, _ := h.snapshot(); t != nil && now != nil && now != t {
			h.unlockOp()
			return errorf("unlock %q: %w", m.name, endedErr(t.endedBy()))
		}
	}
	defer h.unlockOp()
	if held != nil {
		held()
		held = nil
	}
	err = m.release(ctx, h, rt)
	if errors.Is(err, ErrNoPermission) || errors.Is(err, ErrUnknownOutcome) && h.holds() > 0 {
		// Redis refuses the give-back for want of rights, and would refuse it again, or no
		// answer told whether it was applied: this Client stops counting and renewing the hold
		// (hold.abandon). Another hold of the owner keeps it as an orphan, given back once
		// Redis answers (never beyond the holds Redis counts for this Client: if the
		// give-back was applied after all, nothing more goes, and a context owner's holds
		// taken through other Clients stay); the last expires with its lease if Redis still
		// has it, unless the owner's next grant finds it first. Counting it on (as before)
		// left the Client one hold above Redis when the give-back had been applied, until
		// the tenure ended as lost (the drift hunt), or renewed for ever a last hold that was
		// not given back.
		h.abandon()
	}
	if err != nil && failed != nil {
		failed(h, err)
	}
	return err
}

// release gives back one hold of h and updates h. h.op must be held. When it gives back the
// last hold and a waiter of this Client is parked on the lock, it passes the lock to that
// waiter in the same script (handoff.go). rt, when not nil, records for the observer
// whether the release ended the tenure and whether it passed the lock on.
func (m *Mutex) release(ctx context.Context, h *hold, rt *relTrace) error {
	t, lost := h.snapshot()
	_, why := h.why()
	expired := errors.Is(why, ErrLeaseExpired)
	last := lost == nil && t != nil && h.holds() == 1
	var cand *candidate
	if m.v.handoff && m.c.opts.ackReplicas == 0 && last {
		cand = m.c.claim(h, t.streak)
	}
	if !last {
		t = nil
	} else {
		h.beginRelease(t)
	}
	sent := time.Now()
	// A context owner's give-back is conditional on this Client's count in Redis (keep: its
	// holds less this one): when its tenure was lost and another Client took the lock afresh
	// for the same owner id, Redis counts none of this Client's, and the release takes
	// nothing of the other Client's tenure (-4, read as holding none). Before, it gave back
	// the other Client's hold, and with its last one freed the lock or passed it on.
	// An Unlock of holds whose fixed lease ran its course (the Client counts none of them
	// now) is conditional too (keep 0): it gives back only a hold Redis still counts of this
	// Client's (its own in the drift moment, or one kept in another Client's tenure), never
	// the hold of a tenure another Client took afresh since. Before, it went unconditionally
	// (keep -1), as an Unlock through a Client that took no hold does (an owner id is a
	// capability: Mutex.Unlock), and freed the lock under that Client
	// (TestSharedOwner_unlockAfterFixedLeaseTakesNoOtherClientsHold).
	keep := -1
	if isContextOwner(h.owner) {
		keep = h.holds() - 1
		if expired {
			keep = max(keep, 0)
		}
	}
	n, token, err := m.sendRelease(ctx, h.owner, cand, h, t, keep)
	if n == releaseKept {
		n = -1
	}
	if err != nil && t != nil {
		h.releaseFailed(t)
	}
	if cand != nil {
		var unknown error
		if err != nil && !definitive(err) {
			unknown = err
		}
		if n != 0 {
			token = 0
		}
		cand.settle(token, sent, unknown)
	}
	if err != nil {
		return err
	}
	if rt != nil {
		rt.freed = last && n >= 0
		rt.handedOff = cand != nil && n == 0 && token > 0
	}
	if extra := h.released(n); extra > 0 {
		// This Client's last hold is given back, and Redis still counts holds of the owner:
		// those this Client let go of (orphans, holds of an acquire whose outcome it never
		// learnt) go too, so the lock is free now rather than at the end of their lease; a
		// context owner's holds taken through other Clients stay (keep 0: never beyond what
		// Redis counts for this Client).
		given, rerr := m.giveBackOrphans(ctx, h.owner, 0, extra)
		if m.c.obs != nil && m.v.obs != "" && (given > 0 || rerr != nil) {
			m.c.gaveBack(m.v.obs, m.name, h.owner, int(max(given, 1)), GiveBackOrphan, rerr)
		}
	}
	switch {
	case lost != nil:
		return errorf("unlock %q: %w (%w)", m.name, ErrNotHeld, lost)
	case expired:
		return errorf("unlock %q: %w", m.name, ErrLeaseExpired)
	case n < 0:
		return errorf("unlock %q: %w", m.name, ErrNotHeld)
	}
	return nil
}

// sendRelease runs the release script for owner, on a context that outlives ctx, replaying
// it until Redis answers. It returns the owner's remaining holds, 0 when the lock was freed,
// -1 when the owner held none; with a successor (next, may be nil), also the token of the
// grant that passed the lock to it (0 when it did not).
//
// keep >= 0 makes the give-back conditional: applied only while Redis counts more than keep
// holds of this Client's (the release script's ARGV[8]: for a context owner, this Client's
// count; for a handle's owner, the owner's); else it answers releaseKept. keep < 0 gives back
// unconditionally.
//
// t is the tenure of h whose last hold (as this Client counts) the release gives back, or
// nil. A replay that finds the owner's holds gone, and no force that took them (release.lua
// answers -2), counts as the first send having freed the lock only when t is given and the
// replay was sent before t's lease ran out on this Client's conservative clock: until then
// the lease cannot have run out in Redis. Otherwise the owner held none (-1). The deadline is
// the later of the one known before the first send and the one known at the replay: a
// renewal that finds the lock already freed by the first send ends the lease (it was not
// lost: it was given back).
func (m *Mutex) sendRelease(ctx context.Context, owner string, next *candidate, h *hold, t *tenure, keep int) (int64, int64, error) {
	var fctx context.Context
	var fcancel context.CancelFunc
	if t != nil && t.relSCTaken.CompareAndSwap(false, true) {
		fctx, fcancel = m.c.firstSendCtxIn(ctx, time.Now(), &t.relSC) // no allocation
	} else {
		fctx, fcancel = m.c.firstSendCtx(ctx)
	}
	defer fcancel()
	channel := m.keys.pub
	if m.v.spin {
		channel = ""
	}
	var before time.Time // t's deadline before the first send
	if t != nil {
		before = h.deadline(t)
	}
	var fastErr rueidis.RedisResult // fast_release's send, when it got no answer
	if t != nil && t.fast != "" && next == nil && keep < 0 {
		// The tenure is in the fast form (fast.go): fast_release frees it in three calls,
		// and needs no sequence number (it writes none). A lock held otherwise (-5) goes to
		// the release script as a first send; a send of unknown outcome is replayed as the
		// release script's (below), which reads the fast form.
		fk, fa := [1]string{m.keys.lock}, [3]string{owner, t.fast[len(owner)+2:], channel}
		res := m.c.execServed(fctx, lua.FastRelease, fk[:], fa[:])
		n, err := res.AsInt64()
		switch {
		case err == nil && n != -5:
			return n, 0, nil
		case err != nil && !definitive(err):
			fastErr = res
		case err != nil:
			return 0, 0, classify("unlock", m.name, err)
		}
	}
	req := m.c.newRequest()
	var keys, args []string
	if m.v.forced {
		keys = []string{m.keys.lock, m.keys.forced}
		args = []string{owner, req, channel, ""}
	} else {
		keys = []string{m.keys.lock, m.keys.releaseRecord(req)}
		args = []string{owner, req, channel, strconv.FormatInt(2*m.c.opts.cleanupTimeout.Milliseconds(), 10)}
	}
	if m.v.releaseExtra != nil {
		k, a := m.v.releaseExtra(m)
		keys, args = append(keys, k...), append(args, a...)
	}
	if next != nil {
		next.h.handoff = m.c.newRequest() // the claim holds next.h.op (hold.handoff)
		keys = append(keys, m.keys.fence)
		args = append(args, next.h.owner, strconv.FormatInt(next.lease.Milliseconds(), 10), next.h.handoff)
	}
	if keep >= 0 {
		for len(args) < 7 {
			args = append(args, "") // ARGV[5..7]: no successor (release.lua), unused (the others)
		}
		args = append(args, strconv.Itoa(keep))
	}
	parse := func(res rueidis.RedisResult) (int64, int64, error) {
		if next == nil {
			n, err := res.AsInt64()
			return n, 0, err
		}
		vals, err := res.AsIntSlice()
		if err == nil && len(vals) != 2 {
			err = fmt.Errorf("malformed reply %v", vals)
		}
		if err != nil {
			return 0, 0, err
		}
		return vals[0], vals[1], nil
	}
	// A first send that Redis could not serve (a refused dial, a failover or a migration
	// in progress) applied nothing: it goes again, within the cleanup timeout.
	first := keys
	if m.v.forced && m.v.releaseExtra == nil {
		// A first send reads no forced record (release.lua reads it on replays only): it
		// leaves it out, so that every key it names exists. A Cluster node serves such a
		// script while the slot migrates (following ASK); one that names a key that exists
		// nowhere is refused (TRYAGAIN) for as long as the migration lasts. With a
		// successor, the lock's key stands in for the record, keeping the fence third.
		if next == nil {
			first = keys[:1]
		} else {
			first = []string{keys[0], keys[0], keys[2]}
		}
	}
	res := fastErr
	if res.Error() == nil {
		res = m.c.execServed(fctx, m.v.release, first, args)
	}
	err := res.Error()
	var sent time.Time
	if err != nil && !definitive(err) {
		dl, _ := fctx.Deadline()
		cctx, cancel := m.c.cleanupCtxUntil(fctx, dl)
		defer cancel()
		if m.v.forced {
			// A replay names the tenure it gives a hold of back, so that the script can
			// tell a hold forced away from one this request freed.
			// It names it for a hold that is not the last too (the tenure in force), so
			// that a replay reaching a tenure begun since (the first send freed the lock, or
			// the lease ran out, and a grant took it afresh: for a context owner perhaps
			// through another Client) gives nothing back there (release.lua).
			args[3] = "0"
			if t != nil {
				args[3] = strconv.FormatInt(t.token, 10)
				if t.fast != "" && m.v.releaseExtra == nil {
					// A tenure that began in the fast form (fast.go) is named by its form
					// too (ARGV[9]), as a force records it while it is in that form
					// (force_release.lua): so a replay that finds it forced away tells
					// the loss. By its token first: a re-entry of the owner's may have
					// converted it (one whose caller had gone: the Client did not learn
					// it), and a converted tenure named by its form alone was taken for
					// ended, its last hold left held for the rest of its lease.
					for len(args) < 8 {
						args = append(args, "")
					}
					args = append(args, t.fast)
				}
			} else if h != nil {
				if cur, _ := h.snapshot(); cur != nil {
					args[3] = strconv.FormatInt(cur.token, 10)
				}
			}
		}
		site := replaySite{kind: m.v.obs, name: m.name, owner: owner, op: "release"}
		res, sent, err = m.c.replayAt(cctx, ctx, site, m.v.release, keys, args, err)
	}
	var n, token int64
	if err == nil {
		n, token, err = parse(res)
	}
	if err != nil {
		return 0, 0, classify("unlock", m.name, err)
	}
	if n == -3 {
		// Only a release sent beside a later operation of the owner on the lock (not one
		// after another, as h.op keeps them) meets it: nothing was given back.
		return 0, 0, errorf("unlock %q: %w: the owner's later operation reached Redis first", m.name, ErrUnknownOutcome)
	}
	if n == -2 {
		n = -1
		if t != nil && (sent.Before(before) || sent.Before(h.deadline(t))) {
			n = 0
		}
	}
	return n, token, nil
}
