package rlock

import (
	"errors"
	"net"
	"strings"

	"github.com/redis/rueidis"
)

// Sentinel errors, to be checked with [errors.Is]. Each one's text starts with "rlock: " and
// reads well alone. The errors the package returns carry that prefix once, at the start,
// and show what they wrap without it: `rlock: lock "x": lock lost: lease gone`.
var (
	// ErrNotHeld: the caller's owner holds no hold on the lock: it never did, it already gave
	// every hold back, or the lease ran out or the lock was taken from it.
	ErrNotHeld = errors.New("rlock: not held")
	// ErrLockLost: a lock the caller held is no longer held: a renewal found it gone or
	// taken, or its lease ran out before a renewal was confirmed. It is the cause of the
	// contexts and the value of the errors that report a loss.
	ErrLockLost = errors.New("rlock: lock lost")
	// ErrLeaseExpired: a hold taken with a fixed lease ([Mutex.LockLease], [Mutex.TryLock]
	// with lease > 0) ran to the end of its lease, as asked. It wraps ErrNotHeld. It is the
	// cause of the hold's contexts, and [Mutex.Err] and Unlock report it until the owner
	// locks again or unlocks. Unlike a loss it does not block the owner's next Lock.
	ErrLeaseExpired = errorf("%w: its fixed lease ran out", ErrNotHeld)
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("rlock: client closed")
	// ErrWrongType: the key at the lock's name holds a value that is not a relock lock. The
	// value is left untouched.
	ErrWrongType = errors.New("rlock: key holds a value that is not a lock")
	// ErrUnknownOutcome: a request's reply was lost and the outcome could not be learned
	// within the cleanup timeout. A lock's hold or a PermitSemaphore's permit it may have
	// granted expires with its lease; a [Semaphore]'s permits it may have taken do not come
	// back by themselves (see Replays at Semaphore).
	ErrUnknownOutcome = errors.New("rlock: outcome unknown")
	// ErrNoReplicaAck: with [WithReplicaAck], a grant was not acknowledged by enough replicas
	// in time and was given back.
	ErrNoReplicaAck = errors.New("rlock: grant not acknowledged by enough replicas")
	// ErrInvalid: an argument is out of range or missing: an empty name, a negative wait, a
	// fixed lease below 10ms, a permit count out of its range, a nil client, handle or ctx,
	// an invalid option. (A lease <= 0 given to TryLock is not one: it asks for watchdog
	// mode.)
	ErrInvalid = errors.New("rlock: invalid argument")
	// ErrConflict: [Client.ForceUnlockSeen] found the lock held by a holder the caller had not
	// seen, or in another tenure (another fencing token), and changed nothing.
	ErrConflict = errors.New("rlock: held otherwise than seen")
)

func invalid(format string, args ...any) error {
	return errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// classify wraps err, a reply to an operation on key, so that callers can match it.
func classify(op, key string, err error) error {
	if re, ok := rueidis.IsRedisErr(err); ok && strings.Contains(re.Error(), "WRONGTYPE") {
		return errorf("%s %q: %w (%s)", op, key, ErrWrongType, re.Error())
	}
	if re, ok := rueidis.IsRedisErr(err); ok && noPermission(re.Error()) {
		return noPermissionError(op, key, re)
	}
	return errorf("%s %q: %w", op, key, err)
}

// noPermission reports whether msg, an error reply, is Redis refusing a command, a key or a
// channel to the user (ACL): NOPERM from a command sent, or the error of a script whose call
// was refused.
func noPermission(msg string) bool {
	return strings.HasPrefix(msg, "NOPERM") || strings.Contains(msg, "user executing the script can't")
}

// definitive reports whether err proves the request had no effect on Redis: a reply from
// Redis (an error reply means the script did not change anything: relock's scripts check
// before they write), or a failure to connect. Anything else (a timeout, a broken
// connection, a cancelled context) leaves the outcome unknown, and so does a script that a
// Cluster node stopped half-way because it touched a key the node no longer has (a slot
// being migrated): Redis does not undo what it wrote before.
func definitive(err error) bool {
	if errors.Is(err, ErrUnknownOutcome) {
		return false
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) && re != nil {
		return !strings.Contains(re.Error(), "non local key")
	}
	return dialFailed(err)
}

// answers reports whether re, an error reply to a replayed script, is the script's own
// answer about the state it found (a key of another type, an upgrade refused), which a
// replay may return as the outcome. Any other error reply (BUSY, LOADING, READONLY, OOM, a
// refused command) is Redis declining to run the replay: it wrote nothing and says nothing
// of whether the first send was applied.
func answers(re *rueidis.RedisError) bool {
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "UPGRADE")
}

// dialFailed reports whether err is a connection that could not be made: it carried nothing.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// transient reports whether err, a failed attempt, may pass by itself: Redis could not be
// reached (nothing was sent), or it answered that it is loading, busy, or without a
// master. An outcome left unknown is not transient: a later attempt could stack a hold on a
// ghost one.
func transient(err error) bool {
	if errors.Is(err, ErrUnknownOutcome) {
		return false
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) && re != nil && !rueidis.IsRedisNil(re) {
		msg := re.Error()
		for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	return dialFailed(err)
}
