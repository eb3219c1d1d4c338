package rlock

import (
	"context"
	"strings"
)

type ownerKey struct{}

// ownerErr is what the owner key carries, in place of an id, in a context that [WithOwner]
// or [Client.WithNewOwner] made from a nil parent: every operation with it returns err.
type ownerErr struct{ err error }

// ctxError returns why no operation may use ctx: it is nil, or it is (or derives from) a
// context that WithOwner or WithNewOwner made from a nil parent. Nil otherwise.
func ctxError(ctx context.Context) error {
	if ctx == nil {
		return invalid("nil context")
	}
	if oe, ok := ctx.Value(ownerKey{}).(*ownerErr); ok {
		return oe.err
	}
	return nil
}

// nilParent returns what WithOwner and WithNewOwner return for a nil parent: a context on
// context.Background that is already cancelled, with cause err, and whose owner is err.
func nilParent(err error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(err)
	return context.WithValue(ctx, ownerKey{}, &ownerErr{err})
}

// WithOwner returns a copy of ctx that carries owner id. Every lock operation made with that
// context (or one derived from it) acts for that owner instead of the handle's own: two
// handles of one name, or one handle from two goroutines, re-enter rather than block each
// other when their contexts carry the same owner. This is what a thread is to Redisson: pass
// the context down a call chain and nested locking of one name re-enters.
//
// The id is used as given, across processes: two processes using the same id are the same
// owner, which lets one process unlock what another locked. An id is therefore a capability:
// whoever knows it (and may reach the lock's keys in Redis) can unlock what that owner holds.
// Make ids unique where that is not wanted (see [WithNewOwner]), and ones that cannot be
// guessed where they cross a trust boundary. One id used through several Clients at once has
// one count of holds in Redis, and Redis also counts apart the holds each Client's operations
// took (up to 16 Clients per owner and lock; beyond, the oldest Client's count is forgotten):
// a Client that gives back holds it let go of while Redis may still count them (an acquire
// whose outcome stayed unknown, a give-back that got no answer, a fixed lease that just
// ended) gives back only holds Redis counts for that Client, never one that another Client
// took. A Client whose count Redis forgot, or that took its holds before Redis counted them
// per Client (an older relock), gives back none of those: they expire with their lease. An
// Unlock through one Client of a hold taken through another still gives it back, as the
// same owner's, unless that Client's own last tenure ran out its fixed lease and was not
// unlocked (see [Mutex.Unlock]). Any other text is a valid id: in Redis it becomes "u:"+id,
// and no other field of a lock's hash starts with "u:" (or with "h:", a handle's own id), so
// no id can be taken for another owner's or the lock's own bookkeeping. An empty id is
// invalid: operations return [ErrInvalid].
//
// WithOwner never panics. A nil ctx, which has no context to copy, gives a context that no
// operation accepts: it derives from context.Background, is already cancelled (its
// [context.Cause] is the error below, so work outside relock that is given it stops at once
// too), carries no owner id ([OwnerFrom] reports none), and every method of this package that
// takes it (or a context derived from it, by WithOwner and WithNewOwner too, which return it
// as it is) returns an error wrapping [ErrInvalid] that says "WithOwner: nil parent
// context", as it would for a nil ctx; nothing is sent to Redis.
func WithOwner(ctx context.Context, id string) context.Context {
	if ctx == nil {
		return nilParent(invalid("WithOwner: nil parent context"))
	}
	if ctxError(ctx) != nil {
		// Made from a nil parent: it stays refused, whatever owner is put on it (an id put
		// over the mark hid it: review22).
		return ctx
	}
	return context.WithValue(ctx, ownerKey{}, id)
}

// WithNewOwner returns a copy of ctx that carries a fresh owner id, unique across processes
// (see [WithOwner]). On a nil or zero Client (not made by New or Dial) the id is empty, so
// that every operation with the context returns an error wrapping [ErrInvalid]. It never
// panics: a nil ctx gives, as for WithOwner, a cancelled context on context.Background with
// which every operation returns an error wrapping [ErrInvalid] that says "WithNewOwner: nil
// parent context" (whatever the Client).
func (c *Client) WithNewOwner(ctx context.Context) context.Context {
	if ctx == nil {
		return nilParent(invalid("WithNewOwner: nil parent context"))
	}
	if c.usable() != nil {
		return WithOwner(ctx, "")
	}
	return WithOwner(ctx, c.newOwner()[2:])
}

// OwnerFrom returns the owner id ctx carries, if any (none for a nil ctx, nor for a context
// that WithOwner or WithNewOwner made from a nil parent).
func OwnerFrom(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	id, ok := ctx.Value(ownerKey{}).(string)
	return id, ok
}

// isContextOwner reports whether owner, an owner id as Redis keeps it, is a context owner's
// ("u:", [WithOwner]), which several Clients may share, rather than a handle's own ("h:"),
// whose holds one Client alone takes.
func isContextOwner(owner string) bool { return strings.HasPrefix(owner, "u:") }
