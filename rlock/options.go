package rlock

import (
	"strings"
	"time"

	"github.com/relock-go/relock/pubsub"
	"github.com/relock-go/relock/watchdog"
)

// Defaults.
const (
	// DefaultWatchdogTimeout is the lease of a lock held in watchdog mode, renewed while held.
	DefaultWatchdogTimeout = 30 * time.Second
	// DefaultRenewFraction is the share of the lease after which the watchdog renews it.
	DefaultRenewFraction = watchdog.DefaultRenewFraction
	// DefaultKeyPrefix is put before every lock name to form its Redis keys.
	DefaultKeyPrefix = "relock:"
	// DefaultCleanupTimeout bounds the requests relock makes on the caller's behalf after
	// the caller's context ended: an Unlock, the resolution of an acquire whose reply was
	// lost, the undoing of an acquire that raced a cancellation.
	DefaultCleanupTimeout = 5 * time.Second
	// DefaultWaiterTimeout is how long a waiter's place in a queue kept in Redis (a fair
	// lock's queue, a read-write lock's waiting writers) outlives its last sign of life. A
	// waiter refreshes its place every third of it while it waits, so only a waiter that
	// died (or lost Redis) loses it; its place then blocks those behind it for at most this
	// long.
	DefaultWaiterTimeout = 10 * time.Second
	// DefaultSubscriptionLinger is how long a release channel stays subscribed after its
	// last waiter left.
	DefaultSubscriptionLinger = pubsub.DefaultLinger
)

// Option configures a [Client].
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	watchdogTimeout time.Duration
	renewFraction   float64
	prefix          string
	cleanupTimeout  time.Duration
	linger          time.Duration
	waiterTimeout   time.Duration
	ackReplicas     int           // 0: no replica acknowledgement
	ackTimeout      time.Duration // bound of each WAIT
	pubsub          PubSubMode
	observers       []*Observer // WithObserver, in the order given
	nilObserver     bool        // WithObserver(nil) was given
	clientInfo      *ClientInfo // WithClientInfo; nil: no record (clientinfo.go)
	nilLogger       bool        // WithLogger(nil) was given
}

func defaultOptions() options {
	return options{
		watchdogTimeout: DefaultWatchdogTimeout,
		renewFraction:   DefaultRenewFraction,
		prefix:          DefaultKeyPrefix,
		cleanupTimeout:  DefaultCleanupTimeout,
		linger:          DefaultSubscriptionLinger,
		waiterTimeout:   DefaultWaiterTimeout,
	}
}

func (o *options) validate() error {
	switch {
	case o.watchdogTimeout < 10*time.Millisecond:
		return invalid("watchdog timeout %v is below 10ms", o.watchdogTimeout)
	case !(o.renewFraction > 0 && o.renewFraction < 1):
		return invalid("renew fraction %v is not in (0, 1)", o.renewFraction)
	case o.renewFraction < minRenewFraction:
		return invalid("renew fraction %v is below %v: the watchdog would renew every lease about as fast as Redis answers", o.renewFraction, minRenewFraction)
	case renewAt(o.watchdogTimeout, o.renewFraction) > latestRenewal(o.watchdogTimeout):
		lease := o.watchdogTimeout
		return invalid("renew fraction %v of a %v watchdog timeout renews at %v, after %v (the lease's conservative end, %v, less a tenth of it for the round trip): use at most %.3f",
			o.renewFraction, lease, renewAt(lease, o.renewFraction), latestRenewal(lease),
			lease-watchdog.Drift(lease), float64(latestRenewal(lease))/float64(lease))
	case strings.ContainsAny(o.prefix, "{}"):
		return invalid("key prefix %q contains a brace", o.prefix)
	case o.cleanupTimeout < time.Millisecond:
		return invalid("cleanup timeout %v is below 1ms", o.cleanupTimeout)
	case o.linger < 0:
		return invalid("subscription linger %v is negative", o.linger)
	case o.waiterTimeout < 30*time.Millisecond:
		return invalid("waiter timeout %v is below 30ms", o.waiterTimeout)
	case o.ackReplicas < 0:
		return invalid("replica acknowledgements %d is negative", o.ackReplicas)
	case o.ackReplicas > 0 && o.ackTimeout < time.Millisecond:
		return invalid("replica acknowledgement timeout %v is below 1ms", o.ackTimeout)
	case o.ackReplicas > 0 && o.ackTimeout > o.watchdogTimeout:
		return invalid("replica acknowledgement timeout %v is above the watchdog timeout %v: a grant acknowledged after its lease ended is not held", o.ackTimeout, o.watchdogTimeout)
	case o.pubsub < PubSubAuto || o.pubsub > PubSubSharded:
		return invalid("pub/sub mode %d is not PubSubAuto, PubSubClassic or PubSubSharded", o.pubsub)
	case o.nilObserver:
		return invalid("nil Observer")
	case o.nilLogger:
		return invalid("nil logger")
	}
	return nil
}

// WithWatchdogTimeout sets the lease of locks held in watchdog mode ([Mutex.Lock], and
// [Mutex.TryLock] with lease <= 0); the watchdog renews it while the lock is held. A crashed
// holder's lock frees within this time. At least 10ms; default [DefaultWatchdogTimeout].
func WithWatchdogTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.watchdogTimeout = d })
}

// WithRenewFraction sets the share of the lease (0.1 <= f < 1) after which the watchdog renews
// it. Default [DefaultRenewFraction] (two thirds). New refuses any other f, with an error
// wrapping [ErrInvalid] that names it; it is never rounded into range.
//
// The lower bound, 0.1, is twice the watchdog's merge window: a renewal may go out up to a
// twentieth of the lease before its point, so that renewals due at nearby moments share a
// round (see DESIGN 6). At f = 0.1 a lease is renewed at most 20 times per lease, at least a
// twentieth of it apart; at 0.05 or below a renewal may go out as soon as the last one is
// confirmed, and f near 0 (1e-300) made the watchdog renew back to back, thousands of scripts
// a second for one lock. A smaller f buys little: it adds at most a tenth of the lease to a
// renewal's budget ((1-f) * lease - drift, below), which a longer lease gives better.
//
// The renewal must leave time to be confirmed before the holder's conservative end of the
// lease (the lease less the drift allowance, 1% + 2ms; see [Mutex]): New refuses, with an
// error wrapping [ErrInvalid], a fraction f for which
//
//	f * lease > lease - drift(lease) - max(lease/10, 1ms)
//
// where lease is the watchdog timeout: a tenth of the lease (at least 1ms) is kept for the
// renewal's round trip. That caps f at 0.886 for a 500ms lease, about 0.89 for longer ones,
// and 0.69 for the shortest (10ms). A later renewal could not be confirmed in time, and every
// lock would be reported lost after one lease.
//
// That check allows for one round trip. A renewal has (1-f) * lease - drift(lease) in all (a
// third of the lease, less the drift, by default), and may spend about three round trips of
// it: on a connection where rueidis still sends a lone request and reads its reply before it
// writes the next (until two requests first overlap there), it waits for the request in
// flight, one of the Client's or rueidis's keepalive PING (sent on an idle connection every
// Dialer.KeepAlive, 1s by default); and a server whose script cache lacks the renew script
// (the first renewal on it since it started, failed over or flushed its scripts) answers
// EVALSHA with NOSCRIPT, and the script goes again in full (EVAL). It takes longer when the
// request ahead is slow, when the Client's previous renewal round is still on the wire (the
// watchdog sends one at a time), or while a Cluster slot migrates (the script goes again
// per lock). Keep (1-f) * lease well above three round trips to Redis, or such a renewal may
// not be confirmed in time and the lock be reported lost.
func WithRenewFraction(f float64) Option {
	return optionFunc(func(o *options) { o.renewFraction = f })
}

// minRenewFraction is the smallest fraction WithRenewFraction accepts (see there): twice the
// share of a lease by which the watchdog may bring a renewal forward (watchdog's Lease.early,
// a twentieth).
const minRenewFraction = watchdog.MinRenewFraction

// renewAt is when the watchdog renews a lease after its grant or last renewal, as it computes
// it.
func renewAt(lease time.Duration, f float64) time.Duration {
	return time.Duration(float64(lease) * f)
}

// latestRenewal is the latest renewal point that [WithRenewFraction] accepts for lease: its
// conservative end less a tenth of it (at least 1ms) for the renewal's round trip.
func latestRenewal(lease time.Duration) time.Duration {
	return lease - watchdog.Drift(lease) - max(lease/10, time.Millisecond)
}

// WithKeyPrefix sets the text put before every lock name in its Redis keys. It must not
// contain '{' or '}'. Default [DefaultKeyPrefix].
//
// Applications that share a Redis keep apart with prefixes of their own (and an ACL user per
// prefix, [ACLRule]), as long as no prefix begins with another: with "t:" and "t:a:", the name
// "a:x" of the first and "x" of the second are the same lock, and the first's ACL pattern
// covers the second's keys. End each prefix with a separator no name of the shorter one
// starts its text with, or make them differ in their first characters ("billing:", "orders:").
// ACLRule refuses a prefix with whitespace, control characters or quotes, which no printed
// ACL rule can carry (Redis refuses a key pattern with whitespace): a Client may use such a
// prefix, but not under a user of its own.
func WithKeyPrefix(p string) Option {
	return optionFunc(func(o *options) { o.prefix = p })
}

// WithCleanupTimeout bounds the requests relock makes after the caller's context ended
// (see [DefaultCleanupTimeout]). At least 1ms: the scripts are told periods derived from it in
// whole milliseconds (they remember applied requests for twice it), which must not be 0.
func WithCleanupTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.cleanupTimeout = d })
}

// WithSubscriptionLinger sets how long a release channel stays subscribed after its last
// waiter left, so that a busy lock does not subscribe and unsubscribe for every wait. Zero
// unsubscribes at once. Default [DefaultSubscriptionLinger].
func WithSubscriptionLinger(d time.Duration) Option {
	return optionFunc(func(o *options) { o.linger = d })
}

// WithWaiterTimeout sets how long a waiter's place in a queue kept in Redis outlives its
// last refresh (see [DefaultWaiterTimeout]); waiters refresh it every third of this while
// they wait. At least 30ms.
func WithWaiterTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) { o.waiterTimeout = d })
}

// WithReplicaAck makes every fresh grant wait until at least replicas replicas acknowledge
// it (Redis WAIT, bounded by timeout, sent on the same connection right behind the acquire
// script). A grant that too few replicas acknowledged in time is given back and the attempt
// counts as failed: Lock and TryLock try again, within their wait, every few milliseconds,
// and report an error wrapping [ErrNoReplicaAck] if the wait ends that way.
//
// On a Redis Cluster (a rueidis client in Cluster mode) the acknowledgements counted are those
// of the replicas of the master that applied the grant, also when the grant was redirected
// there (MOVED, after a slot moved; ASK, while it migrates): the acquire and its WAIT go
// together on one connection to the master that serves the lock's slot, and when that master
// redirects them, to the node named. A redirection that cannot be followed that way (a node
// the rueidis client does not know yet, or more than a few redirections in a row) counts as
// acknowledged by no replica: the grant is given back and tried again, as above.
//
// It narrows the window in which a failover to an asynchronous replica loses a lock that was
// just granted; it does not close it (WAIT does not make Redis strongly consistent), and it
// costs a round trip to the replicas per grant. Default: off (replicas 0).
//
// With replicas > 0, timeout must be at least 1ms and at most the Client's watchdog timeout
// ([WithWatchdogTimeout], whichever order the options come in): New refuses any other, with an
// error wrapping [ErrInvalid] that names both, and never shortens it. A grant acknowledged
// after its lease ended is not held, so a longer WAIT serves nothing, and it costs: WAIT is a
// blocking command, which rueidis sends on a dedicated connection that the caller's
// cancellation does not free, so every acquire whose ctx ends while its WAIT waits (no
// replica answering) leaves that connection blocked in WAIT for the rest of the timeout, also
// past [Client.Close]. The bound keeps that to at most a watchdog timeout; keep the timeout
// well below it (a few round trips to the replicas) to keep it short.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return optionFunc(func(o *options) { o.ackReplicas, o.ackTimeout = replicas, timeout })
}

// PubSubMode is how waiters are woken: which pub/sub a release publishes on, and which the
// Client's subscription connections listen to. See [WithPubSub].
type PubSubMode int

const (
	// PubSubAuto is sharded pub/sub on a Redis Cluster (a rueidis client in Cluster mode),
	// classic pub/sub elsewhere (a single server, Sentinel, miniredis). Sharded pub/sub
	// needs Redis 7: on a Cluster of older servers, choose [PubSubClassic].
	PubSubAuto PubSubMode = iota
	// PubSubClassic is PUBLISH and SUBSCRIBE. On a Cluster every message is broadcast by
	// the cluster bus to every node, and one subscription connection serves every waiter
	// of the Client.
	PubSubClassic
	// PubSubSharded is SPUBLISH and SSUBSCRIBE (Redis 7 Cluster): a message stays within
	// its lock's shard (its hash slot's master and replicas), and the Client keeps one
	// subscription connection per master that serves a lock a waiter waits for. When a
	// slot moves or its master fails over, the subscription follows it and the waiters
	// are woken to look at the lock again. New refuses it for a client not in Cluster mode
	// (so does Dial, once it has dialled a server that is not a Cluster).
	PubSubSharded
)

// WithPubSub sets how waiters are woken (default [PubSubAuto]). Every Client that locks the
// same names must use the same mode: a release published on one is not heard on the other
// (a waiter then waits until the lease of the lock it waits for runs out).
func WithPubSub(mode PubSubMode) Option {
	return optionFunc(func(o *options) { o.pubsub = mode })
}

// buildOptions applies opts to the defaults and validates the result: an invalid option, or a
// nil one, is an error wrapping ErrInvalid.
func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			return o, invalid("option %d is nil", i)
		}
		opt.apply(&o)
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	return o, validateClientInfo(o.clientInfo)
}
