package rlock

import (
	"context"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
)

// WithLogger makes the Client log to l what goes wrong with its locks and what it does on
// its own, through an [Observer] built in (it composes with those of [WithObserver], in the
// order the options were given). A nil l is an error wrapping [ErrInvalid] from [New].
//
// What it logs, with the attributes kind, name, owner, token and cause where they apply (the
// owner never as its id, which is a capability: whoever knows it can unlock what it holds; a
// handle's owner shows as "client:" and its Client's id, a context owner as "#" and a hash
// of its id, enough to tell owners apart and to find one whose id you know (the hash is
// 32-bit FNV-1a, in lower-case hex without leading zeros, of "u:" followed by the id given
// to [WithOwner]); the lines of the
// semaphores and the latch, which act for no owner, have no owner attribute):
//   - Error "relock: lock lost": a tenure ended by a loss (cause "lost", with error: the
//     loss as [Mutex.Err] reports it, and held: how long the tenure lasted);
//   - Warn "relock: renewal failed": a watchdog round in which renewals failed (leases,
//     failures, lost, error: the first failure);
//   - Warn "relock: subscription lost": a channel that waiters listen on stopped being
//     served (channel, error); Info "relock: subscription restored" when it is served again;
//   - Debug "relock: lease expired": a fixed lease that ran its course before Unlock (taking
//     a lock with a lease and letting it run out is a common pattern, not a fault);
//   - Debug "relock: request replayed" (op, sends; Warn with error when the outcome stayed
//     unknown), Debug "relock: given back" (holds, reason; Warn with error when the give-back
//     failed), Debug "relock: hold ended by close".
//
// Nothing else is logged: an acquisition, a release, an unlock that ends a tenure and a
// successful renewal log nothing at any level, so an uncontended Lock and Unlock costs the
// logger nothing but the observer's dispatch.
//
// l's handler runs as the Observer's hooks do: synchronously, on the goroutine that does the
// work, the watchdog's and the subscriber's included. A handler that blocks (a synchronous
// network sink, a full pipe) delays the renewals of every lock the Client holds and the
// wake-ups of its waiters; give such a handler a buffer of its own (an asynchronous
// [slog.Handler]).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l == nil {
			o.nilLogger = true
			return
		}
		o.observers = append(o.observers, logObserver(l))
	})
}

// logObserver is the Observer of WithLogger.
func logObserver(l *slog.Logger) *Observer {
	bg := context.Background()
	return &Observer{
		HoldEnd: func(e HoldEndInfo) {
			var level slog.Level
			var msg string
			switch e.Cause {
			case EndLost:
				level, msg = slog.LevelError, "relock: lock lost"
			case EndLeaseExpired:
				level, msg = slog.LevelDebug, "relock: lease expired"
			case EndClosed:
				level, msg = slog.LevelDebug, "relock: hold ended by close"
			default:
				return // an unlock: the hot path logs nothing
			}
			if !l.Enabled(bg, level) {
				return
			}
			attrs := lockAttrs(e.Kind, e.Name, e.Owner)
			attrs = append(attrs, slog.Int64("token", e.Token),
				slog.String("cause", string(e.Cause)), slog.Duration("held", e.Held),
				slog.Any("error", e.Err))
			l.LogAttrs(bg, level, msg, attrs...)
		},
		RenewalRound: func(e RenewalRoundInfo) {
			if e.Failures == 0 || !l.Enabled(bg, slog.LevelWarn) {
				return
			}
			l.LogAttrs(bg, slog.LevelWarn, "relock: renewal failed",
				slog.Int("leases", e.Leases), slog.Int("failures", e.Failures),
				slog.Int("lost", e.Lost), slog.Any("error", e.Err))
		},
		Replay: func(e ReplayInfo) {
			level := slog.LevelDebug
			if e.Err != nil {
				level = slog.LevelWarn
			}
			if !l.Enabled(bg, level) {
				return
			}
			attrs := lockAttrs(e.Kind, e.Name, e.Owner)
			attrs = append(attrs, slog.String("op", e.Op), slog.Int("sends", e.Sends))
			if e.Err != nil {
				attrs = append(attrs, slog.Any("error", e.Err))
			}
			l.LogAttrs(bg, level, "relock: request replayed", attrs...)
		},
		GiveBack: func(e GiveBackInfo) {
			level := slog.LevelDebug
			if e.Err != nil {
				level = slog.LevelWarn
			}
			if !l.Enabled(bg, level) {
				return
			}
			attrs := lockAttrs(e.Kind, e.Name, e.Owner)
			attrs = append(attrs, slog.Int("holds", e.Holds), slog.String("reason", string(e.Reason)))
			if e.Err != nil {
				attrs = append(attrs, slog.Any("error", e.Err))
			}
			l.LogAttrs(bg, level, "relock: given back", attrs...)
		},
		Subscription: func(e SubscriptionInfo) {
			if e.Up {
				l.LogAttrs(bg, slog.LevelInfo, "relock: subscription restored", slog.String("channel", e.Channel))
				return
			}
			l.LogAttrs(bg, slog.LevelWarn, "relock: subscription lost", slog.String("channel", e.Channel), slog.Any("error", e.Err))
		},
	}
}

// lockAttrs are the attributes every line about a primitive starts with: its kind and name,
// and its owner (ownerAttr) unless owner is "" (the semaphores and the latch act for no
// owner: an attribute would show the hash of "", the same for all of them, as if it were
// one context owner).
func lockAttrs(kind Kind, name, owner string) []slog.Attr {
	attrs := []slog.Attr{slog.String("kind", string(kind)), slog.String("name", name)}
	if owner == "" {
		return attrs
	}
	return append(attrs, ownerAttr(owner))
}

// ownerAttr names owner in a log line without its id (see WithLogger).
func ownerAttr(owner string) slog.Attr {
	if rest, ok := strings.CutPrefix(owner, "h:"); ok {
		if i := strings.LastIndexByte(rest, ':'); i > 0 {
			return slog.String("owner", "client:"+rest[:i])
		}
	}
	h := fnv.New32a()
	h.Write([]byte(owner))
	return slog.String("owner", "#"+strconv.FormatUint(uint64(h.Sum32()), 16))
}
